//! The screening state behind the request path: its settings from the
//! config, the one way it learns ([`Invalidations`]), and its upkeep.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use txgate_config::{ScreenConfig, SidecarConfig};
use txgate_screen::assertion::CooldownSettings;
use txgate_screen::backpressure::BackpressureSettings;
use txgate_screen::{
    Applied, Invalidation, Screen, ScreenSettings, UnixMillis, millis as ms, unix_millis,
};

use crate::metrics::Metrics;
use crate::screening::VerdictCache;

/// Screening settings from the config's `[screen]` section, and from
/// `[sidecar]` how long calls are tracked hot (when `tracks_hot`: a
/// source is asked ShouldForward about hot calls).
pub fn screen_settings(
    config: &ScreenConfig,
    sidecar: &SidecarConfig,
    tracks_hot: bool,
) -> ScreenSettings {
    ScreenSettings {
        chain_ids: config.chain_ids.clone(),
        denied_ttl: ms(config.denied_ttl),
        suspect_window: ms(config.suspect_window),
        max_denied: config.max_denied,
        recent_failure_ttl: ms(config.recent_failure_ttl),
        max_recent_failures: config.max_recent_failures,
        sender_cache_ttl: ms(config.sender_cache_ttl),
        max_cached_senders: config.max_cached_senders,
        pending_timeout: ms(config.pending_timeout),
        max_pending: config.max_pending,
        forwarded_ttl: ms(config.forwarded_ttl),
        max_forwarded: config.max_forwarded,
        shaping_hold: ms(config.shaping_hold),
        backpressure: BackpressureSettings {
            capacity: f64::from(config.backpressure.tokens),
            refill_per_sec: config.backpressure.refill_per_sec,
            backoff_initial: ms(config.backpressure.backoff_initial),
            backoff_max: ms(config.backpressure.backoff_max),
            max_senders: config.backpressure.max_senders,
        },
        cooldown: CooldownSettings {
            distinct_fingerprints: config.cooldown.distinct_fingerprints,
            window: ms(config.denied_ttl),
            duration: ms(config.cooldown.duration),
            trickle_interval: ms(config.cooldown.trickle_interval),
            max_assertions: config.cooldown.max_assertions,
            idle: ms(config.cooldown.assertion_idle),
        },
        hot_window: if tracks_hot {
            ms(sidecar.hot_window)
        } else {
            0
        },
        max_hot_calls: sidecar.max_hot_calls,
    }
}

/// What the wall clock reads: the start txgate stamps on what it learns
/// itself, and what a batch is applied at (a ban's start is told on the
/// wall clock, which crosses hosts; see `txgate_screen::wall`).
pub fn wall_now() -> UnixMillis {
    unix_millis(SystemTime::now())
}

/// The one way screening state is learned: batches of invalidations.
/// Cheap to clone; shared with whatever delivers verdicts.
#[derive(Debug, Clone)]
pub struct Invalidations {
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
}

impl Invalidations {
    /// Invalidations applied to `screen`, counted in `metrics`.
    pub fn new(screen: Arc<Screen>, metrics: Arc<Metrics>) -> Invalidations {
        Invalidations { screen, metrics }
    }

    /// Applies a batch in one pass (see [`Screen::apply`]) and counts what
    /// it did.
    pub fn apply(&self, batch: &[Invalidation]) -> Applied {
        let now = self.screen.millis(tokio::time::Instant::now().into_std());
        let applied = self.screen.apply(batch, now, wall_now());
        self.metrics.screen.applied(&applied);
        applied
    }

    /// The metrics it counts in.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Background upkeep of the screening state, until `stop`: every 100 ms,
/// sweep one shard of each cache (a full pass every 64 ticks, each step
/// short), finished cooldowns and idle assertions; once a second, refresh
/// the size gauges.
pub async fn upkeep(
    screen: Arc<Screen>,
    verdicts: Option<Arc<VerdictCache>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Evictions since the start, those of the snapshot import included.
    let mut evicted = 0;
    for round in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = screen.millis(tokio::time::Instant::now().into_std());
        screen.sweep(now, 1);
        if let Some(verdicts) = &verdicts {
            verdicts.sweep(now, 1);
        }
        // The gauges read every shard of every map: once a second.
        if round % 10 != 0 {
            continue;
        }
        metrics.screen.sizes(&screen.sizes());
        let total = screen.assertions_evicted();
        metrics
            .screen
            .assertions_evicted
            .inc_by(total.saturating_sub(evicted) as u64);
        evicted = total;
        if let Some(verdicts) = &verdicts {
            metrics.screen.entries.verdicts.set(verdicts.len() as i64);
        }
    }
}
