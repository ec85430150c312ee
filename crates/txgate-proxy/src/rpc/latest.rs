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
//! (`eth_call`): elsewhere the node's own answer to a missing argument is
//! kept. Every other tag (`pending`, `safe`, `finalized`, `earliest`,
//! numbers, hashes) is left as sent, and so is `eth_getLogs`' filter (a
//! pinned `toBlock` below a client's own `fromBlock` would turn logs into
//! an error, and Go reads its keys in any case); every block-reading call,
//! pinned or not, goes only to a node at or above the agreed head. A read
//! the client's own writes send to the sequencer is not pinned: it wants
//! the newest state.

use serde_json::value::RawValue;
use txgate_jsonrpc::Call;

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

/// Whether txgate answers `call` itself at the agreed head: an
/// `eth_blockNumber` without arguments (with some, the node's error is
/// the answer).
pub(crate) fn answers_locally(call: &Call<'_>) -> bool {
    call.method == "eth_blockNumber"
        && call.params.is_none_or(|p| {
            let mut text = p.get().bytes().filter(|b| !b.is_ascii_whitespace());
            text.next() == Some(b'[') && text.next() == Some(b']') && text.next().is_none()
        })
}

/// Whether `method` reads blocks by number: it goes only to a node at or
/// above the agreed head, so a block txgate said exists (by
/// `eth_blockNumber`, or a pinned `latest`) is there whatever the tag.
pub(crate) fn reads_blocks(method: &str) -> bool {
    method == "eth_getLogs" || POSITIONS.iter().any(|(m, _)| *m == method)
}

/// What a message's calls are pinned to: the agreed head, for the calls
/// `pinnable` lets be (those that go to the replicas: a read sent to the
/// sequencer for the client's own writes or the pending block keeps its
/// tag, so it sees the newest state).
#[derive(Clone, Copy)]
pub(crate) struct Pin<'f> {
    /// The agreed head.
    pub(crate) head: u64,
    /// Whether a call may be pinned.
    pub(crate) pinnable: &'f (dyn Fn(&Call<'_>) -> bool + Sync),
}

impl std::fmt::Debug for Pin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pin")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

/// `params` with `latest` pinned to block `head`, as JSON text; `None`
/// when nothing changes (no `latest`, a method without a block, params not
/// the shape the node reads). Written once, at its size: the caller puts
/// it straight into the outgoing call.
pub(crate) fn pin(method: &str, params: Option<&RawValue>, head: u64) -> Option<String> {
    let position = POSITIONS.iter().find(|(m, _)| *m == method)?.1;
    let list: Vec<&RawValue> = match params {
        Some(params) => serde_json::from_str(params.get()).ok()?,
        None => Vec::new(),
    };
    let replace = match list.get(position) {
        Some(tag) if tag.get().trim() == "\"latest\"" => true,
        // go-ethereum reads a missing block of eth_call as latest.
        None if method == "eth_call" && list.len() == position && position > 0 => false,
        _ => return None,
    };
    // "0x" and at most 16 hex digits, quoted.
    let size = list.iter().map(|v| v.get().len() + 1).sum::<usize>() + 22;
    let mut out = String::with_capacity(size);
    out.push('[');
    for (i, value) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if replace && i == position {
            push_number(&mut out, head);
        } else {
            out.push_str(value.get());
        }
    }
    if !replace {
        if !list.is_empty() {
            out.push(',');
        }
        push_number(&mut out, head);
    }
    out.push(']');
    Some(out)
}

/// `"0x<n>"`.
fn push_number(out: &mut String, n: u64) {
    use std::fmt::Write as _;
    let _ = write!(out, "\"0x{n:x}\"");
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
        pin(method, Some(&params), 0x1f)
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
    fn a_log_filter_is_left_as_sent_but_reads_blocks() {
        assert_eq!(
            pinned("eth_getLogs", r#"[{"address":"0xab","toBlock":"latest"}]"#),
            None
        );
        assert!(reads_blocks("eth_getLogs"));
        assert!(reads_blocks("eth_getBlockByNumber"));
        assert!(!reads_blocks("eth_getTransactionReceipt"));
    }

    #[test]
    fn only_a_block_number_call_without_arguments_is_answered_here() {
        let call = |params: Option<&str>| {
            let params = params.map(|p| RawValue::from_string(p.to_string()).unwrap());
            let call = Call {
                id: None,
                method: "eth_blockNumber".into(),
                params: params.as_deref(),
            };
            answers_locally(&call)
        };
        assert!(call(None));
        assert!(call(Some("[]")));
        assert!(call(Some("[ ]")));
        assert!(!call(Some("[[]]")));
        assert!(!call(Some("[1]")));
        assert!(!call(Some("{}")));
    }

    #[test]
    fn the_block_number_answer_carries_the_callers_id() {
        assert_eq!(
            block_number_answer(r#""a""#, 255),
            br#"{"jsonrpc":"2.0","id":"a","result":"0xff"}"#
        );
    }
}
