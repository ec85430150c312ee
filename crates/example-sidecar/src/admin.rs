//! The admin endpoint: invalidations injected by tests and the demo.
//!
//! `POST /invalidations` takes one object or an array of them:
//! - `{"raw_tx": "0x…", "assertion_id": "0x…", "assertion_version": 1}`:
//!   the sidecar decodes the transaction and computes its fingerprint, tx
//!   hash and sender with txgate's library;
//! - `{"synthetic": N, "assertion_id": "0x…", "assertion_version": 1}`: N
//!   random fingerprints (storm tests).
//!
//! Answers `{"accepted": N, "fingerprints": [...]}` (fingerprints of raw
//! transactions only), or 400 with the reason.

use std::convert::Infallible;
use std::sync::Arc;

use alloy_primitives::{Address, B256, keccak256};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use txgate_screen::{Fingerprint, decode, decode_hex, recover_sender};

use crate::hub::Hub;

/// Synthetic invalidations per request at most.
const MAX_SYNTHETIC: u64 = 10_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Injected {
    #[serde(default)]
    raw_tx: Option<String>,
    #[serde(default)]
    synthetic: Option<u64>,
    assertion_id: B256,
    assertion_version: u64,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Body {
    One(Injected),
    Many(Vec<Injected>),
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn inject(hub: &Hub, item: &Injected, fingerprints: &mut Vec<String>) -> Result<u64, String> {
    let assertion = (item.assertion_id, item.assertion_version);
    match (&item.raw_tx, item.synthetic) {
        (Some(raw), None) => {
            let tx =
                decode(&decode_hex(raw).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            let sender = recover_sender(&tx).map_err(|e| e.to_string())?;
            let fp = Fingerprint::of(&tx).ok_or("a contract creation has no fingerprint")?;
            hub.invalidate(&fp, assertion, Some(tx.hash), Some(sender), 0);
            fingerprints.push(format!("{}", fp.hash));
            Ok(1)
        }
        (None, Some(n)) if n > MAX_SYNTHETIC => {
            Err(format!("synthetic: at most {MAX_SYNTHETIC} per request"))
        }
        (None, Some(n)) => {
            let seed = keccak256(item.assertion_id);
            for i in 0..n {
                let mut preimage = seed.to_vec();
                preimage.extend_from_slice(&i.to_be_bytes());
                let h = keccak256(&preimage);
                let fp = Fingerprint::from_parts(
                    Address::from_slice(&h[..20]),
                    &h[..],
                    Default::default(),
                    21_000,
                );
                hub.invalidate(&fp, assertion, None, None, 0);
            }
            Ok(n)
        }
        _ => Err("give exactly one of raw_tx and synthetic".into()),
    }
}

async fn handle(
    hub: Arc<Hub>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => Ok(reply(StatusCode::OK, json!({"ok": true}))),
        (&Method::POST, "/invalidations") => {
            let body = match Limited::new(req.into_body(), 64 << 20).collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => {
                    return Ok(reply(
                        StatusCode::BAD_REQUEST,
                        json!({"error": "body unreadable or over 64 MiB"}),
                    ));
                }
            };
            let items = match serde_json::from_slice::<Body>(&body) {
                Ok(Body::One(item)) => vec![item],
                Ok(Body::Many(items)) => items,
                Err(e) => {
                    return Ok(reply(
                        StatusCode::BAD_REQUEST,
                        json!({"error": e.to_string()}),
                    ));
                }
            };
            let mut accepted = 0;
            let mut fingerprints = Vec::new();
            for item in &items {
                match inject(&hub, item, &mut fingerprints) {
                    Ok(n) => accepted += n,
                    Err(e) => {
                        return Ok(reply(
                            StatusCode::BAD_REQUEST,
                            json!({"error": e, "accepted": accepted}),
                        ));
                    }
                }
            }
            Ok(reply(
                StatusCode::OK,
                json!({"accepted": accepted, "fingerprints": fingerprints}),
            ))
        }
        _ => Ok(reply(StatusCode::NOT_FOUND, json!({"error": "not found"}))),
    }
}

/// Serves the admin endpoint forever.
pub(crate) async fn serve(listener: TcpListener, hub: Arc<Hub>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let hub = hub.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(hub.clone(), req));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
