//! The pool's questions (Aeges `VerifyTransaction`): answers by result,
//! denials by reason, malformed requests by reason, latency.

use prometheus::{Histogram, IntCounter, IntGauge};
use txgate_proto::aeges::Invalid;
use txgate_screen::Reason;

use super::registrar::Registrar;

/// The reasons a transaction is denied in the pool ([`Reason`]s the pool
/// path can give; decoding and signatures are the pool's own).
pub const DENY_REASONS: [Reason; 4] = [
    Reason::RecentFailure,
    Reason::SenderBackoff,
    Reason::DeniedFingerprint,
    Reason::AssertionCooldown,
];

/// Malformed requests the transport refuses before decoding, by
/// `txgate_aeges_verify_invalid_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Message over `aeges.max_verify_bytes`.
    TooLarge,
    /// A compressed message (none is accepted).
    Compressed,
    /// The body ends inside the gRPC frame, or carries more than one
    /// message.
    Frame,
}

impl Framing {
    const ALL: [Framing; 3] = [Framing::TooLarge, Framing::Compressed, Framing::Frame];

    fn as_str(self) -> &'static str {
        match self {
            Framing::TooLarge => "too_large",
            Framing::Compressed => "compressed",
            Framing::Frame => "frame",
        }
    }
}

/// `txgate_aeges_verify_*`.
pub struct VerifyMetrics {
    /// `txgate_aeges_verify_total{result="allowed"}`.
    pub allowed: IntCounter,
    /// `…{result="denied"}`.
    pub denied: IntCounter,
    /// `…{result="would_deny"}`: monitor-only answered `false`.
    pub would_deny: IntCounter,
    /// `…{result="invalid"}`: `INVALID_ARGUMENT`, by reason in
    /// `txgate_aeges_verify_invalid_total`.
    pub invalid: IntCounter,
    /// `…{result="refused_source"}`: `PERMISSION_DENIED`.
    pub refused_source: IntCounter,
    /// `…{result="exhausted"}`: `RESOURCE_EXHAUSTED`, over
    /// `aeges.max_in_flight`.
    pub exhausted: IntCounter,
    /// `…{result="timeout"}`: the body did not arrive in time.
    pub timeout: IntCounter,
    /// `…{result="cancelled"}`: the caller reset the call (its deadline)
    /// or the connection broke before the body was in.
    pub cancelled: IntCounter,
    /// `…{result="unimplemented"}`: another gRPC method.
    pub unimplemented: IntCounter,
    /// Denials (and would-be denials) by reason, in [`DENY_REASONS`] order.
    denials: Vec<IntCounter>,
    invalid_decode: Vec<IntCounter>,
    invalid_framing: Vec<IntCounter>,
    /// Time from the request's head to its answer.
    pub duration: Histogram,
    /// Questions in flight.
    pub in_flight: IntGauge,
}

impl std::fmt::Debug for VerifyMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyMetrics").finish_non_exhaustive()
    }
}

impl VerifyMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> VerifyMetrics {
        let results = r.counter_vec(
            "aeges_verify_total",
            "Pool questions (VerifyTransaction) by result: allowed, denied, would_deny \
             (monitor-only), invalid, refused_source, exhausted, timeout, cancelled, \
             unimplemented",
            &["result"],
        );
        let result = |name: &str| results.with_label_values(&[name]);
        let denials = r.counter_vec(
            "aeges_verify_denials_total",
            "Pool questions answered denied (or, monitor-only, that would have been), \
             by reason",
            &["reason"],
        );
        let invalid = r.counter_vec(
            "aeges_verify_invalid_total",
            "Pool questions refused as malformed, by reason (INVALID_ARGUMENT; a \
             compressed message, UNIMPLEMENTED)",
            &["reason"],
        );
        VerifyMetrics {
            allowed: result("allowed"),
            denied: result("denied"),
            would_deny: result("would_deny"),
            invalid: result("invalid"),
            refused_source: result("refused_source"),
            exhausted: result("exhausted"),
            timeout: result("timeout"),
            cancelled: result("cancelled"),
            unimplemented: result("unimplemented"),
            denials: DENY_REASONS
                .iter()
                .map(|r| denials.with_label_values(&[r.as_str()]))
                .collect(),
            invalid_decode: Invalid::ALL
                .iter()
                .map(|i| invalid.with_label_values(&[i.reason()]))
                .collect(),
            invalid_framing: Framing::ALL
                .iter()
                .map(|f| invalid.with_label_values(&[f.as_str()]))
                .collect(),
            duration: r.histogram(
                "aeges_verify_duration_seconds",
                "Pool question time, request head to answer",
                // A verdict takes microseconds, like a screening decision;
                // the plugin's deadline is 500 ms.
                super::screen::SCREEN_BUCKETS,
            ),
            in_flight: r.gauge(
                "aeges_verify_in_flight",
                "Pool questions in flight (cap: aeges.max_in_flight)",
            ),
        }
    }

    /// Counts a denial, or in monitor-only mode a would-be denial.
    pub fn deny(&self, reason: Reason, monitor_only: bool) {
        if monitor_only {
            self.would_deny.inc();
        } else {
            self.denied.inc();
        }
        if let Some(i) = DENY_REASONS.iter().position(|r| *r == reason) {
            self.denials[i].inc();
        }
    }

    /// Counts a request whose message is refused.
    pub fn invalid(&self, reason: Invalid) {
        self.invalid.inc();
        if let Some(i) = Invalid::ALL.iter().position(|r| *r == reason) {
            self.invalid_decode[i].inc();
        }
    }

    /// Counts a request whose framing is refused.
    pub fn framing(&self, reason: Framing) {
        self.invalid.inc();
        if let Some(i) = Framing::ALL.iter().position(|r| *r == reason) {
            self.invalid_framing[i].inc();
        }
    }

    /// `txgate_aeges_verify_denials_total{reason}` for `reason` (tests).
    pub fn denials(&self, reason: Reason) -> u64 {
        DENY_REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.denials[i].get())
    }

    /// `txgate_aeges_verify_invalid_total{reason}` for a decode reason
    /// (tests).
    pub fn invalid_count(&self, reason: Invalid) -> u64 {
        Invalid::ALL
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.invalid_decode[i].get())
    }

    /// `txgate_aeges_verify_invalid_total{reason}` for a framing reason
    /// (tests).
    pub fn framing_count(&self, reason: Framing) -> u64 {
        Framing::ALL
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.invalid_framing[i].get())
    }
}
