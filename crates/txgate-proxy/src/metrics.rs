//! Prometheus metrics.
//!
//! Every label set is bounded and created up front; the request path holds
//! ready handles and never looks a label up by string, except the method
//! name, which goes through one hash lookup into a fixed table.

use std::collections::HashMap;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use txgate_screen::{Applied, Reason, Sizes};

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
    /// Lone screened call with unusable params or transaction (-32602).
    InvalidParams,
    /// Lone screened call refused by screening (-32003, or 429 -32005).
    Screened,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 16] = [
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
        Outcome::InvalidParams,
        Outcome::Screened,
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
            Outcome::InvalidParams => "invalid_params",
            Outcome::Screened => "screened",
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
    /// Screening decisions, cache sizes, invalidations.
    pub screen: ScreenMetrics,
    /// The sidecar link, the invalidation queue, the probe, snapshots.
    pub sidecar: SidecarMetrics,
}

/// Sidecar link metrics.
pub struct SidecarMetrics {
    /// 1 while the invalidation stream is open.
    pub up: IntGauge,
    /// Stream (re)connection attempts that failed or streams that ended.
    pub reconnects: IntCounter,
    /// Invalidations received.
    pub received: IntCounter,
    /// Invalidations refused as malformed (counted and logged, not applied).
    pub malformed: IntCounter,
    /// Times the queue was full and the stream waited for room.
    pub queue_full: IntCounter,
    /// Invalidations queued, not yet applied.
    pub queue_depth: IntGauge,
    /// Batches applied.
    pub batches: IntCounter,
    /// Sidecar's observation to txgate's application, seconds.
    pub lag: Histogram,
    /// ShouldForward outcomes: forward, deny, timeout, error.
    pub probe: [IntCounter; 4],
    /// Snapshot writes: ok, error.
    pub snapshots: [IntCounter; 2],
}

impl std::fmt::Debug for SidecarMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarMetrics").finish_non_exhaustive()
    }
}

/// Lag buckets in seconds, 1 ms to 10 s.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl SidecarMetrics {
    fn new(reg: &dyn Fn(Box<dyn prometheus::core::Collector>)) -> SidecarMetrics {
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).unwrap_or_else(|_| unreachable!());
            reg(Box::new(g.clone()));
            g
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).unwrap_or_else(|_| unreachable!());
            reg(Box::new(c.clone()));
            c
        };
        let lag = Histogram::with_opts(
            HistogramOpts::new(
                "sidecar_lag_seconds",
                "From the sidecar observing an invalidation to txgate applying it",
            )
            .buckets(LAG_BUCKETS.to_vec()),
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(lag.clone()));
        let probe = IntCounterVec::new(
            Opts::new("should_forward_total", "ShouldForward probes by outcome"),
            &["result"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(probe.clone()));
        let snapshots = IntCounterVec::new(
            Opts::new("ban_snapshots_total", "Ban snapshot writes by result"),
            &["result"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(snapshots.clone()));
        SidecarMetrics {
            up: gauge("sidecar_up", "1 while the invalidation stream is open"),
            reconnects: counter(
                "sidecar_reconnects_total",
                "Sidecar connection attempts that failed and streams that ended",
            ),
            received: counter(
                "sidecar_invalidations_received_total",
                "Invalidations received from the sidecar",
            ),
            malformed: counter(
                "sidecar_invalidations_malformed_total",
                "Invalidations refused as malformed (not applied)",
            ),
            queue_full: counter(
                "sidecar_queue_full_total",
                "Times the invalidation queue was full and the stream waited for room",
            ),
            queue_depth: gauge(
                "sidecar_queue_depth",
                "Invalidations received and not yet applied",
            ),
            batches: counter("sidecar_batches_total", "Batches of invalidations applied"),
            lag,
            probe: ["forward", "deny", "timeout", "error"].map(|r| probe.with_label_values(&[r])),
            snapshots: ["ok", "error"].map(|r| snapshots.with_label_values(&[r])),
        }
    }
}

/// How a screened call was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// Nothing against it.
    Clean,
    /// A suspect fingerprint given its one slot (or a cooldown trickle).
    Suspect,
    /// A contract creation (no fingerprint).
    Creation,
}

impl Passed {
    const ALL: [Passed; 3] = [Passed::Clean, Passed::Suspect, Passed::Creation];

    fn as_str(self) -> &'static str {
        match self {
            Passed::Clean => "clean",
            Passed::Suspect => "suspect",
            Passed::Creation => "contract_creation",
        }
    }
}

/// Screening metrics, every label set created up front.
pub struct ScreenMetrics {
    forwarded: Vec<IntCounter>,
    refused: Vec<IntCounter>,
    would_refuse: Vec<IntCounter>,
    /// Screening time per call, from the raw param to the decision.
    pub duration: Histogram,
    /// Sender cache hits.
    pub sender_cache_hits: IntCounter,
    /// Sender cache misses (one libsecp256k1 recovery each).
    pub sender_cache_misses: IntCounter,
    entries: [IntGauge; 7],
    invalidations: [IntCounter; 9],
}

impl std::fmt::Debug for ScreenMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenMetrics").finish_non_exhaustive()
    }
}

/// Screening time buckets in seconds, 1 µs to 10 ms.
const SCREEN_BUCKETS: &[f64] = &[
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.01,
];

impl ScreenMetrics {
    fn new(reg: &dyn Fn(Box<dyn prometheus::core::Collector>)) -> ScreenMetrics {
        let decisions = IntCounterVec::new(
            Opts::new(
                "screen_decisions_total",
                "Screened calls by decision (forwarded, refused, would_refuse in monitor-only \
                 mode) and reason",
            ),
            &["decision", "reason"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(decisions.clone()));
        let forwarded = Passed::ALL
            .iter()
            .map(|p| decisions.with_label_values(&["forwarded", p.as_str()]))
            .collect();
        let by_reason = |decision: &str| {
            Reason::ALL
                .iter()
                .map(|r| decisions.with_label_values(&[decision, r.as_str()]))
                .collect::<Vec<_>>()
        };
        let refused = by_reason("refused");
        let would_refuse = by_reason("would_refuse");

        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "screen_duration_seconds",
                "Screening time per call, raw param to decision",
            )
            .buckets(SCREEN_BUCKETS.to_vec()),
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(duration.clone()));

        let cache = IntCounterVec::new(
            Opts::new(
                "screen_sender_cache_total",
                "Sender lookups by result (a miss costs one ECDSA recovery)",
            ),
            &["result"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(cache.clone()));

        let entries = IntGaugeVec::new(
            Opts::new("screen_entries", "Entries held by each screening cache"),
            &["cache"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(entries.clone()));
        let gauge = |name: &str| entries.with_label_values(&[name]);

        let applied = IntCounterVec::new(
            Opts::new(
                "invalidations_total",
                "Invalidations applied, by what they did",
            ),
            &["result"],
        )
        .unwrap_or_else(|_| unreachable!());
        reg(Box::new(applied.clone()));
        let counter = |name: &str| applied.with_label_values(&[name]);

        ScreenMetrics {
            forwarded,
            refused,
            would_refuse,
            duration,
            sender_cache_hits: cache.with_label_values(&["hit"]),
            sender_cache_misses: cache.with_label_values(&["miss"]),
            entries: [
                gauge("denied"),
                gauge("recent_failures"),
                gauge("senders"),
                gauge("backpressured_senders"),
                gauge("pending"),
                gauge("cooldowns"),
                gauge("assertions"),
            ],
            invalidations: [
                counter("banned"),
                counter("refreshed"),
                counter("stale_version"),
                counter("version_bump"),
                counter("recent_failure"),
                counter("sender_charged"),
                counter("sender_backoff"),
                counter("sender_untracked"),
                counter("cooldown_started"),
            ],
        }
    }

    /// Counts a forwarded screened call.
    pub fn passed(&self, how: Passed) {
        self.forwarded[how as usize].inc();
    }

    /// Counts a refusal (or, in monitor-only mode, a would-be refusal).
    pub fn refused(&self, reason: Reason, monitor_only: bool) {
        let index = reason.index();
        if monitor_only {
            self.would_refuse[index].inc();
        } else {
            self.refused[index].inc();
        }
    }

    /// Sets the cache gauges.
    pub fn sizes(&self, sizes: &Sizes) {
        let values = [
            sizes.denied,
            sizes.recent_failures,
            sizes.senders,
            sizes.backpressured,
            sizes.pending,
            sizes.cooldowns,
            sizes.assertions,
        ];
        for (gauge, value) in self.entries.iter().zip(values) {
            gauge.set(value as i64);
        }
    }

    /// Counts what a batch of invalidations did.
    pub fn applied(&self, a: &Applied) {
        let values = [
            a.banned,
            a.refreshed,
            a.stale,
            a.bumped,
            a.recent_failures,
            a.charged,
            a.backoffs,
            a.untracked,
            a.cooldowns,
        ];
        for (counter, value) in self.invalidations.iter().zip(values) {
            counter.inc_by(value as u64);
        }
    }
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

        let screen = ScreenMetrics::new(&reg);
        let sidecar = SidecarMetrics::new(&reg);

        Metrics {
            screen,
            sidecar,
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
        m.screen.refused(Reason::DeniedFingerprint, false);
        m.screen.refused(Reason::RecentFailure, true);
        m.screen.passed(Passed::Clean);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains(
            "txgate_screen_decisions_total{decision=\"refused\",reason=\"denied_fingerprint\"} 1"
        ));
        assert!(text.contains(
            "txgate_screen_decisions_total{decision=\"would_refuse\",reason=\"recent_failure\"} 1"
        ));
        assert!(
            text.contains(
                "txgate_screen_decisions_total{decision=\"forwarded\",reason=\"clean\"} 1"
            )
        );
        assert!(text.contains("txgate_screen_entries{cache=\"denied\"} 0"));
    }
}
