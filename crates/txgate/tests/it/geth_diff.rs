//! Transparency against geth (issue 42): one `geth --dev`, the same calls
//! sent straight to it and through txgate in front of it, and the two
//! answers compared.
//!
//! Where the node is deterministic the answers must be the same bytes
//! under the same HTTP status: ids of every kind, the node's own errors
//! and codes, batches, reads of the chain, and the node's refusals of
//! transactions. Where txgate answers differently on purpose, the test
//! asserts the difference and names the rule that makes it (its framing of
//! requests, its batch cap, its method policy, its screening, its own
//! JSON-RPC refusals). Where the node's answer carries what differs from
//! one transaction to the next (block hashes and numbers, base fees, a
//! transaction's hash), the structure is compared and the varying values
//! are checked for what they must be.
//!
//! Transactions are signed with anvil's accounts 1 to 4 straight to the
//! node and 5 to 8 through txgate, so the two paths never share a nonce or
//! a known transaction; the node's messages do not name the sender, so
//! they compare byte for byte.

use std::time::Duration;

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, TxKind, U256, keccak256};
use futures_util::{SinkExt, StreamExt};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{
    ANVIL_ACCOUNTS, ANVIL_KEYS, Answer, Eoa, Geth, Txgate, nothing_pending, post,
    receipt as receipt_of, rpc, rpc_json, try_get,
};

/// One geth dev node and txgate in front of it (defaults: screening on
/// with no sidecar, the default method policy, batch cap and body cap).
struct Pair {
    node: Geth,
    txgate: Txgate,
}

impl Pair {
    async fn start() -> Pair {
        let node = Geth::start().await;
        let txgate = Txgate::start(&node.url, &[]);
        Pair { node, txgate }
    }

    /// `body` POSTed straight to the node, then through txgate.
    async fn both(&self, body: &str) -> (Answer, Answer) {
        let direct = rpc(&self.node.url, body).await.expect("geth");
        let through = rpc(&self.txgate.url, body).await.expect("txgate");
        (direct, through)
    }
}

fn text(answer: &Answer) -> String {
    String::from_utf8_lossy(&answer.2).into_owned()
}

fn json_of(answer: &Answer) -> Value {
    serde_json::from_slice(&answer.2).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(answer)))
}

/// The node's answer and txgate's are the same bytes under the same status.
fn assert_identical(what: &str, direct: &Answer, through: &Answer) {
    assert_eq!(
        (through.0, text(through)),
        (direct.0, text(direct)),
        "{what}: txgate's answer (left) is not geth's (right)"
    );
}

fn call(id: Value, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A batch of `n` `eth_chainId` calls with ids 0 to n - 1.
fn chain_id_batch(n: usize) -> String {
    let calls: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_chainId"}}"#))
        .collect();
    format!("[{}]", calls.join(","))
}

/// Single calls the node answers, each with its id, read the same
/// through txgate byte for byte: txgate forwards the caller's bytes and
/// writes the node's answer back under the caller's own id text.
#[tokio::test(flavor = "multi_thread")]
async fn calls_ids_and_the_nodes_errors_come_back_byte_for_byte() {
    let pair = Pair::start().await;
    let cases: Vec<(&str, String)> = vec![
        ("a number id", call(json!(1), "eth_chainId", json!([]))),
        ("a string id", call(json!("abc"), "eth_chainId", json!([]))),
        ("a null id", call(Value::Null, "eth_chainId", json!([]))),
        // Written by hand: serde_json would print 1.5 and a u64 at most.
        (
            "an id as the caller wrote it",
            r#"{"jsonrpc":"2.0","id":1.50,"method":"eth_chainId","params":[]}"#.into(),
        ),
        (
            "an id beyond 64 bits",
            r#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"eth_chainId"}"#.into(),
        ),
        ("a negative id", call(json!(-7), "eth_chainId", json!([]))),
        (
            "a body with whitespace around it",
            "  {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_chainId\"}  \n".into(),
        ),
        (
            "an unknown method",
            call(json!(2), "eth_noSuchMethod", json!([])),
        ),
        (
            "a malformed argument",
            call(json!(3), "eth_getBalance", json!(["0x12", "latest"])),
        ),
        (
            "a missing argument",
            call(json!(4), "eth_getBlockByNumber", json!(["latest"])),
        ),
        (
            "too many arguments",
            call(json!(5), "eth_chainId", json!([1])),
        ),
        (
            "params as an object",
            call(json!(6), "eth_chainId", json!({})),
        ),
        (
            "the genesis block",
            call(json!(7), "eth_getBlockByNumber", json!(["0x0", true])),
        ),
        (
            "a funded balance",
            call(
                json!(8),
                "eth_getBalance",
                json!([ANVIL_ACCOUNTS[9], "latest"]),
            ),
        ),
        ("the head", call(json!(9), "eth_blockNumber", json!([]))),
        ("net_version", call(json!(10), "net_version", json!([]))),
        (
            "web3_clientVersion",
            call(json!(11), "web3_clientVersion", json!([])),
        ),
        ("txpool_status", call(json!(12), "txpool_status", json!([]))),
    ];
    for (what, body) in &cases {
        let (direct, through) = pair.both(body).await;
        assert_eq!(direct.0, StatusCode::OK, "{what}: {}", text(&direct));
        assert_identical(what, &direct, &through);
    }
}

/// What txgate cannot frame as JSON-RPC it answers itself and never
/// forwards (its framing, `txgate-jsonrpc`): the node's JSON-RPC code and
/// id, but HTTP 400 (the request failed, not a call) and a message that
/// names the defect where geth says only "invalid request".
#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_get_the_nodes_code_from_txgate_itself() {
    let pair = Pair::start().await;
    // (what, body, code, id, geth's message, txgate's message)
    let cases: [(&str, &str, i64, Value, &str, &str); 10] = [
        (
            "not JSON",
            r#"{"jsonrpc":"2.0","id":1,"#,
            -32700,
            Value::Null,
            "parse error",
            "parse error: body is not valid JSON",
        ),
        (
            "a string",
            r#""hello""#,
            -32600,
            Value::Null,
            "invalid request",
            "invalid request: body must be a request object or a batch array",
        ),
        (
            "a number",
            "42",
            -32600,
            Value::Null,
            "invalid request",
            "invalid request: body must be a request object or a batch array",
        ),
        (
            "an object id",
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"eth_chainId"}"#,
            -32600,
            Value::Null,
            "invalid request",
            "invalid request: id must be a string, a number or null",
        ),
        (
            "an array id",
            r#"{"jsonrpc":"2.0","id":[1],"method":"eth_chainId"}"#,
            -32600,
            Value::Null,
            "invalid request",
            "invalid request: id must be a string, a number or null",
        ),
        (
            "no version",
            r#"{"id":1,"method":"eth_chainId"}"#,
            -32600,
            json!(1),
            "invalid request",
            "invalid request: jsonrpc must be \"2.0\"",
        ),
        (
            "version 1.0",
            r#"{"jsonrpc":"1.0","id":1,"method":"eth_chainId"}"#,
            -32600,
            json!(1),
            "invalid request",
            "invalid request: jsonrpc must be \"2.0\"",
        ),
        (
            "no method",
            r#"{"jsonrpc":"2.0","id":1}"#,
            -32600,
            json!(1),
            "invalid request",
            "invalid request: missing method",
        ),
        (
            "a number as method",
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            -32600,
            json!(1),
            "invalid request",
            "invalid request: method must be a string",
        ),
        (
            "an empty batch",
            "[]",
            -32600,
            Value::Null,
            "empty batch",
            "invalid request: empty batch",
        ),
    ];
    for (what, body, code, id, geth_says, txgate_says) in &cases {
        let (direct, through) = pair.both(body).await;
        assert_eq!(direct.0, StatusCode::OK, "{what}: {}", text(&direct));
        assert_eq!(
            json_of(&direct),
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": geth_says}}),
            "{what}: geth's answer"
        );
        assert_eq!(
            through.0,
            StatusCode::BAD_REQUEST,
            "{what}: {}",
            text(&through)
        );
        assert_eq!(
            json_of(&through),
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": txgate_says}}),
            "{what}: txgate's answer"
        );
    }

    // Two where txgate follows JSON-RPC 2.0 and geth is lenient. A boolean
    // id is no id in the specification ("a String, Number, or NULL"):
    // geth answers the call under it; txgate refuses the request.
    let body = r#"{"jsonrpc":"2.0","id":true,"method":"eth_chainId"}"#;
    let (direct, through) = pair.both(body).await;
    assert_eq!(
        text(&direct),
        r#"{"jsonrpc":"2.0","id":true,"result":"0x7a69"}"#
    );
    assert_eq!(through.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(&through)["error"]["code"],
        -32600,
        "{}",
        text(&through)
    );
    // Params that are neither an array nor an object are not a request in
    // the specification ("MUST be an Array or Object"): geth says invalid
    // params (-32602), txgate invalid request (-32600).
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":"x"}"#;
    let (direct, through) = pair.both(body).await;
    assert_eq!(
        text(&direct),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"non-array args"}}"#
    );
    assert_eq!(through.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(&through),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600,
            "message": "invalid request: params must be an array or an object"}})
    );

    // A request of notifications only: JSON-RPC owes no answer. geth sends
    // an empty 200; txgate says so with 204 No Content.
    for body in [
        r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#,
        r#"[{"jsonrpc":"2.0","method":"eth_chainId"}]"#,
    ] {
        let (direct, through) = pair.both(body).await;
        assert_eq!((direct.0, text(&direct).as_str()), (StatusCode::OK, ""));
        assert_eq!(
            (through.0, text(&through).as_str()),
            (StatusCode::NO_CONTENT, "")
        );
    }
}

/// The transport's refusals: geth answers them in plain text, txgate in
/// JSON-RPC under the same status where there is one (every refusal of
/// txgate's is a JSON-RPC error object: `rpc/rescue.rs`).
#[tokio::test(flavor = "multi_thread")]
async fn transport_refusals_keep_the_status_and_speak_json_rpc() {
    let pair = Pair::start().await;
    let chain_id = call(json!(1), "eth_chainId", json!([]));
    for content_type in [Some("text/plain"), None] {
        let direct = post(&pair.node.url, content_type, chain_id.clone())
            .await
            .expect("geth");
        let through = post(&pair.txgate.url, content_type, chain_id.clone())
            .await
            .expect("txgate");
        assert_eq!(direct.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            text(&direct),
            "invalid content type, only application/json is supported\n"
        );
        assert_eq!(through.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            json_of(&through),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
                "message": "invalid request: content-type must be application/json"}})
        );
    }

    // A GET: geth answers an empty 200 (its health check); txgate 405, as
    // JSON-RPC over HTTP is POST (its health checks are on the admin port).
    let direct = try_get(&pair.node.url).await.expect("geth");
    assert_eq!((direct.0, text(&direct).as_str()), (StatusCode::OK, ""));
    let through = try_get(&pair.txgate.url).await.expect("txgate");
    assert_eq!(through.0, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(&through)["error"]["code"], -32600);

    // The body cap: both 5 MiB, both refused by the declared length before
    // a byte of the body is read (so none is sent here).
    let over = 5 * 1024 * 1024 + 1;
    let (status, body) = declared_too_long(&pair.node.url, over).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body, format!("content length too large ({over}>5242880)\n"));
    let (status, body) = declared_too_long(&pair.txgate.url, over).await;
    assert_eq!(status, 413, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32005,
            "message": "limit exceeded: request body is larger than 5242880 bytes"}})
    );
}

/// POSTs a head declaring `length` bytes of body and sends none; returns
/// the status and the body of the answer.
async fn declared_too_long(url: &str, length: usize) -> (u16, String) {
    let authority = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .to_ascii_lowercase()
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("content-length:")
                            .map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse::<usize>().ok());
                if length.is_some_and(|l| body.len() >= l) {
                    return;
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no whole answer within 10 s from {url}");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

/// Batches: the same answer, byte for byte, up to txgate's cap of 100
/// calls; over it txgate refuses the whole batch (`rpc.max_batch_size`,
/// HTTP 413, -32005) where geth serves up to 1000, so geth's own limit
/// (its "batch too large" at 1001) is never reached through txgate.
#[tokio::test(flavor = "multi_thread")]
async fn batches_match_up_to_txgates_cap() {
    let pair = Pair::start().await;
    for n in [1, 2, 100] {
        let (direct, through) = pair.both(&chain_id_batch(n)).await;
        assert_eq!(json_of(&direct).as_array().map(Vec::len), Some(n));
        assert_identical(&format!("a batch of {n}"), &direct, &through);
    }

    // Mixed, with entries txgate answers itself: the ones that reach the
    // node come back as the node wrote them; the invalid ones get the
    // node's code under the node's id, txgate's message naming the defect
    // (its framing); a denied method gets the node's -32601, without the
    // method's name (the method policy); the notification gets nothing.
    let batch = r#"[
        {"jsonrpc":"2.0","id":1,"method":"eth_chainId"},
        1,
        {"jsonrpc":"2.0","id":"x","method":"eth_noSuch"},
        {"jsonrpc":"2.0","method":"eth_chainId"},
        {"jsonrpc":"2.0","id":3,"method":"eth_getBalance","params":["0x12"]},
        {"id":4,"method":"eth_chainId"},
        {"jsonrpc":"2.0","id":5,"method":"admin_peers"},
        {"jsonrpc":"2.0","id":null,"method":"net_version"}
    ]"#;
    let (direct, through) = pair.both(batch).await;
    assert_eq!((direct.0, through.0), (StatusCode::OK, StatusCode::OK));
    let (direct, through) = (json_of(&direct), json_of(&through));
    let (direct, through) = (direct.as_array().unwrap(), through.as_array().unwrap());
    assert_eq!(direct.len(), 7, "one answer per call: {direct:?}");
    assert_eq!(through.len(), 7, "one answer per call: {through:?}");
    for i in [0, 2, 3, 6] {
        assert_eq!(through[i], direct[i], "entry {i}, forwarded");
    }
    for (i, message) in [
        (1, "invalid request: batch element is not an object"),
        (4, "invalid request: jsonrpc must be \"2.0\""),
        (5, "the method does not exist/is not available"),
    ] {
        assert_eq!(through[i]["id"], direct[i]["id"], "entry {i}");
        assert_eq!(
            through[i]["error"]["code"], direct[i]["error"]["code"],
            "entry {i}"
        );
        assert_eq!(through[i]["error"]["message"], message, "entry {i}");
    }
    assert_eq!(direct[1]["error"]["message"], "invalid request");
    assert_eq!(
        direct[5]["error"]["message"],
        "the method admin_peers does not exist/is not available"
    );

    // Over txgate's cap: geth serves 101 and 1000 calls.
    for n in [101, 1000] {
        let (direct, through) = pair.both(&chain_id_batch(n)).await;
        assert_eq!(direct.0, StatusCode::OK);
        assert_eq!(json_of(&direct).as_array().map(Vec::len), Some(n));
        assert_eq!(through.0, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            json_of(&through),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32005,
                "message": format!("limit exceeded: batch of {n} calls exceeds the limit of 100")}})
        );
    }
    // geth's own limit, 1000: one error under the first call's id. Through
    // txgate the same batch meets txgate's cap first.
    let (direct, through) = pair.both(&chain_id_batch(1001)).await;
    assert_eq!(direct.0, StatusCode::OK);
    assert_eq!(
        text(&direct),
        r#"[{"jsonrpc":"2.0","id":0,"error":{"code":-32600,"message":"batch too large"}}]"#
    );
    assert_eq!(through.0, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(json_of(&through)["error"]["code"], -32005);
}

/// The method policy (`rpc.policy`, default deny list `admin_*`,
/// `debug_*`, `personal_*`, `miner_*`, `engine_*`): refused before the
/// node with the node's own code and status for a method it lacks, but a
/// message that does not echo the method.
#[tokio::test(flavor = "multi_thread")]
async fn denied_methods_get_the_nodes_code_without_reaching_it() {
    let pair = Pair::start().await;
    for method in [
        "admin_peers",
        "debug_traceTransaction",
        "personal_listAccounts",
        "miner_start",
        "engine_exchangeCapabilities",
    ] {
        let (direct, through) = pair.both(&call(json!(4), method, json!([]))).await;
        assert_eq!((direct.0, through.0), (StatusCode::OK, StatusCode::OK));
        let message = format!("the method {method} does not exist/is not available");
        assert_eq!(
            json_of(&direct),
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": message}})
        );
        assert_eq!(
            json_of(&through),
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601,
                "message": "the method does not exist/is not available"}})
        );
    }
}

const GWEI: u128 = 1_000_000_000;

/// A transfer of `value` wei to 0x42…42.
fn transfer(nonce: u64, gas: u64, max_fee: u128, tip: u128, value: u64) -> TxEip1559 {
    TxEip1559 {
        chain_id: 31337,
        nonce,
        gas_limit: gas,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(value),
        access_list: Default::default(),
        input: Default::default(),
    }
}

fn hash_of(raw: &str) -> String {
    keccak256(alloy_primitives::hex::decode(raw).expect("hex")).to_string()
}

fn send_raw_call(raw: &str) -> String {
    call(json!(1), "eth_sendRawTransaction", json!([raw]))
}

/// Every answer of one path's submissions, in order, by name; the node's
/// hashes written as `<hash>` once checked to be the transaction's own.
async fn submissions(
    url: &str,
    first_account: usize,
    poor_seed: u64,
) -> Vec<(&'static str, Answer)> {
    let account = |i: usize| Eoa::from_key(ANVIL_KEYS[first_account + i]);
    let (a, b, c) = (account(0), account(1), account(2));
    // Funded by no genesis.
    let poor = Eoa::new(poor_seed);
    let fee = 20 * GWEI;

    let first = a.sign_tx(transfer(0, 21_000, fee, GWEI, 1));
    let (_, answer) = rpc_json(url, &send_raw_call(&first)).await;
    assert_eq!(answer["result"], hash_of(&first), "{answer}");
    let mined = receipt_of(url, &hash_of(&first), Duration::from_secs(30)).await;
    assert_eq!(mined["status"], "0x1", "{mined}");
    nothing_pending(url).await;

    // b's nonce 3 leaves a gap: it waits in the pool for ever, so it is
    // still there when it is sent again.
    let queued = b.sign_tx(transfer(3, 21_000, fee, GWEI, 1));
    let cases: Vec<(&'static str, String)> = vec![
        ("the mined transaction again", first.clone()),
        (
            "nonce too low",
            a.sign_tx(transfer(0, 21_000, fee, GWEI, 2)),
        ),
        ("a queued transaction", queued.clone()),
        ("already known", queued),
        (
            "replacement underpriced",
            b.sign_tx(transfer(3, 21_000, fee, GWEI, 2)),
        ),
        (
            "tip below the pool's minimum",
            c.sign_tx(transfer(0, 21_000, fee, 0, 1)),
        ),
        (
            "fee over the node's cap",
            c.sign_tx(transfer(0, 100_000, 20_000 * GWEI, GWEI, 1)),
        ),
        (
            "intrinsic gas too low",
            c.sign_tx(transfer(0, 20_000, fee, GWEI, 1)),
        ),
        (
            "tip above the fee cap",
            c.sign_tx(transfer(0, 21_000, GWEI, 2 * GWEI, 1)),
        ),
        (
            "another chain",
            c.sign_tx(TxEip1559 {
                chain_id: 1,
                ..transfer(0, 21_000, fee, GWEI, 1)
            }),
        ),
        (
            "insufficient funds",
            poor.sign_tx(transfer(0, 21_000, fee, GWEI, 1)),
        ),
        ("bad RLP", "0xdeadbeef".into()),
        ("not hex", "0xzz".into()),
        ("empty", "0x".into()),
    ];
    let mut answers = Vec::new();
    for (what, raw) in cases {
        let mut answer = rpc(url, &send_raw_call(&raw)).await.expect("transport");
        let mut value: Value = serde_json::from_slice(&answer.2).unwrap_or_default();
        if value.get("result").is_some() {
            assert_eq!(value["result"], hash_of(&raw), "{what}");
            value["result"] = "<hash>".into();
            answer.2 = value.to_string().into();
        }
        answers.push((what, answer));
    }
    answers
}

/// The node's refusals of transactions, each built for the path's own
/// account: identical through txgate. What does not decode as a
/// transaction is refused by txgate's screening itself (its hex and
/// envelope stages: -32602 with `data.reason` `invalid_transaction`) and
/// never reaches the node.
#[tokio::test(flavor = "multi_thread")]
async fn the_nodes_refusals_of_transactions_come_back_byte_for_byte() {
    let pair = Pair::start().await;
    let direct = submissions(&pair.node.url, 1, 4201).await;
    let through = submissions(&pair.txgate.url, 5, 4202).await;
    let refused_by_screening = ["bad RLP", "not hex", "empty"];
    for ((what, direct), (_, through)) in direct.iter().zip(&through) {
        if refused_by_screening.contains(what) {
            continue;
        }
        assert_identical(what, direct, through);
    }
    let find = |answers: &[(&str, Answer)], what: &str| {
        json_of(&answers.iter().find(|(w, _)| *w == what).unwrap().1)
    };
    // The node's own words, for the record of what was compared.
    for (what, message) in [
        (
            "the mined transaction again",
            "nonce too low: next nonce 1, tx nonce 0",
        ),
        ("nonce too low", "nonce too low: next nonce 1, tx nonce 0"),
        ("already known", "already known"),
        (
            "replacement underpriced",
            "replacement transaction underpriced",
        ),
        (
            "tip below the pool's minimum",
            "transaction gas price below minimum: gas tip cap 0, minimum needed 1",
        ),
        (
            "fee over the node's cap",
            "tx fee (2.00 ether) exceeds the configured cap (1.00 ether)",
        ),
        (
            "intrinsic gas too low",
            "intrinsic gas too low: gas 20000, minimum needed 21000",
        ),
        (
            "tip above the fee cap",
            "max priority fee per gas higher than max fee per gas",
        ),
        (
            "another chain",
            "invalid sender: invalid chain id for signer: have 1 want 31337",
        ),
        (
            "insufficient funds",
            "insufficient funds for gas * price + value: balance 0, tx cost \
             420000000000001, overshot 420000000000001",
        ),
    ] {
        let answer = find(&direct, what);
        assert_eq!(answer["error"]["code"], -32000, "{what}: {answer}");
        assert_eq!(answer["error"]["message"], message, "{what}");
    }
    assert_eq!(find(&direct, "a queued transaction")["result"], "<hash>");

    // Screening's refusals, against geth's own answers.
    for (what, geth_code, geth_says, txgate_says) in [
        (
            "bad RLP",
            -32000,
            "rlp: value size exceeds available input length",
            "invalid params: invalid RLP: input too short",
        ),
        (
            "not hex",
            -32602,
            "invalid argument 0: json: cannot unmarshal invalid hex string into Go value of type hexutil.Bytes",
            "invalid params: invalid hex: raw transaction must be 0x-prefixed hex",
        ),
        (
            "empty",
            -32000,
            "typed transaction too short",
            "invalid params: empty raw transaction",
        ),
    ] {
        let direct = find(&direct, what);
        assert_eq!(
            direct,
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": geth_code, "message": geth_says}}),
            "{what}"
        );
        assert_eq!(
            find(&through, what),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": txgate_says,
                "data": {"reason": "invalid_transaction"}}}),
            "{what}"
        );
    }
}

/// `eth_sendRawTransactionSync`: its receipt, its
/// refusals and its timeout (code 4, the hash in `data`) come back as the
/// node wrote them.
#[tokio::test(flavor = "multi_thread")]
async fn sync_submissions_get_the_nodes_receipt_and_timeout() {
    let pair = Pair::start().await;
    let mut answers = Vec::new();
    for (url, key) in [
        (&pair.node.url, ANVIL_KEYS[4]),
        (&pair.txgate.url, ANVIL_KEYS[8]),
    ] {
        let sender = Eoa::from_key(key);
        let raw = sender.sign_tx(transfer(0, 21_000, 20 * GWEI, GWEI, 1));
        let (status, mined) = rpc_json(
            url,
            &call(json!(1), "eth_sendRawTransactionSync", json!([raw])),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{mined}");
        let receipt = mined["result"].clone();
        assert_eq!(receipt["status"], "0x1", "{mined}");
        assert_eq!(receipt["transactionHash"], hash_of(&raw));
        assert_eq!(receipt["from"], sender.address.to_string().to_lowercase());
        // The receipt is the node's: as eth_getTransactionReceipt reads it
        // straight from the node.
        let stored = receipt_of(&pair.node.url, &hash_of(&raw), Duration::from_secs(30)).await;
        assert_eq!(receipt, stored);
        nothing_pending(url).await;

        // Its nonce again: the node's refusal.
        let again = sender.sign_tx(transfer(0, 21_000, 20 * GWEI, GWEI, 2));
        let refused = rpc(
            url,
            &call(json!(2), "eth_sendRawTransactionSync", json!([again])),
        )
        .await
        .expect("transport");
        // A nonce gap: never mined, so a timeout of 1 ms always runs out.
        let late = sender.sign_tx(transfer(5, 21_000, 20 * GWEI, GWEI, 1));
        let (_, timed_out) = rpc_json(
            url,
            &call(json!(3), "eth_sendRawTransactionSync", json!([late, 1])),
        )
        .await;
        assert_eq!(
            timed_out,
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": 4,
                "message": "The transaction was added to the transaction pool but wasn't processed in 1ms",
                "data": hash_of(&late)}})
        );
        // A timeout geth cannot read (hex, where it wants a number).
        let bad_timeout = rpc(
            url,
            &call(json!(4), "eth_sendRawTransactionSync", json!([late, "0x1"])),
        )
        .await
        .expect("transport");
        answers.push((receipt, refused, bad_timeout));
    }
    let (direct, through) = (&answers[0], &answers[1]);
    // The two receipts: the same fields, and the same values but for what
    // belongs to the block and the sender (the two are mined in different
    // blocks, whose hash, number, time and base fee are the chain's).
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&through.0), keys(&direct.0));
    for (key, value) in through.0.as_object().unwrap() {
        let varies = [
            "blockHash",
            "blockNumber",
            "blockTimestamp",
            "effectiveGasPrice",
            "from",
            "transactionHash",
        ];
        if !varies.contains(&key.as_str()) {
            assert_eq!(value, &direct.0[key], "receipt field {key}");
        }
    }
    assert_identical("a sync call's nonce too low", &direct.1, &through.1);
    assert_eq!(
        text(&direct.1),
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"nonce too low: next nonce 1, tx nonce 0"}}"#
    );
    assert_identical("a sync call's unreadable timeout", &direct.2, &through.2);
    assert_eq!(json_of(&direct.2)["error"]["code"], -32602);
}

/// One WebSocket exchange on a fresh socket: the text of the first
/// message back, or how the socket ended.
async fn ws_exchange(url: &str, request: &str) -> String {
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("WebSocket upgrade at {url}: {e}"));
    socket.send(Message::text(request)).await.expect("send");
    next_or_end(&mut socket).await
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next text message within 10 s, or how the socket ended.
async fn next_or_end(socket: &mut Socket) -> String {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10 s");
        match message {
            Some(Ok(Message::Text(text))) => return text.to_string(),
            Some(Ok(Message::Close(frame))) => return format!("closed: {frame:?}"),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return format!("error: {e}"),
            None => return "ended".into(),
        }
    }
}

/// The same calls over WebSocket: the node's answers are relayed as it
/// wrote them; what txgate answers itself differs as over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn websocket_answers_match_geth() {
    let pair = Pair::start().await;
    let through_url = format!("ws://{}", pair.txgate.rpc_addr);
    let identical: Vec<String> = vec![
        call(json!(1), "eth_chainId", json!([])),
        call(json!("abc"), "eth_chainId", json!([])),
        call(Value::Null, "eth_chainId", json!([])),
        r#"{"jsonrpc":"2.0","id":1.50,"method":"eth_chainId"}"#.into(),
        call(json!(2), "eth_noSuchMethod", json!([])),
        call(json!(3), "eth_getBalance", json!(["0x12", "latest"])),
        call(json!(5), "eth_getBlockByNumber", json!(["0x0", false])),
        call(json!(6), "eth_subscribe", json!(["nope"])),
        call(json!(7), "eth_unsubscribe", json!(["0x1234"])),
        chain_id_batch(3),
        chain_id_batch(100),
    ];
    for request in &identical {
        let direct = ws_exchange(&pair.node.ws_url, request).await;
        let through = ws_exchange(&through_url, request).await;
        assert_eq!(through, direct, "over WebSocket: {request}");
    }

    // As over HTTP: the method policy, the framing, the batch cap.
    let both = |request: String| {
        let (direct_url, through_url) = (pair.node.ws_url.clone(), through_url.clone());
        async move {
            let direct = ws_exchange(&direct_url, &request).await;
            let through = ws_exchange(&through_url, &request).await;
            let parse = |text: &str| -> Value {
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
            };
            (parse(&direct), parse(&through))
        }
    };
    let (direct, through) = both(call(json!(4), "admin_peers", json!([]))).await;
    assert_eq!(
        direct["error"]["message"],
        "the method admin_peers does not exist/is not available"
    );
    assert_eq!(
        through,
        json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601,
            "message": "the method does not exist/is not available"}})
    );
    let (direct, through) = both("[]".into()).await;
    assert_eq!(
        direct,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "empty batch"}})
    );
    assert_eq!(
        through,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "invalid request: empty batch"}})
    );
    let (direct, through) =
        both(r#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId"},1]"#.into()).await;
    assert_eq!(through[0], direct[0], "the forwarded entry");
    assert_eq!(direct[1]["error"]["message"], "invalid request");
    assert_eq!(
        through[1],
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "invalid request: batch element is not an object"}})
    );
    let (direct, through) = both(chain_id_batch(101)).await;
    assert_eq!(direct.as_array().map(Vec::len), Some(101));
    assert_eq!(
        through,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32005,
            "message": "limit exceeded: batch of 101 calls exceeds the limit of 100"}})
    );

    // A message that is not JSON: both -32700 under a null id, in their own
    // words (geth's is Go's decoder error). Then geth ends the connection,
    // while txgate answers the next call on the same socket (txgate's
    // WebSocket rule: every message is answered as an HTTP body is; a
    // socket closes only for the reasons HEURISTICS.md lists).
    let next_call = call(json!(9), "eth_chainId", json!([]));
    let direct = ws_two(&pair.node.ws_url, r#"{"jsonrpc":"2.0","id":1,"#, &next_call).await;
    assert_eq!(
        direct.0,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"unexpected end of JSON input"}}"#
    );
    assert!(
        !direct.1.starts_with('{'),
        "geth answered after a parse error: {}",
        direct.1
    );
    let through = ws_two(&through_url, r#"{"jsonrpc":"2.0","id":1,"#, &next_call).await;
    assert_eq!(
        through.0,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: body is not valid JSON"}}"#
    );
    assert_eq!(through.1, r#"{"jsonrpc":"2.0","id":9,"result":"0x7a69"}"#);
}

/// Sends `first` and then `second` on one fresh socket; returns the first
/// message back for each, or how the socket ended.
async fn ws_two(url: &str, first: &str, second: &str) -> (String, String) {
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("WebSocket upgrade at {url}: {e}"));
    let mut answers = Vec::new();
    for request in [first, second] {
        if let Err(e) = socket.send(Message::text(request)).await {
            answers.push(format!("send failed: {e}"));
            continue;
        }
        answers.push(next_or_end(&mut socket).await);
    }
    (answers[0].clone(), answers[1].clone())
}

/// A `newHeads` subscription over WebSocket, straight and through: the
/// same notification shape, each under its own socket's subscription id,
/// carrying the same block's header.
#[tokio::test(flavor = "multi_thread")]
async fn new_heads_notifications_match_geth() {
    let pair = Pair::start().await;
    let through_url = format!("ws://{}", pair.txgate.rpc_addr);
    let subscribe = call(json!(1), "eth_subscribe", json!(["newHeads"]));
    let mut sockets = Vec::new();
    for url in [pair.node.ws_url.clone(), through_url] {
        let (mut socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("WebSocket upgrade");
        socket
            .send(Message::text(subscribe.clone()))
            .await
            .expect("send");
        let answer = next_text(&mut socket).await;
        let value: Value = serde_json::from_str(&answer).expect("JSON");
        let id = value["result"]
            .as_str()
            .expect("a subscription id")
            .to_owned();
        assert_eq!(
            answer,
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{id}"}}"#),
            "{url}"
        );
        sockets.push((socket, id));
    }
    // A block: a transfer, straight to the node.
    let raw = Eoa::from_key(ANVIL_KEYS[3]).sign_tx(transfer(0, 21_000, 20 * GWEI, GWEI, 1));
    let (_, sent) = rpc_json(&pair.node.url, &send_raw_call(&raw)).await;
    assert_eq!(sent["result"], hash_of(&raw), "{sent}");
    let mut notifications = Vec::new();
    for (socket, id) in &mut sockets {
        let text = next_text(socket).await;
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(value["params"]["subscription"], *id, "{text}");
        // The shape, byte for byte, with the subscription id in place.
        let header = serde_json::to_string(&value["params"]["result"]).unwrap();
        notifications.push((text.replace(id.as_str(), "<subscription>"), header));
    }
    let (direct, through) = (&notifications[0], &notifications[1]);
    assert_eq!(through.0, direct.0, "the notification");
    assert!(direct.0.starts_with(
        r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"<subscription>","result":{"#
    ), "{}", direct.0);
    let header: Value = serde_json::from_str(&direct.1).unwrap();
    assert_eq!(header["number"], "0x1", "{header}");
}

/// The next text message on `socket`, within 10 s.
async fn next_text(socket: &mut Socket) -> String {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10 s")
            .expect("socket open")
            .expect("a message");
        if let Message::Text(text) = message {
            return text.to_string();
        }
    }
}
