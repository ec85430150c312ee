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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use alloy_consensus::TxEip1559;
    use alloy_primitives::{TxKind, U256};
    use tokio_stream::StreamExt;

    use super::*;
    use crate::config::Config;
    use crate::testutil::{receiver, sign};

    fn storm(n: u64) -> Injected {
        serde_json::from_value(json!({"synthetic": n,
            "assertion_id": format!("0x{}", "b7".repeat(32)), "assertion_version": 1}))
        .expect("injected")
    }

    fn hub(extra: &str) -> Arc<Hub> {
        Arc::new(Hub::new(Config::parse(extra).expect("config")))
    }

    fn admin(hub: &Arc<Hub>) -> Admin {
        Admin::new(hub.clone(), Reporter::disabled())
    }

    fn raw_call(to: Address, input: &[u8]) -> Vec<u8> {
        sign(TxEip1559 {
            chain_id: 31337,
            nonce: 4,
            gas_limit: 90_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(to),
            value: U256::from(5),
            access_list: Default::default(),
            input: input.to_vec().into(),
        })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_raw_tx_injection_is_also_a_result_and_a_report() {
        let (addr, mut reports) = receiver(200, Duration::ZERO).await;
        let hub = hub("");
        let admin = Admin::new(
            hub.clone(),
            Reporter::new(&format!("http://{addr}/?token=t")).expect("reporter"),
        );
        hub.results.publish(Executed {
            block: 12,
            index: 0,
            tx_hash: B256::ZERO,
            status: 1,
            gas_used: 0,
            error: String::new(),
        });
        let results = hub.results.subscribe(Some(U256::from(12)));
        let invalidations = hub.subscribe();
        let raw = raw_call(Address::repeat_byte(0xc0), &[0xaa, 0x60, 0xe7, 0x33, 1]);
        let item: Injected = serde_json::from_value(json!({
            "raw_tx": format!("0x{}", alloy_primitives::hex::encode(&raw)),
            "assertion_id": format!("0x{}", "b7".repeat(32)), "assertion_version": 2}))
        .expect("item");
        let mut fingerprints = Vec::new();
        assert_eq!(
            inject(&admin, &item, &mut None, &mut fingerprints).await,
            Ok(1)
        );
        drop((hub, admin));
        let tx = decode(&raw).expect("decodes");
        let sender = recover_sender(&tx).expect("sender");
        let invalidations: Vec<_> = invalidations.collect().await;
        assert_eq!(invalidations.len(), 1);
        assert_eq!(invalidations[0].tx_hash, Some(tx.hash));
        let results: Vec<_> = results.collect().await;
        assert_eq!(results.len(), 1, "at the latest block: not filtered out");
        let id = results[0].tx_execution_id.clone().expect("id");
        assert_eq!(id.tx_hash, tx.hash.to_vec());
        assert_eq!(U256::from_be_slice(&id.block_number), U256::from(12));
        assert_eq!(results[0].status, 5);
        assert!(results[0].error.contains(&"b7".repeat(32)));
        let (path, _, body) = tokio::time::timeout(Duration::from_secs(5), reports.recv())
            .await
            .expect("in time")
            .expect("a report");
        assert_eq!(path, "/report?token=t");
        assert_eq!(body[0], json!(format!("{}", tx.hash)));
        assert_eq!(
            body[1]["caller"],
            json!(sender),
            "lowercase hex, as alloy serializes"
        );
        assert_eq!(body[1]["nonce"], json!(4));
        assert_eq!(body[1]["value"], json!("0x5"));
        assert_eq!(body[1]["gas_price"], json!(2_000_000_000u64));
        assert_eq!(body[1]["gas_priority_fee"], json!(1_000_000_000u64));
        assert_eq!(body[1]["chain_id"], json!(31337));
    }

    /// POSTs `body` to `path` on the admin endpoint at `addr`.
    async fn post(
        addr: std::net::SocketAddr,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http::<Full<Bytes>>();
        let request = Request::post(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let response = client.request(request).await.expect("response");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn raw_results_are_published_as_given() {
        let hub = hub("");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, admin(&hub)));
        let mut results = Box::pin(hub.results.subscribe(None));
        let unknown = format!("0x{}", "ee".repeat(32));
        let (status, answer) = post(
            addr,
            "/results",
            json!([
                {"tx_hash": unknown, "status": 6},
                {"tx_hash": unknown, "status": 5, "block_number": 3, "index": 2,
                 "gas_used": 7, "error": "boom"},
            ]),
        )
        .await;
        assert_eq!(
            (status, answer),
            (200, json!({"accepted": 2, "subscribers": 1}))
        );
        let first = results.next().await.expect("a result");
        assert_eq!(first.status, 6, "a status this build does not know, as is");
        let id = first.tx_execution_id.expect("id");
        assert_eq!((id.tx_hash, id.index), (vec![0xee; 32], 0));
        assert_eq!(U256::from_be_slice(&id.block_number), U256::ZERO);
        let second = results.next().await.expect("a result");
        let id = second.tx_execution_id.expect("id");
        assert_eq!(U256::from_be_slice(&id.block_number), U256::from(3));
        assert_eq!(
            (id.index, second.gas_used, second.error.as_str()),
            (2, 7, "boom")
        );
        // One object works too; a short hash does not.
        let one = json!({"tx_hash": unknown, "status": 1});
        assert_eq!(post(addr, "/results", one).await.0, 200);
        let short = json!({"tx_hash": "0x01", "status": 1});
        assert_eq!(post(addr, "/results", short).await.0, 400);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_a_synthetic_storm_reaches_a_slow_subscriber_without_loss() {
        let hub = hub("stream_buffer = 16\n");
        let mut stream = Box::pin(hub.subscribe());
        let reader = tokio::spawn(async move {
            let mut got = 0u64;
            while stream.next().await.is_some() {
                got += 1;
                // Slower than the storm.
                tokio::task::yield_now().await;
            }
            got
        });
        let mut pace = Some(Duration::from_secs(5));
        let injected = inject(&admin(&hub), &storm(2_000), &mut pace, &mut Vec::new()).await;
        assert_eq!(injected, Ok(2_000));
        assert!(
            pace.is_some(),
            "never gave up on a subscriber making progress"
        );
        drop(hub);
        assert_eq!(reader.await.expect("reader"), 2_000, "invalidations lost");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_a_stalled_subscriber_does_not_hold_a_storm_forever() {
        let hub = hub("stream_buffer = 4\n");
        let _stalled = hub.subscribe();
        let started = Instant::now();
        let mut pace = Some(Duration::from_millis(20));
        let injected = inject(&admin(&hub), &storm(1_000), &mut pace, &mut Vec::new()).await;
        assert_eq!(injected, Ok(1_000));
        assert_eq!(pace, None, "given up on once, for the rest of the request");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_subscribers_a_storm_is_not_paced() {
        let hub = hub("stream_buffer = 4\n");
        let mut pace = Some(Duration::from_secs(5));
        let started = Instant::now();
        assert_eq!(
            inject(&admin(&hub), &storm(1_000), &mut pace, &mut Vec::new()).await,
            Ok(1_000)
        );
        assert!(pace.is_some());
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn accept_error_spin_backoff_doubles_from_50ms_to_1s_and_resets() {
        let mut backoff = AcceptBackoff::new();
        let pauses: Vec<u64> = (0..7)
            .map(|_| backoff.failed().0.as_millis() as u64)
            .collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(backoff.succeeded(), Some(7));
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(backoff.failed().0, Duration::from_millis(50));
    }

    #[test]
    fn accept_error_spin_logs_once_per_failure_burst() {
        let mut backoff = AcceptBackoff::new();
        let logged: Vec<bool> = (0..5).map(|_| backoff.failed().1).collect();
        assert_eq!(logged, [true, false, false, false, false]);
        backoff.succeeded();
        assert!(backoff.failed().1, "a new burst is logged again");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn accept_error_spin_a_failing_accept_is_not_retried_in_a_busy_loop() {
        let attempts = AtomicUsize::new(0);
        let accept = || {
            attempts.fetch_add(1, Ordering::Relaxed);
            async {
                tokio::task::yield_now().await;
                Err::<(), _>(std::io::Error::from_raw_os_error(24)) // EMFILE
            }
        };
        let ran = tokio::time::timeout(Duration::from_millis(300), accept_loop(accept, |()| {}));
        assert!(ran.await.is_err(), "the loop runs forever");
        // At 0, 50, 150 ms (the next at 350 ms).
        let attempts = attempts.load(Ordering::Relaxed);
        assert!((2..=4).contains(&attempts), "{attempts} attempts in 300 ms");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn accept_error_spin_connections_are_served_after_errors() {
        let attempts = AtomicUsize::new(0);
        let served = AtomicUsize::new(0);
        let accept = || {
            let n = attempts.fetch_add(1, Ordering::Relaxed);
            async move {
                tokio::task::yield_now().await;
                if n % 3 == 2 {
                    Ok(n)
                } else {
                    Err(std::io::Error::from_raw_os_error(24))
                }
            }
        };
        let serve = |_: usize| {
            served.fetch_add(1, Ordering::Relaxed);
        };
        let _ = tokio::time::timeout(Duration::from_millis(400), accept_loop(accept, serve)).await;
        // Each burst of two errors pauses 50 + 100 ms: reset after each success.
        assert!(
            served.load(Ordering::Relaxed) >= 2,
            "{}",
            served.load(Ordering::Relaxed)
        );
    }
}
