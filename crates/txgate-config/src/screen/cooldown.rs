//! `[screen.cooldown]`: assertion cooldowns.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default: distinct failing fingerprints that start a cooldown.
pub const DEFAULT_COOLDOWN_DISTINCT_FINGERPRINTS: usize = 10;
/// Default: cooldown length.
pub const DEFAULT_COOLDOWN_SECS: u64 = 300;
/// Default: one call per this interval passes during a cooldown.
pub const DEFAULT_TRICKLE_INTERVAL_MS: u64 = 2_000;
/// Default: assertions tracked at most.
pub const DEFAULT_MAX_ASSERTIONS: usize = 65_536;
/// Default: an assertion idle this long (no invalidation, no cooldown
/// running) is evicted from the assertion table.
pub const DEFAULT_ASSERTION_IDLE_SECS: u64 = 3_600;

/// Assertion cooldowns.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CooldownConfig {
    /// Distinct failing fingerprints under one assertion (within the denied
    /// TTL) that start a cooldown; 0 turns cooldowns off.
    pub distinct_fingerprints: usize,
    /// Cooldown length.
    #[serde(rename = "duration_secs", deserialize_with = "crate::duration::secs")]
    pub duration: Duration,
    /// During a cooldown, one matching call passes per this interval.
    #[serde(
        rename = "trickle_interval_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub trickle_interval: Duration,
    /// Assertions tracked at most.
    pub max_assertions: usize,
    /// An assertion with no invalidation for this long, and no cooldown
    /// running, is evicted from the assertion table, so that new assertions
    /// keep getting cooldown tracking.
    #[serde(
        rename = "assertion_idle_secs",
        deserialize_with = "crate::duration::secs"
    )]
    pub assertion_idle: Duration,
}

impl CooldownConfig {
    /// Checks the `screen.cooldown.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            (
                "screen.cooldown.trickle_interval_ms",
                &self.trickle_interval,
            ),
            ("screen.cooldown.max_assertions", &self.max_assertions),
            ("screen.cooldown.assertion_idle_secs", &self.assertion_idle),
        ])
    }
}

impl Default for CooldownConfig {
    fn default() -> Self {
        CooldownConfig {
            distinct_fingerprints: DEFAULT_COOLDOWN_DISTINCT_FINGERPRINTS,
            duration: Duration::from_secs(DEFAULT_COOLDOWN_SECS),
            trickle_interval: Duration::from_millis(DEFAULT_TRICKLE_INTERVAL_MS),
            max_assertions: DEFAULT_MAX_ASSERTIONS,
            assertion_idle: Duration::from_secs(DEFAULT_ASSERTION_IDLE_SECS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut CooldownConfig);

    #[test]
    fn defaults_are_valid() {
        CooldownConfig::default().validate().unwrap();
        // 0 distinct fingerprints turns cooldowns off; it is not an error.
        CooldownConfig {
            distinct_fingerprints: 0,
            ..CooldownConfig::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 3] = [
            (
                |c| c.trickle_interval = Duration::ZERO,
                "screen.cooldown.trickle_interval_ms",
            ),
            (|c| c.max_assertions = 0, "screen.cooldown.max_assertions"),
            (
                |c| c.assertion_idle = Duration::ZERO,
                "screen.cooldown.assertion_idle_secs",
            ),
        ];
        for (change, key) in cases {
            let mut c = CooldownConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }
}
