//! Aeges listener metrics: the Credible Layer sidecar's failure reports.

use prometheus::{IntCounter, IntCounterVec};

use super::registrar::Registrar;

/// `txgate_aeges_reports_total{result}`: reports by what became of them.
pub struct AegesMetrics {
    /// Parsed and queued (a call: ban, charge, refuse the hash).
    pub accepted: IntCounter,
    /// Parsed, a contract creation: its hash is refused, nothing banned.
    pub creation: IntCounter,
    /// Refused: the peer is outside `aeges.report_allow` (403).
    pub refused_source: IntCounter,
    /// Refused: no token or the wrong one (401).
    pub refused_token: IntCounter,
    /// Refused: over `aeges.max_report_bytes` (413).
    pub too_large: IntCounter,
    /// Refused: the body does not parse (400), by reason in `invalid`.
    pub malformed: IntCounter,
    /// Refused: the worker could not take it in time (503).
    pub unavailable: IntCounter,
    /// Another path or method (404, 405).
    pub not_found: IntCounter,
    /// Refused: the body took longer than 5 s to arrive (408).
    pub timeout: IntCounter,
    /// Connections closed at once: `aeges::MAX_CONNECTIONS` were open.
    pub connections_refused: IntCounter,
    /// Connections closed because they did not show their protocol (the
    /// first bytes) within 5 s.
    pub connections_idle: IntCounter,
    /// `txgate_aeges_report_invalid_total{reason}`.
    pub invalid: IntCounterVec,
}

impl std::fmt::Debug for AegesMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AegesMetrics").finish_non_exhaustive()
    }
}

impl AegesMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> AegesMetrics {
        let reports = r.counter_vec(
            "aeges_reports_total",
            "Failure reports posted to the Aeges listener, by result",
            &["result"],
        );
        let result = |name: &str| reports.with_label_values(&[name]);
        AegesMetrics {
            accepted: result("accepted"),
            creation: result("creation"),
            refused_source: result("refused_source"),
            refused_token: result("refused_token"),
            too_large: result("too_large"),
            malformed: result("malformed"),
            unavailable: result("unavailable"),
            not_found: result("not_found"),
            timeout: result("timeout"),
            connections_refused: r.counter(
                "aeges_connections_refused_total",
                "Connections to the Aeges listener closed at once: too many open",
            ),
            connections_idle: r.counter(
                "aeges_connections_idle_total",
                "Connections to the Aeges listener closed: nothing arrived within 5 s",
            ),
            invalid: r.counter_vec(
                "aeges_report_invalid_total",
                "Failure reports refused as malformed, by reason",
                &["reason"],
            ),
        }
    }
}
