//! `[screen.backpressure]`: a token bucket per sender, charged only by
//! invalidations.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_at_least, require_positive};

/// Default: tokens in a sender's bucket.
pub const DEFAULT_BACKPRESSURE_TOKENS: u32 = 20;
/// Default: tokens returned per second.
pub const DEFAULT_BACKPRESSURE_REFILL_PER_SEC: f64 = 5.0;
/// Default: first backoff.
pub const DEFAULT_BACKOFF_INITIAL_MS: u64 = 1_000;
/// Default: longest backoff.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 30_000;
/// Default: senders under backpressure tracked at most.
pub const DEFAULT_MAX_TRACKED_SENDERS: usize = 100_000;

/// Token bucket per sender, charged only by invalidations.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BackpressureConfig {
    /// Tokens in a full bucket: invalidations a sender may cause before it
    /// is backed off.
    pub tokens: u32,
    /// Tokens returned per second.
    pub refill_per_sec: f64,
    /// First backoff.
    #[serde(
        rename = "backoff_initial_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub backoff_initial: Duration,
    /// Longest backoff (each further dry run doubles the last).
    #[serde(
        rename = "backoff_max_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub backoff_max: Duration,
    /// Senders tracked at most.
    pub max_senders: usize,
}

impl BackpressureConfig {
    /// Checks the `screen.backpressure.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("screen.backpressure.tokens", &self.tokens),
            (
                "screen.backpressure.backoff_initial_ms",
                &self.backoff_initial,
            ),
            ("screen.backpressure.max_senders", &self.max_senders),
        ])?;
        let refill = self.refill_per_sec;
        if !(refill.is_finite() && refill > 0.0) {
            return Err(ConfigError::new(
                "screen.backpressure.refill_per_sec",
                format!("must be a number greater than 0, is {refill}"),
            ));
        }
        require_at_least(
            "screen.backpressure.backoff_max_ms",
            self.backoff_max,
            "screen.backpressure.backoff_initial_ms",
            self.backoff_initial,
        )
    }
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        BackpressureConfig {
            tokens: DEFAULT_BACKPRESSURE_TOKENS,
            refill_per_sec: DEFAULT_BACKPRESSURE_REFILL_PER_SEC,
            backoff_initial: Duration::from_millis(DEFAULT_BACKOFF_INITIAL_MS),
            backoff_max: Duration::from_millis(DEFAULT_BACKOFF_MAX_MS),
            max_senders: DEFAULT_MAX_TRACKED_SENDERS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut BackpressureConfig);

    #[test]
    fn defaults_are_valid() {
        BackpressureConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 8] = [
            (|c| c.tokens = 0, "screen.backpressure.tokens"),
            (
                |c| c.backoff_initial = Duration::ZERO,
                "screen.backpressure.backoff_initial_ms",
            ),
            (|c| c.max_senders = 0, "screen.backpressure.max_senders"),
            (
                |c| c.refill_per_sec = 0.0,
                "screen.backpressure.refill_per_sec",
            ),
            (
                |c| c.refill_per_sec = -1.0,
                "screen.backpressure.refill_per_sec",
            ),
            (
                |c| c.refill_per_sec = f64::NAN,
                "screen.backpressure.refill_per_sec",
            ),
            (
                |c| c.refill_per_sec = f64::INFINITY,
                "screen.backpressure.refill_per_sec",
            ),
            (
                |c| c.backoff_max = Duration::from_millis(1),
                "screen.backpressure.backoff_max_ms",
            ),
        ];
        for (change, key) in cases {
            let mut c = BackpressureConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }
}
