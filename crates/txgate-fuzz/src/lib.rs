//! The bodies of txgate's fuzz targets: each takes arbitrary bytes and
//! must neither panic nor hang nor allocate without bound, and where a
//! property can be stated, asserts it (a panic is the finding).
//!
//! `fuzz/` (cargo-fuzz, nightly) drives them with libFuzzer; on stable,
//! `tests/corpora.rs` replays the checked-in corpora (`fuzz/corpus/<target>`)
//! through them, so an input that once broke a target fails CI. [`TARGETS`]
//! names them all.
//!
//! | target | what it reaches |
//! |---|---|
//! | `jsonrpc` | framing of a request body (single, batch, ids, notifications), rewriting a batch for the upstream and answers back under the caller's ids |
//! | `raw_tx` | a raw-transaction param: 0x-hex, EIP-2718 envelope, fingerprint, signature hash, sender recovery |
//! | `raw_tx_differential` | txgate's decoding and sender recovery against alloy's on the same bytes |
//! | `upstream_response` | the upstream client's HTTP/1.1 response reader, fed in pieces |
//! | `snapshot` | the ban snapshot loader, and importing what it decodes |
//! | `sidecar` | every sidecar message txgate reads (txgate.v1, rpcproxy.v1, the result stream, failure reports, Aeges VerifyTransaction) into invalidations and verdicts |
//! | `config` | the config loader and its validation |
//! | `identity` | the PROXY protocol v1/v2 parser and `X-Forwarded-For`/`Forwarded` resolution |
//! | `conditional` | the condition of a conditional transaction, and the caller's `X-Optimism-Signature` |
//! | `proxyd_hook` | proxyd's validation-hook body: txgate's own JSON reader against serde_json (never accepting what is not JSON), each hash recomputed |

use std::net::IpAddr;

use alloy_consensus::transaction::SignerRecoverable;
use alloy_eips::eip2718::{Decodable2718, Typed2718};
use prost::Message;

/// A target's body.
pub type Body = fn(&[u8]);

/// Every target: its name and its body.
pub const TARGETS: [(&str, Body); 10] = [
    ("jsonrpc", jsonrpc),
    ("raw_tx", raw_tx),
    ("raw_tx_differential", raw_tx_differential),
    ("upstream_response", upstream_response),
    ("snapshot", snapshot),
    ("sidecar", sidecar),
    ("config", config),
    ("identity", identity),
    ("conditional", conditional),
    ("proxyd_hook", proxyd_hook),
];

/// A request body: framed, each call rewritten for the upstream, an
/// answer written under each caller's id; the ids survive as JSON.
pub fn jsonrpc(data: &[u8]) {
    use txgate_jsonrpc::{Entry, Frame, encode};
    const MAX_BATCH: usize = 100;
    let Ok(frame) = txgate_jsonrpc::parse(data, MAX_BATCH) else {
        return;
    };
    let entries: Vec<&Entry<'_>> = match &frame {
        Frame::Single(entry) => vec![entry],
        Frame::Batch(entries) => {
            assert!(!entries.is_empty() && entries.len() <= MAX_BATCH);
            entries.iter().collect()
        }
    };
    let mut upstream = Vec::from(*b"[");
    for (index, entry) in entries.iter().enumerate() {
        let Entry::Call(call) = entry else { continue };
        if upstream.len() > 1 {
            upstream.push(b',');
        }
        encode::write_upstream_call(&mut upstream, call, index);
        // An answer under the caller's own id is JSON, and its id is the
        // caller's, byte for byte.
        let mut out = Vec::new();
        let id = call.id.map(|i| i.as_str());
        encode::write_error(&mut out, id, -32000, "fuzz", None);
        // (JSON's numbers are unbounded: an id like -5e311 is valid JSON
        // that serde_json's `Value` cannot hold, so validity is checked
        // without converting numbers, and the id compared as text.)
        serde_json::from_slice::<serde::de::IgnoredAny>(&out)
            .unwrap_or_else(|e| panic!("answer not JSON: {e}"));
        if let Some(id) = id {
            let echoed = format!("\"id\":{id}");
            assert!(
                out.windows(echoed.len()).any(|w| w == echoed.as_bytes()),
                "the answer does not carry the caller's id"
            );
        }
    }
    upstream.push(b']');
    // What went upstream is a batch the upstream can read (read without
    // a depth limit: wrapping single calls adds a level to what txgate,
    // at most `MAX_DEPTH` deep, accepted).
    serde_json::from_slice::<serde::de::IgnoredAny>(&upstream)
        .unwrap_or_else(|e| panic!("upstream batch not JSON: {e}"));

    // And the upstream's answers, whatever they are, are read back safely.
    let _ = encode::parse_upstream_batch(data);
}

/// A raw-transaction param, as the screening stack takes it apart.
pub fn raw_tx(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(bytes) = txgate_screen::decode_hex(text) else {
        return;
    };
    let Ok(tx) = txgate_screen::decode(&bytes) else {
        return;
    };
    assert_eq!(tx.hash, alloy_primitives::keccak256(&bytes));
    let _ = txgate_screen::Fingerprint::of(&tx);
    let _ = tx.signature_hash();
    let _ = txgate_screen::recover_sender(&tx);
}

/// txgate's decoding and recovery against alloy's: whatever txgate
/// accepts, alloy accepts too, with the same fields and the same sender.
pub fn raw_tx_differential(data: &[u8]) {
    let Ok(ours) = txgate_screen::decode(data) else {
        return;
    };
    let theirs = alloy_consensus::TxEnvelope::decode_2718_exact(data)
        .unwrap_or_else(|e| panic!("txgate decoded what alloy refuses: {e}"));
    use alloy_consensus::Transaction;
    assert_eq!(ours.hash, *theirs.tx_hash());
    assert_eq!(ours.ty, theirs.ty());
    assert_eq!(ours.chain_id, theirs.chain_id());
    assert_eq!(ours.to, theirs.to());
    assert_eq!(ours.input, *theirs.input());
    assert_eq!(ours.value, theirs.value());
    assert_eq!(ours.gas_limit, theirs.gas_limit());
    assert_eq!(ours.signature_hash(), theirs.signature_hash());
    if let Ok(sender) = txgate_screen::recover_sender(&ours) {
        let theirs = theirs
            .recover_signer()
            .unwrap_or_else(|e| panic!("txgate recovered what alloy cannot: {e}"));
        assert_eq!(sender, theirs);
    }
}

/// The upstream response reader, fed in pieces of the first byte's size,
/// under a cap from the second.
pub fn upstream_response(data: &[u8]) {
    let [step, cap, wire @ ..] = data else {
        return;
    };
    let max_body = 16usize << (cap % 12);
    txgate_proxy::fuzzing::upstream_response(wire, usize::from(*step).max(1), max_body);
}

/// A ban snapshot file: decoded, and what decodes imported into a screen.
pub fn snapshot(data: &[u8]) {
    let Ok(decoded) = txgate_screen::snapshot::decode(data) else {
        return;
    };
    let screen = txgate_screen::Screen::new(
        txgate_screen::ScreenSettings::default(),
        std::time::Instant::now(),
    );
    let imported = screen.import_bans(&decoded.records, 1_000_000);
    assert!(imported <= decoded.records.len());
    // What was imported encodes and decodes to the same records.
    let again = txgate_screen::snapshot::decode(&txgate_screen::snapshot::encode(&decoded.records))
        .expect("re-encoded snapshot decodes");
    assert_eq!(again.records.len(), decoded.records.len());
}

/// Every sidecar message txgate reads, from the same bytes.
pub fn sidecar(data: &[u8]) {
    if let Ok(msg) = txgate_proto::v1::Invalidation::decode(data) {
        let _ = txgate_proto::to_invalidation(&msg, 0);
    }
    if let Ok(msg) = txgate_proto::rpcproxy_v1::Invalidation::decode(data) {
        let _ = txgate_proto::rpcproxy::to_invalidation(&msg, 0);
        let _ = txgate_proto::rpcproxy::observed_at_ms(&msg);
    }
    if let Ok(answer) = txgate_proto::rpcproxy_v1::ShouldForwardResponse::decode(data) {
        let _ = txgate_proto::rpcproxy::verdict(&answer);
    }
    if let Ok(result) = txgate_proto::transport_v1::TransactionResult::decode(data) {
        let _ = txgate_proto::results::classify(&result);
    }
    if let Ok(report) = txgate_proto::report::parse(data) {
        let _ = report.fingerprint();
        let _ = report.invalidation(0);
    }
    let _ = txgate_proto::aeges::decode(bytes::Bytes::copy_from_slice(data));
}

/// A config file: loaded and validated; never a panic.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = txgate_config::Config::from_toml(text) {
        let _ = config.validate();
    }
}

/// The PROXY protocol header of a connection, and the client address a
/// forwarding header names (the bytes after the first newline, one value
/// a line).
pub fn identity(data: &[u8]) {
    let _ = txgate_identity::proxy_protocol::starts_header(data);
    if let Ok(Some(header)) = txgate_identity::proxy_protocol::parse(data) {
        let _ = format!("{header:?}");
    }
    let trusted = txgate_identity::TrustedProxies::new(vec![
        "10.0.0.0/8".parse().expect("net"),
        "2001:db8::/32".parse().expect("net"),
    ]);
    let peer: IpAddr = "10.1.2.3".parse().expect("ip");
    let values: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    for header in [
        txgate_identity::forwarded::Header::XForwardedFor,
        txgate_identity::forwarded::Header::Forwarded,
    ] {
        let found =
            txgate_identity::forwarded::resolve(peer, &trusted, header, values.iter().copied());
        // Named by the header, the client is an address the header holds
        // (one of its tokens parses to it); else it is the peer.
        // (A quoted-string's `\x` is `x`: RFC 7230's quoted-pair.)
        let unescaped: Vec<u8> = data.iter().copied().filter(|&b| b != b'\\').collect();
        let named = unescaped
            .split(|b| b",; \t\"[]=\n".contains(b))
            .filter_map(|token| std::str::from_utf8(token).ok())
            .filter_map(|token| {
                token
                    .parse::<IpAddr>()
                    .ok()
                    .or_else(|| token.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
                    .or_else(|| token.rsplit_once(':').and_then(|(ip, _)| ip.parse().ok()))
            })
            .any(|ip| txgate_identity::canonical(ip) == found.ip);
        assert!(
            found.ip == peer || named,
            "{} is neither the peer nor in the header",
            found.ip
        );
    }
}

/// A condition (before the first NUL) and a signature header over a body
/// (after it, header and body split at the next NUL).
pub fn conditional(data: &[u8]) {
    let mut parts = data.splitn(3, |&b| b == 0);
    let condition = parts.next().unwrap_or_default();
    if let Ok(text) = std::str::from_utf8(condition)
        && let Ok(checked) = txgate_conditional::check(text, txgate_conditional::MAX_COST)
    {
        assert!(checked.cost <= txgate_conditional::MAX_COST);
        assert!(checked.accounts <= checked.cost);
    }
    if let (Some(header), Some(body)) = (parts.next(), parts.next()) {
        let _ = txgate_conditional::caller::verify(header, body);
    }
}

/// proxyd's hook body. txgate reads it with a JSON reader of its own:
/// whatever it accepts must be JSON to serde_json too (checked as serde_json
/// checks what it skips, so a number out of f64's range is JSON), with a
/// `txs` object holding exactly the transactions parsed (each key once,
/// each the hash the parser recomputed).
pub fn proxyd_hook(data: &[u8]) {
    use txgate_proto::proxyd::{MAX_TXS, parse};
    /// The body's shape as serde_json reads it, values unread.
    #[derive(serde::Deserialize)]
    struct Shape {
        txs: std::collections::BTreeMap<String, serde::de::IgnoredAny>,
    }
    let Ok(request) = parse(data, MAX_TXS) else {
        return;
    };
    let shape: Shape = serde_json::from_slice(data)
        .unwrap_or_else(|e| panic!("accepted a body serde_json refuses: {e}"));
    assert_eq!(shape.txs.len(), request.txs.len(), "each transaction once");
    assert!(request.txs.len() <= MAX_TXS);
    for tx in &request.txs {
        assert!(shape.txs.contains_key(tx.key), "a key not in the body");
        let key: alloy_primitives::B256 = tx.key.parse().expect("a key that is not a hash");
        assert_eq!(key, tx.hash, "a key that is not the recomputed hash");
    }
}
