//! proxyd's validation hook (`POST /proxyd/validate`): requests by
//! result, transactions by verdict, refusals by reason, errors by code,
//! what was remembered, latency.

use prometheus::{Histogram, IntCounter, IntGauge};
use txgate_screen::Reason;

use super::registrar::Registrar;
use super::verify::DENY_REASONS;

/// Why a hook request got no verdict: the `errorCode` of its answer and
/// the label of `txgate_proxyd_hook_errors_total{code}`, declared here
/// once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookError {
    /// Another path, or not a POST.
    NotFound,
    /// The peer is outside `aeges.proxyd_allow`.
    SourceNotAllowed,
    /// No token, or the wrong one.
    Unauthorized,
    /// Over `aeges.max_in_flight` requests at once.
    Busy,
    /// Over `aeges.max_proxyd_bytes`.
    TooLarge,
    /// The body did not arrive in time.
    Timeout,
    /// The body broke off.
    Body,
    /// Not the hook's JSON shape (or a field that does not parse).
    Malformed,
    /// More than 100 transactions.
    TooManyTxs,
    /// A transaction whose fields do not hash to its key.
    HashMismatch,
    /// A transaction type that is not judged (a deposit, an unknown one).
    UnsupportedType,
}

impl HookError {
    /// Every error, in label order.
    pub const ALL: [HookError; 11] = [
        HookError::NotFound,
        HookError::SourceNotAllowed,
        HookError::Unauthorized,
        HookError::Busy,
        HookError::TooLarge,
        HookError::Timeout,
        HookError::Body,
        HookError::Malformed,
        HookError::TooManyTxs,
        HookError::HashMismatch,
        HookError::UnsupportedType,
    ];

    /// The `errorCode` and metric label.
    pub fn code(self) -> &'static str {
        match self {
            HookError::NotFound => "not_found",
            HookError::SourceNotAllowed => "source_not_allowed",
            HookError::Unauthorized => "unauthorized",
            HookError::Busy => "busy",
            HookError::TooLarge => "too_large",
            HookError::Timeout => "timeout",
            HookError::Body => "body",
            HookError::Malformed => "malformed",
            HookError::TooManyTxs => "too_many_txs",
            HookError::HashMismatch => "hash_mismatch",
            HookError::UnsupportedType => "unsupported_type",
        }
    }
}

/// `txgate_proxyd_hook_*`.
pub struct ProxydMetrics {
    /// `txgate_proxyd_hook_requests_total{result="allowed"}`: every
    /// transaction answered `false`.
    pub allowed: IntCounter,
    /// `…{result="refused"}`: at least one answered `true`.
    pub refused: IntCounter,
    /// `…{result="would_refuse"}`: monitor-only answered all `false` over
    /// at least one it would have refused.
    pub would_refuse: IntCounter,
    /// `…{result="error"}`: no verdict (by code in `errors`).
    pub error: IntCounter,
    /// `txgate_proxyd_hook_txs_total{verdict}`: allowed, refused,
    /// would_refuse.
    pub txs_allowed: IntCounter,
    /// `…{verdict="refused"}`.
    pub txs_refused: IntCounter,
    /// `…{verdict="would_refuse"}`.
    pub txs_would_refuse: IntCounter,
    /// `txgate_proxyd_hook_creations_total`: creations judged (no
    /// fingerprint: by hash and sender only).
    pub creations: IntCounter,
    /// `txgate_proxyd_hook_remembered_total`: transactions remembered as
    /// forwarded (every one of their request answered `false`).
    pub remembered: IntCounter,
    /// `txgate_proxyd_hook_over_rate_total`: requests of a source over
    /// `aeges.proxyd_txs_per_sec`, judged but not remembered.
    pub over_rate: IntCounter,
    refusals: Vec<IntCounter>,
    errors: Vec<IntCounter>,
    /// Request time, head to answer.
    pub duration: Histogram,
    /// Requests in flight.
    pub in_flight: IntGauge,
}

impl std::fmt::Debug for ProxydMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxydMetrics").finish_non_exhaustive()
    }
}

impl ProxydMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ProxydMetrics {
        let requests = r.counter_vec(
            "proxyd_hook_requests_total",
            "proxyd validation hook requests by result: allowed, refused, would_refuse \
             (monitor-only), error",
            &["result"],
        );
        let request = |name: &str| requests.with_label_values(&[name]);
        let txs = r.counter_vec(
            "proxyd_hook_txs_total",
            "Transactions judged for proxyd's hook, by verdict: allowed, refused, \
             would_refuse (monitor-only)",
            &["verdict"],
        );
        let tx = |name: &str| txs.with_label_values(&[name]);
        let refusals = r.counter_vec(
            "proxyd_hook_refusals_total",
            "Transactions answered true for proxyd's hook (or, monitor-only, that would \
             have been), by reason",
            &["reason"],
        );
        let errors = r.counter_vec(
            "proxyd_hook_errors_total",
            "proxyd hook requests answered an errorCode instead of a verdict, by code \
             (proxyd then applies its own fail_open choice)",
            &["code"],
        );
        ProxydMetrics {
            allowed: request("allowed"),
            refused: request("refused"),
            would_refuse: request("would_refuse"),
            error: request("error"),
            txs_allowed: tx("allowed"),
            txs_refused: tx("refused"),
            txs_would_refuse: tx("would_refuse"),
            creations: r.counter(
                "proxyd_hook_creations_total",
                "Contract creations judged for proxyd's hook (no fingerprint: by hash and \
                 sender only)",
            ),
            remembered: r.counter(
                "proxyd_hook_remembered_total",
                "Transactions of all-allowed hook requests remembered as forwarded (a \
                 failure naming their hash bans their fingerprint)",
            ),
            over_rate: r.counter(
                "proxyd_hook_over_rate_total",
                "proxyd hook requests of a source over aeges.proxyd_txs_per_sec: judged, \
                 their transactions not remembered",
            ),
            refusals: DENY_REASONS
                .iter()
                .map(|r| refusals.with_label_values(&[r.as_str()]))
                .collect(),
            errors: HookError::ALL
                .iter()
                .map(|e| errors.with_label_values(&[e.code()]))
                .collect(),
            duration: r.histogram(
                "proxyd_hook_duration_seconds",
                "proxyd hook request time, head to answer",
                super::screen::SCREEN_BUCKETS,
            ),
            in_flight: r.gauge(
                "proxyd_hook_in_flight",
                "proxyd hook requests in flight (cap: aeges.max_in_flight)",
            ),
        }
    }

    /// Counts a transaction refused (or, monitor-only, that would be).
    pub fn refusal(&self, reason: Reason, monitor_only: bool) {
        if monitor_only {
            self.txs_would_refuse.inc();
        } else {
            self.txs_refused.inc();
        }
        if let Some(i) = DENY_REASONS.iter().position(|r| *r == reason) {
            self.refusals[i].inc();
        }
    }

    /// Counts a request answered `error` instead of a verdict.
    pub fn failed(&self, error: HookError) {
        self.error.inc();
        if let Some(i) = HookError::ALL.iter().position(|e| *e == error) {
            self.errors[i].inc();
        }
    }

    /// `txgate_proxyd_hook_errors_total{code}` (tests).
    pub fn errors(&self, error: HookError) -> u64 {
        HookError::ALL
            .iter()
            .position(|e| *e == error)
            .map_or(0, |i| self.errors[i].get())
    }

    /// `txgate_proxyd_hook_refusals_total{reason}` (tests).
    pub fn refusals(&self, reason: Reason) -> u64 {
        DENY_REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.refusals[i].get())
    }
}
