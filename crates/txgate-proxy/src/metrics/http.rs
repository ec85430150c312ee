//! Client-facing HTTP metrics: calls by method, responses by outcome,
//! connections, requests in flight, request time.

use std::collections::HashMap;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::registrar::Registrar;

/// Methods that get their own label; every other method counts as `other`.
pub const KNOWN_METHODS: &[&str] = &[
    "eth_accounts",
    "eth_blobBaseFee",
    "eth_blockNumber",
    "eth_call",
    "eth_callBundle",
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
    "eth_sendBundle",
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
    /// A sync call over `admission.max_sync_in_flight` (429).
    SyncOverloaded,
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
    /// Message over `rpc.max_message_txs` transactions.
    TooManyTxs,
    /// Lone call refused by the method policy (-32601).
    MethodDenied,
    /// Upstream unreachable or broken (502).
    UpstreamUnavailable,
    /// No healthy node of the call's role (503).
    NoHealthyUpstream,
    /// Upstream too slow (504).
    UpstreamTimeout,
    /// Lone screened call with unusable params or transaction (-32602).
    InvalidParams,
    /// Lone screened call refused by screening (-32003, or 429 -32005).
    Screened,
    /// Over a per-client rate (429, -32005).
    RateLimited,
    /// An unknown API key (401).
    Unauthorized,
    /// Upgraded to a WebSocket (101).
    Upgraded,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 22] = [
        Outcome::Forwarded,
        Outcome::Notification,
        Outcome::Overloaded,
        Outcome::SyncOverloaded,
        Outcome::BadHttpMethod,
        Outcome::BadContentType,
        Outcome::BodyTooLarge,
        Outcome::BodyTimeout,
        Outcome::BodyError,
        Outcome::ParseError,
        Outcome::InvalidRequest,
        Outcome::BatchTooLarge,
        Outcome::TooManyTxs,
        Outcome::MethodDenied,
        Outcome::UpstreamUnavailable,
        Outcome::NoHealthyUpstream,
        Outcome::UpstreamTimeout,
        Outcome::InvalidParams,
        Outcome::Screened,
        Outcome::RateLimited,
        Outcome::Unauthorized,
        Outcome::Upgraded,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Notification => "notification",
            Outcome::Overloaded => "overloaded",
            Outcome::SyncOverloaded => "sync_overloaded",
            Outcome::BadHttpMethod => "bad_http_method",
            Outcome::BadContentType => "bad_content_type",
            Outcome::BodyTooLarge => "body_too_large",
            Outcome::BodyTimeout => "body_timeout",
            Outcome::BodyError => "body_error",
            Outcome::ParseError => "parse_error",
            Outcome::InvalidRequest => "invalid_request",
            Outcome::BatchTooLarge => "batch_too_large",
            Outcome::TooManyTxs => "too_many_txs",
            Outcome::MethodDenied => "method_denied",
            Outcome::UpstreamUnavailable => "upstream_unavailable",
            Outcome::NoHealthyUpstream => "no_healthy_upstream",
            Outcome::UpstreamTimeout => "upstream_timeout",
            Outcome::InvalidParams => "invalid_params",
            Outcome::Screened => "screened",
            Outcome::RateLimited => "rate_limited",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Upgraded => "upgraded",
        }
    }
}

/// Latency buckets in seconds, 50 µs to 10 s.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The client-facing side.
pub struct HttpMetrics {
    calls: HashMap<&'static str, IntCounter>,
    calls_other: IntCounter,
    outcomes: Vec<IntCounter>,
    /// Requests being handled (admitted, not yet answered).
    pub in_flight: IntGauge,
    /// `admission.max_in_flight`: the cap `in_flight` runs against.
    pub max_in_flight: IntGauge,
    /// Open client connections.
    pub open_connections: IntGauge,
    /// Client connections accepted.
    pub connections_total: IntCounter,
    /// Connections closed because their first bytes did not arrive within
    /// `server.header_read_timeout_ms`.
    pub silent_closed: IntCounter,
    /// Connections closed because they started no request within
    /// `server.idle_timeout_ms`.
    pub idle_closed: IntCounter,
    /// Request handling time, admission to response.
    pub request_duration: Histogram,
    /// 1 while draining for shutdown.
    pub draining: IntGauge,
}

impl std::fmt::Debug for HttpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpMetrics").finish_non_exhaustive()
    }
}

impl HttpMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> HttpMetrics {
        let calls = r.counter_vec(
            "rpc_calls_total",
            "JSON-RPC calls received, by method (unlisted: other)",
            &["method"],
        );
        let outcomes = r.counter_vec(
            "http_responses_total",
            "HTTP requests answered, by outcome",
            &["outcome"],
        );
        HttpMetrics {
            calls: KNOWN_METHODS
                .iter()
                .map(|m| (*m, calls.with_label_values(&[*m])))
                .collect(),
            calls_other: calls.with_label_values(&["other"]),
            outcomes: Outcome::ALL
                .iter()
                .map(|o| outcomes.with_label_values(&[o.as_str()]))
                .collect(),
            in_flight: r.gauge(
                "in_flight_requests",
                "Requests admitted and not yet answered",
            ),
            max_in_flight: r.gauge(
                "admission_max_in_flight",
                "Requests admitted at once at most (admission.max_in_flight)",
            ),
            open_connections: r.gauge("open_connections", "Open client connections"),
            connections_total: r.counter("connections_total", "Client connections accepted"),
            silent_closed: r.counter(
                "connections_silent_closed_total",
                "Client connections closed because no request began within server.header_read_timeout_ms",
            ),
            idle_closed: r.counter(
                "connections_idle_closed_total",
                "Client connections closed gracefully because they started no request within server.idle_timeout_ms",
            ),
            request_duration: r.histogram(
                "request_duration_seconds",
                "Time from admission to response",
                LATENCY_BUCKETS,
            ),
            draining: r.gauge("draining", "1 while draining for shutdown"),
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
}
