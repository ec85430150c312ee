//! The watcher: polls the node for new blocks and, for every transaction
//! of each:
//!
//! - judges it, if it calls a protected contract, by the configured
//!   assertions ("no call may revert": the receipt's status; "selector S is
//!   forbidden": the calldata), and feeds every violation to the hub as an
//!   invalidation;
//! - publishes its result ([`crate::results`]): `ASSERTION_FAILED` if it
//!   violated an assertion, else `SUCCESS` or `REVERTED` from its receipt;
//! - reports it ([`crate::report`]) if it violated an assertion.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use serde_json::Value;
use txgate_screen::{AssertionKey, Fingerprint};

use crate::hub::Hub;
use crate::node::{Node, Receipt, hex_bytes, hex_u64};
use crate::report::{Reporter, TxEnv};
use crate::results::{Executed, assertion_failure, status};

/// Judges one mined transaction (JSON from `eth_getBlockByNumber`), at
/// position `index` of block `block`, with its receipt when known:
/// invalidates, publishes its result and reports it; returns the
/// assertions it violated.
fn judge(
    hub: &Hub,
    reporter: &Reporter,
    tx: &Value,
    receipt: Option<Receipt>,
    block: u64,
    index: u64,
) -> Result<usize, String> {
    let hash: B256 = tx["hash"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or("bad hash")?;
    let to = tx["to"].as_str().and_then(|s| s.parse::<Address>().ok());
    let mut violated: Vec<AssertionKey> = Vec::new();
    if let Some(to) = to.filter(|to| hub.config.protects(*to)) {
        let input = hex_bytes(&tx["input"]).ok_or("bad input")?;
        violated = hub
            .config
            .violated(to, &input, receipt.map(|r| r.reverted))
            .into_iter()
            .map(|a| a.key())
            .collect();
        if !violated.is_empty() {
            let sender: Option<Address> = tx["from"].as_str().and_then(|s| s.parse().ok());
            let value: U256 = tx["value"]
                .as_str()
                .and_then(|s| U256::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                .unwrap_or_default();
            let gas = hex_u64(&tx["gas"]).unwrap_or_default();
            let fp = Fingerprint::from_parts(to, &input, value, gas);
            for a in &violated {
                let reached = hub.invalidate(&fp, *a, Some(hash), sender, block);
                tracing::info!(tx = %hash, sender = ?sender, fingerprint = %fp.hash,
                    assertion = %a.id, subscribers = reached, "invalidation");
            }
        }
    }
    let failed = !violated.is_empty();
    let error = match (failed, receipt) {
        (true, _) => assertion_failure(&violated),
        (false, None) => "receipt unavailable".to_string(),
        (false, Some(_)) => String::new(),
    };
    hub.results.publish(Executed {
        block,
        index,
        tx_hash: hash,
        status: status(failed, receipt.map(|r| r.reverted)) as i32,
        gas_used: receipt.map_or(0, |r| r.gas_used),
        error,
    });
    if failed {
        match TxEnv::from_rpc(tx) {
            Ok(env) => {
                reporter.report(hash, &env);
            }
            Err(e) => tracing::warn!(tx = %hash, error = %e, "cannot report a failure"),
        }
    }
    Ok(violated.len())
}

/// Polls `node` every `interval` for new blocks and judges their
/// transactions into `hub` (reporting failures to `reporter`), forever.
/// Starts at the head it first sees.
pub(crate) async fn watch(node: Node, hub: Arc<Hub>, reporter: Reporter, interval: Duration) {
    let mut next: Option<u64> = None;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let head = match node.block_number().await {
            Ok(Some(head)) => head,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "node unreachable");
                continue;
            }
        };
        let from = *next.get_or_insert(head);
        for number in from..=head {
            let block = match node.block(number).await {
                Ok(block) => block,
                Err(e) => {
                    tracing::warn!(block = number, error = %e, "cannot read block");
                    break;
                }
            };
            let receipts = match node.receipts_in_block(number).await {
                Ok(receipts) => receipts,
                Err(e) => {
                    tracing::warn!(block = number, error = %e, "cannot read receipts");
                    Default::default()
                }
            };
            let transactions = block["transactions"].as_array().into_iter().flatten();
            for (index, tx) in transactions.enumerate() {
                let receipt = tx["hash"]
                    .as_str()
                    .and_then(|h| receipts.get(&h.to_lowercase()).copied());
                if let Err(e) = judge(&hub, &reporter, tx, receipt, number, index as u64) {
                    tracing::warn!(block = number, error = %e, "cannot judge a transaction");
                }
            }
            next = Some(number + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use tokio_stream::StreamExt;

    use super::*;
    use crate::config::Config;
    use crate::testutil::receiver;

    const CONTRACT: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";

    fn hub() -> Hub {
        let text = format!(
            "[[assertion]]\nid = \"0x{a1}\"\nversion = 1\nkind = \"no_revert\"\ncontract = \"{CONTRACT}\"\n\
             [[assertion]]\nid = \"0x{a2}\"\nversion = 3\nkind = \"forbidden_selector\"\ncontract = \"{CONTRACT}\"\nselector = \"0xaa60e733\"\n",
            a1 = "a1".repeat(32),
            a2 = "a2".repeat(32),
        );
        Hub::new(Config::parse(&text).expect("config"))
    }

    fn tx(to: &str, input: &str) -> Value {
        json!({"to": to, "input": input, "hash": format!("0x{}", "11".repeat(32)),
            "from": "0x0000000000000000000000000000000000000007", "value": "0x0", "gas": "0x5208"})
    }

    fn receipt(reverted: bool) -> Option<Receipt> {
        Some(Receipt {
            reverted,
            gas_used: 30_000,
        })
    }

    fn no_report() -> Reporter {
        Reporter::disabled()
    }

    #[test]
    fn hub_node_cycle_judging_needs_no_node() {
        let hub = hub();
        let sweep = tx(CONTRACT, "0xaa60e7330000");
        assert_eq!(
            judge(&hub, &no_report(), &sweep, receipt(false), 1, 0),
            Ok(1)
        );
        let fp = Fingerprint::from_parts(
            CONTRACT.parse().expect("address"),
            &[0xaa, 0x60, 0xe7, 0x33, 0, 0],
            U256::ZERO,
            21_000,
        );
        assert_eq!(
            hub.verdict(&fp.hash),
            Some(vec![AssertionKey {
                id: B256::repeat_byte(0xa2),
                version: 3
            }])
        );
        // Reverted: both assertions.
        assert_eq!(
            judge(&hub, &no_report(), &sweep, receipt(true), 1, 0),
            Ok(2)
        );
        // Not protected, or fine: nothing.
        let other = tx("0x0000000000000000000000000000000000000009", "0xaa60e733");
        assert_eq!(
            judge(&hub, &no_report(), &other, receipt(true), 1, 0),
            Ok(0)
        );
        assert_eq!(
            judge(
                &hub,
                &no_report(),
                &tx(CONTRACT, "0x12345678"),
                receipt(false),
                1,
                0
            ),
            Ok(0)
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_transaction_gets_a_result_and_failures_a_report() {
        let (addr, mut reports) = receiver(200, Duration::ZERO).await;
        let reporter = Reporter::new(&format!("http://{addr}/x?token=abc")).expect("reporter");
        let hub = hub();
        let results = hub.results.subscribe(None);
        let hash = |i: u8| format!("0x{}", format!("{i:02x}").repeat(32));
        let mut txs = Vec::new();
        for (i, (to, input)) in [
            ("0x0000000000000000000000000000000000000009", "0x"), // success
            ("0x0000000000000000000000000000000000000009", "0x"), // reverted
            (CONTRACT, "0x12345678"),                             // fine
            (CONTRACT, "0xaa60e733"),                             // forbidden
        ]
        .into_iter()
        .enumerate()
        {
            let mut t = tx(to, input);
            t["hash"] = json!(hash(i as u8 + 1));
            t["nonce"] = json!(format!("{i:#x}"));
            t["gasPrice"] = json!("0x3b9aca00");
            txs.push(t);
        }
        let receipts = [receipt(false), receipt(true), None, receipt(false)];
        for (i, (t, r)) in txs.iter().zip(receipts).enumerate() {
            judge(&hub, &reporter, t, r, 9, i as u64).expect("judged");
        }
        drop(hub);
        let got: Vec<_> = results.collect().await;
        let summary: Vec<(u64, Vec<u8>, i32, u64, bool)> = got
            .iter()
            .map(|r| {
                let id = r.tx_execution_id.clone().expect("id");
                assert_eq!(U256::from_be_slice(&id.block_number), U256::from(9));
                assert_eq!(id.iteration_id, 0);
                (
                    id.index,
                    id.tx_hash,
                    r.status,
                    r.gas_used,
                    r.error.is_empty(),
                )
            })
            .collect();
        let h = |i: u8| vec![i; 32];
        assert_eq!(
            summary,
            [
                (0, h(1), 1, 30_000, true),
                (1, h(2), 2, 30_000, true),
                (2, h(3), 0, 0, false), // no receipt
                (3, h(4), 5, 30_000, false),
            ]
        );
        assert!(got[3].error.contains(&"a2".repeat(32)), "{}", got[3].error);
        // One report, for the failure only.
        let (path, _, body) = tokio::time::timeout(Duration::from_secs(5), reports.recv())
            .await
            .expect("in time")
            .expect("a report");
        assert_eq!(path, "/report?token=abc");
        assert_eq!(body[0], json!(hash(4)));
        assert_eq!(body[1]["kind"], json!(CONTRACT.to_lowercase()));
        assert_eq!(body[1]["data"], json!("0xaa60e733"));
        assert_eq!(body[1]["nonce"], json!(3));
        assert_eq!(
            body[1]["caller"],
            json!("0x0000000000000000000000000000000000000007")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(reports.try_recv().is_err(), "only failures are reported");
    }
}
