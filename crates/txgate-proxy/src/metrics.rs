//! Prometheus metrics.
//!
//! Every label set is bounded and created up front; the request path holds
//! ready handles and never looks a label up by string, except the method
//! name, which goes through one hash lookup into a fixed table.

use std::collections::HashMap;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Methods that get their own label; every other method counts as `other`.
pub const KNOWN_METHODS: &[&str] = &[
    "eth_accounts",
    "eth_blobBaseFee",
    "eth_blockNumber",
    "eth_call",
    "eth_callMany",
    "eth_chainId",
    "eth_createAccessList",
    "eth_estimateGas",
    "eth_feeHistory",
    "eth_gasPrice",
    "eth_getBalance",
    "eth_getBlockByHash",
    "eth_getBlockByNumber",
    "eth_getBlockReceipts",
    "eth_getBlockTransactionCountByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getCode",
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_getLogs",
    "eth_getProof",
    "eth_getStorageAt",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByHash",
    "eth_getTransactionCount",
    "eth_getTransactionReceipt",
    "eth_getUncleCountByBlockHash",
    "eth_getUncleCountByBlockNumber",
    "eth_maxPriorityFeePerGas",
    "eth_newBlockFilter",
    "eth_newFilter",
    "eth_newPendingTransactionFilter",
    "eth_sendRawTransaction",
    "eth_sendRawTransactionConditional",
    "eth_sendRawTransactionSync",
    "eth_sendTransaction",
    "eth_sign",
    "eth_signTransaction",
    "eth_signTypedData_v4",
    "eth_simulateV1",
    "eth_subscribe",
    "eth_syncing",
    "eth_uninstallFilter",
    "eth_unsubscribe",
    "net_listening",
    "net_peerCount",
    "net_version",
    "txpool_content",
    "txpool_inspect",
    "txpool_status",
    "web3_clientVersion",
    "web3_sha3",
];

/// How a request ended; one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the upstream (including upstream JSON-RPC errors).
    Forwarded,
    /// Every call was a notification; answered 204.
    Notification,
    /// Refused by admission control (429).
    Overloaded,
    /// Not a POST (405).
    BadHttpMethod,
    /// Wrong content type (415).
    BadContentType,
    /// Body over the cap (413).
    BodyTooLarge,
    /// Client too slow to send the body (408).
    BodyTimeout,
    /// Body could not be read (client went away).
    BodyError,
    /// Not JSON (-32700).
    ParseError,
    /// Not a valid request (-32600).
    InvalidRequest,
    /// Batch over the cap.
    BatchTooLarge,
    /// Lone call refused by the method policy (-32601).
    MethodDenied,
    /// Upstream unreachable or broken (502).
    UpstreamUnavailable,
    /// Upstream too slow (504).
    UpstreamTimeout,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 14] = [
        Outcome::Forwarded,
        Outcome::Notification,
        Outcome::Overloaded,
        Outcome::BadHttpMethod,
        Outcome::BadContentType,
        Outcome::BodyTooLarge,
        Outcome::BodyTimeout,
        Outcome::BodyError,
        Outcome::ParseError,
        Outcome::InvalidRequest,
        Outcome::BatchTooLarge,
        Outcome::MethodDenied,
        Outcome::UpstreamUnavailable,
        Outcome::UpstreamTimeout,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Notification => "notification",
            Outcome::Overloaded => "overloaded",
            Outcome::BadHttpMethod => "bad_http_method",
            Outcome::BadContentType => "bad_content_type",
            Outcome::BodyTooLarge => "body_too_large",
            Outcome::BodyTimeout => "body_timeout",
            Outcome::BodyError => "body_error",
            Outcome::ParseError => "parse_error",
            Outcome::InvalidRequest => "invalid_request",
            Outcome::BatchTooLarge => "batch_too_large",
            Outcome::MethodDenied => "method_denied",
            Outcome::UpstreamUnavailable => "upstream_unavailable",
            Outcome::UpstreamTimeout => "upstream_timeout",
        }
    }
}

/// Why an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// TCP connect refused or timed out.
    Connect,
    /// No full answer within the call timeout.
    Timeout,
    /// Connection broke while sending or receiving.
    Io,
    /// Non-2xx answer without a JSON-RPC body.
    Status,
    /// Response over `upstream.max_response_bytes`.
    TooLarge,
}

impl UpstreamFailure {
    const ALL: [UpstreamFailure; 5] = [
        UpstreamFailure::Connect,
        UpstreamFailure::Timeout,
        UpstreamFailure::Io,
        UpstreamFailure::Status,
        UpstreamFailure::TooLarge,
    ];

    fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::Connect => "connect",
            UpstreamFailure::Timeout => "timeout",
            UpstreamFailure::Io => "io",
            UpstreamFailure::Status => "status",
            UpstreamFailure::TooLarge => "too_large",
        }
    }
}

/// Latency buckets in seconds, 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// All of txgate's metrics, with their handles resolved.
pub struct Metrics {
    registry: Registry,
    calls: HashMap<&'static str, IntCounter>,
    calls_other: IntCounter,
    outcomes: Vec<IntCounter>,
    upstream_failures: Vec<IntCounter>,
    /// Requests being handled (admitted, not yet answered).
    pub in_flight: IntGauge,
    /// Open client connections.
    pub open_connections: IntGauge,
    /// Client connections accepted.
    pub connections_total: IntCounter,
    /// Request handling time, admission to response.
    pub request_duration: Histogram,
    /// Upstream round trip, request sent to body read.
    pub upstream_duration: Histogram,
    /// 1 while the last upstream health probe succeeded.
    pub upstream_up: IntGauge,
    /// 1 while draining for shutdown.
    pub draining: IntGauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("txgate".into()), None)
            .unwrap_or_else(|_| unreachable!("prefix is valid"));
        let reg = |c: Box<dyn prometheus::core::Collector>| {
            registry
                .register(c)
                .unwrap_or_else(|e| unreachable!("metric registers once: {e}"));
        };

        let calls_vec = IntCounterVec::new(
            Opts::new(
                "rpc_calls_total",
                "JSON-RPC calls received, by method (unlisted: other)",
            ),
            &["method"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(calls_vec.clone()));
        let calls = KNOWN_METHODS
            .iter()
            .map(|m| (*m, calls_vec.with_label_values(&[*m])))
            .collect();
        let calls_other = calls_vec.with_label_values(&["other"]);

        let outcome_vec = IntCounterVec::new(
            Opts::new("http_responses_total", "HTTP requests answered, by outcome"),
            &["outcome"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(outcome_vec.clone()));
        let outcomes = Outcome::ALL
            .iter()
            .map(|o| outcome_vec.with_label_values(&[o.as_str()]))
            .collect();

        let failure_vec = IntCounterVec::new(
            Opts::new(
                "upstream_errors_total",
                "Upstream calls that failed, by kind",
            ),
            &["kind"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(failure_vec.clone()));
        let upstream_failures = UpstreamFailure::ALL
            .iter()
            .map(|k| failure_vec.with_label_values(&[k.as_str()]))
            .collect();

        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).unwrap_or_else(|_| unreachable!());
            reg(Box::new(g.clone()));
            g
        };
        let in_flight = gauge(
            "in_flight_requests",
            "Requests admitted and not yet answered",
        );
        let open_connections = gauge("open_connections", "Open client connections");
        let upstream_up = gauge("upstream_up", "1 while the upstream health probe succeeds");
        let draining = gauge("draining", "1 while draining for shutdown");

        let connections_total = IntCounter::new("connections_total", "Client connections accepted")
            .unwrap_or_else(|_| unreachable!());
        reg(Box::new(connections_total.clone()));

        let histogram = |name: &str, help: &str| {
            let h = Histogram::with_opts(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
            )
            .unwrap_or_else(|_| unreachable!());
            reg(Box::new(h.clone()));
            h
        };
        let request_duration = histogram(
            "request_duration_seconds",
            "Time from admission to response",
        );
        let upstream_duration = histogram(
            "upstream_duration_seconds",
            "Upstream round trip, request to full body",
        );

        Metrics {
            registry,
            calls,
            calls_other,
            outcomes,
            upstream_failures,
            in_flight,
            open_connections,
            connections_total,
            request_duration,
            upstream_duration,
            upstream_up,
            draining,
        }
    }

    /// Counts one call of `method`.
    pub fn call(&self, method: &str) {
        self.calls.get(method).unwrap_or(&self.calls_other).inc();
    }

    /// Counts one answered request.
    pub fn outcome(&self, outcome: Outcome) {
        self.outcomes[outcome as usize].inc();
    }

    /// Counts one failed upstream call.
    pub fn upstream_failure(&self, kind: UpstreamFailure) {
        self.upstream_failures[kind as usize].inc();
    }

    /// The registry, for collectors added by later stages.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        // Encoding into a Vec fails only on an invalid metric, which
        // registration already ruled out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_indexed_by_discriminant() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
        for (i, k) in UpstreamFailure::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
    }

    #[test]
    fn render_has_prefix_and_bounded_methods() {
        let m = Metrics::new();
        m.call("eth_chainId");
        m.call("made_up_method_1");
        m.call("made_up_method_2");
        m.outcome(Outcome::MethodDenied);
        m.upstream_failure(UpstreamFailure::Timeout);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("txgate_rpc_calls_total{method=\"eth_chainId\"} 1"));
        assert!(text.contains("txgate_rpc_calls_total{method=\"other\"} 2"));
        assert!(!text.contains("made_up"));
        assert!(text.contains("txgate_http_responses_total{outcome=\"method_denied\"} 1"));
        assert!(text.contains("txgate_upstream_errors_total{kind=\"timeout\"} 1"));
        assert!(text.contains("txgate_request_duration_seconds_bucket"));
    }
}
