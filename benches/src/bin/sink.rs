//! A sink upstream for the load tools: a small JSON-RPC responder that
//! takes every raw transaction at once, as a sequencer's ingress does,
//! without executing it, so that a bench can show what txgate itself adds
//! to honest latency when the node is not the bottleneck.
//!
//! - `eth_sendRawTransaction` (single, or a batch of nothing else): answered
//!   here with the transaction's hash (keccak256 of the raw bytes), or
//!   -32602 when the parameter is not hex; counted.
//! - Anything else is relayed to `--node` as it came and its answer passed
//!   back (deploys, balances and receipts of the bench's set-up, txgate's
//!   health probe), so the sink stands in front of a real node.
//! - `GET /stats`: `{"sends": N, "relayed": M}`.
//!
//! `target/release/sink --listen 127.0.0.1:PORT --node http://127.0.0.1:8545`.
//! One thread (a current-thread runtime): on a small machine the sink takes
//! at most one core from what it measures. Loopback only.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{hex, keccak256};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use txgate_benches::procs::{HttpClient, client};

/// Largest request body read (a batch of large raw transactions).
const MAX_BODY: usize = 8 << 20;

/// A sink upstream: takes raw transactions at once, relays the rest.
#[derive(Parser)]
struct Args {
    /// Where it listens (a loopback address and port).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// The node it relays everything but raw transactions to.
    #[arg(long, value_name = "URL")]
    node: String,
}

struct Sink {
    node: String,
    relay: HttpClient,
    sends: AtomicU64,
    relayed: AtomicU64,
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// The answer to one raw-transaction call.
fn accept(call: &Value) -> Value {
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    let raw = call["params"][0].as_str().unwrap_or_default();
    match hex::decode(raw) {
        Ok(bytes) if !bytes.is_empty() => {
            json!({"jsonrpc": "2.0", "id": id, "result": keccak256(&bytes).to_string()})
        }
        _ => json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32602, "message": "invalid raw transaction"}}),
    }
}

fn is_send(call: &Value) -> bool {
    call["method"] == "eth_sendRawTransaction"
}

impl Sink {
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() == Method::GET && request.uri().path() == "/stats" {
            let stats = json!({
                "sends": self.sends.load(Ordering::Relaxed),
                "relayed": self.relayed.load(Ordering::Relaxed),
            });
            return json_response(StatusCode::OK, stats.to_string().into_bytes());
        }
        let Ok(body) = Limited::new(request.into_body(), MAX_BODY).collect().await else {
            return json_response(StatusCode::PAYLOAD_TOO_LARGE, b"{}".to_vec());
        };
        let body = body.to_bytes();
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let answer = match &parsed {
            Some(call @ Value::Object(_)) if is_send(call) => {
                self.sends.fetch_add(1, Ordering::Relaxed);
                Some(accept(call))
            }
            Some(Value::Array(calls)) if !calls.is_empty() && calls.iter().all(is_send) => {
                self.sends.fetch_add(calls.len() as u64, Ordering::Relaxed);
                Some(Value::Array(calls.iter().map(accept).collect()))
            }
            _ => None,
        };
        if let Some(answer) = answer {
            return json_response(StatusCode::OK, serde_json::to_vec(&answer).unwrap());
        }
        self.relayed.fetch_add(1, Ordering::Relaxed);
        self.relay_to_node(body).await
    }

    async fn relay_to_node(&self, body: Bytes) -> Response<Full<Bytes>> {
        let request = Request::post(&self.node)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .unwrap();
        match self.relay.request(request).await {
            Ok(response) => {
                let status = response.status();
                match response.into_body().collect().await {
                    Ok(b) => json_response(status, b.to_bytes().to_vec()),
                    Err(_) => json_response(StatusCode::BAD_GATEWAY, b"{}".to_vec()),
                }
            }
            Err(_) => json_response(StatusCode::BAD_GATEWAY, b"{}".to_vec()),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Args { listen, node } = Args::parse();
    assert!(
        listen.ip().is_loopback(),
        "the sink listens on loopback only"
    );
    let sink = Arc::new(Sink {
        node,
        relay: client(64),
        sends: AtomicU64::new(0),
        relayed: AtomicU64::new(0),
    });
    let listener = TcpListener::bind(listen).await.expect("bind");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let sink = sink.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let sink = sink.clone();
                async move { Ok::<_, Infallible>(sink.handle(request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
