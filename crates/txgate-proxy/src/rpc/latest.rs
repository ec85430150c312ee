//! Reads of `latest` served at the node group's agreed head, so a client
//! never sees the chain go backwards from one call to the next while the
//! replicas' heads differ (HEURISTICS.md, "Node group").
//!
//! The agreed head is the highest block a strict majority of healthy nodes
//! has reached, and it never goes down. A block-tagged read naming
//! `"latest"` has the tag replaced by that number, and goes only to a node
//! at or above it; `eth_blockNumber` is answered with it by txgate. The
//! positions are go-ethereum's parameter lists. A block parameter left
//! out is pinned only where the node would read it as `latest`
//! (`eth_call`, and `eth_getLogs`' `fromBlock`/`toBlock`): elsewhere the
//! node's own answer to a missing argument is kept. Every other tag
//! (`pending`, `safe`, `finalized`, `earliest`, numbers, hashes) is left
//! as sent.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Where each block-tagged read takes its block.
const POSITIONS: &[(&str, usize)] = &[
    ("eth_getBalance", 1),
    ("eth_getCode", 1),
    ("eth_getTransactionCount", 1),
    ("eth_getStorageAt", 2),
    ("eth_call", 1),
    ("eth_estimateGas", 1),
    ("eth_createAccessList", 1),
    ("eth_getProof", 2),
    ("eth_getBlockByNumber", 0),
    ("eth_getBlockTransactionCountByNumber", 0),
    ("eth_getTransactionByBlockNumberAndIndex", 0),
    ("eth_getUncleByBlockNumberAndIndex", 0),
    ("eth_getUncleCountByBlockNumber", 0),
    ("eth_getBlockReceipts", 0),
    ("eth_feeHistory", 1),
];

/// Whether txgate answers `method` itself at the agreed head.
pub(crate) fn answers_locally(method: &str) -> bool {
    method == "eth_blockNumber"
}

/// `params` with `latest` pinned to block `head`; `None` when nothing
/// changes (no `latest`, a method without a block, params not the shape
/// the node reads).
pub(crate) fn pin(method: &str, params: Option<&RawValue>, head: u64) -> Option<Box<RawValue>> {
    if method == "eth_getLogs" {
        return pin_filter(params?, head);
    }
    let position = POSITIONS.iter().find(|(m, _)| *m == method)?.1;
    let list: Vec<&RawValue> = match params {
        Some(params) => serde_json::from_str(params.get()).ok()?,
        None => Vec::new(),
    };
    let number = format!("\"0x{head:x}\"");
    let pinned = match list.get(position) {
        Some(tag) if tag.get().trim() == "\"latest\"" => {
            let mut parts: Vec<&str> = list.iter().map(|v| v.get()).collect();
            parts[position] = &number;
            parts
        }
        // go-ethereum reads a missing block of eth_call as latest.
        None if method == "eth_call" && list.len() == position && position > 0 => {
            let mut parts: Vec<&str> = list.iter().map(|v| v.get()).collect();
            parts.push(&number);
            parts
        }
        _ => return None,
    };
    RawValue::from_string(format!("[{}]", pinned.join(","))).ok()
}

/// `eth_getLogs`' filter: `fromBlock` and `toBlock` that are `latest` or
/// left out (both mean latest) are pinned, unless the filter names a
/// `blockHash`.
fn pin_filter(params: &RawValue, head: u64) -> Option<Box<RawValue>> {
    let list: Vec<&RawValue> = serde_json::from_str(params.get()).ok()?;
    let [filter] = list.as_slice() else {
        return None;
    };
    let mut filter: Map<String, Value> = serde_json::from_str(filter.get()).ok()?;
    if filter.contains_key("blockHash") {
        return None;
    }
    let mut changed = false;
    for key in ["fromBlock", "toBlock"] {
        let latest = match filter.get(key) {
            None | Some(Value::Null) => true,
            Some(Value::String(tag)) => tag == "latest",
            Some(_) => false,
        };
        if latest {
            filter.insert(key.into(), Value::String(format!("0x{head:x}")));
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    let text = serde_json::to_string(&[Value::Object(filter)]).ok()?;
    RawValue::from_string(text).ok()
}

/// `{"jsonrpc":"2.0","id":<id>,"result":"0x<head>"}`.
pub(crate) fn block_number_answer(id: &str, head: u64) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"0x{head:x}"}}"#).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(method: &str, params: &str) -> Option<String> {
        let params = RawValue::from_string(params.to_string()).unwrap();
        pin(method, Some(&params), 0x1f).map(|p| p.get().to_string())
    }

    #[test]
    fn latest_is_pinned_where_each_method_reads_its_block() {
        assert_eq!(
            pinned("eth_getBalance", r#"["0xab", "latest"]"#).as_deref(),
            Some(r#"["0xab","0x1f"]"#)
        );
        assert_eq!(
            pinned("eth_getStorageAt", r#"["0xab","0x0","latest"]"#).as_deref(),
            Some(r#"["0xab","0x0","0x1f"]"#)
        );
        assert_eq!(
            pinned("eth_getBlockByNumber", r#"["latest",false]"#).as_deref(),
            Some(r#"["0x1f",false]"#)
        );
        // A missing block: eth_call's is latest; eth_getBalance's is the
        // node's error to give.
        assert_eq!(
            pinned("eth_call", r#"[{"to":"0xab"}]"#).as_deref(),
            Some(r#"[{"to":"0xab"},"0x1f"]"#)
        );
        assert_eq!(pinned("eth_getBalance", r#"["0xab"]"#), None);
        // Other tags and methods stay as sent.
        for (method, params) in [
            ("eth_getBalance", r#"["0xab","pending"]"#),
            ("eth_getBalance", r#"["0xab","0x5"]"#),
            ("eth_getBalance", r#"["0xab","finalized"]"#),
            ("eth_getBalance", r#"["0xab",{"blockHash":"0x00"}]"#),
            ("eth_chainId", r#"[]"#),
            ("eth_getBalance", r#"{"address":"0xab"}"#),
            ("eth_call", r#"[{"to":"0xab"},"latest_"]"#),
        ] {
            assert_eq!(pinned(method, params), None, "{method} {params}");
        }
    }

    #[test]
    fn a_log_filter_is_pinned_unless_it_names_a_block_hash() {
        let out = pinned("eth_getLogs", r#"[{"address":"0xab","toBlock":"latest"}]"#).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["fromBlock"], "0x1f");
        assert_eq!(v[0]["toBlock"], "0x1f");
        assert_eq!(v[0]["address"], "0xab");
        assert_eq!(
            pinned("eth_getLogs", r#"[{"fromBlock":"0x1","toBlock":"0x2"}]"#),
            None
        );
        assert_eq!(pinned("eth_getLogs", r#"[{"blockHash":"0x00"}]"#), None);
    }

    #[test]
    fn the_block_number_answer_carries_the_callers_id() {
        assert_eq!(
            block_number_answer(r#""a""#, 255),
            br#"{"jsonrpc":"2.0","id":"a","result":"0xff"}"#
        );
    }
}
