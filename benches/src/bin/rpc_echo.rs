//! A static JSON-RPC node for the pass-through benches that speaks both
//! HTTP/1.1 (keep-alive) and WebSocket, so that a proxy's lanes can be
//! measured against nginx in front of the same node: every call, alone or
//! in a batch, is answered `{"jsonrpc":"2.0","id":<its id>,"result":"0x7a69"}`
//! at once (its id echoed as it came: a static `return 200` cannot answer
//! a proxy that gives calls ids of its own).
//!
//! `target/release/rpc_echo --http 127.0.0.1:P --ws 127.0.0.1:Q`; one
//! thread (a current-thread runtime): it takes at most one core from what
//! it measures. Loopback only.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

const MAX_BODY: usize = 1 << 20;

/// A node that answers every call at once, over HTTP and WebSocket.
#[derive(Parser)]
struct Args {
    /// Address of the HTTP/1.1 endpoint.
    #[arg(long)]
    http: SocketAddr,
    /// Address of the WebSocket endpoint.
    #[arg(long)]
    ws: SocketAddr,
}

#[derive(serde::Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
}

/// The answers to `body` (one call or a batch); `None` when there is
/// nothing to answer or it is not JSON-RPC.
fn answer(body: &[u8]) -> Option<Vec<u8>> {
    let one = |id: &RawValue, out: &mut Vec<u8>| {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(id.get().as_bytes());
        out.extend_from_slice(b",\"result\":\"0x7a69\"}");
    };
    let mut out = Vec::with_capacity(64);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => {
            let calls: Vec<Call<'_>> = serde_json::from_slice(body).ok()?;
            out.push(b'[');
            for id in calls.iter().filter_map(|c| c.id) {
                if out.len() > 1 {
                    out.push(b',');
                }
                one(id, &mut out);
            }
            out.push(b']');
        }
        _ => {
            let call: Call<'_> = serde_json::from_slice(body).ok()?;
            one(call.id?, &mut out);
        }
    }
    Some(out)
}

async fn http(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let (status, out) = match answer(&body) {
        Some(out) => (StatusCode::OK, out),
        None => (StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let mut response = Response::new(Full::new(Bytes::from(out)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, "application/json".parse().unwrap());
    Ok(response)
}

async fn ws(stream: tokio::net::TcpStream) {
    let Ok(socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut tx, mut rx) = socket.split();
    while let Some(Ok(message)) = rx.next().await {
        let reply = match &message {
            Message::Text(text) => answer(text.as_bytes()),
            Message::Close(_) => break,
            _ => None,
        };
        if let Some(out) = reply {
            let Ok(text) = String::from_utf8(out) else {
                continue;
            };
            // Written as they come; the proxy's lane batches its side.
            if tx.send(Message::text(text)).await.is_err() {
                break;
            }
        }
    }
}

fn main() {
    let a = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let http_listener = TcpListener::bind(a.http).await.unwrap();
        let ws_listener = TcpListener::bind(a.ws).await.unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = ws_listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(ws(stream));
            }
        });
        while let Ok((stream, _)) = http_listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service_fn(http))
                    .await;
            });
        }
    });
}
