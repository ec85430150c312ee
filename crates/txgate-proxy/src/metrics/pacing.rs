//! Pacing metrics: refusals held back from clients that keep being
//! refused.

use prometheus::{IntCounter, IntGauge};

use super::registrar::Registrar;

/// `txgate_pacing_refusals_total{result}`, `txgate_pacing_held`,
/// `txgate_pacing_clients` and `txgate_pacing_hold_microseconds_total`.
pub struct PacingMetrics {
    /// Refusals answered after a hold.
    pub held: IntCounter,
    /// Refusals that were due a hold but answered at once: as many were
    /// held already as `screen.pacing.max_held` allows.
    pub over_bound: IntCounter,
    /// Refusals held right now.
    pub holding: IntGauge,
    /// The holds started, summed, in microseconds.
    pub hold_micros: IntCounter,
    /// Clients with a streak of refusals now.
    pub clients: IntGauge,
    /// Refusals of clients the streak table had no room for (not paced).
    pub untracked: IntCounter,
}

impl std::fmt::Debug for PacingMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacingMetrics").finish_non_exhaustive()
    }
}

impl PacingMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> PacingMetrics {
        let refusals = r.counter_vec(
            "pacing_refusals_total",
            "Screening refusals of clients on a streak, by result: held (the streak passed \
             screen.pacing.after), over_bound (due a hold, answered at once: \
             screen.pacing.max_held were held already), untracked (not paced: the table \
             of streaks was full of live ones)",
            &["result"],
        );
        PacingMetrics {
            held: refusals.with_label_values(&["held"]),
            over_bound: refusals.with_label_values(&["over_bound"]),
            holding: r.gauge(
                "pacing_held",
                "Refusals held back right now (bounded by screen.pacing.max_held)",
            ),
            hold_micros: r.counter(
                "pacing_hold_microseconds_total",
                "Sum of the holds started, in microseconds",
            ),
            clients: r.gauge(
                "pacing_clients",
                "Clients with a streak of refusals (bounded by screen.pacing.max_clients)",
            ),
            untracked: refusals.with_label_values(&["untracked"]),
        }
    }
}
