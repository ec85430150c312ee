//! The WebSocket endpoint: the node's WebSocket (anvil's and geth's) as upstream, a real
//! WebSocket client (tokio-tungstenite) and cast; subscriptions relayed,
//! every submission screened on the socket, bad input answered or closed
//! with its own code, the socket's life tied to both ends and to SIGTERM.

use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use txgate_screen::{Invalidation, decode, decode_hex, recover_sender};

use crate::support::relay::Relay;
use crate::support::{
    ADDR1, Eoa, InProcess, KEY0, Node, NodeKind, Txgate, cast_send, eventually, fund, metric, mine,
    rpc_json,
};

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

const ASSERTION: B256 = B256::repeat_byte(0xa5);
const TIP: u128 = 1_000_000_000;

pub(crate) fn ws_url(http: &str) -> String {
    http.replacen("http://", "ws://", 1)
}

pub(crate) async fn connect(url: &str) -> Socket {
    let (socket, _) = tokio_tungstenite::connect_async(ws_url(url))
        .await
        .expect("WebSocket upgrade");
    socket
}

pub(crate) async fn send(socket: &mut Socket, value: &Value) {
    socket
        .send(Message::text(value.to_string()))
        .await
        .expect("send");
}

/// The next text message, as JSON, within 10 s (pings skipped).
pub(crate) async fn next_json(socket: &mut Socket) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, socket.next())
            .await
            .expect("a message within 10 s")
            .expect("socket open")
            .expect("a message");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).expect("JSON"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected message {other:?}"),
        }
    }
}

/// Reads until the answer with `id`, keeping the notifications seen on the
/// way.
pub(crate) async fn answer(socket: &mut Socket, id: &Value, seen: &mut Vec<Value>) -> Value {
    loop {
        let message = next_json(socket).await;
        if message.get("id") == Some(id) {
            return message;
        }
        seen.push(message);
    }
}

/// Sends `request` and reads until its answer (by its id).
pub(crate) async fn call(socket: &mut Socket, request: &Value, seen: &mut Vec<Value>) -> Value {
    send(socket, request).await;
    answer(socket, &request["id"], seen).await
}

/// Reads until the socket closes; returns the close code (`None`: closed
/// without a close frame).
async fn close_code(socket: &mut Socket) -> Option<CloseCode> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.next())
            .await
            .expect("closed within 10 s")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// The next `newHeads` notification of `subscription`: the first one kept
/// in `seen` (it came while an answer was awaited), else the next read.
async fn next_head(socket: &mut Socket, subscription: &Value, seen: &mut Vec<Value>) -> Value {
    let of_subscription = |message: &Value| {
        message["method"] == "eth_subscription"
            && message["params"]["subscription"] == *subscription
    };
    if let Some(i) = seen.iter().position(of_subscription) {
        return seen.remove(i)["params"]["result"].clone();
    }
    loop {
        let message = next_json(socket).await;
        if of_subscription(&message) {
            return message["params"]["result"].clone();
        }
    }
}

fn invalidation(raw: &str) -> Invalidation {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    let sender = recover_sender(&tx).unwrap();
    Invalidation::of(
        &tx,
        Some(sender),
        Some(txgate_screen::AssertionKey {
            id: ASSERTION,
            version: 1,
        }),
        txgate_screen::unix_millis(std::time::SystemTime::now()),
    )
    .unwrap()
}

fn attack_input() -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[0x66; 32]);
    input
}

async fn on_chain(node_url: &str, hash: &str) -> bool {
    let (_, body) = rpc_json(
        node_url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionByHash",
            "params": [hash]})
        .to_string(),
    )
    .await;
    !body["result"].is_null()
}

async fn subscriptions_flow_and_every_submission_on_the_socket_is_screened(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "");
    let target = Address::repeat_byte(0x77);
    let attacker = Eoa::new(21);
    let fresh = Eoa::new(22);
    let honest = Eoa::new(23);
    fund(
        &node.url,
        &[attacker.address, fresh.address, honest.address],
    )
    .await;

    let mut socket = connect(&txgate.url).await;
    let mut seen = Vec::new();
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": "sub", "method": "eth_subscribe", "params": ["newHeads"]}),
    )
    .await;
    let subscribed = answer(&mut socket, &json!("sub"), &mut seen).await;
    let subscription = subscribed["result"].clone();
    assert!(subscription.is_string(), "{subscribed}");

    // An honest transfer over the socket: accepted, and its block arrives
    // as a head on the same socket.
    let raw = honest.sign(0, target, &[], 1, TIP);
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "eth_sendRawTransaction", "params": [raw]}),
    )
    .await;
    let sent = answer(&mut socket, &json!(7), &mut seen).await;
    let hash = sent["result"].as_str().expect("a hash").to_string();
    let head = next_head(&mut socket, &subscription, &mut seen).await;
    assert!(head["number"].is_string(), "{head}");
    assert!(on_chain(&node.url, &hash).await);

    // The attack goes through once; the sidecar's verdict arrives.
    let attack = attacker.sign(0, target, &attack_input(), 0, TIP);
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 8, "method": "eth_sendRawTransaction", "params": [attack]}),
    )
    .await;
    assert!(answer(&mut socket, &json!(8), &mut seen).await["result"].is_string());
    txgate.invalidations.apply(&[invalidation(&attack)]);

    // The same raw tx, and the same calldata from a fresh EOA: refused on
    // the socket under the caller's ids, as over HTTP.
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": "again", "method": "eth_sendRawTransaction",
            "params": [attack]}),
    )
    .await;
    let again = answer(&mut socket, &json!("again"), &mut seen).await;
    assert_eq!(again["error"]["code"], -32003, "{again}");
    assert_eq!(
        again["error"]["data"]["reason"], "recent_failure",
        "{again}"
    );
    let sweep = fresh.sign(0, target, &attack_input(), 0, TIP);
    let sweep_hash = format!(
        "{}",
        alloy_primitives::keccak256(decode_hex(&sweep).unwrap())
    );
    // In a batch beside an honest call: the honest one goes through.
    send(
        &mut socket,
        &json!([
            {"jsonrpc": "2.0", "id": "a", "method": "eth_sendRawTransaction", "params": [sweep]},
            {"jsonrpc": "2.0", "id": "b", "method": "eth_chainId", "params": []},
        ]),
    )
    .await;
    let batch = loop {
        let message = next_json(&mut socket).await;
        if message.is_array() {
            break message;
        }
    };
    assert_eq!(batch[0]["id"], "a", "{batch}");
    assert_eq!(batch[0]["error"]["code"], -32003, "{batch}");
    assert_eq!(
        batch[0]["error"]["data"]["reason"], "denied_fingerprint",
        "{batch}"
    );
    assert_eq!(batch[1]["id"], "b", "{batch}");
    assert_eq!(batch[1]["result"], "0x7a69", "{batch}");
    assert!(
        !on_chain(&node.url, &sweep_hash).await,
        "the sweep reached the node"
    );

    // The subscription keeps delivering on the same socket: the head of
    // the block mined now arrives (after any kept from the attack's block).
    mine(&node.url).await;
    let (_, mined) = rpc_json(
        &node.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}).to_string(),
    )
    .await;
    let later = loop {
        let later = next_head(&mut socket, &subscription, &mut seen).await;
        if later["number"] == mined["result"] {
            break later;
        }
    };
    assert_ne!(later["number"], head["number"]);

    // Unsubscribe, then close: the session and its subscription end.
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "eth_unsubscribe", "params": [subscription]}),
    )
    .await;
    assert_eq!(
        answer(&mut socket, &json!(9), &mut seen).await["result"],
        true
    );
    socket.close(None).await.unwrap();
    let closed = eventually(Duration::from_secs(5), || async {
        let m = txgate.metrics().await;
        metric(&m, "txgate_ws_open_sockets") == 0.0 && metric(&m, "txgate_ws_subscriptions") == 0.0
    })
    .await;
    assert!(
        closed,
        "the session or its subscription outlived its client"
    );
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_ws_subscriptions"), 0.0);
    assert_eq!(metric(&m, "txgate_ws_closes_total{reason=\"client\"}"), 1.0);
    assert!(
        metric(
            &m,
            "txgate_ws_messages_total{direction=\"out\",outcome=\"notification\"}"
        ) >= 2.0
    );
    assert!(
        metric(
            &m,
            "txgate_ws_messages_total{direction=\"in\",outcome=\"screened\"}"
        ) >= 2.0
    );
}

async fn cast_sends_a_transaction_over_the_socket(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let url = ws_url(&txgate.url);
    tokio::task::spawn_blocking(move || cast_send(&url, KEY0, &[ADDR1, "--value", "1ether"]))
        .await
        .unwrap();
    let m = txgate.metrics().await;
    assert!(metric(&m, "txgate_ws_upgrades_total{result=\"upgraded\"}") >= 1.0);
    assert!(
        metric(
            &m,
            "txgate_rpc_calls_total{method=\"eth_sendRawTransaction\"}"
        ) >= 1.0
    );
}

/// A real wallet library over txgate's socket: it subscribes to new heads,
/// sends a signed transfer (screened), waits for the receipt and for the
/// head of its block on the subscription.
async fn wallet_client_round_trip(script: &'static str, kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let url = ws_url(&txgate.url);
    let out = tokio::task::spawn_blocking(move || {
        crate::support::client_script(script, &[&url, KEY0, ADDR1])
    })
    .await
    .unwrap();
    assert!(
        out["status"] == "success" || out["status"] == 1,
        "{script}: {out}"
    );
    let block = out["block"].as_u64().expect("block");
    let heads: Vec<u64> = out["heads"]
        .as_array()
        .expect("heads")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(
        heads.contains(&block),
        "{script}: no head for block {block}: {out}"
    );
    let hash = out["hash"].as_str().expect("hash");
    assert!(on_chain(&node.url, hash).await, "{script}: {out}");
    let m = txgate.metrics().await;
    for method in ["eth_subscribe", "eth_sendRawTransaction"] {
        assert!(
            metric(
                &m,
                &format!("txgate_rpc_calls_total{{method=\"{method}\"}}")
            ) >= 1.0,
            "{script}: {method} did not go through txgate"
        );
    }
    // The transfer was screened on its way, not passed around the stack.
    let screened = ["clean", "suspect"]
        .iter()
        .map(|r| {
            metric(
                &m,
                &format!("txgate_screen_decisions_total{{decision=\"forwarded\",reason=\"{r}\"}}"),
            )
        })
        .sum::<f64>();
    assert!(screened >= 1.0, "{script}: the transfer was not screened");
}

async fn viem_subscribes_and_sends_through_the_socket(kind: NodeKind) {
    wallet_client_round_trip("viem_ws.mjs", kind).await;
}

async fn web3py_subscribes_and_sends_through_the_socket(kind: NodeKind) {
    wallet_client_round_trip("web3_ws.py", kind).await;
}

/// Limits small enough to reach in a test.
const TIGHT: &str = "[websocket]\nmax_message_bytes = 4096\nmax_frame_bytes = 4096\n\
                     max_subscriptions_per_connection = 2\nmax_frames_per_sec = 50\n\
                     frame_burst = 50\n";

async fn bad_input_gets_its_own_answer_or_close_code(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, TIGHT);

    // Not JSON: -32700 under a null id; the socket stays open.
    let mut socket = connect(&txgate.url).await;
    socket.send(Message::text("{not json")).await.unwrap();
    let answer_ = next_json(&mut socket).await;
    assert_eq!(answer_["error"]["code"], -32700, "{answer_}");
    assert_eq!(answer_["id"], Value::Null);
    // A denied method answers -32601 like HTTP (the default policy denies
    // admin namespaces).
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "admin_peers", "params": []}),
    )
    .await;
    let denied = next_json(&mut socket).await;
    assert_eq!(denied["error"]["code"], -32601, "{denied}");

    // Subscriptions over the socket's cap: -32005.
    let mut seen = Vec::new();
    for id in 1..=2 {
        send(
            &mut socket,
            &json!({"jsonrpc": "2.0", "id": id, "method": "eth_subscribe", "params": ["newHeads"]}),
        )
        .await;
        assert!(answer(&mut socket, &json!(id), &mut seen).await["result"].is_string());
    }
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 30, "method": "eth_subscribe", "params": ["newHeads"]}),
    )
    .await;
    let over = answer(&mut socket, &json!(30), &mut seen).await;
    assert_eq!(over["error"]["code"], -32005, "{over}");
    assert_eq!(
        over["error"]["data"]["reason"],
        "subscriptions_per_connection"
    );

    // JSON in a binary frame (as web3.py sends it) is served; a binary
    // message that is not UTF-8: 1003.
    let call = json!({"jsonrpc": "2.0", "id": 31, "method": "eth_chainId", "params": []});
    socket
        .send(Message::binary(call.to_string().into_bytes()))
        .await
        .unwrap();
    assert_eq!(
        answer(&mut socket, &json!(31), &mut seen).await["result"],
        "0x7a69"
    );
    socket
        .send(Message::binary(b"\xff\xfe".to_vec()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut socket).await, Some(CloseCode::Unsupported));

    // A message over the cap: 1009.
    let mut socket = connect(&txgate.url).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["{}"]}}"#,
        "a".repeat(5000)
    );
    let _ = socket.send(Message::text(big)).await;
    assert_eq!(close_code(&mut socket).await, Some(CloseCode::Size));

    // A frame flood: 1008.
    let mut socket = connect(&txgate.url).await;
    for id in 0..200 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []});
        if socket.send(Message::text(call.to_string())).await.is_err() {
            break;
        }
    }
    // The close frame can be lost: txgate closes its side right after it,
    // while this client is still sending, and the reset that answers the
    // late frames discards what the client had not read yet (seen on a
    // loaded machine). Then txgate's own count says why it closed.
    match close_code(&mut socket).await {
        Some(code) => assert_eq!(code, CloseCode::Policy),
        None => {
            let counted = eventually(Duration::from_secs(5), || async {
                let m = txgate.metrics().await;
                metric(&m, "txgate_ws_closes_total{reason=\"frame_rate\"}") >= 1.0
            })
            .await;
            assert!(counted, "the socket closed, but not for its frame rate");
        }
    }

    // Nothing leaked: every session and its subscriptions are gone.
    let settled = eventually(Duration::from_secs(5), || async {
        let m = txgate.metrics().await;
        metric(&m, "txgate_ws_open_sockets") == 0.0 && metric(&m, "txgate_ws_subscriptions") == 0.0
    })
    .await;
    assert!(settled);
    let m = txgate.metrics().await;
    for reason in ["binary", "too_big", "frame_rate"] {
        assert_eq!(
            metric(
                &m,
                &format!("txgate_ws_closes_total{{reason=\"{reason}\"}}")
            ),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(metric(&m, "txgate_ws_subscriptions_refused_total"), 1.0);
}

/// Sends `request` on a raw TCP connection; returns the status line and
/// the headers.
async fn raw_upgrade(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

async fn an_upgrade_without_the_right_headers_is_refused_with_a_clear_status(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "");
    let addr = txgate.url.trim_start_matches("http://").to_string();
    let no_key = "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                  Sec-WebSocket-Version: 13\r\n\r\n";
    let answer_ = raw_upgrade(&addr, no_key).await;
    assert!(answer_.starts_with("HTTP/1.1 400"), "{answer_}");
    assert!(answer_.contains("Sec-WebSocket-Key"), "{answer_}");
    let old_version = "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                       Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let answer_ = raw_upgrade(&addr, old_version).await;
    assert!(answer_.starts_with("HTTP/1.1 426"), "{answer_}");
    assert!(
        answer_
            .to_ascii_lowercase()
            .contains("sec-websocket-version: 13"),
        "{answer_}"
    );
    let no_connection = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
                         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let answer_ = raw_upgrade(&addr, no_connection).await;
    assert!(answer_.starts_with("HTTP/1.1 400"), "{answer_}");
    // A plain GET is still 405, as before.
    let plain = raw_upgrade(&addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(plain.starts_with("HTTP/1.1 405"), "{plain}");
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_ws_upgrades_total{result=\"bad_handshake\"}"),
        3.0
    );
}

async fn the_node_going_away_closes_the_client_with_1011(kind: NodeKind) {
    let mut node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "");
    let mut socket = connect(&txgate.url).await;
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}),
    )
    .await;
    assert_eq!(next_json(&mut socket).await["result"], "0x7a69");
    node.proc.kill();
    assert_eq!(close_code(&mut socket).await, Some(CloseCode::Error));
    // With the node gone, an upgrade is refused 502, not hung.
    let refused = tokio_tungstenite::connect_async(ws_url(&txgate.url)).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 502);
        }
        other => panic!("expected a 502, got {other:?}"),
    }
    let counted = eventually(Duration::from_secs(5), || async {
        metric(
            &txgate.metrics().await,
            "txgate_ws_closes_total{reason=\"upstream\"}",
        ) == 1.0
    })
    .await;
    assert!(counted);
}

async fn sigterm_answers_the_call_in_flight_then_closes_with_going_away(kind: NodeKind) {
    let node = Node::start(kind).await;
    let sender = Eoa::new(41);
    fund(&node.url, &[sender.address]).await;
    let txgate = Txgate::start(&node.url, &[]);
    let mut socket = connect(&txgate.url).await;
    // The sync call's transaction comes with the sender's second nonce: it
    // waits in the node's queue, and the call in flight for its receipt,
    // until the test sends the first (both nodes seal a block as soon as a
    // transaction is ready).
    let to = Address::repeat_byte(0x42);
    let raw = sender.sign(1, to, &[], 1, TIP);
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": "sync", "method": "eth_sendRawTransactionSync",
            "params": [raw]}),
    )
    .await;
    // The call is in flight before the signal: it holds its sync slot and
    // its transaction waits in the node's pool...
    let status =
        json!({"jsonrpc": "2.0", "id": 1, "method": "txpool_status", "params": []}).to_string();
    let in_flight = eventually(Duration::from_secs(10), || async {
        let (_, pool) = rpc_json(&node.url, &status).await;
        metric(&txgate.metrics().await, "txgate_upstream_sync_in_flight") == 1.0
            && pool["result"]["queued"] == "0x1"
    })
    .await;
    assert!(in_flight, "the sync call never reached the node");
    txgate.proc.signal(libc::SIGTERM);
    // ...and the drain has begun before its block is sealed.
    let lines = txgate
        .logs_until(Duration::from_secs(10), |lines| {
            lines.iter().any(|l| l.contains("draining connections"))
        })
        .await;
    assert!(
        lines.iter().any(|l| l.contains("draining connections")),
        "no drain after SIGTERM: {lines:?}"
    );
    // Draining: the call in flight is still answered once its block comes.
    let first = sender.sign(0, to, &[], 1, TIP);
    let (_, sent) = crate::support::send_raw(&node.url, &first).await;
    assert!(sent["result"].is_string(), "{sent}");
    let mut seen = Vec::new();
    let receipt = answer(&mut socket, &json!("sync"), &mut seen).await;
    assert_eq!(receipt["result"]["status"], "0x1", "{receipt}");
    assert_eq!(close_code(&mut socket).await, Some(CloseCode::Away));
}

async fn a_client_close_is_answered_and_a_large_answer_is_not_a_slow_reader(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "[websocket]\nmax_send_queue_bytes = 1024\n");
    let mut socket = connect(&txgate.url).await;
    // A batch of 100 answers (over 4 KiB) with a 1 KiB send queue: the
    // client reads, so it gets it.
    let calls: Vec<Value> = (0..100)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []}))
        .collect();
    send(&mut socket, &Value::Array(calls)).await;
    let batch = next_json(&mut socket).await;
    assert_eq!(batch.as_array().map(Vec::len), Some(100), "{batch}");
    // A notification (no id) gets no answer and holds nothing: the next
    // call is answered, and nothing waits at the close.
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "method": "eth_blockNumber", "params": []}),
    )
    .await;
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": "after", "method": "eth_chainId", "params": []}),
    )
    .await;
    assert_eq!(next_json(&mut socket).await["id"], "after");
    // The client closes: txgate answers its close frame.
    socket
        .send(Message::Close(Some(
            tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: CloseCode::Normal,
                reason: "bye".into(),
            },
        )))
        .await
        .unwrap();
    assert_eq!(close_code(&mut socket).await, Some(CloseCode::Normal));
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_ws_closes_total{reason=\"slow_reader\"}"),
        0.0
    );
}

async fn a_client_that_does_not_read_is_dropped_not_buffered(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(
        &node.url,
        "[websocket]\nmax_send_queue_bytes = 65536\nmax_frames_per_sec = 100000\n\
         frame_burst = 100000\n[upstream]\nmax_response_bytes = 65536\n",
    );
    // A tiny receive window, and nothing read: the answers back up past
    // the queue (64 KiB, plus room for one 64 KiB answer).
    let addr: std::net::SocketAddr = txgate.url.trim_start_matches("http://").parse().unwrap();
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(addr).await.unwrap();
    let (mut socket, _) = tokio_tungstenite::client_async(ws_url(&txgate.url), stream)
        .await
        .expect("upgrade");
    let calls: Vec<Value> = (0..100)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []}))
        .collect();
    let batch = Value::Array(calls).to_string();
    let writer = tokio::spawn(async move {
        for _ in 0..5000 {
            if socket.send(Message::text(batch.clone())).await.is_err() {
                break;
            }
        }
        socket
    });
    let dropped = eventually(Duration::from_secs(20), || async {
        metric(
            &txgate.metrics().await,
            "txgate_ws_closes_total{reason=\"slow_reader\"}",
        ) == 1.0
    })
    .await;
    assert!(dropped, "a client that never reads was not dropped");
    writer.abort();
    // txgate still serves.
    let (_, body) = rpc_json(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).to_string(),
    )
    .await;
    assert_eq!(body["result"], "0x7a69");
}

/// `web3_sha3` of `input` with `id`, and the answer it must get.
fn sha3_call(id: &Value, input: &[u8]) -> (Value, String) {
    let hex = format!("0x{}", alloy_primitives::hex::encode(input));
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "web3_sha3", "params": [hex]});
    (call, alloy_primitives::keccak256(input).to_string())
}

async fn plain_calls_of_many_sockets_share_a_node_socket_per_worker(kind: NodeKind) {
    let node = Node::start(kind).await;
    for shared in [true, false] {
        let txgate = InProcess::start(
            &node.url,
            &format!("[websocket]\nshared_upstream = {shared}\n"),
        );
        let mut sockets = Vec::new();
        for _ in 0..6 {
            sockets.push(connect(&txgate.url).await);
        }
        // Every socket uses the same ids: each must get its own answers.
        for round in 0..3u8 {
            for (i, socket) in sockets.iter_mut().enumerate() {
                let (call, expected) = sha3_call(&json!(1), &[round, i as u8]);
                send(socket, &call).await;
                let (batch_call, batch_expected) = sha3_call(&json!("b"), &[i as u8, round, 7]);
                send(
                    socket,
                    &json!([{"jsonrpc": "2.0", "id": "a", "method": "eth_chainId", "params": []},
                        batch_call]),
                )
                .await;
                // Not carried on the lane: the socket's own node socket.
                send(
                    socket,
                    &json!({"jsonrpc": "2.0", "id": 2, "method": "eth_getBlockByNumber",
                        "params": ["latest", false]}),
                )
                .await;
                // The three answers, in whatever order they come (the
                // lane's and the socket's own are not ordered).
                let (mut single, mut block, mut batch) = (None, None, None);
                for _ in 0..3 {
                    let message = next_json(socket).await;
                    match (message.as_array(), message["id"].as_u64()) {
                        (Some(entries), _) => batch = Some(entries.clone()),
                        (None, Some(1)) => single = Some(message),
                        (None, Some(2)) => block = Some(message),
                        _ => panic!("{message}"),
                    }
                }
                let single = single.expect("the single call's answer");
                assert_eq!(single["result"], expected.as_str(), "{single}");
                let block = block.expect("the block's answer");
                assert!(block["result"]["number"].is_string(), "{block}");
                let batch = batch.expect("the batch's answer");
                assert_eq!(batch.len(), 2);
                for entry in batch {
                    match entry["id"].as_str() {
                        Some("a") => assert_eq!(entry["result"], "0x7a69"),
                        Some("b") => assert_eq!(entry["result"], batch_expected.as_str()),
                        _ => panic!("{entry}"),
                    }
                }
            }
        }
        let metrics = txgate.metrics().await;
        let lanes = metric(&metrics, "txgate_ws_lanes_open");
        let opened = metric(&metrics, "txgate_ws_lane_events_total{event=\"opened\"}");
        if shared {
            // Two workers: one lane each at most, opened once.
            assert!((1.0..=2.0).contains(&lanes), "{lanes}");
            assert_eq!(opened, lanes);
        } else {
            assert_eq!((lanes, opened), (0.0, 0.0));
        }
        let failed = "txgate_ws_lane_events_total{event=\"failed\"}";
        assert!(metrics.contains(failed), "{failed} missing");
        assert_eq!(metric(&metrics, failed), 0.0);
    }
}

async fn an_answer_too_large_for_the_lane_fails_only_its_own_call(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "[upstream]\nmax_response_bytes = 1000\n");
    let mut socket = connect(&txgate.url).await;
    let mut seen = Vec::new();
    let chain_id =
        |id: u32| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []});
    assert_eq!(
        call(&mut socket, &chain_id(1), &mut seen).await["result"],
        "0x7a69"
    );
    // A creation call whose code returns 1024 zero bytes: an answer of
    // about 2 KiB, over the 1000-byte bound, from a call the lane carries.
    let large = json!({"jsonrpc": "2.0", "id": 2, "method": "eth_call",
        "params": [{"data": "0x6104006000f3"}, "latest"]});
    let refused = call(&mut socket, &large, &mut seen).await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(
        refused["error"]["message"], "upstream unavailable",
        "{refused}"
    );
    // The same call with a small answer, and the next call, on the same
    // lane: only the large answer failed.
    let small = json!({"jsonrpc": "2.0", "id": 3, "method": "eth_call",
        "params": [{"data": "0x6100206000f3"}, "latest"]});
    let small = call(&mut socket, &small, &mut seen).await;
    assert_eq!(
        small["result"].as_str().map(str::len),
        Some(2 + 64),
        "{small}"
    );
    assert_eq!(
        call(&mut socket, &chain_id(4), &mut seen).await["result"],
        "0x7a69"
    );
    let metrics = txgate.metrics().await;
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"opened\"}"),
        1.0
    );
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"failed\"}"),
        0.0
    );
    assert_eq!(
        metric(&metrics, "txgate_upstream_errors_total{kind=\"too_large\"}"),
        1.0
    );
    assert!(seen.is_empty(), "{seen:?}");
}

async fn a_stopping_worker_closes_its_lane_with_a_close_frame(kind: NodeKind) {
    let node = Node::start(kind).await;
    let relay = Relay::start(&node.url).await;
    let txgate = InProcess::start(
        &node.url,
        &format!("[websocket]\nupstream_url = \"{}\"\n", relay.url),
    );
    let mut socket = connect(&txgate.url).await;
    let mut seen = Vec::new();
    let chain_id = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    assert_eq!(
        call(&mut socket, &chain_id, &mut seen).await["result"],
        "0x7a69"
    );
    // The session's own socket, then the worker's lane.
    assert_eq!(relay.count(), 2);
    let lane = relay.conn(1);
    // The client leaves; its lane stays open until txgate stops.
    socket.close(None).await.unwrap();
    tokio::task::spawn_blocking(move || drop(txgate))
        .await
        .unwrap();
    let ended = eventually(Duration::from_secs(5), || async {
        lane.ended.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    assert!(ended, "the lane's connection is still open");
    // The last frame txgate sent the node: a close frame with no payload
    // (FIN and opcode 8, masked, length 0, then the four bytes of the
    // mask), not the call's text frame of a connection that just ended.
    let tail = lane.tail.lock().unwrap().clone();
    let close = tail.len().checked_sub(6).map(|at| &tail[at..at + 2]);
    assert_eq!(close, Some(&[0x88u8, 0x80][..]), "{tail:02x?}");
    assert!(seen.is_empty(), "{seen:?}");
}

async fn a_lane_that_fails_answers_its_calls_and_the_sockets_stay_open(kind: NodeKind) {
    let node = Node::start(kind).await;
    let relay = Relay::start(&node.url).await;
    // A call timeout far above the test's waits: call 2 must be answered
    // by the lane's failure, not by its timeout.
    let txgate = InProcess::start(
        &node.url,
        &format!(
            "[upstream]\ncall_timeout_ms = 60000\n[websocket]\nupstream_url = \"{}\"\n",
            relay.url
        ),
    );
    let mut socket = connect(&txgate.url).await;
    let chain_id =
        |id: u32| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []});
    let mut seen = Vec::new();
    send(&mut socket, &chain_id(1)).await;
    assert_eq!(
        answer(&mut socket, &json!(1), &mut seen).await["result"],
        "0x7a69"
    );
    // The session's own socket, then the worker's lane.
    assert_eq!(relay.count(), 2);
    let lane = relay.conn(1);
    // A call in flight on the lane when its socket fails is answered
    // -32603; the client's socket stays open.
    lane.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = lane.up.load(std::sync::atomic::Ordering::SeqCst);
    send(&mut socket, &chain_id(2)).await;
    let sent = eventually(Duration::from_secs(10), || async {
        lane.up.load(std::sync::atomic::Ordering::SeqCst) > before
    })
    .await;
    assert!(sent, "the call never reached the lane");
    // While the lane holds call 2, what it does not carry is answered on
    // the session's own socket: a call whose answer can be large, and a
    // batch of more than four calls.
    send(
        &mut socket,
        &json!({"jsonrpc": "2.0", "id": 10, "method": "eth_getBlockByNumber",
            "params": ["latest", false]}),
    )
    .await;
    let batch: Vec<Value> = (20..25).map(chain_id).collect();
    send(&mut socket, &Value::Array(batch)).await;
    let (mut block, mut answers) = (None, None);
    while block.is_none() || answers.is_none() {
        let message = next_json(&mut socket).await;
        match message.as_array() {
            Some(entries) => answers = Some(entries.len()),
            None => {
                assert_eq!(message["id"], 10, "{message}");
                block = Some(message);
            }
        }
    }
    assert!(block.unwrap()["result"]["number"].is_string());
    assert_eq!(answers, Some(5));
    lane.cut.send_replace(true);
    let failed = answer(&mut socket, &json!(2), &mut seen).await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(
        failed["error"]["message"], "upstream unavailable",
        "{failed}"
    );
    // The next call opens a new lane.
    send(&mut socket, &chain_id(3)).await;
    assert_eq!(
        answer(&mut socket, &json!(3), &mut seen).await["result"],
        "0x7a69"
    );
    assert_eq!(relay.count(), 3);
    let metrics = txgate.metrics().await;
    for series in [
        "txgate_ws_lane_events_total{event=\"failed\"}",
        "txgate_ws_closes_total{reason=\"upstream\"}",
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"failed\"}"),
        1.0
    );
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"opened\"}"),
        2.0
    );
    assert_eq!(metric(&metrics, "txgate_ws_lanes_open"), 1.0);
    assert_eq!(
        metric(&metrics, "txgate_ws_closes_total{reason=\"upstream\"}"),
        0.0
    );
    assert!(seen.is_empty(), "{seen:?}");
}

crate::support::on_each_node!(
    sigterm_answers_the_call_in_flight_then_closes_with_going_away,
    viem_subscribes_and_sends_through_the_socket,
    web3py_subscribes_and_sends_through_the_socket,
    subscriptions_flow_and_every_submission_on_the_socket_is_screened,
    cast_sends_a_transaction_over_the_socket,
    bad_input_gets_its_own_answer_or_close_code,
    an_upgrade_without_the_right_headers_is_refused_with_a_clear_status,
    the_node_going_away_closes_the_client_with_1011,
    a_client_close_is_answered_and_a_large_answer_is_not_a_slow_reader,
    a_client_that_does_not_read_is_dropped_not_buffered,
    plain_calls_of_many_sockets_share_a_node_socket_per_worker,
    an_answer_too_large_for_the_lane_fails_only_its_own_call,
    a_stopping_worker_closes_its_lane_with_a_close_frame,
    a_lane_that_fails_answers_its_calls_and_the_sockets_stay_open,
);
