//! HTTP clients on the lanes (`websocket.http_lanes`): the plain calls of
//! many HTTP clients share one node socket per worker, each answer goes
//! to its own client with its own id, a lane that fails answers its calls
//! -32603 and the next call opens a new one, an oversize answer is refused
//! alone, and a node whose WebSocket cannot be opened gets the calls over
//! HTTP. Submissions keep the pool unless `websocket.http_lane_submissions`
//! puts them on the lanes, and a lone call keeps it unless
//! `websocket.http_lane_min_overlap = 0` (which most tests here set, to
//! send calls one at a time on a lane). The node's WebSocket is reached
//! through a relay the test can watch, stall and cut.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::support::relay::Relay;
use crate::support::{Eoa, InProcess, Node, NodeKind, eventually, fund, metric, rpc_json};

const ANSWERED: &str = "txgate_http_lane_calls_total{result=\"answered\"}";
const FAILED: &str = "txgate_http_lane_calls_total{result=\"failed\"}";
const POOLED: &str = "txgate_http_lane_calls_total{result=\"pooled\"}";
const TOO_LARGE: &str = "txgate_http_lane_calls_total{result=\"too_large\"}";

const LANES_OPEN: &str = "txgate_ws_lanes_open";

/// `eth_chainId` with `id`.
fn chain_id(id: u32) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []}).to_string()
}

/// Sends `eth_chainId` on new connections until `lanes` lanes are open:
/// a lane opens in the background on an HTTP call that finds it closed
/// (that call goes over the pool), and each worker has its own.
async fn open_lanes(txgate: &InProcess, lanes: f64) {
    let call = chain_id(0);
    let opened = eventually(Duration::from_secs(20), || async {
        let (_, answer) = rpc_json(&txgate.url, &call).await;
        assert_eq!(answer["result"], "0x7a69", "{answer}");
        metric(&txgate.metrics().await, LANES_OPEN) >= lanes
    })
    .await;
    assert!(opened, "fewer than {lanes} lanes opened");
}

/// Lanes through `relay`, taken by calls made one at a time too.
fn lanes_through(relay: &Relay, extra: &str) -> String {
    format!(
        "[websocket]\nupstream_url = \"{}\"\nhttp_lane_min_overlap = 0\n{extra}",
        relay.url
    )
}

/// `web3_sha3` of `input` with `id`, and the result it must get.
fn sha3(id: &Value, input: &[u8]) -> (String, String) {
    let hex = format!("0x{}", alloy_primitives::hex::encode(input));
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "web3_sha3", "params": [hex]});
    (
        call.to_string(),
        alloy_primitives::keccak256(input).to_string(),
    )
}

async fn many_http_clients_share_a_node_socket_per_worker(kind: NodeKind) {
    let node = Node::start(kind).await;
    for lanes in [true, false] {
        let relay = Relay::start(&node.url).await;
        let txgate = InProcess::start(
            &node.url,
            &lanes_through(&relay, &format!("http_lanes = {lanes}\n")),
        );
        if lanes {
            open_lanes(&txgate, 2.0).await;
        }
        let before = txgate.metrics().await;
        // 40 clients at once, 5 calls each, every client using the same
        // ids (1, "a", null-free strings and big numbers): each answer must
        // be its own caller's, with its id as the caller wrote it.
        let ids = [
            json!(1),
            json!("a"),
            json!(9007199254740991u64),
            json!("x\"y"),
            json!(0),
        ];
        let mut tasks = Vec::new();
        for client in 0..40u8 {
            let url = txgate.url.clone();
            let ids = ids.clone();
            tasks.push(tokio::spawn(async move {
                for (n, id) in ids.iter().enumerate() {
                    let (call, expected) = sha3(id, &[client, n as u8]);
                    let (status, answer) = rpc_json(&url, &call).await;
                    assert_eq!(status, StatusCode::OK, "{answer}");
                    assert_eq!(answer["id"], *id, "{answer}");
                    assert_eq!(answer["result"], expected.as_str(), "{answer}");
                }
                // A small batch travels on the lane too, its answers in
                // the caller's order under the caller's ids.
                let (first, first_expected) = sha3(&json!("a"), &[client, 9]);
                let (second, second_expected) = sha3(&json!(7), &[client, 10]);
                let batch = format!(
                    r#"[{first},{{"jsonrpc":"2.0","id":null,"method":"eth_chainId","params":[]}},{second}]"#
                );
                let (status, answer) = rpc_json(&url, &batch).await;
                assert_eq!(status, StatusCode::OK, "{answer}");
                let answers = answer.as_array().expect("a batch's answer");
                assert_eq!(answers.len(), 3, "{answer}");
                assert_eq!(answers[0]["id"], "a");
                assert_eq!(answers[0]["result"], first_expected.as_str(), "{answer}");
                assert_eq!(answers[1]["id"], Value::Null);
                assert_eq!(answers[1]["result"], "0x7a69", "{answer}");
                assert_eq!(answers[2]["id"], 7);
                assert_eq!(answers[2]["result"], second_expected.as_str(), "{answer}");
                // One call forwarded, at position 1 (txgate answers the
                // invalid entry): still a batch, answered in place.
                let (solo, solo_expected) = sha3(&json!("solo"), &[client, 11]);
                let (status, answer) =
                    rpc_json(&url, &format!(r#"[{{"jsonrpc":"2.0","id":9}},{solo}]"#)).await;
                assert_eq!(status, StatusCode::OK, "{answer}");
                let answers = answer.as_array().expect("a batch's answer");
                assert_eq!(answers.len(), 2, "{answer}");
                assert_eq!(answers[0]["error"]["code"], -32600, "{answer}");
                assert_eq!(answers[1]["id"], "solo", "{answer}");
                assert_eq!(answers[1]["result"], solo_expected.as_str(), "{answer}");
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // A call the lanes do not carry (its answer can be large), and a
        // batch of more than four, go over HTTP.
        let (_, block) = rpc_json(
            &txgate.url,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "eth_getBlockByNumber",
                "params": ["latest", false]})
            .to_string(),
        )
        .await;
        assert!(block["result"]["number"].is_string(), "{block}");
        let five: Vec<Value> = (0..5)
            .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []}))
            .collect();
        let (status, answers) = rpc_json(&txgate.url, &Value::Array(five).to_string()).await;
        assert_eq!(status, StatusCode::OK);
        let answers = answers.as_array().expect("a batch's answer").clone();
        assert_eq!(answers.len(), 5);
        for (n, answer) in answers.iter().enumerate() {
            assert_eq!(
                (&answer["id"], &answer["result"]),
                (&json!(n), &json!("0x7a69"))
            );
        }
        let metrics = txgate.metrics().await;
        let delta = |series| metric(&metrics, series) - metric(&before, series);
        if lanes {
            // Two workers: one socket each, for 200 lone calls and 80
            // batches of 3 and 1 calls (the large call and the batch of
            // five: not offered).
            assert_eq!(relay.count(), 2);
            assert_eq!(delta(ANSWERED), 360.0);
            assert_eq!(delta(POOLED), 0.0);
        } else {
            assert_eq!(relay.count(), 0);
            assert_eq!(metric(&metrics, ANSWERED), 0.0);
        }
        assert_eq!(metric(&metrics, FAILED), 0.0);
    }
}

async fn a_lane_that_fails_answers_its_http_call_and_the_next_call_opens_another(kind: NodeKind) {
    let node = Node::start(kind).await;
    let relay = Relay::start(&node.url).await;
    // One worker: one lane. A call timeout far above the test's waits: the
    // call must be answered by the lane's failure, not by its timeout.
    let txgate = InProcess::start(
        &node.url,
        &format!(
            "[server]\nworkers = 1\n[upstream]\ncall_timeout_ms = 60000\n{}",
            lanes_through(&relay, "")
        ),
    );
    open_lanes(&txgate, 1.0).await;
    let before = txgate.metrics().await;
    let (_, first) = rpc_json(&txgate.url, &chain_id(1)).await;
    assert_eq!(first["result"], "0x7a69", "{first}");
    assert_eq!(relay.count(), 1);
    let answered = metric(&txgate.metrics().await, ANSWERED);
    assert_eq!(answered - metric(&before, ANSWERED), 1.0);
    let lane = relay.conn(0);
    lane.stall.store(true, SeqCst);
    let before = lane.up.load(SeqCst);
    let url = txgate.url.clone();
    let held = tokio::spawn(async move { rpc_json(&url, &chain_id(2)).await });
    let sent = eventually(Duration::from_secs(10), || async {
        lane.up.load(SeqCst) > before
    })
    .await;
    assert!(sent, "the call never reached the lane");
    lane.cut.send_replace(true);
    let (status, failed) = held.await.unwrap();
    assert_eq!(failed["id"], 2, "{failed}");
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(
        failed["error"]["message"], "upstream unavailable",
        "{failed}"
    );
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    // The next call goes over the pool and opens a new lane (after the
    // lane's pause), which the calls after it take.
    let (_, next) = rpc_json(&txgate.url, &chain_id(3)).await;
    assert_eq!(next["result"], "0x7a69", "{next}");
    assert_eq!(next["id"], 3, "{next}");
    open_lanes(&txgate, 1.0).await;
    assert_eq!(relay.count(), 2);
    let (_, last) = rpc_json(&txgate.url, &chain_id(4)).await;
    assert_eq!(
        (&last["result"], &last["id"]),
        (&json!("0x7a69"), &json!(4)),
        "{last}"
    );
    let metrics = txgate.metrics().await;
    assert!(metric(&metrics, ANSWERED) >= answered + 1.0);
    assert_eq!(metric(&metrics, FAILED), 1.0);
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"failed\"}"),
        1.0
    );
}

async fn an_answer_too_large_for_an_http_call_on_the_lane_fails_it_alone(kind: NodeKind) {
    let node = Node::start(kind).await;
    let relay = Relay::start(&node.url).await;
    let txgate = InProcess::start(
        &node.url,
        &format!(
            "[server]\nworkers = 1\n[upstream]\nmax_response_bytes = 1000\n{}",
            lanes_through(&relay, "")
        ),
    );
    open_lanes(&txgate, 1.0).await;
    let before = txgate.metrics().await;
    // One worker: one lane. A creation call whose code returns 1024 zero bytes: about 2 KiB of
    // answer, over the 1000-byte bound.
    let (status, refused) = rpc_json(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": "big", "method": "eth_call",
            "params": [{"data": "0x6104006000f3"}, "latest"]})
        .to_string(),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(refused["id"], "big", "{refused}");
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let (_, small) = rpc_json(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": "small", "method": "eth_call",
            "params": [{"data": "0x6100206000f3"}, "latest"]})
        .to_string(),
    )
    .await;
    assert_eq!(
        small["result"].as_str().map(str::len),
        Some(2 + 64),
        "{small}"
    );
    let metrics = txgate.metrics().await;
    assert_eq!(metric(&metrics, TOO_LARGE), 1.0);
    assert_eq!(metric(&metrics, ANSWERED) - metric(&before, ANSWERED), 1.0);
    assert_eq!(
        metric(&metrics, "txgate_ws_lane_events_total{event=\"failed\"}"),
        0.0
    );
    assert_eq!(relay.count(), 1, "the lane stayed up");
}

async fn a_node_whose_websocket_cannot_be_opened_gets_http_calls_over_the_pool(kind: NodeKind) {
    let node = Node::start(kind).await;
    // A port held but not listening: every connect is refused.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = format!("ws://{}", held.local_addr().unwrap());
    let txgate = InProcess::start(
        &node.url,
        &format!("[websocket]\nupstream_url = \"{dead}\"\nhttp_lane_min_overlap = 0\n"),
    );
    for id in 0..20u32 {
        let (status, answer) = rpc_json(&txgate.url, &chain_id(id)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["result"], "0x7a69", "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
    }
    let metrics = txgate.metrics().await;
    assert_eq!(metric(&metrics, ANSWERED), 0.0);
    assert_eq!(metric(&metrics, FAILED), 0.0);
    assert_eq!(metric(&metrics, POOLED), 20.0);
    // One try to open per worker (two), then none for 10 s.
    let tries = metric(&metrics, "txgate_ws_lane_events_total{event=\"failed\"}");
    assert!((1.0..=2.0).contains(&tries), "{tries} tries to open a lane");
}

/// A submission over HTTP keeps the pool by default (a node that takes its
/// time on the shared socket would delay every call behind it), and takes
/// the lane with `websocket.http_lane_submissions`; either way it reaches
/// the node and is answered with its hash.
async fn http_submissions_keep_the_pool_unless_asked_onto_the_lanes(kind: NodeKind) {
    let node = Node::start(kind).await;
    let sender = Eoa::new(0x4c);
    fund(&node.url, &[sender.address]).await;
    for (nonce, on_lanes) in [(0u64, false), (2, true)] {
        let relay = Relay::start(&node.url).await;
        let txgate = InProcess::start(
            &node.url,
            &format!(
                "[server]\nworkers = 1\n{}",
                lanes_through(&relay, &format!("http_lane_submissions = {on_lanes}\n"))
            ),
        );
        open_lanes(&txgate, 1.0).await;
        let before = txgate.metrics().await;
        let up_before = relay.conn(0).up.load(SeqCst);
        let raw = sender.sign(
            nonce,
            alloy_primitives::Address::repeat_byte(0x4d),
            &[],
            1,
            1_000_000_000,
        );
        let submit = json!({"jsonrpc": "2.0", "id": "tx", "method": "eth_sendRawTransaction",
            "params": [raw]})
        .to_string();
        let (status, answer) = rpc_json(&txgate.url, &submit).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["id"], "tx", "{answer}");
        assert!(
            answer["result"].as_str().is_some_and(|h| h.len() == 66),
            "{answer}"
        );
        // The same in a batch beside a read: the batch goes on the lane
        // only when every call it forwards may.
        let raw = sender.sign(
            nonce + 1,
            alloy_primitives::Address::repeat_byte(0x4d),
            &[],
            1,
            1_000_000_000,
        );
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]},
            {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId", "params": []},
        ])
        .to_string();
        let (status, answers) = rpc_json(&txgate.url, &batch).await;
        assert_eq!(status, StatusCode::OK, "{answers}");
        let answers = answers.as_array().expect("a batch's answer").clone();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert!(answers[0]["result"].is_string(), "{answers:?}");
        let metrics = txgate.metrics().await;
        let answered = metric(&metrics, ANSWERED) - metric(&before, ANSWERED);
        if on_lanes {
            assert_eq!(answered, 3.0, "the submission and the batch took the lane");
            // The relay counts bytes once it has written them on.
            let written = eventually(Duration::from_secs(5), || async {
                relay.conn(0).up.load(SeqCst) > up_before
            })
            .await;
            assert!(written, "the submission was written on the lane");
        } else {
            assert_eq!(answered, 0.0, "the submission and the batch kept the pool");
            let written = relay.conn(0).up.load(SeqCst) - up_before;
            assert_eq!(written, 0, "nothing written on the lane");
        }
        assert_eq!(relay.count(), 1);
    }
}

/// By default a lone HTTP call keeps the pool (`http_lane_min_overlap`
/// 1): a lane saves only by writing overlapping calls together, and a call
/// alone is answered sooner over the pool. Calls that overlap take the
/// lane, opened by the first of them that finds it closed.
async fn a_lone_http_call_keeps_the_pool_and_overlapping_calls_take_the_lane(kind: NodeKind) {
    let node = Node::start(kind).await;
    let relay = Relay::start(&node.url).await;
    let txgate = InProcess::start(
        &node.url,
        &format!(
            "[server]\nworkers = 1\n[websocket]\nupstream_url = \"{}\"\n",
            relay.url
        ),
    );
    for id in 0..20u32 {
        let (status, answer) = rpc_json(&txgate.url, &chain_id(id)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(
            (&answer["id"], &answer["result"]),
            (&json!(id), &json!("0x7a69"))
        );
    }
    let metrics = txgate.metrics().await;
    assert_eq!(metric(&metrics, ANSWERED), 0.0);
    assert_eq!(metric(&metrics, POOLED), 20.0);
    assert_eq!(relay.count(), 0, "no lane opened for calls one at a time");
    // Calls at once, on connections of their own: all but the first of a
    // burst overlap another.
    let took = eventually(Duration::from_secs(20), || async {
        let calls: Vec<_> = (100..116u32)
            .map(|id| {
                let (url, call) = (txgate.url.clone(), chain_id(id));
                tokio::spawn(async move { (id, rpc_json(&url, &call).await) })
            })
            .collect();
        for call in calls {
            let (id, (status, answer)) = call.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{answer}");
            assert_eq!(
                (&answer["id"], &answer["result"]),
                (&json!(id), &json!("0x7a69"))
            );
        }
        metric(&txgate.metrics().await, ANSWERED) > 0.0
    })
    .await;
    assert!(took, "overlapping calls never took the lane");
    assert_eq!(relay.count(), 1);
    assert_eq!(metric(&txgate.metrics().await, FAILED), 0.0);
}

crate::support::on_each_node!(
    a_lone_http_call_keeps_the_pool_and_overlapping_calls_take_the_lane,
    many_http_clients_share_a_node_socket_per_worker,
    http_submissions_keep_the_pool_unless_asked_onto_the_lanes,
    a_lane_that_fails_answers_its_http_call_and_the_next_call_opens_another,
    an_answer_too_large_for_an_http_call_on_the_lane_fails_it_alone,
    a_node_whose_websocket_cannot_be_opened_gets_http_calls_over_the_pool,
);
