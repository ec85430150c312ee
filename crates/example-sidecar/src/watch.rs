//! The watcher: polls the node for new blocks, judges each transaction to a
//! protected contract by the configured assertions ("no call may revert":
//! the receipt's status; "selector S is forbidden": the calldata), and
//! feeds every violation to the hub as an invalidation.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use serde_json::Value;
use txgate_screen::Fingerprint;

use crate::hub::Hub;
use crate::node::{Node, hex_bytes, hex_u64};

/// Judges one mined transaction (JSON from `eth_getBlockByNumber`), with
/// its receipt status when known; returns the assertions it violated.
fn judge(hub: &Hub, tx: &Value, reverted: Option<bool>, block: u64) -> Result<usize, String> {
    let Some(to) = tx["to"].as_str().and_then(|s| s.parse::<Address>().ok()) else {
        return Ok(0);
    };
    if !hub.config.protects(to) {
        return Ok(0);
    }
    let input = hex_bytes(&tx["input"]).ok_or("bad input")?;
    let hash: B256 = tx["hash"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or("bad hash")?;
    let sender: Option<Address> = tx["from"].as_str().and_then(|s| s.parse().ok());
    let value: U256 = tx["value"]
        .as_str()
        .and_then(|s| U256::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_default();
    let gas = hex_u64(&tx["gas"]).unwrap_or_default();
    let violated = hub.config.violated(to, &input, reverted);
    let fp = Fingerprint::from_parts(to, &input, value, gas);
    for a in &violated {
        let reached = hub.invalidate(&fp, a.key(), Some(hash), sender, block);
        tracing::info!(tx = %hash, sender = ?sender, fingerprint = %fp.hash, assertion = %a.id,
            subscribers = reached, "invalidation");
    }
    Ok(violated.len())
}

/// Polls `node` every `interval` for new blocks and judges their
/// transactions into `hub`, forever. Starts at the head it first sees.
pub(crate) async fn watch(node: Node, hub: Arc<Hub>, interval: Duration) {
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
            let statuses = match node.reverted_in_block(number).await {
                Ok(statuses) => statuses,
                Err(e) => {
                    tracing::warn!(block = number, error = %e, "cannot read receipts");
                    Default::default()
                }
            };
            for tx in block["transactions"].as_array().into_iter().flatten() {
                let reverted = tx["hash"]
                    .as_str()
                    .and_then(|h| statuses.get(&h.to_lowercase()).copied());
                if let Err(e) = judge(&hub, tx, reverted, number) {
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
    use txgate_screen::AssertionKey;

    use super::*;
    use crate::config::Config;

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

    #[test]
    fn hub_node_cycle_judging_needs_no_node() {
        let hub = hub();
        let sweep = tx(CONTRACT, "0xaa60e7330000");
        assert_eq!(judge(&hub, &sweep, Some(false), 1), Ok(1));
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
        assert_eq!(judge(&hub, &sweep, Some(true), 1), Ok(2));
        // Not protected, or fine: nothing.
        let other = tx("0x0000000000000000000000000000000000000009", "0xaa60e733");
        assert_eq!(judge(&hub, &other, Some(true), 1), Ok(0));
        assert_eq!(
            judge(&hub, &tx(CONTRACT, "0x12345678"), Some(false), 1),
            Ok(0)
        );
    }
}
