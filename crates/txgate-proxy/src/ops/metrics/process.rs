//! Process metrics: the background tasks and the parts txgate cannot serve
//! without.

use prometheus::IntCounter;

use super::registrar::Registrar;

/// Process metrics.
pub struct ProcessMetrics {
    /// Background tasks that did not stop within their deadline at
    /// shutdown (aborted; the log names each).
    pub tasks_stopped_late: IntCounter,
    /// Failures of a part txgate cannot serve without (a worker, a
    /// listener, the admin listener): each one ends the process.
    pub fatal_failures: IntCounter,
}

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessMetrics").finish_non_exhaustive()
    }
}

impl ProcessMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ProcessMetrics {
        ProcessMetrics {
            tasks_stopped_late: r.counter(
                "background_tasks_stopped_late_total",
                "Background tasks aborted because they did not stop within their deadline",
            ),
            fatal_failures: r.counter(
                "fatal_failures_total",
                "Failures of a part txgate cannot serve without; each ends the process",
            ),
        }
    }
}
