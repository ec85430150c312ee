//! Upstream metrics: failures by kind, round-trip time, the health probe.

use prometheus::{Histogram, IntCounter, IntGauge};

use super::http::LATENCY_BUCKETS;
use super::registrar::Registrar;

/// Why an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// TCP connect refused or timed out.
    Connect,
    /// No full answer within the call timeout.
    Timeout,
    /// Connection broke while sending or receiving (reset, or closed
    /// before the answer was whole).
    Io,
    /// An answer that is not HTTP/1.1: garbage status line, bad chunk
    /// framing, headers that never end (over 64 KiB).
    Malformed,
    /// Non-2xx answer without a JSON-RPC body.
    Status,
    /// Response over `upstream.max_response_bytes`.
    TooLarge,
    /// The TLS handshake with an `https://` node failed (its certificate,
    /// or the protocol).
    Tls,
}

impl UpstreamFailure {
    /// Every kind, in label order.
    pub const ALL: [UpstreamFailure; 7] = [
        UpstreamFailure::Connect,
        UpstreamFailure::Timeout,
        UpstreamFailure::Io,
        UpstreamFailure::Malformed,
        UpstreamFailure::Status,
        UpstreamFailure::TooLarge,
        UpstreamFailure::Tls,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::Connect => "connect",
            UpstreamFailure::Timeout => "timeout",
            UpstreamFailure::Io => "io",
            UpstreamFailure::Malformed => "malformed",
            UpstreamFailure::Status => "status",
            UpstreamFailure::TooLarge => "too_large",
            UpstreamFailure::Tls => "tls",
        }
    }
}

/// The upstream node.
pub struct UpstreamMetrics {
    failures: Vec<IntCounter>,
    /// Upstream round trip, request sent to body read.
    pub duration: Histogram,
    /// 1 while the last upstream health probe succeeded.
    pub up: IntGauge,
    /// `eth_sendRawTransactionSync` calls holding a slot now.
    pub sync_in_flight: IntGauge,
    /// Their cap (`admission.max_sync_in_flight`).
    pub sync_max_in_flight: IntGauge,
    /// Sync calls refused at once because every slot was taken.
    pub sync_refused: IntCounter,
}

impl std::fmt::Debug for UpstreamMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamMetrics").finish_non_exhaustive()
    }
}

impl UpstreamMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> UpstreamMetrics {
        let failures = r.counter_vec(
            "upstream_errors_total",
            "Upstream calls that failed, by kind",
            &["kind"],
        );
        UpstreamMetrics {
            failures: UpstreamFailure::ALL
                .iter()
                .map(|k| failures.with_label_values(&[k.as_str()]))
                .collect(),
            duration: r.histogram(
                "upstream_duration_seconds",
                "Upstream round trip, request to full body",
                LATENCY_BUCKETS,
            ),
            up: r.gauge("upstream_up", "1 while the upstream health probe succeeds"),
            sync_in_flight: r.gauge(
                "upstream_sync_in_flight",
                "eth_sendRawTransactionSync calls in flight (each waits for its receipt)",
            ),
            sync_max_in_flight: r.gauge(
                "upstream_sync_max_in_flight",
                "Cap on eth_sendRawTransactionSync calls in flight (admission.max_sync_in_flight)",
            ),
            sync_refused: r.counter(
                "upstream_sync_refused_total",
                "eth_sendRawTransactionSync calls refused because admission.max_sync_in_flight were in flight",
            ),
        }
    }

    /// Counts one failed upstream call.
    pub fn failure(&self, kind: UpstreamFailure) {
        self.failures[kind as usize].inc();
    }
}
