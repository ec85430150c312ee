//! `[screen]`: screening of raw-transaction submissions, with its
//! [`backpressure`], [`cooldown`] and [`pacing`] subsections.

pub mod backpressure;
pub mod cooldown;
pub mod pacing;

use std::time::Duration;

use serde::Deserialize;

use self::backpressure::BackpressureConfig;
use self::cooldown::CooldownConfig;
use self::pacing::PacingConfig;
use crate::error::{ConfigError, require_positive};

/// Default: screening on (`screen.enabled`).
pub const DEFAULT_SCREEN_ENABLED: bool = true;
/// Default: refuse for real, not monitor-only.
pub const DEFAULT_MONITOR_ONLY: bool = false;
/// Default: how long a denied fingerprint stays denied (DESIGN: 128 s).
pub const DEFAULT_DENIED_TTL_SECS: u64 = 128;
/// Default: how long a fingerprint stays suspect after its ban.
pub const DEFAULT_SUSPECT_WINDOW_SECS: u64 = 128;
/// Default: denied and suspect fingerprints held at most.
pub const DEFAULT_MAX_DENIED: usize = 1_000_000;
/// Default: how long a failed tx hash is refused outright.
pub const DEFAULT_RECENT_FAILURE_TTL_SECS: u64 = 60;
/// Default: failed tx hashes held at most.
pub const DEFAULT_MAX_RECENT_FAILURES: usize = 1_000_000;
/// Default: how long a recovered sender stays cached by tx hash.
pub const DEFAULT_SENDER_CACHE_TTL_SECS: u64 = 300;
/// Default: senders cached at most.
pub const DEFAULT_MAX_CACHED_SENDERS: usize = 1_000_000;
/// Default: how long a forward is remembered for attribution.
pub const DEFAULT_PENDING_TIMEOUT_SECS: u64 = 30;
/// Default: pending forwards remembered at most.
pub const DEFAULT_MAX_PENDING: usize = 262_144;
/// Default: how long a forwarded tx hash is remembered with its
/// fingerprint and sender.
pub const DEFAULT_FORWARDED_TTL_SECS: u64 = 60;
/// Default: forwarded tx hashes held at most; sized for 10,000 tx/s over
/// 60 s.
pub const DEFAULT_MAX_FORWARDED: usize = 600_000;
/// Default: how long one forward of a suspect fingerprint holds its slot.
pub const DEFAULT_SHAPING_HOLD_MS: u64 = 4_000;
/// Default: screened calls of one JSON-RPC batch screened concurrently at
/// most. Only ShouldForward probes wait; 64 lets a typical batch ask the
/// sidecar in one round trip while one batch still cannot open more than
/// 64 probes at once.
pub const DEFAULT_BATCH_CONCURRENCY: usize = 64;
/// Default: no ban snapshot.
pub const DEFAULT_SNAPSHOT_PATH: &str = "";
/// Default: snapshot every 30 s (and at shutdown).
pub const DEFAULT_SNAPSHOT_INTERVAL_SECS: u64 = 30;

/// Screening of `eth_sendRawTransaction` and its siblings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ScreenConfig {
    /// Screen at all; off forwards the screened methods like any other.
    pub enabled: bool,
    /// Count and log what would be refused, forward everything.
    pub monitor_only: bool,
    /// Accepted chain ids; empty accepts every chain id.
    pub chain_ids: Vec<u64>,
    /// How long a denied fingerprint stays denied.
    #[serde(rename = "denied_ttl_secs", deserialize_with = "crate::duration::secs")]
    pub denied_ttl: Duration,
    /// How long a fingerprint stays suspect (shaped) after its ban.
    #[serde(
        rename = "suspect_window_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub suspect_window: Duration,
    /// Denied and suspect fingerprints held at most.
    pub max_denied: usize,
    /// How long a failed tx hash is refused before any ECDSA.
    #[serde(
        rename = "recent_failure_ttl_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub recent_failure_ttl: Duration,
    /// Failed tx hashes held at most.
    pub max_recent_failures: usize,
    /// How long a recovered sender stays cached by tx hash.
    #[serde(
        rename = "sender_cache_ttl_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub sender_cache_ttl: Duration,
    /// Senders cached at most.
    pub max_cached_senders: usize,
    /// How long a forward is remembered to charge a later invalidation.
    #[serde(
        rename = "pending_timeout_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub pending_timeout: Duration,
    /// Pending forwards remembered at most.
    pub max_pending: usize,
    /// How long a forwarded tx hash is remembered with its fingerprint and
    /// sender, for the sources that name only the hash (the Credible Layer
    /// result stream).
    #[serde(
        rename = "forwarded_ttl_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub forwarded_ttl: Duration,
    /// Forwarded tx hashes held at most.
    pub max_forwarded: usize,
    /// How long one forward of a suspect fingerprint holds its slot.
    #[serde(
        rename = "shaping_hold_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub shaping_hold: Duration,
    /// Screened calls of one JSON-RPC batch screened concurrently at most;
    /// the others of the batch wait for a slot.
    pub batch_concurrency: usize,
    /// Sender backpressure.
    pub backpressure: BackpressureConfig,
    /// Assertion cooldowns.
    pub cooldown: CooldownConfig,
    /// Holding the refusals of a client that keeps being refused.
    pub pacing: PacingConfig,
    /// File the denied set is written to (periodically and at shutdown)
    /// and read from at start; empty: no snapshot.
    pub snapshot_path: String,
    /// Seconds between snapshots.
    #[serde(
        rename = "snapshot_interval_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub snapshot_interval: Duration,
}

impl ScreenConfig {
    /// Checks the `screen.*` keys, `screen.backpressure.*`,
    /// `screen.cooldown.*` and `screen.pacing.*` included.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("screen.denied_ttl_secs", &self.denied_ttl),
            ("screen.max_denied", &self.max_denied),
            ("screen.recent_failure_ttl_secs", &self.recent_failure_ttl),
            ("screen.max_recent_failures", &self.max_recent_failures),
            ("screen.sender_cache_ttl_secs", &self.sender_cache_ttl),
            ("screen.max_cached_senders", &self.max_cached_senders),
            ("screen.pending_timeout_secs", &self.pending_timeout),
            ("screen.max_pending", &self.max_pending),
            ("screen.forwarded_ttl_secs", &self.forwarded_ttl),
            ("screen.max_forwarded", &self.max_forwarded),
            ("screen.batch_concurrency", &self.batch_concurrency),
            ("screen.snapshot_interval_secs", &self.snapshot_interval),
        ])?;
        self.backpressure.validate()?;
        self.cooldown.validate()?;
        self.pacing.validate()?;
        self.validate_snapshot_path()
    }

    /// The snapshot is written beside its path: the directory must exist
    /// (a setting that cannot work is refused before anything listens, not
    /// found out at the first save).
    fn validate_snapshot_path(&self) -> Result<(), ConfigError> {
        let value = &self.snapshot_path;
        if !self.enabled || value.is_empty() {
            return Ok(());
        }
        let fail = |message: String| ConfigError {
            key: "screen.snapshot_path".into(),
            message,
        };
        let path = std::path::Path::new(value);
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => std::path::Path::new("."),
        };
        if !dir.is_dir() {
            return Err(fail(format!(
                "`{value}`: directory `{}` does not exist",
                dir.display()
            )));
        }
        if path.is_dir() {
            return Err(fail(format!("`{value}` is a directory, not a file")));
        }
        Ok(())
    }
}

impl Default for ScreenConfig {
    fn default() -> Self {
        ScreenConfig {
            enabled: DEFAULT_SCREEN_ENABLED,
            monitor_only: DEFAULT_MONITOR_ONLY,
            chain_ids: Vec::new(),
            denied_ttl: Duration::from_secs(DEFAULT_DENIED_TTL_SECS),
            suspect_window: Duration::from_secs(DEFAULT_SUSPECT_WINDOW_SECS),
            max_denied: DEFAULT_MAX_DENIED,
            recent_failure_ttl: Duration::from_secs(DEFAULT_RECENT_FAILURE_TTL_SECS),
            max_recent_failures: DEFAULT_MAX_RECENT_FAILURES,
            sender_cache_ttl: Duration::from_secs(DEFAULT_SENDER_CACHE_TTL_SECS),
            max_cached_senders: DEFAULT_MAX_CACHED_SENDERS,
            pending_timeout: Duration::from_secs(DEFAULT_PENDING_TIMEOUT_SECS),
            max_pending: DEFAULT_MAX_PENDING,
            forwarded_ttl: Duration::from_secs(DEFAULT_FORWARDED_TTL_SECS),
            max_forwarded: DEFAULT_MAX_FORWARDED,
            shaping_hold: Duration::from_millis(DEFAULT_SHAPING_HOLD_MS),
            batch_concurrency: DEFAULT_BATCH_CONCURRENCY,
            backpressure: BackpressureConfig::default(),
            cooldown: CooldownConfig::default(),
            pacing: PacingConfig::default(),
            snapshot_path: DEFAULT_SNAPSHOT_PATH.to_string(),
            snapshot_interval: Duration::from_secs(DEFAULT_SNAPSHOT_INTERVAL_SECS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut ScreenConfig);

    #[test]
    fn defaults_are_valid() {
        ScreenConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 16] = [
            (|c| c.denied_ttl = Duration::ZERO, "screen.denied_ttl_secs"),
            (|c| c.max_denied = 0, "screen.max_denied"),
            (
                |c| c.recent_failure_ttl = Duration::ZERO,
                "screen.recent_failure_ttl_secs",
            ),
            (|c| c.max_recent_failures = 0, "screen.max_recent_failures"),
            (
                |c| c.sender_cache_ttl = Duration::ZERO,
                "screen.sender_cache_ttl_secs",
            ),
            (|c| c.max_cached_senders = 0, "screen.max_cached_senders"),
            (
                |c| c.pending_timeout = Duration::ZERO,
                "screen.pending_timeout_secs",
            ),
            (|c| c.max_pending = 0, "screen.max_pending"),
            (
                |c| c.forwarded_ttl = Duration::ZERO,
                "screen.forwarded_ttl_secs",
            ),
            (|c| c.max_forwarded = 0, "screen.max_forwarded"),
            (|c| c.batch_concurrency = 0, "screen.batch_concurrency"),
            (
                |c| c.snapshot_interval = Duration::ZERO,
                "screen.snapshot_interval_secs",
            ),
            // The subsections are checked too.
            (|c| c.backpressure.tokens = 0, "screen.backpressure.tokens"),
            (
                |c| c.cooldown.max_assertions = 0,
                "screen.cooldown.max_assertions",
            ),
            (
                |c| c.cooldown.assertion_idle = Duration::ZERO,
                "screen.cooldown.assertion_idle_secs",
            ),
            (|c| c.pacing.max_held = 0, "screen.pacing.max_held"),
        ];
        for (change, key) in cases {
            let mut c = ScreenConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }
}
