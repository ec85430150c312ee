//! Conditional transactions: what the checks before screening decided.

use prometheus::{IntCounter, IntCounterVec, IntGauge};
use txgate_conditional::Reason;
use txgate_conditional::caller::CallerError;

use super::registrar::Registrar;

/// The labels of the refusals, by the refusal's index; with `accepted` and
/// `would_refuse`, the `result` label of `txgate_conditional_total`.
pub const REFUSALS: [&str; 11] = [
    "disabled",
    "missing",
    "invalid",
    "cost_exceeded",
    "undecodable",
    "target",
    "unauthenticated",
    "bad_authentication",
    "caller_denied",
    "rate_limited",
    "caller_rate_limited",
];

/// The `reason` label of `txgate_conditional_auth_failures_total`, in
/// [`CallerError`]'s order.
pub const AUTH_FAILURES: [CallerError; 3] = [
    CallerError::Malformed,
    CallerError::BadSignature,
    CallerError::Mismatch,
];

/// The `kind` label of `txgate_conditional_callers_total`: unsigned,
/// signed (indexed by whether the call was signed).
pub const CALLERS: [&str; 2] = ["unsigned", "signed"];

/// Ready handles of every label, for the checks.
#[derive(Debug)]
pub struct ConditionalCounters {
    /// `result="accepted"`.
    pub accepted: IntCounter,
    /// `result="would_refuse"`.
    pub would_refuse: IntCounter,
    /// Each refusal, by its index in [`REFUSALS`].
    pub refused: [IntCounter; 11],
    /// Malformed conditions, by [`Reason`].
    pub invalid: Vec<IntCounter>,
    /// Calls that passed the caller check, by [`CALLERS`].
    pub callers: [IntCounter; 2],
    /// Headers that did not verify, by [`CallerError`].
    pub auth_failures: [IntCounter; 3],
}

/// See the module docs.
pub struct ConditionalMetrics {
    /// `txgate_conditional_total{result}`: accepted, would_refuse
    /// (monitor-only), and each refusal (disabled, missing, invalid,
    /// cost_exceeded, undecodable, target, unauthenticated,
    /// bad_authentication, caller_denied, rate_limited, caller_rate_limited).
    pub calls: IntCounterVec,
    /// `txgate_conditional_callers_total{kind}`: calls that passed the
    /// caller check, signed or unsigned.
    pub callers: IntCounterVec,
    /// `txgate_conditional_auth_failures_total{reason}`: signature headers
    /// that did not verify (malformed, bad_signature, mismatch).
    pub auth_failures: IntCounterVec,
    /// `txgate_conditional_invalid_total{reason}`: malformed conditions by
    /// what was wrong.
    pub invalid: IntCounterVec,
    /// `txgate_conditional_enabled`: 1 while the method is on.
    pub enabled: IntGauge,
    /// `txgate_conditional_switches_total`: times the switch changed.
    pub switches: IntCounter,
}

impl std::fmt::Debug for ConditionalMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConditionalMetrics").finish_non_exhaustive()
    }
}

impl ConditionalMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ConditionalMetrics {
        let calls = r.counter_vec(
            "conditional_total",
            "eth_sendRawTransactionConditional calls by what the condition checks decided",
            &["result"],
        );
        let results = ["accepted", "would_refuse"].into_iter().chain(REFUSALS);
        for result in results {
            calls.with_label_values(&[result]);
        }
        let invalid = r.counter_vec(
            "conditional_invalid_total",
            "Malformed conditions by what was wrong",
            &["reason"],
        );
        for reason in Reason::ALL {
            invalid.with_label_values(&[reason.as_str()]);
        }
        let callers = r.counter_vec(
            "conditional_callers_total",
            "Conditional calls that passed the caller check, by whether they were signed (X-Optimism-Signature)",
            &["kind"],
        );
        for kind in CALLERS {
            callers.with_label_values(&[kind]);
        }
        let auth_failures = r.counter_vec(
            "conditional_auth_failures_total",
            "X-Optimism-Signature headers that did not verify, by what was wrong",
            &["reason"],
        );
        for e in AUTH_FAILURES {
            auth_failures.with_label_values(&[e.as_str()]);
        }
        ConditionalMetrics {
            calls,
            callers,
            auth_failures,
            invalid,
            enabled: r.gauge(
                "conditional_enabled",
                "1 while eth_sendRawTransactionConditional is accepted (conditional.enabled)",
            ),
            switches: r.counter(
                "conditional_switches_total",
                "Times conditional.enabled changed while running (SIGHUP)",
            ),
        }
    }
}

impl ConditionalMetrics {
    /// Ready handles of every label.
    pub fn counters(&self) -> ConditionalCounters {
        ConditionalCounters {
            accepted: self.calls.with_label_values(&["accepted"]),
            would_refuse: self.calls.with_label_values(&["would_refuse"]),
            refused: REFUSALS.map(|r| self.calls.with_label_values(&[r])),
            invalid: Reason::ALL
                .iter()
                .map(|r| self.invalid.with_label_values(&[r.as_str()]))
                .collect(),
            callers: CALLERS.map(|k| self.callers.with_label_values(&[k])),
            auth_failures: AUTH_FAILURES
                .map(|e| self.auth_failures.with_label_values(&[e.as_str()])),
        }
    }
}
