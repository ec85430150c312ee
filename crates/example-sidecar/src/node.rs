//! The local node's JSON-RPC client: head, blocks, receipts, and `eth_call`
//! simulation. It knows nothing of what the sidecar does with them.

use std::collections::HashMap;
use std::time::Duration;

use alloy_primitives::Address;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use txgate_screen::Tx;

/// How long one JSON-RPC call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the sidecar reads of a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// Status 0.
    pub(crate) reverted: bool,
    /// Gas used by the transaction.
    pub(crate) gas_used: u64,
}

/// A JSON-RPC client of the node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    url: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A JSON-RPC quantity (`"0x1a"`).
pub(crate) fn hex_u64(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// JSON-RPC data (`"0x…"`, `"0x"` for none).
pub(crate) fn hex_bytes(v: &Value) -> Option<Vec<u8>> {
    let s = v.as_str()?;
    if s == "0x" {
        return Some(Vec::new());
    }
    txgate_screen::decode_hex(s).ok()
}

impl Node {
    /// A client of the node at `url`.
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
        let response = tokio::time::timeout(CALL_TIMEOUT, self.client.request(request))
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

    /// The number of the latest block (`eth_blockNumber`); `Ok(None)` when
    /// the node answers something that is not a quantity.
    pub(crate) async fn block_number(&self) -> Result<Option<u64>, String> {
        Ok(hex_u64(&self.call("eth_blockNumber", json!([])).await?))
    }

    /// Block `number` with its full transactions (`eth_getBlockByNumber`).
    pub(crate) async fn block(&self, number: u64) -> Result<Value, String> {
        self.call(
            "eth_getBlockByNumber",
            json!([format!("{number:#x}"), true]),
        )
        .await
    }

    /// The receipt of each transaction of block `number`, by lowercase tx
    /// hash: every receipt of the block in one call
    /// (`eth_getBlockReceipts`).
    pub(crate) async fn receipts_in_block(
        &self,
        number: u64,
    ) -> Result<HashMap<String, Receipt>, String> {
        let receipts = self
            .call("eth_getBlockReceipts", json!([format!("{number:#x}")]))
            .await?;
        Ok(receipts
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    r["transactionHash"].as_str()?.to_lowercase(),
                    Receipt {
                        reverted: hex_u64(&r["status"])? == 0,
                        gas_used: hex_u64(&r["gasUsed"]).unwrap_or(0),
                    },
                ))
            })
            .collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_node_cycle_node_is_only_the_json_rpc_client() {
        // The dependency goes one way: the hub and the watcher may use the
        // node, never the other way round.
        let node = include_str!("node.rs");
        let hub = include_str!("hub.rs");
        let hub_path = ["crate", "::", "hub"].concat();
        let node_path = ["crate", "::", "node"].concat();
        assert!(!node.contains(&hub_path), "node.rs uses the hub");
        assert!(
            !node.contains(&["H", "ub"].concat()),
            "node.rs knows of the hub"
        );
        assert!(!hub.contains(&node_path), "hub.rs uses the node");
    }

    #[test]
    fn quantities_and_data_decode() {
        assert_eq!(hex_u64(&json!("0x1a")), Some(26));
        assert_eq!(hex_u64(&json!("1a")), None);
        assert_eq!(hex_bytes(&json!("0x")), Some(Vec::new()));
        assert_eq!(hex_bytes(&json!("0x0102")), Some(vec![1, 2]));
    }
}
