//! Pacing end to end: a client that keeps sending refused submissions gets
//! its refusals held, doubling to the cap, on every connection it opens;
//! other clients (distinct loopback addresses), other answers and a
//! cleared submission are not held; a held answer takes no in-flight slot;
//! the process holds at most `max_held` at once.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use txgate_screen::{Invalidation, decode, decode_hex, recover_sender};

use crate::support::{Eoa, InProcess, RecordingUpstream, metric};

const TARGET: Address = Address::repeat_byte(0x7e);
const TIP: u128 = 1_000_000_000;
/// The first hold, and the cap in these tests: long beside a loopback
/// call, so "held" and "not held" are far apart even on a loaded machine.
const HOLD: Duration = Duration::from_millis(400);
const CAP: Duration = Duration::from_millis(1600);

/// The attacker's call: a selector and one argument.
fn attack_input() -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[0x66; 32]);
    input
}

/// One kept HTTP/1.1 connection to `addr` from the loopback address
/// `from` (127.0.0.2, 127.0.0.3…: distinct clients).
async fn connect(addr: SocketAddr, from: &str) -> SendRequest<Full<Bytes>> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// One call on a kept connection: the answer and how long it took.
async fn call(conn: &mut SendRequest<Full<Bytes>>, body: &Value) -> (Value, Duration) {
    conn.ready().await.unwrap();
    let started = Instant::now();
    let request = hyper::Request::post("/")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = conn.send_request(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (serde_json::from_slice(&bytes).unwrap(), started.elapsed())
}

/// The holds txgate has started so far. Each is counted as it starts,
/// before its answer goes out, so a call answered with this count
/// unchanged was not held (while no other answer is due a hold).
async fn holds(txgate: &InProcess) -> f64 {
    metric(
        &txgate.metrics().await,
        "txgate_pacing_refusals_total{result=\"held\"}",
    )
}

/// One call on a kept connection that txgate must answer without a hold:
/// no hold starts while it is answered.
async fn call_not_held(
    txgate: &InProcess,
    conn: &mut SendRequest<Full<Bytes>>,
    body: &Value,
    what: &str,
) -> Value {
    let before = holds(txgate).await;
    let (answer, took) = call(conn, body).await;
    assert_eq!(holds(txgate).await, before, "{what}: held ({took:?})");
    answer
}

fn submit(raw: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "eth_sendRawTransaction", "params": [raw]})
}

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// Bans the attacker's call (its fingerprint, no assertion) in `txgate`.
fn ban_attack_call(txgate: &InProcess) {
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
}

fn config(extra: &str) -> String {
    format!(
        "[admission]\nmax_in_flight = 1\n\n[screen.pacing]\nafter = 2\ninitial_hold_ms = {}\n\
         max_hold_ms = {}\nmax_held = 1\n{extra}",
        HOLD.as_millis(),
        CAP.as_millis()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_being_refused_is_held_and_no_one_else_is() {
    let upstream = RecordingUpstream::start().await;
    let txgate = InProcess::start(&upstream.url, &config(""));
    ban_attack_call(&txgate);
    let at = addr(&txgate.url);
    // A fresh EOA per submission, as an attacker rotates them.
    let mut seeds = 101..;
    let mut attack = || attack_with_seed(seeds.next().unwrap_or_default());

    let mut a = connect(at, "127.0.0.2").await;
    // The first `after` refusals: at once.
    for _ in 0..2 {
        let answer = call_not_held(&txgate, &mut a, &attack(), "not held yet").await;
        refused(&answer);
    }
    // Then held, doubling to the cap; the answer is the same refusal.
    let (answer, took) = call(&mut a, &attack()).await;
    refused(&answer);
    assert!(took >= HOLD, "third refusal held: {took:?}");
    // A new connection from the same client does not start over.
    let mut a = connect(at, "127.0.0.2").await;
    let (answer, took) = call(&mut a, &attack()).await;
    refused(&answer);
    assert!(took >= 2 * HOLD, "fourth held twice as long: {took:?}");

    // A third client's first `after` refusals, not held: its next one is
    // due a hold.
    let mut c = connect(at, "127.0.0.4").await;
    for seed in 700..702 {
        let answer = call_not_held(&txgate, &mut c, &attack_with_seed(seed), "C, not yet").await;
        refused(&answer);
    }
    // While a refusal of A is held (for the cap, 1.6 s):
    let held = tokio::spawn(async move {
        let (answer, took) = call(&mut a, &attack_with_seed(500)).await;
        (a, answer, took)
    });
    assert!(
        crate::support::eventually(Duration::from_secs(5), || async {
            metric(&txgate.metrics().await, "txgate_pacing_held") == 1.0
        })
        .await,
        "A's refusal is held"
    );
    // another client's calls are answered, not held, though the admission
    // cap is one call in flight: the held answer holds no slot;
    let mut b = connect(at, "127.0.0.3").await;
    let chain = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    let answer = call_not_held(&txgate, &mut b, &chain, "B's call").await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    // and the third client, due a hold, finds the one place taken
    // (`max_held` 1): answered at once, counted. (Counted over the bound,
    // it also shows A was still held then, so through B's call.)
    let answer = call_not_held(
        &txgate,
        &mut c,
        &attack_with_seed(702),
        "over the bound, not held",
    )
    .await;
    refused(&answer);
    assert_eq!(
        metric(
            &txgate.metrics().await,
            "txgate_pacing_refusals_total{result=\"over_bound\"}"
        ),
        1.0
    );
    let answer = call_not_held(
        &txgate,
        &mut b,
        &attack_with_seed(600),
        "B's own first refusal",
    )
    .await;
    refused(&answer);
    let (mut a, answer, took) = held.await.unwrap();
    refused(&answer);
    assert!(took >= CAP, "{took:?}");

    // A submission the node takes ends A's streak.
    let answer = call_not_held(&txgate, &mut a, &transfer(&Eoa::new(42)), "taken").await;
    assert_eq!(answer["result"], "0x01", "forwarded: {answer}");
    let answer = call_not_held(
        &txgate,
        &mut a,
        &attack_with_seed(800),
        "the streak started over",
    )
    .await;
    refused(&answer);

    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_pacing_refusals_total{result=\"held\"}"),
        3.0
    );
    assert_eq!(
        metric(&m, "txgate_pacing_refusals_total{result=\"over_bound\"}"),
        1.0
    );
    assert_eq!(metric(&m, "txgate_pacing_held"), 0.0, "every place back");
    // B's and C's streaks, and A's new one (one refusal since its clear):
    // the gauge is set by the upkeep, every 100 ms.
    assert!(
        crate::support::eventually(Duration::from_secs(5), || async {
            metric(&txgate.metrics().await, "txgate_pacing_clients") == 3.0
        })
        .await
    );
    assert_eq!(
        metric(&m, "txgate_pacing_hold_microseconds_total"),
        (HOLD + 2 * HOLD + CAP).as_micros() as f64
    );
}

/// The attacker's call from the fresh EOA `seed`: refused by the denied
/// fingerprint.
fn attack_with_seed(seed: u64) -> Value {
    submit(&Eoa::new(seed).sign(0, TARGET, &attack_input(), 0, TIP))
}

/// Asserts a refusal by the denied fingerprint.
fn refused(answer: &Value) {
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "denied_fingerprint");
}

/// A transfer from `from` (nonce 0): it clears screening; the node takes it
/// if `from` is funded.
fn transfer(from: &Eoa) -> Value {
    submit(&from.sign(0, Address::repeat_byte(0x11), &[], 1, TIP))
}

/// A WebSocket to txgate at `url` (http://…) from the loopback address
/// `from`: a client of its own.
async fn websocket_from(
    url: &str,
    from: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let stream = socket.connect(addr(url)).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(url.replacen("http://", "ws://", 1), stream)
        .await
        .expect("upgrade");
    ws
}

/// anvil, txgate in front of it with the tests' pacing and the attacker's
/// call banned, and a funded account (seed `funded`).
async fn anvil_stack(funded: u64) -> (crate::support::Anvil, InProcess, Eoa) {
    let anvil = crate::support::Anvil::start().await;
    let txgate = InProcess::start(&anvil.url, &config(""));
    ban_attack_call(&txgate);
    let eoa = Eoa::new(funded);
    crate::support::fund(&anvil.url, &[eoa.address]).await;
    (anvil, txgate, eoa)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_counts_each_refusal_and_pacing_off_holds_nothing() {
    let upstream = RecordingUpstream::start().await;
    let txgate = InProcess::start(&upstream.url, &config(""));
    ban_attack_call(&txgate);
    let mut a = connect(addr(&txgate.url), "127.0.0.2").await;
    // Three refusals in one batch pass `after` (2): the batch is held.
    let batch = Value::Array((900..903).map(attack_with_seed).collect());
    let (answer, took) = call(&mut a, &batch).await;
    assert_eq!(answer.as_array().map(Vec::len), Some(3), "{answer}");
    for one in answer.as_array().unwrap() {
        refused(one);
    }
    assert!(took >= HOLD, "{took:?}");
    // A batch with one submission that clears is not held, and ends the
    // streak, whatever else in it was refused.
    let batch = json!([attack_with_seed(910), transfer(&Eoa::new(43))]);
    let answer = call_not_held(&txgate, &mut a, &batch, "a batch that clears").await;
    assert_eq!(answer[1]["result"], "0x01", "{answer}");
    call_not_held(
        &txgate,
        &mut a,
        &attack_with_seed(911),
        "the streak restarted",
    )
    .await;
    drop(txgate);

    let off = InProcess::start(&upstream.url, &config("enabled = false\n"));
    ban_attack_call(&off);
    let mut a = connect(addr(&off.url), "127.0.0.2").await;
    for seed in 920..930 {
        let answer = call_not_held(&off, &mut a, &attack_with_seed(seed), "pacing off").await;
        refused(&answer);
    }
    let m = off.metrics().await;
    assert_eq!(
        metric(&m, "txgate_pacing_refusals_total{result=\"held\"}"),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_a_streak_is_held_on_its_websocket_too() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let (_anvil, txgate, funded) = anvil_stack(61).await;
    let mut ws = websocket_from(&txgate.url, "127.0.0.5").await;
    // The answer, how long it took, and how many holds started meanwhile
    // (none: the message was not held).
    let mut round_trip = async |body: Value| {
        let before = holds(&txgate).await;
        let started = Instant::now();
        ws.send(Message::text(body.to_string())).await.unwrap();
        loop {
            let message = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("an answer within 10 s")
                .expect("open")
                .expect("a message");
            // An answer; a subscription's notifications are skipped.
            if let Message::Text(text) = message {
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["method"] != "eth_subscription" {
                    let took = started.elapsed();
                    return (value, took, holds(&txgate).await - before);
                }
            }
        }
    };
    for seed in 1000..1002 {
        let (answer, took, held) = round_trip(attack_with_seed(seed)).await;
        refused(&answer);
        assert_eq!(held, 0.0, "not held yet: {took:?}");
    }
    let (answer, took, _) = round_trip(attack_with_seed(1002)).await;
    refused(&answer);
    assert!(
        took >= HOLD,
        "the third refusal on the socket is held: {took:?}"
    );
    // A call added to the message does not evade the hold: the node
    // answers it at once, and the whole answer waits out the hold.
    let chain = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    let (answer, took, _) = round_trip(json!([attack_with_seed(1004), chain])).await;
    let answers = answer.as_array().expect("a batch answer");
    assert_eq!(answers.len(), 2, "{answer}");
    refused(&answers[0]);
    assert_eq!(answers[1]["result"], "0x7a69", "{answer}");
    assert!(
        took >= 2 * HOLD,
        "a mixed message is held, the hold doubled: {took:?}"
    );
    // Other calls on the socket are not held.
    let (answer, took, held) = round_trip(chain).await;
    assert_eq!(answer["result"], "0x7a69", "{answer}");
    assert_eq!(held, 0.0, "{took:?}");
    // A transfer the node takes, over the socket, starts the streak over
    // from its message's refusal, as over HTTP, and that message is not
    // held, refusal and all.
    let (answer, took, held) = round_trip(json!([attack_with_seed(1005), transfer(&funded)])).await;
    refused(&answer[0]);
    assert!(answer[1]["result"].is_string(), "{answer}");
    assert_eq!(held, 0.0, "a message with a taken submission: {took:?}");
    let (answer, took, held) = round_trip(attack_with_seed(1003)).await;
    refused(&answer);
    assert_eq!(held, 0.0, "the streak started over at 1: {took:?}");
    // The third refusal since would be held; in a message that opens a
    // subscription it is not: the node's notifications would reach the
    // client before its id.
    let subscribe =
        json!({"jsonrpc": "2.0", "id": 2, "method": "eth_subscribe", "params": ["newHeads"]});
    let (answer, took, held) = round_trip(json!([attack_with_seed(1007), subscribe])).await;
    refused(&answer[0]);
    assert!(answer[1]["result"].is_string(), "{answer}");
    assert_eq!(held, 0.0, "a message that subscribes: {took:?}");
    // The streak is now 3 (1005's restart, 1003, 1007): the next refusal
    // is the fourth, its hold doubled.
    let (answer, took, _) = round_trip(attack_with_seed(1008)).await;
    refused(&answer);
    assert!(
        took >= 2 * HOLD,
        "the streak went on from the restart: {took:?}"
    );
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_pacing_refusals_total{result=\"held\"}"),
        3.0
    );
}

/// A held WebSocket answer is not lost to a stop: the drain sends it at
/// once, then closes the socket with "going away".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_websocket_answer_goes_out_when_the_drain_starts() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let anvil = crate::support::Anvil::start().await;
    let mut txgate = InProcess::start(
        &anvil.url,
        "[screen.pacing]\nafter = 1\ninitial_hold_ms = 8000\nmax_hold_ms = 8000\n",
    );
    ban_attack_call(&txgate);
    let ws = websocket_from(&txgate.url, "127.0.0.6").await;
    let (mut ws, mut frames) = ws.split();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), frames.next())
            .await
            .expect("a frame within 5 s")
            .expect("open")
            .expect("a frame")
    };
    ws.send(Message::text(attack_with_seed(2000).to_string()))
        .await
        .unwrap();
    let Message::Text(first) = next().await else {
        panic!("a text answer")
    };
    refused(&serde_json::from_str(&first).unwrap());
    // The second refusal, with a call the node answers: due 8 s.
    let chain = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    ws.send(Message::text(
        json!([attack_with_seed(2001), chain]).to_string(),
    ))
    .await
    .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), next())
            .await
            .is_err(),
        "held"
    );
    let started = Instant::now();
    txgate.begin_stop();
    let Message::Text(held) = next().await else {
        panic!("the held answer first")
    };
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "sent when the drain started, not after the hold: {:?}",
        started.elapsed()
    );
    let held: Value = serde_json::from_str(&held).unwrap();
    refused(&held[0]);
    assert_eq!(held[1]["result"], "0x7a69", "{held}");
    let Message::Close(Some(frame)) = next().await else {
        panic!("then a close frame")
    };
    assert_eq!(frame.code, CloseCode::Away);
}

/// A held HTTP answer is not lost to a stop either: the drain ends its
/// hold (the grace period, 1 s here, is for calls, not for an 8 s hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_http_answer_goes_out_when_the_drain_starts() {
    let upstream = RecordingUpstream::start().await;
    let mut txgate = InProcess::start(
        &upstream.url,
        "[screen.pacing]\nafter = 1\ninitial_hold_ms = 8000\nmax_hold_ms = 8000\n",
    );
    ban_attack_call(&txgate);
    let mut conn = connect(addr(&txgate.url), "127.0.0.7").await;
    let (answer, _) = call(&mut conn, &attack_with_seed(3000)).await;
    refused(&answer);
    let held = tokio::spawn(async move { call(&mut conn, &attack_with_seed(3001)).await });
    assert!(
        crate::support::eventually(Duration::from_secs(10), || async {
            metric(&txgate.metrics().await, "txgate_pacing_held") == 1.0
        })
        .await,
        "the second refusal is held"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "the second refusal is held");
    txgate.begin_stop();
    // Answered at all, it went out within the grace period: once that is
    // over the stopped txgate drops the connection, and the call fails
    // (`call` panics on a transport error). The 5 s are well under the
    // 8 s hold, so neither can its natural end deliver it.
    let (answer, _) = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("answered within 5 s")
        .expect("the call, answered before the grace period ended");
    refused(&answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_submission_the_node_takes_ends_a_streak() {
    let (_anvil, txgate, funded) = anvil_stack(62).await;
    let mut a = connect(addr(&txgate.url), "127.0.0.6").await;
    for seed in 1100..1102 {
        let answer = call_not_held(&txgate, &mut a, &attack_with_seed(seed), "not yet").await;
        refused(&answer);
    }
    // An unfunded account's transfer clears screening, and the node
    // refuses it: a throwaway that costs nothing does not end the streak.
    let (answer, _) = call(&mut a, &transfer(&Eoa::new(63))).await;
    assert!(answer["error"].is_object(), "the node refused it: {answer}");
    let (answer, took) = call(&mut a, &attack_with_seed(1102)).await;
    refused(&answer);
    assert!(took >= HOLD, "the streak went on: {took:?}");
    // A transfer the node takes ends it.
    let (answer, _) = call(&mut a, &transfer(&funded)).await;
    assert!(answer["result"].is_string(), "{answer}");
    let answer = call_not_held(
        &txgate,
        &mut a,
        &attack_with_seed(1103),
        "the streak started over",
    )
    .await;
    refused(&answer);
}
