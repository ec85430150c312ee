//! The upstream node client: pooled keep-alive HTTP/1.1, connect and call
//! timeouts, a response size cap, and failures classified for the caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use txgate_config::Config;

use crate::metrics::{Metrics, UpstreamFailure};
use crate::rescue::JSON;

/// An upstream answer read in full.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status the upstream sent.
    pub status: StatusCode,
    /// Its body.
    pub body: Bytes,
}

impl Reply {
    /// Whether the body looks like JSON-RPC (an object or a batch), which is
    /// relayed as it is whatever the status.
    pub fn is_json_rpc(&self) -> bool {
        matches!(
            self.body.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        )
    }
}

/// A pooled client for one upstream URL.
#[derive(Clone, Debug)]
pub struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    call_timeout: Duration,
    max_response_bytes: usize,
    metrics: Arc<Metrics>,
}

impl Upstream {
    /// Builds the client; the URL was checked by `Config::validate`.
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Result<Self, String> {
        let up = &config.upstream;
        let uri: Uri = up.url.parse().map_err(|e| format!("upstream.url: {e}"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_millis(up.connect_timeout_ms)));
        connector.set_keepalive(Some(Duration::from_secs(30)));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_millis(up.pool_idle_timeout_ms))
            .pool_max_idle_per_host(up.effective_pool_max_idle(&config.admission))
            .build(connector);
        Ok(Upstream {
            client,
            uri,
            call_timeout: Duration::from_millis(up.call_timeout_ms),
            max_response_bytes: up.max_response_bytes,
            metrics,
        })
    }

    /// Posts `body` and reads the whole answer within the call timeout.
    pub async fn call(&self, body: Bytes) -> Result<Reply, UpstreamFailure> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.call_timeout, self.exchange(body)).await;
        let result = match result {
            Ok(inner) => inner,
            Err(_) => Err(UpstreamFailure::Timeout),
        };
        match &result {
            Ok(_) => self
                .metrics
                .upstream_duration
                .observe(started.elapsed().as_secs_f64()),
            Err(kind) => self.metrics.upstream_failure(*kind),
        }
        result
    }

    async fn exchange(&self, body: Bytes) -> Result<Reply, UpstreamFailure> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        request.headers_mut().insert(CONTENT_TYPE, JSON);
        let response = self.client.request(request).await.map_err(|e| {
            if e.is_connect() {
                tracing::debug!(error = %e, "upstream connect failed");
                UpstreamFailure::Connect
            } else {
                tracing::debug!(error = %e, "upstream request failed");
                UpstreamFailure::Io
            }
        })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), self.max_response_bytes)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    UpstreamFailure::TooLarge
                } else {
                    UpstreamFailure::Io
                }
            })?
            .to_bytes();
        Ok(Reply { status, body })
    }

    /// One health probe: `eth_chainId` answered with a JSON-RPC result.
    pub async fn probe(&self) -> bool {
        const PROBE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
        match self.call(Bytes::from_static(PROBE)).await {
            Ok(reply) => reply.status.is_success() && reply.is_json_rpc(),
            Err(_) => false,
        }
    }
}

/// Whether `value` is a JSON content type txgate accepts.
pub(crate) fn is_json_content_type(value: Option<&HeaderValue>) -> bool {
    let Some(value) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    [
        "application/json",
        "application/json-rpc",
        "application/jsonrequest",
    ]
    .iter()
    .any(|t| essence.eq_ignore_ascii_case(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let ok = [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/json-rpc",
        ];
        for v in ok {
            assert!(
                is_json_content_type(Some(&HeaderValue::from_static(v))),
                "{v}"
            );
        }
        for v in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "",
        ] {
            assert!(
                !is_json_content_type(Some(&HeaderValue::from_static(v))),
                "{v}"
            );
        }
        assert!(!is_json_content_type(None));
    }
}
