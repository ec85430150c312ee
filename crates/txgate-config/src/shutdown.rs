//! `[shutdown]`: graceful shutdown.

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;

/// Default time in-flight calls get to finish at shutdown.
pub const DEFAULT_GRACE_PERIOD_MS: u64 = 30_000;
/// Default time txgate keeps serving, not ready, before it stops accepting.
pub const DEFAULT_DRAIN_DELAY_MS: u64 = 0;
/// The longest drain delay: a stop must not wait on a typo.
pub const MAX_DRAIN_DELAY_MS: u64 = 300_000;

/// Shutdown behaviour.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// Time in-flight calls get to finish after SIGTERM or SIGINT.
    #[serde(
        rename = "grace_period_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub grace_period: Duration,
    /// After SIGTERM or SIGINT, time txgate keeps accepting and serving
    /// while `/readyz` answers 503, so that a load balancer's health check
    /// takes it out of rotation before it stops accepting (set it above the
    /// balancer's detection time: interval × fall). 0: stop accepting at
    /// once.
    #[serde(
        rename = "drain_delay_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub drain_delay: Duration,
}

impl ShutdownConfig {
    /// Checks the `shutdown.*` keys: every value is usable (a grace period
    /// of 0 exits at once).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.drain_delay > Duration::from_millis(MAX_DRAIN_DELAY_MS) {
            return Err(ConfigError::new(
                "shutdown.drain_delay_ms",
                format!(
                    "{} is above {MAX_DRAIN_DELAY_MS} (5 minutes): a stop would wait that long",
                    self.drain_delay.as_millis()
                ),
            ));
        }
        Ok(())
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace_period: Duration::from_millis(DEFAULT_GRACE_PERIOD_MS),
            drain_delay: Duration::from_millis(DEFAULT_DRAIN_DELAY_MS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_grace_period_is_valid() {
        ShutdownConfig::default().validate().unwrap();
        let c = ShutdownConfig {
            grace_period: Duration::from_millis(0),
            drain_delay: Duration::from_millis(MAX_DRAIN_DELAY_MS),
        };
        c.validate().unwrap();
        let c = ShutdownConfig {
            drain_delay: Duration::from_millis(MAX_DRAIN_DELAY_MS + 1),
            ..c
        };
        assert_eq!(c.validate().unwrap_err().key, "shutdown.drain_delay_ms");
    }
}
