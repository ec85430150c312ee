//! `eth_sendBundle` end to end, against a node that records every byte it
//! gets (over HTTP, and over WebSocket from a recording socket server): an
//! honest bundle arrives as sent, alone, in a batch and on a WebSocket; a
//! bundle holding a banned or recently failed transaction never reaches the
//! node, its refusal names the transaction, and its honest transactions are
//! not remembered; malformed bundles get -32602 and reach nothing;
//! monitor-only mode forwards and counts; `eth_callBundle` passes. And with
//! the example sidecar's ShouldForward, a bundle's transactions are asked
//! about as lone calls are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::{Address, B256, keccak256};
use futures_util::{SinkExt, StreamExt};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use txgate_screen::{Invalidation, decode, decode_hex, recover_sender};

use crate::support::{Eoa, InProcess, RecordingUpstream, fund, get, metric, rpc, rpc_json};

const TARGET: Address = Address::repeat_byte(0x7e);
const TIP: u128 = 1_000_000_000;

fn attack_input() -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[0x66; 32]);
    input
}

fn honest_input(n: u8) -> Vec<u8> {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[n; 64]);
    input
}

/// Honest calls from fresh senders (seeds from `seed` on).
fn honest(seed: u64, n: usize) -> Vec<String> {
    (0..n as u64)
        .map(|i| Eoa::new(seed + i).sign(0, TARGET, &honest_input(i as u8), 0, TIP))
        .collect()
}

fn hash_of(raw: &str) -> B256 {
    keccak256(decode_hex(raw).unwrap())
}

/// A first attacker's call, reported failed: its hash fails and its
/// fingerprint is banned, so a copy from anyone else is refused too.
fn ban_attack(txgate: &InProcess) -> String {
    let raw = Eoa::new(1).sign(0, TARGET, &attack_input(), 0, TIP);
    let tx = decode(&decode_hex(&raw).unwrap()).unwrap();
    let inv = Invalidation::of(
        &tx,
        Some(recover_sender(&tx).unwrap()),
        None,
        txgate_screen::unix_millis(std::time::SystemTime::now()),
    )
    .unwrap();
    assert_eq!(txgate.invalidations.apply(&[inv]).banned, 1);
    raw
}

/// A lone `eth_sendBundle` as a builder's client writes one, other fields
/// and spacing included.
fn bundle_body(id: u64, txs: &[String]) -> String {
    format!(
        r#"{{"jsonrpc": "2.0", "id": {id}, "method": "eth_sendBundle", "params": [{{"txs": {}, "blockNumber": "0x1b4", "revertingTxHashes": [], "replacementUuid": "5d7d6a1e-0000-4000-8000-000000000001"}}]}}"#,
        serde_json::to_string(txs).unwrap()
    )
}

/// The params of `body`'s call(s) of `method`, as raw JSON text.
fn params_of(body: &[u8], method: &str) -> Vec<String> {
    let calls: Vec<HashMap<String, Box<RawValue>>> = match body.first() {
        Some(b'[') => serde_json::from_slice(body).unwrap(),
        _ => vec![serde_json::from_slice(body).unwrap()],
    };
    calls
        .iter()
        .filter(|c| c.get("method").map(|m| m.get()) == Some(&format!("\"{method}\"")))
        .map(|c| c["params"].get().to_owned())
        .collect()
}

/// The bundles the node got so far: their params, as raw JSON text
/// (txgate's own health probes left out).
fn bundles_received(node: &RecordingUpstream) -> Vec<String> {
    node.received()
        .iter()
        .flat_map(|body| params_of(body, "eth_sendBundle"))
        .collect()
}

/// Whether the node got `body` as it is.
fn received_as_is(node: &RecordingUpstream, body: &str) -> bool {
    node.received().iter().any(|b| b == body.as_bytes())
}

/// What `txgate` remembers of `raw` as forwarded (`null`: nothing).
async fn forwarded(txgate: &InProcess, raw: &str) -> Value {
    forwarded_at(&txgate.admin_url, raw).await
}

async fn bundles(txgate: &InProcess, result: &str) -> f64 {
    let series = format!("txgate_screen_bundles_total{{result=\"{result}\"}}");
    metric(&txgate.metrics().await, &series)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_bundle_arrives_as_sent_alone_and_in_a_batch() {
    let node = RecordingUpstream::start().await;
    let txgate = InProcess::start(&node.url, "");
    ban_attack(&txgate);
    let txs = honest(100, 3);

    // Alone: the caller's bytes, as they are.
    let body = bundle_body(7, &txs);
    let (status, _, answer) = rpc(&txgate.url, &body).await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert_eq!(bundles_received(&node).len(), 1);
    assert!(received_as_is(&node, &body), "forwarded byte for byte");
    for tx in &txs {
        assert!(!forwarded(&txgate, tx).await.is_null(), "remembered");
    }

    // In a batch: the params as they are, the id rewritten.
    let more = honest(200, 2);
    let params = format!(
        r#"[ {{ "minTimestamp": 0, "txs" : {} }} ]"#,
        serde_json::to_string(&more).unwrap()
    );
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":"a","method":"eth_chainId"}},{{"jsonrpc":"2.0","id":"b","method":"eth_sendBundle","params":{params}}}]"#
    );
    let (status, answers) = rpc_json(&txgate.url, &batch).await;
    assert_eq!(status, 200);
    assert_eq!(answers[1]["id"], "b", "{answers}");
    assert_eq!(answers[1]["result"], "0x01", "{answers}");
    assert_eq!(bundles_received(&node)[1], params, "params byte for byte");
    assert_eq!(bundles(&txgate, "forwarded").await, 2.0);

    // An empty bundle (a cancellation for some builders) is forwarded.
    let empty = bundle_body(8, &[]);
    let (_, answer) = rpc_json(&txgate.url, &empty).await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert!(received_as_is(&node, &empty));
    assert_eq!(bundles(&txgate, "empty").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_holding_a_banned_transaction_never_reaches_the_node_and_names_it() {
    let node = RecordingUpstream::start().await;
    let txgate = InProcess::start(&node.url, "");
    let original = ban_attack(&txgate);
    let copy = Eoa::new(2).sign(0, TARGET, &attack_input(), 0, TIP);
    let txs = honest(300, 2);
    let refused_before = metric(
        &txgate.metrics().await,
        r#"txgate_screen_decisions_total{decision="refused",reason="denied_fingerprint"}"#,
    );

    // The copy from another sender, last: the whole bundle is refused.
    let with_copy = [txs[0].clone(), txs[1].clone(), copy.clone()];
    let (status, answer) = rpc_json(&txgate.url, &bundle_body(9, &with_copy)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], 9);
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    let data = &answer["error"]["data"];
    assert_eq!(data["reason"], "denied_fingerprint", "{answer}");
    assert_eq!(data["bundle_index"], 2, "{answer}");
    assert_eq!(data["tx_hash"], hash_of(&copy).to_string(), "{answer}");
    assert!(data["fingerprint"].is_string(), "{answer}");

    // The original itself, in the middle: its hash failed recently.
    let with_original = [txs[0].clone(), original.clone(), txs[1].clone()];
    let (_, answer) = rpc_json(&txgate.url, &bundle_body(10, &with_original)).await;
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "recent_failure");
    assert_eq!(answer["error"]["data"]["bundle_index"], 1);
    assert_eq!(
        answer["error"]["data"]["tx_hash"],
        hash_of(&original).to_string()
    );

    // In a batch: that call is refused, the others go on.
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}},{},{{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}}]"#,
        bundle_body(2, &with_copy)
    );
    let (status, answers) = rpc_json(&txgate.url, &batch).await;
    assert_eq!(status, 200);
    assert_eq!(answers[0]["result"], "0x01", "{answers}");
    assert_eq!(answers[1]["error"]["data"]["bundle_index"], 2, "{answers}");
    assert_eq!(answers[2]["result"], "0x01", "{answers}");

    // Nothing of them reached the node, and nothing of them is
    // remembered: the honest transactions of a refused bundle were not
    // admitted.
    assert!(bundles_received(&node).is_empty(), "{:?}", node.received());
    for tx in &txs {
        assert!(forwarded(&txgate, tx).await.is_null(), "{tx} remembered");
    }
    let text = txgate.metrics().await;
    assert_eq!(
        metric(&text, r#"txgate_screen_bundles_total{result="refused"}"#),
        3.0
    );
    assert_eq!(
        metric(
            &text,
            r#"txgate_screen_decisions_total{decision="refused",reason="denied_fingerprint"}"#
        ),
        refused_before + 2.0,
        "counted by the refusing transaction's reason"
    );

    // Alone, the same honest transactions pass and are remembered.
    let (_, answer) = rpc_json(&txgate.url, &bundle_body(11, &txs)).await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    for tx in &txs {
        let seen = forwarded(&txgate, tx).await;
        assert!(seen["fingerprint"].is_string(), "{seen}");
    }
    assert_eq!(bundles_received(&node).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bundles_get_invalid_params_and_reach_nothing() {
    let node = RecordingUpstream::start().await;
    let txgate = InProcess::start(&node.url, "[rpc]\nmax_bundle_txs = 4\n");
    let tx = honest(400, 1).remove(0);
    let too_many = serde_json::to_string(&honest(410, 5)).unwrap();
    let cases = [
        ("no params", String::new(), "malformed_bundle"),
        ("empty params", r#","params":[]"#.into(), "malformed_bundle"),
        (
            "txs missing",
            r#","params":[{"blockNumber":"0x1"}]"#.into(),
            "malformed_bundle",
        ),
        (
            "txs not an array",
            format!(r#","params":[{{"txs":"{tx}"}}]"#),
            "malformed_bundle",
        ),
        (
            "an entry not a string",
            format!(r#","params":[{{"txs":["{tx}",1]}}]"#),
            "malformed_bundle",
        ),
        (
            "over rpc.max_bundle_txs",
            format!(r#","params":[{{"txs":{too_many}}}]"#),
            "malformed_bundle",
        ),
        (
            "TXS beside txs",
            format!(r#","params":[{{"txs":["{tx}"],"TXS":["0x01"]}}]"#),
            "malformed_bundle",
        ),
        (
            "txs twice",
            format!(r#","params":[{{"txs":["{tx}"],"txs":["0x01"]}}]"#),
            "malformed_bundle",
        ),
        (
            "two bundle objects",
            format!(r#","params":[{{"txs":["{tx}"]}},{{"txs":["0x01"]}}]"#),
            "malformed_bundle",
        ),
        (
            "an entry not hex",
            format!(r#","params":[{{"txs":["{tx}","0xnothex"]}}]"#),
            "invalid_transaction",
        ),
    ];
    for (what, params, reason) in &cases {
        let body = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"eth_sendBundle"{params}}}"#);
        let (status, answer) = rpc_json(&txgate.url, &body).await;
        assert_eq!(status, 200, "{what}: {answer}");
        assert_eq!(answer["id"], 5, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], -32602, "{what}: {answer}");
        assert_eq!(
            answer["error"]["data"]["reason"], *reason,
            "{what}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("invalid params: "), "{what}: {message}");
        if *reason == "invalid_transaction" {
            // Screening's refusal: it names the transaction.
            assert_eq!(answer["error"]["data"]["bundle_index"], 1, "{answer}");
        }
    }
    assert!(bundles_received(&node).is_empty(), "{:?}", node.received());
    assert_eq!(bundles(&txgate, "malformed").await, 9.0);
    assert_eq!(bundles(&txgate, "refused").await, 1.0);
    assert!(forwarded(&txgate, &tx).await.is_null());

    // eth_callBundle (a simulation) is not screened: it passes as sent,
    // banned transaction and all.
    let original = ban_attack(&txgate);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"eth_callBundle","params":[{{"txs":["{original}"],"blockNumber":"0x1"}}]}}"#
    );
    let (_, answer) = rpc_json(&txgate.url, &body).await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert!(received_as_is(&node, &body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_only_forwards_what_it_would_refuse_and_counts_it() {
    let node = RecordingUpstream::start().await;
    let txgate = InProcess::start(&node.url, "[screen]\nmonitor_only = true\n");
    ban_attack(&txgate);
    let copy = Eoa::new(2).sign(0, TARGET, &attack_input(), 0, TIP);
    let mut txs = honest(500, 2);
    txs.push(copy);
    let body = bundle_body(12, &txs);
    let (_, answer) = rpc_json(&txgate.url, &body).await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert!(received_as_is(&node, &body));
    let text = txgate.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"txgate_screen_bundles_total{result="would_refuse"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"txgate_screen_decisions_total{decision="would_refuse",reason="denied_fingerprint"}"#
        ),
        1.0
    );
    // A would-be refusal remembers nothing of the bundle either.
    assert!(forwarded(&txgate, &txs[0]).await.is_null());
}

/// A node's WebSocket that records every text message it gets and
/// answers each call `"0x01"` under its id.
struct RecordingSocket {
    url: String,
    messages: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingSocket {
    async fn start() -> RecordingSocket {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let messages = Arc::new(Mutex::new(Vec::new()));
        let seen = messages.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    while let Some(Ok(message)) = socket.next().await {
                        let Message::Text(text) = message else {
                            continue;
                        };
                        seen.lock().unwrap().push(text.as_str().to_owned());
                        let answer = |call: &Value| json!({"jsonrpc": "2.0", "id": call["id"], "result": "0x01"});
                        let reply = match serde_json::from_str::<Value>(&text).unwrap_or_default() {
                            Value::Array(calls) => Value::Array(calls.iter().map(answer).collect()),
                            call => answer(&call),
                        };
                        if socket.send(Message::text(reply.to_string())).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        RecordingSocket {
            url,
            messages,
            task,
        }
    }

    /// The bundles received so far: their params, as raw JSON text.
    fn bundles(&self) -> Vec<String> {
        let messages = self.messages.lock().unwrap().clone();
        messages
            .iter()
            .flat_map(|m| params_of(m.as_bytes(), "eth_sendBundle"))
            .collect()
    }
}

impl Drop for RecordingSocket {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_websocket_an_honest_bundle_arrives_as_sent_and_a_banned_one_never() {
    let node = RecordingUpstream::start().await;
    let socket_node = RecordingSocket::start().await;
    let config = format!("[websocket]\nupstream_url = \"{}\"\n", socket_node.url);
    let txgate = InProcess::start(&node.url, &config);
    ban_attack(&txgate);
    let ws_url = txgate.url.replacen("http://", "ws://", 1);
    let (mut client, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    let mut call = async |body: String| -> Value {
        client.send(Message::text(body)).await.unwrap();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(10), client.next())
                .await
                .expect("an answer within 10 s")
                .unwrap()
                .unwrap();
            if let Message::Text(text) = next {
                return serde_json::from_str(&text).unwrap();
            }
        }
    };

    let txs = honest(600, 3);
    let params = format!(
        r#"[{{"txs":{}, "blockNumber":"0x2"}}]"#,
        serde_json::to_string(&txs).unwrap()
    );
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":"w1","method":"eth_sendBundle","params":{params}}}"#);
    let answer = call(body).await;
    assert_eq!(answer["id"], "w1", "{answer}");
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert_eq!(
        socket_node.bundles(),
        std::slice::from_ref(&params),
        "params as sent"
    );

    let copy = Eoa::new(2).sign(0, TARGET, &attack_input(), 0, TIP);
    let banned = [honest(700, 1).remove(0), copy.clone()];
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}},{}]"#,
        bundle_body(2, &banned)
    );
    let answers = call(batch).await;
    assert_eq!(answers[0]["result"], "0x01", "{answers}");
    assert_eq!(answers[1]["error"]["code"], -32003, "{answers}");
    assert_eq!(answers[1]["error"]["data"]["bundle_index"], 1, "{answers}");
    assert_eq!(
        answers[1]["error"]["data"]["tx_hash"],
        hash_of(&copy).to_string()
    );
    assert_eq!(
        socket_node.bundles(),
        [params],
        "the refused one never sent"
    );
    assert!(forwarded(&txgate, &banned[0]).await.is_null());
    assert!(bundles_received(&node).is_empty(), "nothing over HTTP");
}

/// What `admin` (a txgate's admin listener) remembers of `raw` as
/// forwarded (`null`: nothing).
async fn forwarded_at(admin: &str, raw: &str) -> Value {
    let url = format!("{admin}/bans/lookup?tx_hash={}", hash_of(raw));
    let (status, _, body) = get(&url).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice::<Value>(&body).unwrap()["tx_hash"]["forwarded"].clone()
}

/// The example sidecar answers ShouldForward (asked about every call
/// here): the transactions of a bundle are asked about as lone calls are,
/// all at once; the one it simulates as reverting refuses the bundle,
/// named, and the honest one is not remembered until it comes alone.
/// (The node is anvil, which has no `eth_sendBundle`: a forwarded bundle
/// gets anvil's own error.)
#[tokio::test(flavor = "multi_thread")]
async fn a_bundle_is_asked_about_like_lone_calls_and_a_deny_refuses_it() {
    use crate::sidecar_loop::{poke, setup};
    let l = setup(
        crate::support::NodeKind::Anvil,
        "",
        "[sidecar]\nshould_forward = true\nshould_forward_scope = \"all\"\nshould_forward_timeout_ms = 2000\n",
    )
    .await;
    let (honest, attacker) = (Eoa::new(61), Eoa::new(62));
    fund(&l.node.url, &[honest.address, attacker.address]).await;
    let probes = |m: &str, result: &str| {
        metric(
            m,
            &format!("txgate_should_forward_total{{result=\"{result}\"}}"),
        )
    };
    let before = l.txgate.metrics().await;
    let fine = honest.sign(0, l.contract, &poke(5), 0, TIP);
    let attack = attacker.sign(0, l.contract, &poke(13), 0, TIP);
    let bundle = [fine.clone(), attack.clone()];
    let (status, answer) = rpc_json(&l.txgate.url, &bundle_body(1, &bundle)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "denied_fingerprint");
    assert_eq!(answer["error"]["data"]["bundle_index"], 1, "{answer}");
    assert_eq!(
        answer["error"]["data"]["tx_hash"],
        hash_of(&attack).to_string()
    );
    let m = l.txgate.metrics().await;
    assert_eq!(
        (
            probes(&m, "forward") - probes(&before, "forward"),
            probes(&m, "deny") - probes(&before, "deny"),
        ),
        (1.0, 1.0),
        "both asked about"
    );
    assert!(forwarded_at(&l.txgate.admin_url, &fine).await.is_null());

    // Alone, the honest one passes (its "forward" verdict cached: not
    // asked again), reaches the node and is remembered.
    let (_, answer) = rpc_json(&l.txgate.url, &bundle_body(2, std::slice::from_ref(&fine))).await;
    assert!(answer["error"]["code"] != -32003, "{answer}");
    assert!(
        answer["error"]["data"].get("bundle_index").is_none(),
        "{answer}"
    );
    let m2 = l.txgate.metrics().await;
    assert_eq!(probes(&m2, "forward"), probes(&m, "forward"));
    assert!(!forwarded_at(&l.txgate.admin_url, &fine).await.is_null());
    assert_eq!(
        metric(&m2, r#"txgate_screen_bundles_total{result="forwarded"}"#),
        1.0
    );
}

/// A message is bounded by the transactions it would have screened, not
/// by its calls: a batch of bundles over `rpc.max_message_txs` is refused
/// whole (-32005, HTTP 413) before any is screened or forwarded, over HTTP
/// and over a WebSocket; one at the cap passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_its_transaction_cap_is_refused_whole_before_screening() {
    let node = RecordingUpstream::start().await;
    let socket_node = RecordingSocket::start().await;
    let config = format!(
        "[rpc]\nmax_message_txs = 5\n[websocket]\nupstream_url = \"{}\"\n",
        socket_node.url
    );
    let txgate = InProcess::start(&node.url, &config);
    // Two bundles of 3: six transactions in a batch of two calls.
    let over = format!(
        "[{},{}]",
        bundle_body(1, &honest(700, 3)),
        bundle_body(2, &honest(710, 3))
    );
    let (status, answer) = rpc_json(&txgate.url, &over).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "too_many_txs",
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["txs"], 6, "{answer}");
    assert_eq!(answer["error"]["data"]["max_message_txs"], 5, "{answer}");
    assert!(bundles_received(&node).is_empty(), "{:?}", node.received());
    // Nothing was screened: no bundle counted.
    assert_eq!(bundles(&txgate, "forwarded").await, 0.0);

    // Over a WebSocket, the same frame gets the same answer.
    let ws_url = txgate.url.replacen("http://", "ws://", 1);
    let (mut client, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    client.send(Message::text(over)).await.unwrap();
    let answer: Value = loop {
        let next = tokio::time::timeout(Duration::from_secs(10), client.next())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .unwrap();
        if let Message::Text(text) = next {
            break serde_json::from_str(&text).unwrap();
        }
    };
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "too_many_txs",
        "{answer}"
    );
    assert!(socket_node.bundles().is_empty());

    // Five (a bundle of 3 and two raw transactions) are within the cap.
    let mut raws = honest(720, 2).into_iter();
    let within = format!(
        r#"[{},{{"jsonrpc":"2.0","id":3,"method":"eth_sendRawTransaction","params":["{}"]}},{{"jsonrpc":"2.0","id":4,"method":"eth_sendRawTransaction","params":["{}"]}}]"#,
        bundle_body(1, &honest(730, 3)),
        raws.next().unwrap(),
        raws.next().unwrap()
    );
    let (status, answer) = rpc_json(&txgate.url, &within).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer[0]["result"], "0x01", "{answer}");
    assert_eq!(bundles_received(&node).len(), 1);
    let text = txgate.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"txgate_http_responses_total{outcome="too_many_txs"}"#
        ),
        1.0,
        "{text}"
    );
}
