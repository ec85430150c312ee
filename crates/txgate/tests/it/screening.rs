//! Screening end to end: real anvil, txgate in this process, invalidations
//! applied through the same function the sidecar stream feeds.

use std::time::Duration;

use alloy_primitives::{Address, B256};
use hyper::StatusCode;
use serde_json::json;
use txgate_screen::{Invalidation, decode, decode_hex, recover_sender};

use crate::support::{
    ADDR1, Eoa, InProcess, KEY0, Node, NodeKind, accepted, cast_send, fund, metric,
    nothing_pending, refused, rpc_json, send_raw,
};

/// Init code of a contract that accepts every call (runtime: STOP).
const ACCEPT_ALL: &str = "0x6001600c60003960016000f300";
const ASSERTION: B256 = B256::repeat_byte(0xa5);

/// An attacker's call: selector 0xdeadbeef and one argument.
fn attack_input() -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[0x66; 32]);
    input
}

/// An honest call: `deposit()`.
const DEPOSIT: [u8; 4] = [0xd0, 0xe3, 0x0d, 0xb0];

fn invalidation(raw: &str, with_sender: bool) -> Invalidation {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    let sender = recover_sender(&tx).unwrap();
    let mut inv = Invalidation::of(
        &tx,
        Some(sender),
        Some(txgate_screen::AssertionKey {
            id: ASSERTION,
            version: 1,
        }),
        txgate_screen::unix_millis(std::time::SystemTime::now()),
    )
    .unwrap();
    if !with_sender {
        inv.sender = None;
        inv.tx_hash = None;
    }
    inv
}

/// `txgate_screen_decisions_total{decision, reason}` from a scrape.
fn decisions(metrics: &str, decision: &str, reason: &str) -> f64 {
    metric(
        metrics,
        &format!("txgate_screen_decisions_total{{decision=\"{decision}\",reason=\"{reason}\"}}"),
    )
}

/// Deploys the accept-all contract through txgate (a contract creation:
/// screened, no fingerprint) and returns its address.
fn deploy(url: &str) -> Address {
    crate::support::deploy(url, ACCEPT_ALL)
}

/// The receipt status of `hash`, waiting up to 5 s for it to be mined.
async fn status_of(anvil_url: &str, hash: &str) -> serde_json::Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionReceipt",
        "params": [hash]});
    for _ in 0..100 {
        let status = rpc_json(anvil_url, &body.to_string()).await.1["result"]["status"].clone();
        if !status.is_null() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serde_json::Value::Null
}

async fn invalidation_refuses_replay_fresh_eoas_and_higher_tip_but_not_other_calldata(
    kind: NodeKind,
) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "");

    // Honest traffic first: a transfer and a contract call go through.
    cast_send(&txgate.url, KEY0, &[ADDR1, "--value", "1ether"]);
    let contract = deploy(&txgate.url);

    let attacker = Eoa::new(1);
    let fresh: Vec<Eoa> = (100..120).map(Eoa::new).collect();
    let mut everyone: Vec<Address> = fresh.iter().map(|e| e.address).collect();
    everyone.push(attacker.address);
    fund(&node.url, &everyone).await;

    let first = attacker.sign(0, contract, &attack_input(), 0, 1_000_000_000);
    let hash = accepted(&send_raw(&txgate.url, &first).await);
    assert_eq!(status_of(&node.url, &hash).await, "0x1");

    // The sidecar's verdict.
    let inv = invalidation(&first, true);
    let applied = txgate.invalidations.apply(&[inv]);
    assert_eq!(
        (applied.banned, applied.recent_failures, applied.charged),
        (1, 1, 1)
    );

    // 1. The same raw tx: refused by hash, before any ECDSA.
    let data = refused(
        &send_raw(&txgate.url, &first).await,
        200,
        -32003,
        "recent_failure",
    );
    assert_eq!(data["tx_hash"], hash);
    assert_eq!(data["assertion_ids"], json!([format!("{ASSERTION}")]));

    // 2. The same calldata from 20 fresh EOAs: refused by fingerprint.
    for eoa in &fresh {
        let raw = eoa.sign(0, contract, &attack_input(), 0, 1_000_000_000);
        let data = refused(
            &send_raw(&txgate.url, &raw).await,
            200,
            -32003,
            "denied_fingerprint",
        );
        assert_eq!(data["fingerprint"], format!("{}", inv.fingerprint));
        assert_eq!(data["assertion_ids"], json!([format!("{ASSERTION}")]));
    }

    // 3. A resubmission at an extreme tip with the next nonce, and with a
    // slightly different value and gas: same fingerprint.
    let bumped = attacker.sign(1, contract, &attack_input(), 0, 500_000_000_000);
    refused(
        &send_raw(&txgate.url, &bumped).await,
        200,
        -32003,
        "denied_fingerprint",
    );

    // 4. Different calldata from the same EOAs goes through and is mined.
    for eoa in &fresh {
        let raw = eoa.sign(0, contract, &DEPOSIT, 1, 1_000_000_000);
        let hash = accepted(&send_raw(&txgate.url, &raw).await);
        assert_eq!(status_of(&node.url, &hash).await, "0x1");
    }

    // In a batch, each call gets its own verdict under its own id.
    let honest = attacker.sign(1, contract, &DEPOSIT, 1, 1_000_000_000);
    let denied = Eoa::new(200).sign(0, contract, &attack_input(), 0, 1_000_000_000);
    let batch = json!([
        {"jsonrpc": "2.0", "id": "a", "method": "eth_sendRawTransaction", "params": [denied]},
        {"jsonrpc": "2.0", "id": "b", "method": "eth_chainId"},
        {"jsonrpc": "2.0", "id": "c", "method": "eth_sendRawTransaction", "params": [honest]},
    ]);
    let (status, body) = rpc_json(&txgate.url, &batch.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["id"], "a");
    assert_eq!(body[0]["error"]["code"], -32003, "{body}");
    assert_eq!(body[1]["result"], "0x7a69", "{body}");
    assert_eq!(body[2]["id"], "c");
    assert!(body[2]["result"].as_str().is_some(), "{body}");

    let metrics = txgate.metrics().await;
    let series = |decision: &str, reason: &str| decisions(&metrics, decision, reason);
    assert_eq!(series("refused", "recent_failure"), 1.0);
    assert_eq!(series("refused", "denied_fingerprint"), 22.0);
    assert_eq!(series("forwarded", "contract_creation"), 1.0);
    assert!(series("forwarded", "clean") >= 23.0);
    assert_eq!(
        metric(&metrics, "txgate_invalidations_total{result=\"banned\"}"),
        1.0
    );
}

async fn hundred_senders_with_identical_calldata_and_no_verdict_all_go_through(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "");
    let contract = deploy(&txgate.url);
    let senders: Vec<Eoa> = (1000..1100).map(Eoa::new).collect();
    fund(
        &node.url,
        &senders.iter().map(|e| e.address).collect::<Vec<_>>(),
    )
    .await;

    // Something else is banned meanwhile; it must not matter.
    let other = Eoa::new(5).sign(0, contract, &attack_input(), 0, 1);
    txgate.invalidations.apply(&[invalidation(&other, true)]);

    // All at once, as concurrent clients.
    let tasks: Vec<_> = senders
        .iter()
        .map(|eoa| {
            let raw = eoa.sign(0, contract, &DEPOSIT, 1_000, 1_000_000_000);
            let url = txgate.url.clone();
            tokio::spawn(async move { send_raw(&url, &raw).await })
        })
        .collect();
    for task in tasks {
        accepted(&task.await.unwrap());
    }
    let metrics = txgate.metrics().await;
    assert_eq!(decisions(&metrics, "forwarded", "clean"), 100.0);
}

async fn sender_backoff_turns_on_after_n_invalidations_and_lifts_after_the_window(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(
        &node.url,
        r#"
[screen.backpressure]
tokens = 3
refill_per_sec = 0.1
backoff_initial_ms = 1500
backoff_max_ms = 3000
"#,
    );
    let contract = deploy(&txgate.url);
    let (attacker, bystander) = (Eoa::new(7), Eoa::new(8));
    fund(&node.url, &[attacker.address, bystander.address]).await;

    // Three forwards with distinct calldata, each invalidated by a verdict
    // that names neither tx nor sender: pending attribution charges them.
    for nonce in 0..3u64 {
        let mut input = attack_input();
        input[4] = nonce as u8;
        let raw = attacker.sign(nonce, contract, &input, 0, 1_000_000_000);
        accepted(&send_raw(&txgate.url, &raw).await);
        let applied = txgate.invalidations.apply(&[invalidation(&raw, false)]);
        assert_eq!(applied.charged, 1, "attributed to the sender");
    }

    // Backed off: even honest calldata from that sender waits.
    let next = attacker.sign(3, contract, &DEPOSIT, 0, 1_000_000_000);
    let answer = crate::support::rpc(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "eth_sendRawTransaction", "params": [next]})
            .to_string(),
    )
    .await
    .unwrap();
    assert_eq!(answer.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.1["retry-after"], "2");
    let body: serde_json::Value = serde_json::from_slice(&answer.2).unwrap();
    assert_eq!(body["id"], 9);
    assert_eq!(body["error"]["code"], -32005, "{body}");
    assert_eq!(body["error"]["data"]["reason"], "sender_backoff");

    // Another sender is untouched.
    accepted(
        &send_raw(
            &txgate.url,
            &bystander.sign(0, contract, &DEPOSIT, 0, 1_000_000_000),
        )
        .await,
    );

    // After the window, the sender is served again.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    accepted(&send_raw(&txgate.url, &next).await);
}

async fn monitor_only_counts_but_forwards_everything(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = InProcess::start(&node.url, "[screen]\nmonitor_only = true\n");
    let contract = deploy(&txgate.url);
    let attacker = Eoa::new(9);
    let fresh: Vec<Eoa> = (300..305).map(Eoa::new).collect();
    let mut all: Vec<Address> = fresh.iter().map(|e| e.address).collect();
    all.push(attacker.address);
    fund(&node.url, &all).await;

    let first = attacker.sign(0, contract, &attack_input(), 0, 1_000_000_000);
    let hash = accepted(&send_raw(&txgate.url, &first).await);
    // Mined, and out of the node's pool, before the replay, so the node's
    // answer is "nonce too low", not a pending duplicate's hash or
    // "already known" (geth's pool takes a new block in a moment after its
    // receipt is readable).
    assert_eq!(status_of(&node.url, &hash).await, "0x1");
    nothing_pending(&node.url).await;
    txgate.invalidations.apply(&[invalidation(&first, true)]);

    // The replay reaches node, which answers for itself ("nonce too low",
    // node's own error): no screening reason in it.
    let (status, body) = send_raw(&txgate.url, &first).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("nonce"),
        "{body}"
    );
    assert!(body["error"]["data"]["reason"].is_null(), "{body}");
    for eoa in &fresh {
        let raw = eoa.sign(0, contract, &attack_input(), 0, 1_000_000_000);
        let hash = accepted(&send_raw(&txgate.url, &raw).await);
        assert_eq!(status_of(&node.url, &hash).await, "0x1");
    }
    let metrics = txgate.metrics().await;
    let series = |decision: &str, reason: &str| decisions(&metrics, decision, reason);
    assert_eq!(series("would_refuse", "recent_failure"), 1.0);
    assert_eq!(series("would_refuse", "denied_fingerprint"), 5.0);
    assert_eq!(series("refused", "denied_fingerprint"), 0.0);
}

crate::support::on_each_node!(
    invalidation_refuses_replay_fresh_eoas_and_higher_tip_but_not_other_calldata,
    hundred_senders_with_identical_calldata_and_no_verdict_all_go_through,
    sender_backoff_turns_on_after_n_invalidations_and_lifts_after_the_window,
    monitor_only_counts_but_forwards_everything,
);
