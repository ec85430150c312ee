//! Per-client limit metrics.

use prometheus::{IntCounter, IntGauge};

use super::registrar::Registrar;
use crate::limits::clients::Limit;

/// `txgate_limit_refusals_total{limit}` and the shared-bucket counter.
pub struct LimitMetrics {
    refusals: Vec<IntCounter>,
    /// Requests refused for an unknown API key.
    pub unknown_key: IntCounter,
    /// Charges that went to a full shard's shared bucket.
    pub shared: IntCounter,
    /// API keys in force.
    pub keys: IntGauge,
    /// Reloads of the keys that failed (the old set stayed).
    pub keys_reload_failed: IntCounter,
}

impl std::fmt::Debug for LimitMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitMetrics").finish_non_exhaustive()
    }
}

impl LimitMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> LimitMetrics {
        let refusals = r.counter_vec(
            "limit_refusals_total",
            "Requests refused by a per-client limit, by limit",
            &["limit"],
        );
        LimitMetrics {
            refusals: Limit::ALL
                .iter()
                .map(|l| refusals.with_label_values(&[l.as_str()]))
                .collect(),
            unknown_key: refusals.with_label_values(&["unknown_key"]),
            shared: r.counter(
                "limit_shared_bucket_total",
                "Charges of clients that found their table shard full of clients in debt \
                 and shared its one bucket",
            ),
            keys: r.gauge("limit_api_keys", "API keys in force"),
            keys_reload_failed: r.counter(
                "limit_api_keys_reload_failures_total",
                "Reloads of the API keys refused (unreadable file, unknown tier): the old \
                 set stayed",
            ),
        }
    }

    /// The counter of one limit.
    pub fn refused(&self, limit: Limit) -> &IntCounter {
        &self.refusals[limit as usize]
    }
}
