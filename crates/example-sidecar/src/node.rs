//! The local node: polling new blocks, receipts, and `eth_call` simulation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use txgate_screen::{Fingerprint, Tx};

use crate::hub::Hub;

/// A JSON-RPC client of the node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    url: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

fn hex_u64(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn hex_bytes(v: &Value) -> Option<Vec<u8>> {
    let s = v.as_str()?;
    if s == "0x" {
        return Some(Vec::new());
    }
    txgate_screen::decode_hex(s).ok()
}

impl Node {
    pub(crate) fn new(url: &str) -> Node {
        Node {
            url: url.to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request = http::Request::post(&self.url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(5), self.client.request(request))
            .await
            .map_err(|_| "node timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let mut value: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if let Some(error) = value.get("error") {
            return Err(error.to_string());
        }
        Ok(value["result"].take())
    }

    /// Whether `tx` reverts when simulated from `sender` at the latest block.
    pub(crate) async fn simulate(&self, tx: &Tx, sender: Option<Address>) -> Result<bool, String> {
        let Some(to) = tx.to else {
            return Ok(false);
        };
        let mut call = json!({
            "to": format!("{to}"),
            "data": format!("0x{}", alloy_primitives::hex::encode(&tx.input)),
            "value": format!("{:#x}", tx.value),
            "gas": format!("{:#x}", tx.gas_limit),
        });
        if let Some(sender) = sender {
            call["from"] = json!(format!("{sender}"));
        }
        match self.call("eth_call", json!([call, "latest"])).await {
            Ok(_) => Ok(false),
            // An execution error is a revert; a transport error is unknown.
            Err(e) if e.contains("revert") || e.contains("execution") => Ok(true),
            Err(e) => Err(e),
        }
    }
}

/// Judges one mined transaction (JSON from `eth_getBlockByNumber`), with
/// its receipt status when known.
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
        let reached = hub.invalidate(&fp, (a.id, a.version), Some(hash), sender, block);
        tracing::info!(tx = %hash, sender = ?sender, fingerprint = %fp.hash, assertion = %a.id,
            subscribers = reached, "invalidation");
    }
    Ok(violated.len())
}

/// Polls for new blocks and judges their transactions, forever.
pub(crate) async fn watch(node: Node, hub: Arc<Hub>, interval: Duration) {
    let mut next: Option<u64> = None;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let head = match node.call("eth_blockNumber", json!([])).await {
            Ok(v) => match hex_u64(&v) {
                Some(head) => head,
                None => continue,
            },
            Err(e) => {
                tracing::debug!(error = %e, "node unreachable");
                continue;
            }
        };
        let from = *next.get_or_insert(head);
        for number in from..=head {
            let block = match node
                .call(
                    "eth_getBlockByNumber",
                    json!([format!("{number:#x}"), true]),
                )
                .await
            {
                Ok(block) => block,
                Err(e) => {
                    tracing::warn!(block = number, error = %e, "cannot read block");
                    break;
                }
            };
            // Every receipt of the block in one call.
            let statuses: HashMap<String, bool> = match node
                .call("eth_getBlockReceipts", json!([format!("{number:#x}")]))
                .await
            {
                Ok(receipts) => receipts
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| {
                        Some((
                            r["transactionHash"].as_str()?.to_lowercase(),
                            hex_u64(&r["status"])? == 0,
                        ))
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(block = number, error = %e, "cannot read receipts");
                    HashMap::new()
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
