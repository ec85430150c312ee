//! [`ScreenSettings`]: every tunable of screening, and the defaults a
//! config starts from.

use crate::assertion::CooldownSettings;
use crate::backpressure::BackpressureSettings;
use crate::ttl::Millis;

/// Every tunable of screening, in milliseconds and entry counts.
#[derive(Debug, Clone, PartialEq)]
pub struct ScreenSettings {
    /// Accepted chain ids; empty accepts all.
    pub chain_ids: Vec<u64>,
    /// How long a denied fingerprint stays denied.
    pub denied_ttl: Millis,
    /// After a ban ends, how long the fingerprint stays suspect.
    pub suspect_window: Millis,
    /// Denied (and suspect) fingerprints held at most.
    pub max_denied: usize,
    /// How long a failed tx hash is refused outright.
    pub recent_failure_ttl: Millis,
    /// Failed tx hashes held at most.
    pub max_recent_failures: usize,
    /// How long a recovered sender stays cached.
    pub sender_cache_ttl: Millis,
    /// Senders cached at most.
    pub max_cached_senders: usize,
    /// How long a forwarded fingerprint is remembered for attribution.
    pub pending_timeout: Millis,
    /// Pending fingerprints held at most.
    pub max_pending: usize,
    /// How long a forwarded tx hash is remembered with its fingerprint and
    /// sender (for sources that name only the hash).
    pub forwarded_ttl: Millis,
    /// Forwarded tx hashes held at most.
    pub max_forwarded: usize,
    /// How long one forward of a suspect fingerprint holds its slot.
    pub shaping_hold: Millis,
    /// Sender backpressure.
    pub backpressure: BackpressureSettings,
    /// Assertion cooldowns.
    pub cooldown: CooldownSettings,
    /// How long a call (target, selector) stays hot after an invalidation
    /// named it (see [`crate::hot`]); 0: calls are not tracked.
    pub hot_window: Millis,
    /// Hot calls held at most.
    pub max_hot_calls: usize,
}

impl Default for ScreenSettings {
    fn default() -> Self {
        ScreenSettings {
            chain_ids: Vec::new(),
            denied_ttl: 128_000,
            suspect_window: 128_000,
            max_denied: 1_000_000,
            recent_failure_ttl: 60_000,
            max_recent_failures: 1_000_000,
            sender_cache_ttl: 300_000,
            max_cached_senders: 1_000_000,
            pending_timeout: 30_000,
            max_pending: 262_144,
            forwarded_ttl: 60_000,
            max_forwarded: 600_000,
            shaping_hold: 4_000,
            backpressure: BackpressureSettings {
                capacity: 20.0,
                refill_per_sec: 5.0,
                backoff_initial: 1_000,
                backoff_max: 30_000,
                max_senders: 100_000,
            },
            cooldown: CooldownSettings {
                distinct_fingerprints: 10,
                window: 128_000,
                duration: 300_000,
                trickle_interval: 2_000,
                max_assertions: 65_536,
                idle: 3_600_000,
            },
            hot_window: 0,
            max_hot_calls: 65_536,
        }
    }
}
