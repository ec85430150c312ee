//! Failure reports, posted as the production Credible Layer sidecar posts
//! them: for every transaction judged to fail an assertion (in a block, or
//! injected through the admin endpoint as `raw_tx`), `POST` to the report
//! URL with its path replaced by `/report` (the query string kept, so
//! `http://host:port/anything?token=abc` posts to
//! `http://host:port/report?token=abc`; user-info `user:pass@` in the URL
//! is sent as HTTP Basic auth, percent-decoded, as reqwest does) a JSON
//! body `[tx_hash, tx_env]`, `tx_env` in the shape of revm's serde
//! `TxEnv` (revm 33, revm-context 12.1):
//!
//! ```json
//! {"tx_type":2,"caller":"0x…","gas_limit":100000,"gas_price":2000000000,
//!  "kind":"0x…" (null for a creation),"value":"0x1","data":"0x…","nonce":7,
//!  "chain_id":31337,"access_list":[{"address":"0x…","storageKeys":["0x…"]}],
//!  "gas_priority_fee":1000000000 (null before EIP-1559),"blob_hashes":[],
//!  "max_fee_per_blob_gas":0,"authorization_list":[{"Left":{"chainId":"0x…",
//!  "address":"0x…","nonce":"0x…","yParity":"0x…","r":"0x…","s":"0x…"}}]}
//! ```
//!
//! `gas_price` is the fee cap (`maxFeePerGas`) from EIP-1559 on, as revm
//! sets it. Fire and forget: one attempt, a 2 s timeout, a non-2xx answer
//! or a failure logged at warn; posting never blocks judging (each report
//! is its own task), and beyond [`MAX_IN_FLIGHT`] reports in flight a new
//! one is dropped and counted (logged at warn at 1, 2, 4, 8… drops).
//!
//! Only `http://` URLs: the sidecar's HTTP client (the one it uses for the
//! node) has no TLS.
//!
//! Here: the [`Reporter`], which posts; `target` makes the report URL and
//! `tx_env` the body.

mod target;
mod tx_env;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use alloy_primitives::B256;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub(crate) use target::Target;
pub(crate) use tx_env::{TxEnv, body};

/// How long one report may take.
pub(crate) const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Reports in flight at most; beyond, new ones are dropped and counted.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

#[derive(Debug)]
struct Inner {
    target: Target,
    client: Client<HttpConnector, Full<bytes::Bytes>>,
    timeout: Duration,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    dropped: AtomicU64,
}

/// A report's slot among those in flight, freed when the post ends.
struct Slot(Arc<Inner>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Posts failure reports, or nothing when no report URL is configured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reporter {
    inner: Option<Arc<Inner>>,
}

impl Reporter {
    /// A reporter that reports nothing.
    pub(crate) fn disabled() -> Reporter {
        Reporter::default()
    }

    /// A reporter posting to `url`'s `/report` (see the module doc).
    pub(crate) fn new(url: &str) -> Result<Reporter, String> {
        Reporter::with_limits(url, REPORT_TIMEOUT, MAX_IN_FLIGHT)
    }

    fn with_limits(url: &str, timeout: Duration, max_in_flight: usize) -> Result<Reporter, String> {
        Ok(Reporter {
            inner: Some(Arc::new(Inner {
                target: Target::parse(url)?,
                client: Client::builder(TokioExecutor::new()).build_http(),
                timeout,
                max_in_flight: max_in_flight.max(1),
                in_flight: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
            })),
        })
    }

    /// Where reports go, if anywhere.
    pub(crate) fn target(&self) -> Option<&Target> {
        self.inner.as_ref().map(|inner| &inner.target)
    }

    /// Reports dropped so far (too many in flight, or no runtime).
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.dropped.load(Ordering::Relaxed))
    }

    /// Posts `[tx_hash, env]` in the background; returns whether a post was
    /// started (not when disabled, or dropped because too many are in
    /// flight). Never waits.
    pub(crate) fn report(&self, tx_hash: B256, env: &TxEnv) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let body = match body(tx_hash, env) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(tx = %tx_hash, error = %e, "cannot encode a failure report");
                return false;
            }
        };
        let admitted = inner.in_flight.fetch_add(1, Ordering::AcqRel) < inner.max_in_flight;
        // Counted in flight from here: the slot frees it when dropped.
        let slot = Slot(inner.clone());
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if admitted => runtime,
            _ => {
                drop(slot);
                let dropped = inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(tx = %tx_hash, dropped, max_in_flight = inner.max_in_flight,
                        "too many failure reports in flight; report dropped");
                }
                return false;
            }
        };
        runtime.spawn(post(slot, tx_hash, body));
        true
    }
}

/// One attempt at posting a report; the outcome is logged.
async fn post(slot: Slot, tx_hash: B256, body: Vec<u8>) {
    let inner = &slot.0;
    let mut request = http::Request::post(inner.target.uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body)));
    if let (Ok(request), Some(authorization)) = (&mut request, &inner.target.authorization) {
        request
            .headers_mut()
            .insert(AUTHORIZATION, authorization.clone());
    }
    let request = match request {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(tx = %tx_hash, error = %e, "cannot build a failure report");
            return;
        }
    };
    let attempt = async {
        let response = inner.client.request(request).await?;
        let status = response.status();
        // Read the (short) answer so the connection can be reused.
        let _ = response.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>(status)
    };
    match tokio::time::timeout(inner.timeout, attempt).await {
        Ok(Ok(status)) if status.is_success() => {
            tracing::debug!(tx = %tx_hash, status = status.as_u16(), "failure report posted");
        }
        Ok(Ok(status)) => {
            tracing::warn!(tx = %tx_hash, status = status.as_u16(), to = %inner.target.redacted(),
                "failure report refused");
        }
        Ok(Err(e)) => {
            tracing::warn!(tx = %tx_hash, error = %e, to = %inner.target.redacted(),
                "failure report failed");
        }
        Err(_) => {
            tracing::warn!(tx = %tx_hash, timeout_ms = inner.timeout.as_millis() as u64,
                to = %inner.target.redacted(), "failure report timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testutil::{Logs, receiver};
    use tx_env::tests::rpc_1559;

    fn env() -> TxEnv {
        TxEnv::from_rpc(&rpc_1559()).expect("tx env")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_report_is_posted_to_report_with_the_query_and_basic_auth() {
        let (addr, mut got) = receiver(200, Duration::ZERO).await;
        let reporter =
            Reporter::new(&format!("http://user:pass@{addr}/ignored?token=abc")).expect("reporter");
        assert!(reporter.report(B256::repeat_byte(0x11), &env()));
        let (path, auth, body) = tokio::time::timeout(Duration::from_secs(5), got.recv())
            .await
            .expect("in time")
            .expect("a report");
        assert_eq!(path, "/report?token=abc");
        assert_eq!(auth.as_deref(), Some("Basic dXNlcjpwYXNz"));
        assert_eq!(body[0], json!(format!("0x{}", "11".repeat(32))));
        assert_eq!(body[1]["nonce"], json!(7));
        assert_eq!(reporter.dropped(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_refused_report_is_logged_at_warn() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let (addr, mut got) = receiver(503, Duration::ZERO).await;
        let reporter = Reporter::new(&format!("http://{addr}")).expect("reporter");
        assert!(reporter.report(B256::repeat_byte(0x11), &env()));
        let (path, auth, _) = got.recv().await.expect("a report");
        assert_eq!((path.as_str(), auth), ("/report", None));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !logs.text().contains("failure report refused") {
            assert!(tokio::time::Instant::now() < deadline, "{}", logs.text());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let text = logs.text();
        assert!(
            text.contains("WARN") && text.contains("status=503"),
            "{text}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn beyond_the_cap_in_flight_reports_are_dropped_and_counted() {
        // The receiver holds every answer: posts stay in flight.
        let (addr, mut got) = receiver(200, Duration::from_secs(30)).await;
        let reporter = Reporter::with_limits(&format!("http://{addr}"), Duration::from_secs(30), 2)
            .expect("reporter");
        let started: Vec<bool> = (0..5)
            .map(|i| reporter.report(B256::repeat_byte(i), &env()))
            .collect();
        assert_eq!(started, [true, true, false, false, false], "never waits");
        assert_eq!(reporter.dropped(), 3);
        for _ in 0..2 {
            got.recv().await.expect("a report");
        }
        // Without a runtime (or when disabled), nothing is posted.
        assert!(!Reporter::disabled().report(B256::ZERO, &env()));
        assert_eq!(Reporter::disabled().dropped(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slot_is_freed_when_a_post_ends() {
        let (addr, mut got) = receiver(200, Duration::ZERO).await;
        let reporter = Reporter::with_limits(&format!("http://{addr}"), Duration::from_secs(5), 1)
            .expect("reporter");
        for i in 0..3 {
            assert!(reporter.report(B256::repeat_byte(i), &env()), "report {i}");
            got.recv().await.expect("a report");
            let inner = reporter.inner.as_ref().expect("enabled");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while inner.in_flight.load(Ordering::Acquire) > 0 {
                assert!(tokio::time::Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        assert_eq!(reporter.dropped(), 0);
    }

    #[test]
    fn without_a_runtime_a_report_is_dropped_not_a_panic() {
        let reporter = Reporter::new("http://127.0.0.1:9/").expect("reporter");
        assert!(!reporter.report(B256::ZERO, &env()));
        assert_eq!(reporter.dropped(), 1);
        let inner = reporter.inner.as_ref().expect("enabled");
        assert_eq!(inner.in_flight.load(Ordering::Acquire), 0);
    }
}
