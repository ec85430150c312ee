//! The result stream of the Credible Layer sidecar's transport protocol,
//! `sidecar.transport.v1.SidecarTransport/SubscribeResults`: one
//! `TransactionResult` for every transaction the sidecar sees executed.
//!
//! - The watcher ([`crate::watch`]) publishes a result for every
//!   transaction of every block it reads: `RESULT_STATUS_SUCCESS` (1) or
//!   `RESULT_STATUS_REVERTED` (2) from the receipt, with the receipt's gas
//!   used, or `RESULT_STATUS_ASSERTION_FAILED` (5) when the transaction
//!   fails one of the configured assertions (`error` names them).
//! - The admin endpoint ([`crate::admin`]) publishes an
//!   `ASSERTION_FAILED` result for every `raw_tx` invalidation it injects,
//!   and any result given to `POST /results` as is.
//!
//! `TxExecutionId` is `{block_number: 32-byte big-endian, iteration_id: 0,
//! tx_hash, index: position in the block}`. Results without a block of
//! their own (injections) carry the latest block the sidecar published a
//! result for.
//!
//! Live only: a subscriber gets what is published after it subscribed,
//! never a replay. `from_block` (a big-endian U256 of at most 32 bytes)
//! filters out the results of earlier blocks. As in the production
//! sidecar, a subscriber more than [`RESULTS_BUFFER`] results behind loses
//! the oldest (the stream goes on; the loss is logged with its count).

use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{B256, U256};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::{Stream, StreamExt};
use txgate_proto::transport_v1::{
    ResultStatus, SubscribeResultsRequest, TransactionResult, TxExecutionId,
};
use txgate_screen::AssertionKey;

/// Results buffered per subscriber: one further behind loses the oldest.
pub(crate) const RESULTS_BUFFER: usize = 16_384;

/// One executed transaction's result, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Executed {
    /// The block it was executed in.
    pub(crate) block: u64,
    /// Its position in the block.
    pub(crate) index: u64,
    /// The transaction hash.
    pub(crate) tx_hash: B256,
    /// A `ResultStatus` value (any value: tests may send future ones).
    pub(crate) status: i32,
    /// Gas used, from the receipt (0 when unknown).
    pub(crate) gas_used: u64,
    /// Empty, or a short reason.
    pub(crate) error: String,
}

impl Executed {
    /// The wire form.
    pub(crate) fn message(&self) -> TransactionResult {
        TransactionResult {
            tx_execution_id: Some(TxExecutionId {
                block_number: U256::from(self.block).to_be_bytes::<32>().to_vec(),
                iteration_id: 0,
                tx_hash: self.tx_hash.to_vec(),
                index: self.index,
            }),
            status: self.status,
            gas_used: self.gas_used,
            error: self.error.clone(),
        }
    }
}

/// The `error` of an `ASSERTION_FAILED` result: the assertions failed.
pub(crate) fn assertion_failure(assertions: &[AssertionKey]) -> String {
    let names: Vec<String> = assertions
        .iter()
        .map(|a| format!("{} v{}", a.id, a.version))
        .collect();
    format!("assertion failed: {}", names.join(", "))
}

/// The status of a transaction from what is known of it: an assertion
/// failure first, then the receipt's status (`None`: no receipt).
pub(crate) fn status(failed: bool, reverted: Option<bool>) -> ResultStatus {
    match (failed, reverted) {
        (true, _) => ResultStatus::AssertionFailed,
        (false, Some(true)) => ResultStatus::Reverted,
        (false, Some(false)) => ResultStatus::Success,
        (false, None) => ResultStatus::Unspecified,
    }
}

/// The broadcast of results to every subscriber.
#[derive(Debug)]
pub(crate) struct Results {
    stream: broadcast::Sender<Executed>,
    /// The highest block a result was published for.
    latest_block: AtomicU64,
}

impl Default for Results {
    fn default() -> Results {
        Results::with_capacity(RESULTS_BUFFER)
    }
}

impl Results {
    /// Results buffered `capacity` per subscriber.
    pub(crate) fn with_capacity(capacity: usize) -> Results {
        let (stream, _) = broadcast::channel(capacity.max(1));
        Results {
            stream,
            latest_block: AtomicU64::new(0),
        }
    }

    /// Sends `result` to every subscriber; returns the subscribers reached.
    pub(crate) fn publish(&self, result: Executed) -> usize {
        self.latest_block.fetch_max(result.block, Ordering::Relaxed);
        self.stream.send(result).unwrap_or(0)
    }

    /// The highest block a result was published for (0: none yet).
    pub(crate) fn latest_block(&self) -> u64 {
        self.latest_block.load(Ordering::Relaxed)
    }

    /// A new subscriber's stream of every result published from now on,
    /// of block `from` on (`None`: all). A subscriber more than the buffer
    /// behind loses the oldest; the loss is logged and the stream goes on.
    pub(crate) fn subscribe(
        &self,
        from: Option<U256>,
    ) -> impl Stream<Item = TransactionResult> + Send + 'static {
        BroadcastStream::new(self.stream.subscribe()).filter_map(move |item| match item {
            Ok(result) if from.is_none_or(|from| U256::from(result.block) >= from) => {
                Some(result.message())
            }
            Ok(_) => None,
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                tracing::warn!(
                    dropped = n,
                    "results subscriber too slow; oldest results dropped"
                );
                None
            }
        })
    }
}

/// `from_block` of a subscription: absent is "all"; otherwise a big-endian
/// U256 of at most 32 bytes (the protocol sends exactly 32).
pub(crate) fn from_block(request: &SubscribeResultsRequest) -> Result<Option<U256>, String> {
    match &request.from_block {
        None => Ok(None),
        Some(bytes) => U256::try_from_be_slice(bytes)
            .map(Some)
            .ok_or_else(|| format!("from_block: {} bytes, at most 32", bytes.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Logs;

    fn executed(block: u64, index: u64) -> Executed {
        Executed {
            block,
            index,
            tx_hash: B256::left_padding_from(&index.to_be_bytes()),
            status: ResultStatus::Success as i32,
            gas_used: 21_000,
            error: String::new(),
        }
    }

    fn block_of(result: &TransactionResult) -> u64 {
        let id = result.tx_execution_id.as_ref().expect("id");
        U256::from_be_slice(&id.block_number).to::<u64>()
    }

    #[test]
    fn the_wire_form_has_a_32_byte_block_number_and_iteration_0() {
        let mut result = executed(0x0102, 3);
        result.status = ResultStatus::AssertionFailed as i32;
        result.error = assertion_failure(&[AssertionKey {
            id: B256::repeat_byte(0xa1),
            version: 2,
        }]);
        let message = result.message();
        let id = message.tx_execution_id.as_ref().expect("id");
        assert_eq!(id.block_number.len(), 32);
        assert_eq!(id.block_number[30..], [1, 2]);
        assert!(id.block_number[..30].iter().all(|b| *b == 0));
        assert_eq!(id.iteration_id, 0);
        assert_eq!(id.index, 3);
        assert_eq!(id.tx_hash, result.tx_hash.to_vec());
        assert_eq!(message.status, 5);
        assert_eq!(message.gas_used, 21_000);
        assert_eq!(
            message.error,
            format!("assertion failed: 0x{} v2", "a1".repeat(32))
        );
        // Classified as txgate does.
        assert_eq!(
            txgate_proto::results::classify(&message),
            txgate_proto::results::Outcome::AssertionFailed(result.tx_hash)
        );
    }

    #[test]
    fn statuses() {
        assert_eq!(status(true, Some(false)), ResultStatus::AssertionFailed);
        assert_eq!(status(true, None), ResultStatus::AssertionFailed);
        assert_eq!(status(false, Some(true)), ResultStatus::Reverted);
        assert_eq!(status(false, Some(false)), ResultStatus::Success);
        assert_eq!(status(false, None), ResultStatus::Unspecified);
        assert_eq!(ResultStatus::Success as i32, 1);
        assert_eq!(ResultStatus::Reverted as i32, 2);
    }

    #[test]
    fn from_block_is_a_big_endian_u256() {
        let request = |from: Option<Vec<u8>>| SubscribeResultsRequest { from_block: from };
        assert_eq!(from_block(&request(None)), Ok(None));
        let mut five = vec![0u8; 32];
        five[31] = 5;
        assert_eq!(from_block(&request(Some(five))), Ok(Some(U256::from(5))));
        assert_eq!(
            from_block(&request(Some(vec![1, 0]))),
            Ok(Some(U256::from(256)))
        );
        assert!(from_block(&request(Some(vec![0; 33]))).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn from_block_filters_out_earlier_blocks_and_nothing_is_replayed() {
        let results = Results::default();
        results.publish(executed(1, 0)); // before anyone subscribed
        let all = results.subscribe(None);
        let from_5 = results.subscribe(Some(U256::from(5)));
        let beyond = results.subscribe(Some(U256::MAX));
        for block in [3, 4, 5, 6, 5] {
            results.publish(executed(block, 0));
        }
        assert_eq!(results.latest_block(), 6);
        drop(results);
        let blocks = |s: Vec<TransactionResult>| s.iter().map(block_of).collect::<Vec<_>>();
        assert_eq!(blocks(all.collect().await), [3, 4, 5, 6, 5]);
        assert_eq!(blocks(from_5.collect().await), [5, 6, 5]);
        assert_eq!(blocks(beyond.collect().await), Vec::<u64>::new());
    }

    #[test]
    fn the_buffer_is_16384_per_subscriber() {
        let results = Results::default();
        let _rx = results.stream.subscribe();
        for i in 0..20_000 {
            results.publish(executed(1, i));
        }
        assert_eq!(results.stream.len(), RESULTS_BUFFER);
        assert_eq!(RESULTS_BUFFER, 16_384);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_subscriber_too_far_behind_loses_the_oldest_logged() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let results = Results::with_capacity(8);
        let slow = results.subscribe(None);
        for i in 0..20 {
            results.publish(executed(1, i));
        }
        // A late subscriber is not affected by the other's lag.
        let late = results.subscribe(None);
        results.publish(executed(2, 20));
        drop(results);
        let got: Vec<u64> = slow
            .map(|r| r.tx_execution_id.map(|id| id.index).unwrap_or(u64::MAX))
            .collect()
            .await;
        // 21 published, 8 buffered: the newest 8 kept, 13 dropped.
        assert_eq!(got, (13..21).collect::<Vec<_>>());
        assert_eq!(late.collect::<Vec<_>>().await.len(), 1);
        let logs = logs.text();
        assert!(logs.contains("oldest results dropped"), "{logs}");
        assert!(logs.contains("dropped=13"), "{logs}");
    }
}
