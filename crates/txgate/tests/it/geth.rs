//! The real nodes behind txgate: `geth --dev` and op-geth (issue 42),
//! started by the test support with anvil's accounts funded. These prove
//! the launcher: a node answers through txgate as it answers directly, and
//! a transaction signed with anvil's first key is mined.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{
    ADDR1, ANVIL_ACCOUNTS, Geth, KEY0, Txgate, accepted, cast, receipt, rpc, rpc_json, send_raw,
};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// One text exchange over a fresh WebSocket to `url`.
async fn ws_exchange(url: &str, request: &str) -> String {
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("WebSocket upgrade at {url}: {e}"));
    socket.send(Message::text(request)).await.expect("send");
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer within 10 s")
            .expect("socket open")
            .expect("a message");
        if let Message::Text(text) = message {
            return text.to_string();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn geth_answers_through_txgate_unchanged() {
    let geth = Geth::start().await;
    let txgate = Txgate::start(&geth.url, &[]);

    let (status, _, direct) = rpc(&geth.url, CHAIN_ID).await.expect("geth");
    assert_eq!(status, StatusCode::OK);
    let (status, _, through) = rpc(&txgate.url, CHAIN_ID).await.expect("txgate");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&through),
        String::from_utf8_lossy(&direct)
    );
    let answer: Value = serde_json::from_slice(&through).expect("JSON");
    assert_eq!(answer["result"], "0x7a69", "anvil's chain id: {answer}");

    // It is geth that answers, and its genesis funded anvil's accounts.
    let (_, version) = rpc_json(
        &txgate.url,
        r#"{"jsonrpc":"2.0","id":2,"method":"web3_clientVersion","params":[]}"#,
    )
    .await;
    assert!(
        version["result"]
            .as_str()
            .is_some_and(|v| v.starts_with("Geth/")),
        "{version}"
    );
    let (_, balance) = rpc_json(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "eth_getBalance",
            "params": [ANVIL_ACCOUNTS[9], "latest"]})
        .to_string(),
    )
    .await;
    assert_eq!(balance["result"], "0x21e19e0c9bab2400000", "{balance}");

    // The same over WebSocket: the node's port serves both, and txgate
    // derives its WebSocket upstream from the HTTP one.
    let direct = ws_exchange(&geth.ws_url, CHAIN_ID).await;
    let through = ws_exchange(&format!("ws://{}", txgate.rpc_addr), CHAIN_ID).await;
    assert_eq!(through, direct);
}

#[tokio::test(flavor = "multi_thread")]
async fn transfer_signed_with_anvils_key_is_mined_on_geth() {
    let geth = Geth::start().await;
    let txgate = Txgate::start(&geth.url, &[]);

    // cast signs for the chain it asks txgate about (nonce, fees, id).
    let raw = cast(&[
        "mktx",
        "--rpc-url",
        &txgate.url,
        "--private-key",
        KEY0,
        ADDR1,
        "--value",
        "1ether",
    ]);
    let hash = accepted(&send_raw(&txgate.url, &raw).await);
    let receipt = receipt(&txgate.url, &hash, Duration::from_secs(30)).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}\n{}", geth.log());
    assert_eq!(
        receipt["from"],
        ANVIL_ACCOUNTS[0].to_lowercase(),
        "{receipt}"
    );

    let (_, balance) = rpc_json(
        &txgate.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance",
            "params": [ADDR1, "latest"]})
        .to_string(),
    )
    .await;
    // 10,000 ether from the genesis, and the one sent.
    assert_eq!(balance["result"], "0x21e27c1806e59a40000", "{balance}");
}

#[tokio::test(flavor = "multi_thread")]
async fn op_geth_serves_conditional_submissions() {
    let node = Geth::op_geth().await;
    let txgate = Txgate::start(&node.url, &[]);

    let (status, _, direct) = rpc(&node.url, CHAIN_ID).await.expect("op-geth");
    assert_eq!(status, StatusCode::OK);
    let (_, _, through) = rpc(&txgate.url, CHAIN_ID).await.expect("txgate");
    assert_eq!(
        String::from_utf8_lossy(&through),
        String::from_utf8_lossy(&direct)
    );

    // Its conditional endpoint is on: it judges the condition before it
    // decodes the transaction.
    let (status, answer) = rpc_json(
        &node.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransactionConditional",
            "params": ["0x00", {"blockNumberMin": "0x5", "blockNumberMax": "0x2"}]})
        .to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("failed conditional validation: ")),
        "{answer}"
    );
}
