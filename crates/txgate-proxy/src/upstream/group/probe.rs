//! The probe task: every `upstream.health_interval_ms`, each node is asked
//! `eth_chainId`, `eth_blockNumber` and `eth_syncing` in one batch, within
//! `upstream.probe_timeout_ms`, all nodes at once. An error object, a
//! missing answer, a timeout or an answer that is not JSON-RPC is a failed
//! probe; `eth_syncing` answering anything but `false` means syncing. The
//! group decides what the results mean ([`txgate_nodes::Group`]).
//!
//! With op-conductor configured, the round also asks it who leads
//! ([`super::conductor`]), at the same time as the probes and within the
//! same deadline, so that readiness at the round's end counts the leader.
//!
//! The short form keeps its one-call probe (`eth_chainId` answered with
//! JSON-RPC), as before the group existed.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{join, join_all};
use serde::Deserialize;
use serde_json::value::RawValue;
use txgate_nodes::Probe;

use super::Nodes;

const PROBE: &[u8] = br#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]},{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber","params":[]},{"jsonrpc":"2.0","id":3,"method":"eth_syncing","params":[]}]"#;

/// One round of probes: every node at once, each within `timeout`; the
/// group takes the results. Returns whether every kind of call has
/// somewhere to go (the short form: whether its node answered).
pub async fn probe_round(nodes: &Nodes, timeout: Duration) -> bool {
    let state = nodes.state();
    if state.is_short_form() {
        let up = match nodes.client(0) {
            Some(only) => only.probe().await,
            None => false,
        };
        if let Some(series) = state.series(0) {
            series.up.set(i64::from(up));
        }
        return up;
    }
    let probes = join_all((0..state.len()).map(|i| probe(nodes, i, timeout)));
    let results = match nodes.conductor() {
        Some(conductor) => join(probes, conductor.follow(state, timeout)).await.0,
        None => probes.await,
    };
    let metrics = state.metrics();
    for (i, result) in results.into_iter().enumerate() {
        if result == Probe::Failed {
            metrics.nodes.probe_failures.inc();
        }
        state.probe(i, result);
    }
    state.ready()
}

/// One node's probe.
async fn probe(nodes: &Nodes, i: usize, timeout: Duration) -> Probe {
    let Some(client) = nodes.client(i) else {
        return Probe::Failed;
    };
    match client
        .call_within(Bytes::from_static(PROBE), Some(timeout))
        .await
    {
        Ok(reply) if reply.status.is_success() => read(&reply.body).unwrap_or(Probe::Failed),
        _ => Probe::Failed,
    }
}

#[derive(Deserialize)]
struct Answer<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
}

/// The probe's answers, by id: each must carry a result.
fn read(body: &[u8]) -> Option<Probe> {
    let answers: Vec<Answer<'_>> = serde_json::from_slice(body).ok()?;
    let result = |id| {
        answers
            .iter()
            .find(|a| a.id == Some(id))
            .and_then(|a| a.result)
            .map(RawValue::get)
    };
    let quantity = |text: &str| {
        let digits = text.strip_prefix("\"0x")?.strip_suffix('"')?;
        u64::from_str_radix(digits, 16).ok()
    };
    let chain_id = quantity(result(1)?)?;
    let head = quantity(result(2)?)?;
    let syncing = result(3)?.trim() != "false";
    Some(Probe::Ok {
        chain_id,
        head,
        syncing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_by_id_and_every_one_must_carry_a_result() {
        let ok = br#"[{"jsonrpc":"2.0","id":3,"result":false},{"jsonrpc":"2.0","id":1,"result":"0x2a"},{"jsonrpc":"2.0","id":2,"result":"0x10"}]"#;
        assert_eq!(
            read(ok),
            Some(Probe::Ok {
                chain_id: 42,
                head: 16,
                syncing: false
            })
        );
        let syncing = br#"[{"id":1,"result":"0x1"},{"id":2,"result":"0x5"},{"id":3,"result":{"currentBlock":"0x5","highestBlock":"0x9"}}]"#;
        assert!(matches!(
            read(syncing),
            Some(Probe::Ok { syncing: true, .. })
        ));
        for bad in [
            &br#"[{"id":1,"result":"0x1"},{"id":2,"error":{"code":-32000,"message":"x"}},{"id":3,"result":false}]"#[..],
            br#"[{"id":1,"result":"0x1"},{"id":3,"result":false}]"#,
            br#"{"id":1,"result":"0x1"}"#,
            br#"[{"id":1,"result":"1"},{"id":2,"result":"0x5"},{"id":3,"result":false}]"#,
            b"not json",
        ] {
            assert_eq!(read(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
