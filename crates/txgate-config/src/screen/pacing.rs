//! `[screen.pacing]`: holding the refusals of a client that keeps sending
//! refused submissions.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default: pacing on.
pub const DEFAULT_PACING_ENABLED: bool = true;
/// Default: refusals in a row from one client answered at once.
pub const DEFAULT_PACING_AFTER: u32 = 8;
/// Default: the first held refusal waits this long.
pub const DEFAULT_PACING_INITIAL_HOLD_MS: u64 = 1;
/// Default: holds double up to this.
pub const DEFAULT_PACING_MAX_HOLD_MS: u64 = 64;
/// Default: refusals held at once at most, all connections together.
pub const DEFAULT_PACING_MAX_HELD: usize = 4_096;
/// Default: clients whose streaks are kept at most.
pub const DEFAULT_PACING_MAX_CLIENTS: usize = 65_536;
/// Default: a streak is forgotten this long after its last refusal.
pub const DEFAULT_PACING_WINDOW_SECS: u64 = 60;
/// The longest `max_hold_ms` accepted (10 s).
pub const MAX_HOLD_MS_BOUND: u64 = 10_000;

/// Pacing of refused submissions (see `txgate_limits::pacing`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PacingConfig {
    /// Hold refusals at all.
    pub enabled: bool,
    /// Screening refusals in a row from one client (no submission taken by
    /// the node between them) answered at once; the next are held.
    pub after: u32,
    /// The first held refusal's wait; each further one in the streak
    /// doubles it.
    #[serde(
        rename = "initial_hold_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub initial_hold: Duration,
    /// The longest wait.
    #[serde(rename = "max_hold_ms", deserialize_with = "crate::duration::millis")]
    pub max_hold: Duration,
    /// Refusals held at once at most; beyond it, refusals are answered at
    /// once (and counted).
    pub max_held: usize,
    /// Clients whose streaks are kept at most (by client address, IPv6
    /// by `limits.ipv6_prefix`).
    pub max_clients: usize,
    /// A streak with no refusal for this long is forgotten.
    #[serde(rename = "window_secs", deserialize_with = "crate::duration::secs")]
    pub window: Duration,
}

impl PacingConfig {
    /// Checks the `screen.pacing.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("screen.pacing.initial_hold_ms", &self.initial_hold),
            ("screen.pacing.max_hold_ms", &self.max_hold),
            ("screen.pacing.max_held", &self.max_held),
            ("screen.pacing.max_clients", &self.max_clients),
            ("screen.pacing.window_secs", &self.window),
        ])?;
        if self.max_hold < self.initial_hold {
            return Err(ConfigError::new(
                "screen.pacing.max_hold_ms",
                format!(
                    "{} is below screen.pacing.initial_hold_ms ({})",
                    self.max_hold.as_millis(),
                    self.initial_hold.as_millis()
                ),
            ));
        }
        // A held answer is a call in flight to the drain: the bound keeps
        // a hold well inside the shutdown grace period's default (30 s).
        if self.max_hold > Duration::from_millis(MAX_HOLD_MS_BOUND) {
            return Err(ConfigError::new(
                "screen.pacing.max_hold_ms",
                format!("{} is over {MAX_HOLD_MS_BOUND}", self.max_hold.as_millis()),
            ));
        }
        Ok(())
    }
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig {
            enabled: DEFAULT_PACING_ENABLED,
            after: DEFAULT_PACING_AFTER,
            initial_hold: Duration::from_millis(DEFAULT_PACING_INITIAL_HOLD_MS),
            max_hold: Duration::from_millis(DEFAULT_PACING_MAX_HOLD_MS),
            max_held: DEFAULT_PACING_MAX_HELD,
            max_clients: DEFAULT_PACING_MAX_CLIENTS,
            window: Duration::from_secs(DEFAULT_PACING_WINDOW_SECS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut PacingConfig);

    #[test]
    fn defaults_are_valid() {
        PacingConfig::default().validate().unwrap();
        // Holding from the first refusal is allowed.
        PacingConfig {
            after: 0,
            ..PacingConfig::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 7] = [
            (
                |c| c.initial_hold = Duration::ZERO,
                "screen.pacing.initial_hold_ms",
            ),
            (|c| c.max_hold = Duration::ZERO, "screen.pacing.max_hold_ms"),
            (|c| c.max_held = 0, "screen.pacing.max_held"),
            (|c| c.max_clients = 0, "screen.pacing.max_clients"),
            (|c| c.window = Duration::ZERO, "screen.pacing.window_secs"),
            (
                |c| {
                    c.initial_hold = Duration::from_millis(10);
                    c.max_hold = Duration::from_millis(5);
                },
                "screen.pacing.max_hold_ms",
            ),
            (
                |c| c.max_hold = Duration::from_millis(10_001),
                "screen.pacing.max_hold_ms",
            ),
        ];
        for (change, key) in cases {
            let mut c = PacingConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }
}
