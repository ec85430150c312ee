//! Ban snapshot metrics: writes, and what the start restored.

use prometheus::{IntCounter, IntGauge};

use super::registrar::Registrar;

/// Ban snapshot metrics.
pub struct SnapshotMetrics {
    /// Snapshots written.
    pub written: IntCounter,
    /// Snapshot writes that failed (the previous snapshot stays).
    pub write_failed: IntCounter,
    /// Bans restored from the snapshot at start.
    pub restored: IntGauge,
    /// Snapshot files refused at start because they could not be read.
    pub load_unreadable: IntCounter,
    /// Snapshot files refused at start as corrupt, truncated or of an
    /// unknown format.
    pub load_unusable: IntCounter,
    /// Starts that restored the previous snapshot because the newest was
    /// missing or unusable.
    pub load_fallback: IntCounter,
    /// Bans restored at start from a snapshot of an older fingerprint
    /// rule (format 1): those of calls with 4 bytes of calldata or fewer
    /// can no longer match and lapse with their remaining time.
    pub restored_old_format: IntGauge,
    /// Unix time of the last snapshot written.
    pub last_success: IntGauge,
    /// Seconds between snapshots (0: snapshots off).
    pub interval: IntGauge,
}

impl std::fmt::Debug for SnapshotMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotMetrics").finish_non_exhaustive()
    }
}

impl SnapshotMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> SnapshotMetrics {
        let writes = r.counter_vec(
            "ban_snapshots_total",
            "Ban snapshot writes by result",
            &["result"],
        );
        let loads = r.counter_vec(
            "ban_snapshot_load_failures_total",
            "Snapshot files refused at start, by reason",
            &["reason"],
        );
        SnapshotMetrics {
            written: writes.with_label_values(&["ok"]),
            write_failed: writes.with_label_values(&["error"]),
            restored: r.gauge(
                "ban_snapshot_restored",
                "Bans restored from the snapshot at start",
            ),
            load_unreadable: loads.with_label_values(&["unreadable"]),
            load_unusable: loads.with_label_values(&["unusable"]),
            restored_old_format: r.gauge(
                "ban_snapshot_restored_old_format",
                "Bans restored at start from a snapshot of an older fingerprint rule (format 1)",
            ),
            last_success: r.gauge(
                "ban_snapshot_last_success_timestamp_seconds",
                "Unix time of the last ban snapshot written (0: none yet)",
            ),
            interval: r.gauge(
                "ban_snapshot_interval_seconds",
                "Seconds between ban snapshots (0: snapshots off)",
            ),
            load_fallback: r.counter(
                "ban_snapshot_fallbacks_total",
                "Starts that restored the previous snapshot because the newest was unusable",
            ),
        }
    }
}
