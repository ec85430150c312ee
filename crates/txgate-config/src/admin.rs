//! `[admin]`: the metrics and health listener.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::error::ConfigError;

/// Default admin listen address (loopback: metrics and health only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9545";

/// Admin listener.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address for `/metrics`, `/healthz` and `/readyz`.
    pub listen: SocketAddr,
}

impl AdminConfig {
    /// Checks the `admin.*` keys on their own: serde already parsed the
    /// address, so nothing is left (`admin.listen` is checked against
    /// `server.listen` by [`Config::validate`](crate::Config::validate)).
    pub fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: crate::parse_addr(DEFAULT_ADMIN_LISTEN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        AdminConfig::default().validate().unwrap();
        assert_eq!(
            AdminConfig::default().listen.to_string(),
            DEFAULT_ADMIN_LISTEN
        );
    }
}
