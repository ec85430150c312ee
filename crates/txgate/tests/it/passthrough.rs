//! The happy path: real clients through txgate to the node (anvil and
//! geth alike).

use hyper::StatusCode;
use serde_json::json;

use crate::support::{ADDR1, KEY0, Node, NodeKind, Txgate, cast, cast_send, metric};

/// Init code that deploys a contract whose every call returns 42.
const ANSWER_CONTRACT: &str = "0x600a600c600039600a6000f3602a60005260206000f3";

async fn cast_send_and_call_go_through(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);

    let before = cast(&["balance", ADDR1, "--rpc-url", &txgate.url]);
    cast_send(&txgate.url, KEY0, &[ADDR1, "--value", "1ether"]);
    let after = cast(&["balance", ADDR1, "--rpc-url", &txgate.url]);
    let (before, after): (u128, u128) = (before.parse().unwrap(), after.parse().unwrap());
    assert_eq!(after - before, 1_000_000_000_000_000_000);

    let address = crate::support::deploy(&txgate.url, ANSWER_CONTRACT).to_string();
    let answer = cast(&[
        "call",
        &address,
        "answer()(uint256)",
        "--rpc-url",
        &txgate.url,
    ]);
    assert_eq!(answer, "42");

    let metrics = txgate.metrics().await;
    assert!(
        metric(
            &metrics,
            "txgate_rpc_calls_total{method=\"eth_sendRawTransaction\"}"
        ) >= 2.0,
        "{metrics}"
    );
    assert!(metric(&metrics, "txgate_rpc_calls_total{method=\"eth_call\"}") >= 1.0);
    assert_eq!(
        metric(
            &metrics,
            "txgate_http_responses_total{outcome=\"upstream_unavailable\"}"
        ),
        0.0
    );
}

async fn batch_of_mixed_calls_keeps_ids_in_order(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let batch = json!([
        {"jsonrpc":"2.0","id":"str-id","method":"eth_chainId","params":[]},
        {"jsonrpc":"2.0","id":7,"method":"eth_blockNumber","params":[]},
        {"jsonrpc":"2.0","method":"eth_chainId","params":[]},
        {"jsonrpc":"2.0","id":null,"method":"eth_getBalance","params":[ADDR1, "latest"]},
        {"jsonrpc":"2.0","id":9,"method":"admin_peers","params":[]},
        {"jsonrpc":"2.0","id":7,"method":"eth_gasPrice","params":[]},
        {"jsonrpc":"1.0","id":10,"method":"eth_chainId"},
        {"jsonrpc":"2.0","id":11,"method":"eth_noSuchMethod","params":[]},
        {"jsonrpc":"2.0","id":1.50,"method":"net_version","params":[]}
    ]);
    // 1.50 is written by hand: serde_json would print 1.5.
    let batch = batch.to_string().replace("1.5,", "1.50,");
    assert!(batch.contains("\"id\":1.50"));
    let (status, _, raw) = crate::support::rpc(&txgate.url, &batch).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    // The caller's id text survives even where the node would refuse it.
    assert!(
        std::str::from_utf8(&raw).unwrap().contains("\"id\":1.50"),
        "{raw:?}"
    );
    let answer: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let answers = answer.as_array().expect("array");
    let ids: Vec<String> = answers.iter().map(|a| a["id"].to_string()).collect();
    // The notification gets no answer; everything else in the caller's order.
    assert_eq!(
        ids,
        ["\"str-id\"", "7", "null", "9", "7", "10", "11", "1.5"]
    );
    assert_eq!(answers[0]["result"], "0x7a69");
    assert!(answers[1]["result"].is_string());
    assert!(answers[2]["result"].as_str().unwrap().starts_with("0x"));
    assert_eq!(answers[3]["error"]["code"], -32601);
    assert!(answers[4]["result"].is_string());
    assert_eq!(answers[5]["error"]["code"], -32600);
    assert_eq!(
        answers[6]["error"]["code"], -32601,
        "the node's own error is relayed"
    );
    assert_eq!(answers[7]["result"], "31337");
}

async fn notifications_get_no_answer(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let (status, _, body) =
        crate::support::rpc(&txgate.url, r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#)
            .await
            .unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(body.is_empty());
    let (status, _, body) = crate::support::rpc(
        &txgate.url,
        r#"[{"jsonrpc":"2.0","method":"eth_chainId"},{"jsonrpc":"2.0","method":"admin_peers"}]"#,
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(body.is_empty());
}

async fn http2_prior_knowledge_is_served(kind: NodeKind) {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = hyper::Request::post(&txgate.url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":"h2","method":"eth_chainId"}"#,
        )))
        .unwrap();
    let response = client.request(req).await.expect("h2c request");
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["id"], "h2");
    assert_eq!(v["result"], "0x7a69");
}

async fn admin_endpoints(kind: NodeKind) {
    let node = Node::start(kind).await;
    let txgate = Txgate::start(&node.url, &[]);
    let (status, _, _) = crate::support::get(&format!("{}/healthz", txgate.admin_url)).await;
    assert_eq!(status, StatusCode::OK);
    // The first probe runs at start; give it a moment.
    let mut ready = false;
    for _ in 0..50 {
        let (status, _, body) = crate::support::get(&format!("{}/readyz", txgate.admin_url)).await;
        if status == StatusCode::OK {
            assert!(
                std::str::from_utf8(&body)
                    .unwrap()
                    .contains("\"upstream\":\"up\"")
            );
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "/readyz never became ready");
    let metrics = txgate.metrics().await;
    for name in [
        "txgate_in_flight_requests",
        "txgate_upstream_up 1",
        "txgate_request_duration_seconds_bucket",
        "txgate_upstream_errors_total{kind=\"connect\"}",
        "txgate_http_responses_total{outcome=\"overloaded\"}",
    ] {
        assert!(metrics.contains(name), "missing {name}");
    }
}

crate::support::on_each_node!(
    cast_send_and_call_go_through,
    batch_of_mixed_calls_keeps_ids_in_order,
    notifications_get_no_answer,
    http2_prior_knowledge_is_served,
    admin_endpoints,
);
