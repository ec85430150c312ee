//! Screening metrics: decisions by reason, screening time, the sender
//! cache, cache sizes, what invalidations did, bundles.

use prometheus::{Histogram, IntCounter, IntGauge, IntGaugeVec};
use txgate_screen::{Applied, Reason, Sizes};

use super::BundleMetrics;
use super::registrar::Registrar;

/// How a screened call was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearedAs {
    /// Nothing against it.
    Clean,
    /// A suspect fingerprint given its one slot (or a cooldown trickle).
    Suspect,
    /// A contract creation (no fingerprint).
    Creation,
}

impl ClearedAs {
    const ALL: [ClearedAs; 3] = [ClearedAs::Clean, ClearedAs::Suspect, ClearedAs::Creation];

    fn as_str(self) -> &'static str {
        match self {
            ClearedAs::Clean => "clean",
            ClearedAs::Suspect => "suspect",
            ClearedAs::Creation => "contract_creation",
        }
    }
}

/// Screening time buckets in seconds, 1 µs to 10 ms.
pub(super) const SCREEN_BUCKETS: &[f64] = &[
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.01,
];

/// Stage time buckets in seconds, 250 ns to 50 ms: a stage takes from a
/// fraction of a microsecond (a cache probe) to tens (one ECDSA recovery),
/// and a ShouldForward probe milliseconds (its deadline included).
pub(super) const STAGE_BUCKETS: &[f64] = &[
    0.000_000_25,
    0.000_000_5,
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.01,
    0.025,
    0.05,
];

/// `txgate_screen_entries{cache}`: entries held by each cache.
#[derive(Debug)]
pub struct CacheGauges {
    /// Denied and suspect fingerprints.
    pub denied: IntGauge,
    /// Recently failed tx hashes.
    pub recent_failures: IntGauge,
    /// Cached senders.
    pub senders: IntGauge,
    /// Senders under backpressure.
    pub backpressured_senders: IntGauge,
    /// Forwards remembered for attribution.
    pub pending: IntGauge,
    /// Forwarded tx hashes remembered (for hash-only sources).
    pub forwarded: IntGauge,
    /// Calls in cooldown.
    pub cooldowns: IntGauge,
    /// Assertions in the table.
    pub assertions: IntGauge,
    /// ShouldForward "forward" verdicts cached.
    pub verdicts: IntGauge,
    /// Calls (target, selector) an invalidation named lately.
    pub hot_calls: IntGauge,
}

impl CacheGauges {
    fn new(vec: &IntGaugeVec) -> CacheGauges {
        let g = |name: &str| vec.with_label_values(&[name]);
        CacheGauges {
            denied: g("denied"),
            recent_failures: g("recent_failures"),
            senders: g("senders"),
            backpressured_senders: g("backpressured_senders"),
            pending: g("pending"),
            forwarded: g("forwarded"),
            cooldowns: g("cooldowns"),
            assertions: g("assertions"),
            verdicts: g("verdicts"),
            hot_calls: g("hot_calls"),
        }
    }
}

/// `txgate_invalidations_total{result}`: what invalidations did.
#[derive(Debug)]
pub struct InvalidationCounters {
    /// New denied fingerprints.
    pub banned: IntCounter,
    /// Bans already held (their end kept, or moved later by a later
    /// failure: never restarted).
    pub refreshed: IntCounter,
    /// Not applied: the ban's life was over before it arrived (a replay,
    /// or a ban learned late).
    pub expired: IntCounter,
    /// Ignored: an outdated assertion version.
    pub stale_version: IntCounter,
    /// Assertion versions bumped (older bans lifted).
    pub version_bump: IntCounter,
    /// Tx hashes added to the recent-failure cache.
    pub recent_failure: IntCounter,
    /// Invalidations charged to a sender.
    pub sender_charged: IntCounter,
    /// Senders that entered backoff.
    pub sender_backoff: IntCounter,
    /// Charges lost: the sender table is full of backed-off senders.
    pub sender_untracked: IntCounter,
    /// Cooldowns started.
    pub cooldown_started: IntCounter,
    /// Failures of a tx hash already learned from another source (or
    /// twice): not charged or counted again.
    pub duplicate: IntCounter,
}

/// The steps screening times (screening's `Laps`), in order: the
/// candidate (hex and tx hash), each stage of screening, then the probe
/// (ShouldForward when asked, and the pending attribution).
pub fn stage_labels() -> Vec<&'static str> {
    let mut labels = vec!["candidate"];
    labels.extend(txgate_screen::stage::stage_names());
    labels.push("probe");
    labels
}

/// Screening metrics, every label set created up front.
pub struct ScreenMetrics {
    cleared: Vec<IntCounter>,
    refused: Vec<IntCounter>,
    would_refuse: Vec<IntCounter>,
    /// Screening time per call, from the raw param to the decision.
    pub duration: Histogram,
    /// `txgate_screen_stage_duration_seconds{stage}`: the time of each
    /// step, in the order of [`stage_labels`] (what
    /// screening's `Laps` observes by position).
    pub stages: Vec<Histogram>,
    /// `txgate_refusal_log_suppressed_total{reason}`: refusal lines left
    /// out, by reason (indexed by [`Reason::index`]).
    pub refusal_log_suppressed: Vec<IntCounter>,
    /// Sender cache hits.
    pub sender_cache_hits: IntCounter,
    /// Sender cache misses (one libsecp256k1 recovery each).
    pub sender_cache_misses: IntCounter,
    /// Cache sizes.
    pub entries: CacheGauges,
    /// `txgate_screen_capacity{cache}`: each cache's bound (0: none).
    pub capacity: CacheGauges,
    /// What invalidations did.
    pub invalidations: InvalidationCounters,
    /// Assertions evicted from the table (idle).
    pub assertions_evicted: IntCounter,
    /// What became of each `eth_sendBundle`.
    pub bundles: BundleMetrics,
}

impl std::fmt::Debug for ScreenMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenMetrics").finish_non_exhaustive()
    }
}

impl ScreenMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ScreenMetrics {
        let decisions = r.counter_vec(
            "screen_decisions_total",
            "Screened calls by decision (forwarded, refused, would_refuse in monitor-only \
             mode) and reason",
            &["decision", "reason"],
        );
        let by_reason = |decision: &str| {
            Reason::ALL
                .iter()
                .map(|r| decisions.with_label_values(&[decision, r.as_str()]))
                .collect::<Vec<_>>()
        };
        let cache = r.counter_vec(
            "screen_sender_cache_total",
            "Sender lookups by result (a miss costs one ECDSA recovery)",
            &["result"],
        );
        let entries = r.gauge_vec(
            "screen_entries",
            "Entries held by each screening cache",
            &["cache"],
        );
        let applied = r.counter_vec(
            "invalidations_total",
            "Invalidations applied, by what they did",
            &["result"],
        );
        let counter = |name: &str| applied.with_label_values(&[name]);
        ScreenMetrics {
            cleared: ClearedAs::ALL
                .iter()
                .map(|p| decisions.with_label_values(&["forwarded", p.as_str()]))
                .collect(),
            refused: by_reason("refused"),
            would_refuse: by_reason("would_refuse"),
            duration: r.histogram(
                "screen_duration_seconds",
                "Screening time per call, raw param to decision",
                SCREEN_BUCKETS,
            ),
            stages: {
                let stages = r.histogram_vec(
                    "screen_stage_duration_seconds",
                    "Time of each screening step: candidate (hex, tx hash), each stage in \
                     order, probe (ShouldForward when asked, pending attribution)",
                    STAGE_BUCKETS,
                    &["stage"],
                );
                stage_labels()
                    .iter()
                    .map(|stage| stages.with_label_values(&[stage]))
                    .collect()
            },
            refusal_log_suppressed: {
                let suppressed = r.counter_vec(
                    "refusal_log_suppressed_total",
                    "Refusal log lines left out (over log.refusals_per_sec), by reason",
                    &["reason"],
                );
                Reason::ALL
                    .iter()
                    .map(|r| suppressed.with_label_values(&[r.as_str()]))
                    .collect()
            },
            sender_cache_hits: cache.with_label_values(&["hit"]),
            sender_cache_misses: cache.with_label_values(&["miss"]),
            entries: CacheGauges::new(&entries),
            capacity: CacheGauges::new(&r.gauge_vec(
                "screen_capacity",
                "Most entries each screening cache holds (0: no bound of its own)",
                &["cache"],
            )),
            invalidations: InvalidationCounters {
                banned: counter("banned"),
                refreshed: counter("refreshed"),
                expired: counter("expired"),
                stale_version: counter("stale_version"),
                version_bump: counter("version_bump"),
                recent_failure: counter("recent_failure"),
                sender_charged: counter("sender_charged"),
                sender_backoff: counter("sender_backoff"),
                sender_untracked: counter("sender_untracked"),
                cooldown_started: counter("cooldown_started"),
                duplicate: counter("duplicate"),
            },
            assertions_evicted: r.counter(
                "screen_assertions_evicted_total",
                "Assertions evicted from the table after going idle",
            ),
            bundles: BundleMetrics::new(r),
        }
    }

    /// Counts a forwarded screened call.
    pub fn cleared(&self, how: ClearedAs) {
        self.cleared[how as usize].inc();
    }

    /// Counts a refusal (or, in monitor-only mode, a would-be refusal).
    pub fn refused(&self, reason: Reason, monitor_only: bool) {
        let index = reason.index();
        if monitor_only {
            self.would_refuse[index].inc();
        } else {
            self.refused[index].inc();
        }
    }

    /// Sets each cache's bound, once at start.
    pub fn set_capacity(&self, settings: &txgate_screen::ScreenSettings, max_verdicts: usize) {
        let c = &self.capacity;
        let set = |g: &IntGauge, n: usize| g.set(i64::try_from(n).unwrap_or(i64::MAX));
        set(&c.denied, settings.max_denied);
        set(&c.recent_failures, settings.max_recent_failures);
        set(&c.senders, settings.max_cached_senders);
        set(&c.backpressured_senders, settings.backpressure.max_senders);
        set(&c.pending, settings.max_pending);
        set(&c.forwarded, settings.max_forwarded);
        set(&c.assertions, settings.cooldown.max_assertions);
        set(&c.verdicts, max_verdicts);
        set(&c.hot_calls, settings.max_hot_calls);
    }

    /// Sets the cache gauges.
    pub fn sizes(&self, sizes: &Sizes) {
        let e = &self.entries;
        let set = |g: &IntGauge, v: usize| g.set(v as i64);
        set(&e.denied, sizes.denied);
        set(&e.recent_failures, sizes.recent_failures);
        set(&e.senders, sizes.senders);
        set(&e.backpressured_senders, sizes.backpressured);
        set(&e.pending, sizes.pending);
        set(&e.forwarded, sizes.forwarded);
        set(&e.cooldowns, sizes.cooldowns);
        set(&e.assertions, sizes.assertions);
        set(&e.hot_calls, sizes.hot_calls);
    }

    /// Counts what a batch of invalidations did.
    pub fn applied(&self, a: &Applied) {
        let c = &self.invalidations;
        let add = |counter: &IntCounter, v: usize| counter.inc_by(v as u64);
        add(&c.banned, a.banned);
        add(&c.refreshed, a.refreshed);
        add(&c.expired, a.expired);
        add(&c.stale_version, a.stale);
        add(&c.version_bump, a.bumped);
        add(&c.recent_failure, a.recent_failures);
        add(&c.sender_charged, a.charged);
        add(&c.sender_backoff, a.backoffs);
        add(&c.sender_untracked, a.untracked);
        add(&c.cooldown_started, a.cooldowns);
        add(&c.duplicate, a.duplicates);
    }
}
