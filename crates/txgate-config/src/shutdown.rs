//! `[shutdown]`: graceful shutdown.

use serde::Deserialize;

use crate::error::ConfigError;

/// Default time in-flight calls get to finish at shutdown.
pub const DEFAULT_GRACE_PERIOD_MS: u64 = 30_000;

/// Shutdown behaviour.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// Time in-flight calls get to finish after SIGTERM or SIGINT.
    pub grace_period_ms: u64,
}

impl ShutdownConfig {
    /// Checks the `shutdown.*` keys: every value is usable (a grace period
    /// of 0 exits at once).
    pub fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace_period_ms: DEFAULT_GRACE_PERIOD_MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_grace_period_is_valid() {
        ShutdownConfig::default().validate().unwrap();
        ShutdownConfig { grace_period_ms: 0 }.validate().unwrap();
    }
}
