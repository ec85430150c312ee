//! `[admission]`: the global cap on calls in flight.

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default global cap on calls in flight.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;
/// Default `Retry-After` seconds sent with HTTP 429.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
/// Default cap on `eth_sendRawTransactionSync` calls in flight: 0, a
/// quarter of `max_in_flight` (at least 1).
pub const DEFAULT_MAX_SYNC_IN_FLIGHT: usize = 0;

/// Global admission control.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Requests in flight at most, across all connections.
    pub max_in_flight: usize,
    /// `Retry-After` seconds on HTTP 429.
    pub retry_after_secs: u64,
    /// `eth_sendRawTransactionSync` calls in flight at most (each holds an
    /// upstream connection until its receipt); 0: a quarter of
    /// `max_in_flight` (at least 1); else below `max_in_flight`.
    pub max_sync_in_flight: usize,
}

impl AdmissionConfig {
    /// Checks the `admission.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[("admission.max_in_flight", &self.max_in_flight)])?;
        if self.max_sync_in_flight != 0 && self.max_sync_in_flight >= self.max_in_flight {
            return Err(ConfigError::new(
                "admission.max_sync_in_flight",
                format!(
                    "{} is not below admission.max_in_flight ({}): slow sync calls could take \
                     every slot",
                    self.max_sync_in_flight, self.max_in_flight
                ),
            ));
        }
        Ok(())
    }
}

impl AdmissionConfig {
    /// The cap on sync calls in force: the setting, or a quarter of
    /// `max_in_flight` (at least 1) when it is 0.
    pub fn effective_max_sync_in_flight(&self) -> usize {
        match self.max_sync_in_flight {
            0 => (self.max_in_flight / 4).max(1),
            n => n,
        }
    }
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            retry_after_secs: DEFAULT_RETRY_AFTER_SECS,
            max_sync_in_flight: DEFAULT_MAX_SYNC_IN_FLIGHT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        AdmissionConfig::default().validate().unwrap();
    }

    #[test]
    fn the_sync_cap_follows_the_global_one_unless_set() {
        let cap = |max_in_flight, max_sync_in_flight| {
            let c = AdmissionConfig {
                max_in_flight,
                max_sync_in_flight,
                ..AdmissionConfig::default()
            };
            c.validate().unwrap();
            c.effective_max_sync_in_flight()
        };
        assert_eq!(cap(1000, 0), 250);
        assert_eq!(cap(2, 0), 1);
        assert_eq!(cap(1, 0), 1);
        assert_eq!(cap(1000, 900), 900);
    }

    #[test]
    fn each_rule_names_its_key() {
        let c = AdmissionConfig {
            max_in_flight: 0,
            ..AdmissionConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "admission.max_in_flight");
        for max_sync_in_flight in [DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_IN_FLIGHT + 1] {
            let c = AdmissionConfig {
                max_sync_in_flight,
                ..AdmissionConfig::default()
            };
            assert_eq!(
                c.validate().unwrap_err().key,
                "admission.max_sync_in_flight"
            );
        }
    }
}
