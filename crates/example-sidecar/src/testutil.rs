//! Test support: captured log lines, and a receiver of failure reports.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_consensus::{SignableTransaction, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Signature, U256};
use http::header::AUTHORIZATION;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Log lines written while a [`Logs::capture`] guard lives (this thread).
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = self.0.lock() {
            logs.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's log lines until the guard is dropped.
    pub(crate) fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// What was captured.
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.lock().map(|l| l.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// A report receiver: forwards each request (path and query, the
/// Authorization header, the body) and answers `status`.
pub(crate) async fn receiver(
    status: u16,
    delay: Duration,
) -> (
    String,
    mpsc::UnboundedReceiver<(String, Option<String>, Value)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let path = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        let auth = req
                            .headers()
                            .get(AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string);
                        let body = req.into_body().collect().await.expect("body").to_bytes();
                        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let _ = tx.send((path, auth, body));
                        tokio::time::sleep(delay).await;
                        let mut response = http::Response::new(Full::new(bytes::Bytes::new()));
                        *response.status_mut() =
                            http::StatusCode::from_u16(status).expect("status");
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("{addr}"), rx)
}

/// Signs `tx` with a fixed key; returns the raw bytes.
pub(crate) fn sign<T: SignableTransaction<Signature>>(tx: T) -> Vec<u8>
where
    TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    let key = secp256k1::SecretKey::from_byte_array([0x42; 32]).expect("key");
    let digest = secp256k1::Message::from_digest(tx.signature_hash().0);
    let (id, compact) = secp256k1::SECP256K1
        .sign_ecdsa_recoverable(digest, &key)
        .serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    TxEnvelope::from(tx.into_signed(signature)).encoded_2718()
}
