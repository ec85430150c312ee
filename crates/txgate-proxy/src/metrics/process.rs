//! Process metrics: the background tasks and the parts txgate cannot serve
//! without.

use prometheus::{IntCounter, IntGauge};

use super::registrar::Registrar;

/// Process metrics.
pub struct ProcessMetrics {
    /// Background tasks that did not stop within their deadline at
    /// shutdown (aborted; the log names each).
    pub tasks_stopped_late: IntCounter,
    /// Failures of a part txgate cannot serve without (a worker, a
    /// listener, the admin listener): each one ends the process.
    pub fatal_failures: IntCounter,
    /// Unix time the process started (its metrics were made).
    pub start_time: IntGauge,
}

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessMetrics").finish_non_exhaustive()
    }
}

impl ProcessMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ProcessMetrics {
        // Which build is running: one series, always 1.
        r.gauge_vec(
            "build_info",
            "The running build: always 1, its version in the label",
            &["version"],
        )
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
        ProcessMetrics {
            tasks_stopped_late: r.counter(
                "background_tasks_stopped_late_total",
                "Background tasks aborted because they did not stop within their deadline",
            ),
            fatal_failures: r.counter(
                "fatal_failures_total",
                "Failures of a part txgate cannot serve without; each ends the process",
            ),
            start_time: {
                let gauge = r.gauge(
                    "start_time_seconds",
                    "Unix time the process started, in seconds",
                );
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                gauge.set(i64::try_from(now).unwrap_or(i64::MAX));
                gauge
            },
        }
    }
}
