//! A node that answers a batch with fewer answers than calls (geth answers
//! a batch over its limit with one error, under the first call's id): over
//! WebSocket, every call the node's answer left out is answered at once
//! with -32603 "upstream returned no response for this call", as over
//! HTTP, not after the call timeout (10 s) as "upstream timed out".

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::InProcess;

/// A WebSocket node that answers a batch with one error under its first
/// call's id, and a single call with a result.
async fn node_answering_batches_in_part() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    let Message::Text(text) = message else {
                        continue;
                    };
                    let reply = match serde_json::from_str::<Value>(&text).unwrap_or_default() {
                        Value::Array(calls) => json!([{"jsonrpc": "2.0", "id": calls[0]["id"],
                            "error": {"code": -32600, "message": "batch too large"}}]),
                        call => json!({"jsonrpc": "2.0", "id": call["id"], "result": "0x1"}),
                    };
                    if socket.send(Message::text(reply.to_string())).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, task)
}

/// The next text message on `client`, as JSON (15 s at most).
async fn next_json<S>(client: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), client.next())
            .await
            .expect("an answer")
            .unwrap()
            .unwrap();
        if let Message::Text(text) = next {
            return serde_json::from_str::<Value>(&text).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_nodes_batch_answer_leaves_out_are_answered_at_once() {
    let (node, task) = node_answering_batches_in_part().await;
    // HTTP goes nowhere: only the WebSocket node is asked.
    let config = format!("[websocket]\nupstream_url = \"{node}\"\n");
    let txgate = InProcess::start("http://127.0.0.1:9", &config);
    let ws_url = txgate.url.replacen("http://", "ws://", 1);
    let (mut client, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    let batch = json!([
        {"jsonrpc": "2.0", "id": "a", "method": "eth_chainId", "params": []},
        {"jsonrpc": "2.0", "id": 7, "method": "eth_blockNumber", "params": []},
        {"jsonrpc": "2.0", "id": null, "method": "eth_gasPrice", "params": []},
    ]);
    let sent = Instant::now();
    client.send(Message::text(batch.to_string())).await.unwrap();
    let answer = next_json(&mut client).await;
    let took = sent.elapsed();
    let answers = answer.as_array().expect("a batch answer");
    assert_eq!(answers.len(), 3, "{answer}");
    let by_id = |id: &Value| {
        answers
            .iter()
            .find(|a| &a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {answer}"))
    };
    // The node's own error, to the call it named.
    assert_eq!(by_id(&json!("a"))["error"]["message"], "batch too large");
    for id in [json!(7), Value::Null] {
        let left_out = by_id(&id);
        assert_eq!(left_out["error"]["code"], -32603, "{left_out}");
        assert_eq!(
            left_out["error"]["message"], "upstream returned no response for this call",
            "{left_out}"
        );
    }
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    // A single call still gets its answer.
    client
        .send(Message::text(
            json!({"jsonrpc": "2.0", "id": 9, "method": "eth_chainId", "params": []}).to_string(),
        ))
        .await
        .unwrap();
    let single = next_json(&mut client).await;
    assert_eq!(single, json!({"jsonrpc": "2.0", "id": 9, "result": "0x1"}));
    task.abort();
}
