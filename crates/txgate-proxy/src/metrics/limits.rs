//! Per-client limit metrics.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::registrar::Registrar;

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
    /// Clients tracked, by table (`ip`, `key`, `caller`).
    pub tracked: IntGaugeVec,
    /// The fleet's Redis: its link, syncs, and what they carried.
    pub redis: RedisMetrics,
}

/// `txgate_redis_*`: the link to the fleet's shared store.
pub struct RedisMetrics {
    /// 1 while syncs succeed (limits are the fleet's), 0 otherwise (each
    /// instance enforces its local share).
    pub up: IntGauge,
    /// Syncs by result (`ok`, `error`).
    pub syncs: IntCounterVec,
    /// Connection attempts by result (`ok`, `error`).
    pub connects: IntCounterVec,
    /// Client reports sent.
    pub clients_synced: IntCounter,
    /// Client reports dropped because Redis was down (that usage stays
    /// local).
    pub dropped: IntCounter,
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
        let redis = RedisMetrics {
            up: r.gauge(
                "redis_up",
                "1 while syncs with the fleet's Redis succeed (limits are fleet-wide), 0 while \
                 each instance enforces its local share",
            ),
            syncs: r.counter_vec(
                "redis_syncs_total",
                "Syncs of limit usage with the fleet's Redis, by result",
                &["result"],
            ),
            connects: r.counter_vec(
                "redis_connects_total",
                "Connections to the fleet's Redis, by result",
                &["result"],
            ),
            clients_synced: r.counter(
                "redis_clients_synced_total",
                "Per-client usage reports sent to the fleet's Redis",
            ),
            dropped: r.counter(
                "redis_usage_dropped_total",
                "Per-client usage reports dropped while Redis was down (that usage stayed local)",
            ),
        };
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
            tracked: r.gauge_vec(
                "limit_tracked_clients",
                "Clients tracked by the rate limits, by table (ip, key: bounded by limits.max_clients; caller: signed conditional callers, bounded by conditional.max_callers)",
                &["table"],
            ),
            redis,
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

/// The `result` label of `txgate_redis_syncs_total` and
/// `txgate_redis_connects_total`.
const RESULTS: [&str; 2] = ["ok", "error"];

impl RedisMetrics {
    /// Creates every `result` series at 0, once the link's task starts
    /// (an instance without the sync exports none).
    pub fn register_results(&self) {
        for result in RESULTS {
            self.syncs.with_label_values(&[result]);
            self.connects.with_label_values(&[result]);
        }
    }

    /// `txgate_redis_syncs_total{result}` of one sync.
    pub fn synced(&self, ok: bool) -> IntCounter {
        self.syncs.with_label_values(&[RESULTS[usize::from(!ok)]])
    }

    /// `txgate_redis_connects_total{result}` of one connection attempt.
    pub fn connected(&self, ok: bool) -> IntCounter {
        self.connects
            .with_label_values(&[RESULTS[usize::from(!ok)]])
    }
}

/// Which limit refused, for `data.reason` and the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// All calls of one IP.
    IpCalls,
    /// Submissions of one IP.
    IpTxs,
    /// All calls of one key.
    KeyCalls,
    /// Submissions of one key.
    KeyTxs,
}

impl Limit {
    /// Every limit, in label order.
    pub const ALL: [Limit; 4] = [Limit::IpCalls, Limit::IpTxs, Limit::KeyCalls, Limit::KeyTxs];

    /// The `data.reason` and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::IpCalls => "ip_rate",
            Limit::IpTxs => "ip_tx_rate",
            Limit::KeyCalls => "key_rate",
            Limit::KeyTxs => "key_tx_rate",
        }
    }
}
