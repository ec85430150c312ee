//! The configuration checked once, with every value that needs parsing
//! parsed: what the daemon starts from. [`Settings::new`] is the one
//! validation ([`Config::validate`], then each section's parsers); after
//! it nothing parses a setting again or falls back to a default, because
//! every parsed value is here.

use std::net::SocketAddr;
use std::ops::Deref;

use crate::{Config, ConfigError, HttpUrl, IpNet, Source};

/// A config that passed validation, and what its strings mean.
#[derive(Debug, Clone)]
pub struct Settings {
    config: Config,
    /// `upstream.url`.
    pub upstream_url: HttpUrl,
    /// The node's WebSocket endpoint, set or derived from `upstream.url`
    /// ([`Config::websocket_upstream`]).
    pub websocket_url: HttpUrl,
    /// `sidecar.url` and `[[sidecar.sources]]`, checked.
    pub sources: Vec<Source>,
    /// `server.trusted_proxies`.
    pub trusted_proxies: Vec<IpNet>,
    /// `limits.exempt`.
    pub exempt: Vec<IpNet>,
    /// The admin listener's bearer token (`admin.token_file`), if set.
    pub admin_token: Option<String>,
    /// The Aeges listener's address (`aeges.listen`; `None`: off).
    pub aeges_listen: Option<SocketAddr>,
    /// `aeges.report_allow`.
    pub aeges_report_allow: Vec<IpNet>,
    /// `aeges.verify_allow`.
    pub aeges_verify_allow: Vec<IpNet>,
    /// `conditional.callers`, as addresses.
    pub conditional_callers: Vec<[u8; 20]>,
    /// `conditional.targets`, as addresses.
    pub conditional_targets: Vec<[u8; 20]>,
}

impl Settings {
    /// Validates `config` and parses every value that needs it; an error
    /// names the key at fault.
    pub fn new(config: Config) -> Result<Settings, ConfigError> {
        config.validate()?;
        Ok(Settings {
            upstream_url: config.upstream.endpoint()?,
            websocket_url: config.websocket_upstream()?,
            sources: config.sidecar.sources()?,
            trusted_proxies: config.server.trusted_proxies()?,
            exempt: config.limits.exempt()?,
            admin_token: config.admin.token()?,
            aeges_listen: config.aeges.listen_addr()?,
            aeges_report_allow: config.aeges.allow()?,
            aeges_verify_allow: config.aeges.verify_allow()?,
            conditional_callers: config.conditional.caller_addresses()?,
            conditional_targets: config.conditional.target_addresses()?,
            config,
        })
    }

    /// The file's values, as validated.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl Deref for Settings {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_settle_and_parse() {
        let s = Settings::new(Config::default()).unwrap();
        assert_eq!(s.upstream_url, s.upstream.endpoint().unwrap());
        assert_eq!(s.websocket_url, s.config().websocket_upstream().unwrap());
        assert_eq!(s.sources, s.sidecar.sources().unwrap());
        assert_eq!(s.aeges_listen, None);
        assert!(s.admin_token.is_none());
    }

    #[test]
    fn a_value_that_does_not_parse_is_refused_naming_its_key() {
        let mut c = Config::default();
        c.conditional.targets = vec!["0x12".into()];
        let e = Settings::new(c).unwrap_err();
        assert!(e.to_string().contains("conditional.targets[0]"), "{e}");
    }
}
