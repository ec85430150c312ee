//! `[admission]`: the global cap on calls in flight.

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default global cap on calls in flight.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;
/// Default `Retry-After` seconds sent with HTTP 429.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
/// Default cap on `eth_sendRawTransactionSync` calls in flight: a quarter
/// of the default global cap.
pub const DEFAULT_MAX_SYNC_IN_FLIGHT: usize = 250;

/// Global admission control.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Requests in flight at most, across all connections.
    pub max_in_flight: usize,
    /// `Retry-After` seconds on HTTP 429.
    pub retry_after_secs: u64,
    /// `eth_sendRawTransactionSync` calls in flight at most (each holds an
    /// upstream connection until its receipt); at most `max_in_flight`.
    pub max_sync_in_flight: usize,
}

impl AdmissionConfig {
    /// Checks the `admission.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("admission.max_in_flight", self.max_in_flight as u64),
            (
                "admission.max_sync_in_flight",
                self.max_sync_in_flight as u64,
            ),
        ])?;
        if self.max_sync_in_flight > self.max_in_flight {
            return Err(ConfigError::new(
                "admission.max_sync_in_flight",
                format!(
                    "{} is above admission.max_in_flight ({}): slow sync calls could take \
                     every slot",
                    self.max_sync_in_flight, self.max_in_flight
                ),
            ));
        }
        Ok(())
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
    fn each_rule_names_its_key() {
        let c = AdmissionConfig {
            max_in_flight: 0,
            ..AdmissionConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "admission.max_in_flight");
        for max_sync_in_flight in [0, DEFAULT_MAX_IN_FLIGHT + 1] {
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
