//! The admin endpoint: invalidations and results injected by tests and the
//! demo.
//!
//! `POST /invalidations` takes one object or an array of them:
//! - `{"raw_tx": "0x…", "assertion_id": "0x…", "assertion_version": 1}`:
//!   the sidecar decodes the transaction and computes its fingerprint, tx
//!   hash and sender with txgate's library; besides the invalidation, it
//!   publishes an `ASSERTION_FAILED` result for the tx hash on
//!   `SubscribeResults` (at the latest block it published a result for)
//!   and posts a failure report (`--report-url`);
//! - `{"synthetic": N, "assertion_id": "0x…", "assertion_version": 1}`: N
//!   random fingerprints (storm tests; no result, no report).
//!
//! Answers `{"accepted": N, "fingerprints": [...]}` (fingerprints of raw
//! transactions only), or 400 with the reason.
//!
//! `POST /results` publishes raw results on `SubscribeResults`, for tests
//! (unknown hashes, statuses this build does not know): one object or an
//! array of `{"tx_hash": "0x…32 bytes", "status": 5}`, with optional
//! `"block_number"` (default: the latest block a result was published
//! for), `"index"` (0), `"gas_used"` (0) and `"error"` (""). `status` is
//! any integer (6 is sent as is). Nothing else happens: no invalidation,
//! no report. Answers `{"accepted": N, "subscribers": S}`, or 400.
//!
//! Injections are paced to the slowest subscriber: when its buffer
//! (`stream_buffer`) is full, the request waits for it to drain, so a storm
//! larger than the buffer reaches a live subscriber whole; the answer comes
//! once everything is sent. A subscriber that makes no progress for 5 s is
//! given up on for the rest of the request (it loses the oldest, logged).
//!
//! `GET /healthz` answers `{"ok": true}`. An accept error (for example
//! EMFILE) pauses the accept loop, 50 ms doubling to 1 s, logged once per
//! burst of errors.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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
use txgate_proto::transport_v1::ResultStatus;
use txgate_screen::{AssertionKey, Fingerprint, decode, decode_hex, recover_sender};

use crate::hub::Hub;
use crate::report::{Reporter, TxEnv};
use crate::results::{Executed, assertion_failure};

/// Synthetic invalidations per request at most.
const MAX_SYNTHETIC: u64 = 10_000_000;
/// How long an injection waits for a subscriber that makes no progress
/// before sending on regardless (that subscriber then loses the oldest).
const ROOM_PATIENCE: Duration = Duration::from_secs(5);
/// First pause after an accept error; it doubles with each error in a row.
const ACCEPT_BACKOFF_INITIAL: Duration = Duration::from_millis(50);
/// Longest pause after accept errors.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

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
enum Body<T> {
    One(T),
    Many(Vec<T>),
}

/// A raw result for `POST /results`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectedResult {
    tx_hash: B256,
    status: i32,
    #[serde(default)]
    block_number: Option<u64>,
    #[serde(default)]
    index: u64,
    #[serde(default)]
    gas_used: u64,
    #[serde(default)]
    error: String,
}

/// The shared state of the admin endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    hub: Arc<Hub>,
    reporter: Reporter,
}

impl Admin {
    /// The endpoint over `hub`, reporting failures to `reporter`.
    pub(crate) fn new(hub: Arc<Hub>, reporter: Reporter) -> Admin {
        Admin { hub, reporter }
    }
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

/// Waits for room at the slowest subscriber while `pace` holds a patience;
/// clears it when a stalled subscriber is given up on.
async fn wait_for_room(hub: &Hub, pace: &mut Option<Duration>) {
    if let Some(patience) = *pace
        && !hub.room(patience).await
    {
        *pace = None;
    }
}

/// Injects one item into the hub. While `pace` holds a patience, each
/// invalidation waits for room at the slowest subscriber (see
/// [`Hub::room`]), so that a storm is not lost to a subscriber that is only
/// slower than the storm; once a stalled subscriber was given up on,
/// `pace` is cleared for the rest of the request. A raw transaction also
/// gets an `ASSERTION_FAILED` result and a failure report. Returns the
/// invalidations injected.
async fn inject(
    admin: &Admin,
    item: &Injected,
    pace: &mut Option<Duration>,
    fingerprints: &mut Vec<String>,
) -> Result<u64, String> {
    let hub = &*admin.hub;
    let assertion = AssertionKey {
        id: item.assertion_id,
        version: item.assertion_version,
    };
    match (&item.raw_tx, item.synthetic) {
        (Some(raw), None) => {
            let raw = decode_hex(raw).map_err(|e| e.to_string())?;
            let tx = decode(&raw).map_err(|e| e.to_string())?;
            let sender = recover_sender(&tx).map_err(|e| e.to_string())?;
            let fp = Fingerprint::of(&tx).ok_or("a contract creation has no fingerprint")?;
            let env = TxEnv::from_raw(&tx, &raw, sender);
            wait_for_room(hub, pace).await;
            hub.invalidate(&fp, assertion, Some(tx.hash), Some(sender), 0);
            hub.results.publish(Executed {
                block: hub.results.latest_block(),
                index: 0,
                tx_hash: tx.hash,
                status: ResultStatus::AssertionFailed as i32,
                gas_used: 0,
                error: assertion_failure(&[assertion]),
            });
            match env {
                Ok(env) => {
                    admin.reporter.report(tx.hash, &env);
                }
                Err(e) => tracing::warn!(tx = %tx.hash, error = %e, "cannot report a failure"),
            }
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
                wait_for_room(hub, pace).await;
                hub.invalidate(&fp, assertion, None, None, 0);
            }
            Ok(n)
        }
        _ => Err("give exactly one of raw_tx and synthetic".into()),
    }
}

/// Reads a JSON body of one `T` or an array of them (at most 64 MiB).
async fn items<T: for<'de> Deserialize<'de>>(
    req: Request<Incoming>,
) -> Result<Vec<T>, Response<Full<Bytes>>> {
    let body = match Limited::new(req.into_body(), 64 << 20).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return Err(reply(
                StatusCode::BAD_REQUEST,
                json!({"error": "body unreadable or over 64 MiB"}),
            ));
        }
    };
    match serde_json::from_slice::<Body<T>>(&body) {
        Ok(Body::One(item)) => Ok(vec![item]),
        Ok(Body::Many(items)) => Ok(items),
        Err(e) => Err(reply(
            StatusCode::BAD_REQUEST,
            json!({"error": e.to_string()}),
        )),
    }
}

/// Publishes raw results; returns the subscribers the last one reached.
fn publish_results(hub: &Hub, items: Vec<InjectedResult>) -> usize {
    let mut reached = 0;
    for item in items {
        reached = hub.results.publish(Executed {
            block: item
                .block_number
                .unwrap_or_else(|| hub.results.latest_block()),
            index: item.index,
            tx_hash: item.tx_hash,
            status: item.status,
            gas_used: item.gas_used,
            error: item.error,
        });
    }
    reached
}

async fn handle(admin: Admin, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => Ok(reply(StatusCode::OK, json!({"ok": true}))),
        (&Method::GET, "/metrics") => {
            let mut response = Response::new(Full::new(Bytes::from(admin.hub.metrics())));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            Ok(response)
        }
        (&Method::POST, "/invalidations") => {
            let items = match items::<Injected>(req).await {
                Ok(items) => items,
                Err(response) => return Ok(response),
            };
            let mut accepted = 0;
            let mut fingerprints = Vec::new();
            let mut pace = Some(ROOM_PATIENCE);
            for item in &items {
                match inject(&admin, item, &mut pace, &mut fingerprints).await {
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
        (&Method::POST, "/results") => {
            let items = match items::<InjectedResult>(req).await {
                Ok(items) => items,
                Err(response) => return Ok(response),
            };
            let accepted = items.len();
            let subscribers = publish_results(&admin.hub, items);
            Ok(reply(
                StatusCode::OK,
                json!({"accepted": accepted, "subscribers": subscribers}),
            ))
        }
        _ => Ok(reply(StatusCode::NOT_FOUND, json!({"error": "not found"}))),
    }
}

/// The pause after accept errors (for example EMFILE: out of file
/// descriptors), so that a failing `accept` is never retried in a busy
/// loop: 50 ms doubling to 1 s, reset by a successful accept.
#[derive(Debug)]
struct AcceptBackoff {
    next: Duration,
    failures: u64,
}

impl AcceptBackoff {
    fn new() -> AcceptBackoff {
        AcceptBackoff {
            next: ACCEPT_BACKOFF_INITIAL,
            failures: 0,
        }
    }

    /// An accept failed: how long to pause, and whether it is the first
    /// failure of a burst (the one to log).
    fn failed(&mut self) -> (Duration, bool) {
        let pause = self.next;
        self.next = (self.next * 2).min(ACCEPT_BACKOFF_MAX);
        self.failures += 1;
        (pause, self.failures == 1)
    }

    /// An accept succeeded: the failures of the burst it ends, if any.
    fn succeeded(&mut self) -> Option<u64> {
        self.next = ACCEPT_BACKOFF_INITIAL;
        Some(std::mem::take(&mut self.failures)).filter(|&n| n > 0)
    }
}

/// Accepts with `accept` and hands each connection to `serve`, forever;
/// after an error, backs off (see [`AcceptBackoff`]) and logs once per
/// burst of errors.
async fn accept_loop<T, F, Fut>(mut accept: F, mut serve: impl FnMut(T))
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<T>>,
{
    let mut backoff = AcceptBackoff::new();
    loop {
        match accept().await {
            Ok(connection) => {
                if let Some(failures) = backoff.succeeded() {
                    tracing::info!(failures, "admin endpoint accepting again");
                }
                serve(connection);
            }
            Err(e) => {
                let (pause, first) = backoff.failed();
                if first {
                    tracing::warn!(error = %e, "admin endpoint cannot accept; backing off");
                } else {
                    tracing::debug!(error = %e, pause_ms = pause.as_millis() as u64,
                        "admin endpoint still cannot accept");
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Serves the admin endpoint forever.
pub(crate) async fn serve(listener: TcpListener, admin: Admin) {
    accept_loop(
        || listener.accept(),
        |(stream, _)| {
            let admin = admin.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(admin.clone(), req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        },
    )
    .await
}

#[cfg(test)]
mod tests;
