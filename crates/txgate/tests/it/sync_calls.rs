//! `eth_sendRawTransactionSync`: a real receipt through txgate from anvil;
//! its own upstream timeout (longer than other calls'), and its own cap in
//! flight, so slow sync calls never starve fast ones.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Eoa, Node, NodeKind, SlowUpstream, TempFile, Txgate, eventually, fund, metric, rpc_json,
};

fn sync_call(id: u64, raw: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "eth_sendRawTransactionSync", "params": [raw]})
        .to_string()
}

/// Screened like any submission, answered with the node's receipt.
async fn a_sync_call_gets_its_receipt_through_txgate(kind: NodeKind) {
    let node = Node::start(kind).await;
    let sender = Eoa::new(701);
    fund(&node.url, &[sender.address]).await;
    let txgate = Txgate::start(&node.url, &[]);
    let raw = sender.sign(
        0,
        alloy_primitives::Address::repeat_byte(0x42),
        &[],
        1,
        1_000_000_000,
    );
    let (status, answer) = rpc_json(&txgate.url, &sync_call(1, &raw)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["status"], "0x1", "{answer}");
    assert!(answer["result"]["blockNumber"].is_string(), "{answer}");
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_upstream_sync_in_flight"), 0.0);
}

/// Against a node that takes 1.5 s for everything: an ordinary call times
/// out at `upstream.call_timeout_ms` (1 s), a sync call gets its answer
/// past it (`upstream.sync_call_timeout_ms`); with two sync calls holding
/// both slots, a third is refused at once while a batch of fast calls
/// still gets through.
#[tokio::test(flavor = "multi_thread")]
async fn sync_calls_have_their_own_timeout_and_cap() {
    // The node holds the sync calls until the test releases them, so their
    // slots stay taken for as long as the checks below take; their own
    // timeout is set far above that.
    let node = SlowUpstream::start_holding(
        Duration::from_millis(1500),
        Some("eth_sendRawTransactionSync"),
    )
    .await;
    let config = TempFile::new(
        "[upstream]\ncall_timeout_ms = 1000\nsync_call_timeout_ms = 60000\n\
         [admission]\nmax_sync_in_flight = 2\n[screen]\nenabled = false\n",
    );
    let txgate = Txgate::start(&node.url, &["--config", config.arg()]);
    let raw = Eoa::new(702).sign(0, alloy_primitives::Address::repeat_byte(1), &[], 0, 1);

    let (status, answer) = rpc_json(
        &txgate.url,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#,
    )
    .await;
    assert_eq!(status, 504, "{answer}");

    let url = txgate.url.clone();
    let held: Vec<_> = (0..2)
        .map(|i| {
            let (url, body) = (url.clone(), sync_call(10 + i, &raw));
            tokio::spawn(async move { rpc_json(&url, &body).await })
        })
        .collect();
    // Both slots taken (seen on the gauge), the third is refused at once:
    // the two are held by the node until released below, so a third call
    // that waited for a slot would get no answer at all.
    let sync_in_flight =
        || async { metric(&txgate.metrics().await, "txgate_upstream_sync_in_flight") };
    let taken = eventually(Duration::from_secs(10), || async {
        sync_in_flight().await == 2.0
    })
    .await;
    assert!(taken, "the two sync calls never held their slots");
    let (status, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        rpc_json(&txgate.url, &sync_call(12, &raw)),
    )
    .await
    .expect("the third sync call waited for a slot");
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["id"], 12);
    assert_eq!(answer["error"]["code"], -32005);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("eth_sendRawTransactionSync"),
        "{answer}"
    );
    // In a batch, the sync call over the cap is refused on its own; the
    // other call goes up (and meets the ordinary timeout of this slow
    // node: the batch holds no sync slot).
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransactionSync", "params": [raw]},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId", "params": []},
    ]);
    let (_, answer) = rpc_json(&txgate.url, &batch.to_string()).await;
    let answers: Vec<Value> = match answer {
        Value::Array(a) => a,
        other => panic!("not a batch answer: {other}"),
    };
    assert_eq!(answers[0]["error"]["code"], -32005, "{answers:?}");
    assert_eq!(
        answers[1]["error"]["message"], "upstream timed out",
        "{answers:?}"
    );
    // The two still hold their slots, past the ordinary timeout the
    // batch's call met; released, they get their answers.
    assert_eq!(sync_in_flight().await, 2.0);
    node.release();
    for call in held {
        let (status, answer) = call.await.unwrap();
        assert_eq!(
            (status.as_u16(), &answer["result"]),
            (200, &json!("0x1")),
            "{answer}"
        );
    }
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_upstream_sync_refused_total"), 2.0);
    // Counted apart from the global cap (its alert stays quiet).
    assert_eq!(
        metric(
            &m,
            "txgate_http_responses_total{outcome=\"sync_overloaded\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_http_responses_total{outcome=\"overloaded\"}"),
        0.0
    );
    assert_eq!(metric(&m, "txgate_upstream_sync_max_in_flight"), 2.0);
    assert_eq!(metric(&m, "txgate_upstream_sync_in_flight"), 0.0);
}

crate::support::on_each_node!(a_sync_call_gets_its_receipt_through_txgate,);
