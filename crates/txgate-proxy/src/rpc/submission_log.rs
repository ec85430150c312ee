//! The submission log: one structured line per forwarded submission
//! (target `txgate::submission`), at most `log.submissions_per_sec` lines
//! a second (burst `log.submissions_burst`); the lines not written are
//! counted (`txgate_submission_log_suppressed_total`) and the next line
//! says how many it stands for. What proxyd's operators asked for
//! (ethereum-optimism/infra#569): which node took a transaction, how
//! long it took, and what the node said.
//!
//! | field | what |
//! |---|---|
//! | `method` | the submission's method |
//! | `tx_hash` | keccak256 of the raw transaction (absent: a bundle, or not hex) |
//! | `node` | the node's name (never its URL) |
//! | `duration_ms` | request to answer, failovers included |
//! | `outcome` | `accepted`, `node_error` (the node answered with an error), or why no node answered (`upstream_timeout`, `upstream_unavailable`, `no_healthy_upstream`, …) |
//! | `error` | the node's error message, at most 200 characters |
//! | `client` | the client's address |
//! | `suppressed` | lines left out since the previous one |
//!
//! A batch's submissions get a line each, with the batch's (or its part's)
//! node and round trip; WebSocket submissions too, from their sockets.
//! The hash and the node's message are worked out for the sampled lines
//! only.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use serde::Deserialize;
use serde_json::value::RawValue;
use txgate_config::LogConfig;
use txgate_limits::{Rate, Sampler};

/// The longest node error message written.
const MAX_ERROR_CHARS: usize = 200;

/// See the module docs.
#[derive(Debug)]
pub struct SubmissionLog {
    sampler: Sampler,
    epoch: Instant,
    suppressed: IntCounter,
}

/// A submission-log line's place under the rate, and the lines left out
/// before it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    suppressed: u64,
}

/// One forwarded submission, as the line reports it.
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// Its method.
    pub method: &'a str,
    /// Its params (the raw transaction is the first).
    pub params: Option<&'a RawValue>,
    /// The node's name; empty when none was reached.
    pub node: &'a str,
    /// Request to answer.
    pub duration: Duration,
    /// The node's answer body, or why there was none.
    pub answer: Result<&'a [u8], &'static str>,
    /// The client's address.
    pub client: Option<IpAddr>,
}

impl SubmissionLog {
    /// A log at `config`'s rate, counting what it leaves out in
    /// `suppressed`.
    pub fn new(config: &LogConfig, suppressed: IntCounter) -> SubmissionLog {
        SubmissionLog {
            sampler: Sampler::new(
                Rate::new(config.submissions_per_sec, config.submissions_burst),
                1,
            ),
            epoch: Instant::now(),
            suppressed,
        }
    }

    /// One submission answered at `at`: written if under the rate, else
    /// counted.
    pub fn forwarded(&self, at: Instant, line: &Forwarded<'_>) {
        if let Some(admitted) = self.admit(at) {
            self.write(admitted, line);
        }
    }

    /// A line's place under the rate at `at`, taken before the answer is
    /// known (a WebSocket submission keeps what its line needs only when it
    /// has one); `None`, counted, over the rate. Each place taken is
    /// written once with [`SubmissionLog::write`].
    pub fn admit(&self, at: Instant) -> Option<Admitted> {
        let now =
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        match self.sampler.sample(0, now) {
            Some(suppressed) => Some(Admitted { suppressed }),
            None => {
                self.suppressed.inc();
                None
            }
        }
    }

    /// Writes the line of an admitted submission.
    pub fn write(&self, admitted: Admitted, line: &Forwarded<'_>) {
        let suppressed = admitted.suppressed;
        let (outcome, error) = match line.answer {
            Ok(body) => match node_error(body) {
                Some(message) => ("node_error", Some(message)),
                None => ("accepted", None),
            },
            Err(why) => (why, None),
        };
        tracing::info!(
            target: "txgate::submission",
            method = line.method,
            tx_hash = tx_hash(line.method, line.params).map(tracing::field::display),
            node = (!line.node.is_empty()).then_some(line.node),
            duration_ms = u64::try_from(line.duration.as_millis()).unwrap_or(u64::MAX),
            outcome,
            error = error.as_deref(),
            client = line.client.map(tracing::field::display),
            suppressed = (suppressed > 0).then_some(suppressed),
            "submission forwarded"
        );
    }
}

/// The submissions of a batch (or of the part of it sent to one node), as
/// their lines report them.
#[derive(Debug)]
pub(super) struct BatchSent<'a> {
    /// The node's name; empty when none was reached.
    pub(super) node: &'a str,
    /// Request to answer, for the whole batch or part.
    pub(super) duration: Duration,
    /// Why no node answered, when none did.
    pub(super) failed: Option<&'static str>,
    pub(super) client: Option<IpAddr>,
}

impl super::Shared {
    /// One line per submission among `indices` of a settled batch: the
    /// node's answer to each (or its refusal, once the plan is closed).
    pub(super) fn log_batch_submissions(
        &self,
        entries: &[txgate_jsonrpc::Entry<'_>],
        slots: &[super::plan::Slot],
        indices: impl IntoIterator<Item = usize>,
        sent: &BatchSent<'_>,
    ) {
        let now = Instant::now();
        for index in indices {
            let Some(txgate_jsonrpc::Entry::Call(call)) = entries.get(index) else {
                continue;
            };
            if !crate::upstream::group::is_submission(&call.method) {
                continue;
            }
            let answer = match (sent.failed, slots.get(index)) {
                (Some(why), _) => Err(why),
                (None, Some(super::plan::Slot::Done(body))) => Ok(body.as_slice()),
                // A notification: the node owed nothing back.
                (None, _) => Ok(&b"{}"[..]),
            };
            self.submissions.forwarded(
                now,
                &Forwarded {
                    method: &call.method,
                    params: call.params,
                    node: sent.node,
                    duration: sent.duration,
                    answer,
                    client: sent.client,
                },
            );
        }
    }
}

/// The hash of a raw-transaction submission's first param.
fn tx_hash(method: &str, params: Option<&RawValue>) -> Option<alloy_primitives::B256> {
    if !method.starts_with("eth_sendRawTransaction") {
        return None;
    }
    // The raw transaction first; the conditional's condition or the sync
    // call's timeout may follow.
    let params: Vec<&RawValue> = serde_json::from_str(params?.get()).ok()?;
    let raw: &str = serde_json::from_str(params.first()?.get()).ok()?;
    let raw = txgate_screen::decode_hex(raw).ok()?;
    Some(alloy_primitives::keccak256(raw))
}

/// The node's error message, when it answered with one.
fn node_error(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer {
        error: Option<Error>,
    }
    #[derive(Deserialize)]
    struct Error {
        message: Option<String>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let message = answer.error?.message.unwrap_or_default();
    Some(message.chars().take(MAX_ERROR_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_error_is_read_and_cut() {
        assert_eq!(
            node_error(br#"{"jsonrpc":"2.0","id":1,"result":"0x01"}"#),
            None
        );
        assert_eq!(
            node_error(
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"nonce too low"}}"#
            )
            .as_deref(),
            Some("nonce too low")
        );
        let long = format!(
            r#"{{"id":1,"error":{{"code":-32000,"message":"{}"}}}}"#,
            "x".repeat(500)
        );
        assert_eq!(node_error(long.as_bytes()).unwrap().len(), MAX_ERROR_CHARS);
    }

    #[test]
    fn the_hash_is_the_raw_transactions() {
        let params = RawValue::from_string(r#"["0x0102"]"#.into()).unwrap();
        assert_eq!(
            tx_hash("eth_sendRawTransaction", Some(&params)),
            Some(alloy_primitives::keccak256([1u8, 2]))
        );
        assert_eq!(tx_hash("eth_sendBundle", Some(&params)), None);
        let conditional =
            RawValue::from_string(r#"["0x0102",{"knownAccounts":{}}]"#.into()).unwrap();
        assert_eq!(
            tx_hash("eth_sendRawTransactionConditional", Some(&conditional)),
            Some(alloy_primitives::keccak256([1u8, 2]))
        );
    }
}
