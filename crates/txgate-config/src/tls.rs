//! `[server.tls]` (TLS on the client port) and `[upstream.tls]` (what an
//! `https://` upstream is trusted by, and the client certificate txgate
//! shows it).
//!
//! Only the settings live here; the certificates are read, checked and
//! reloaded by the proxy. Names of key-exchange groups and versions are
//! checked here, so that `check-config` refuses a typo before anything
//! listens.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default: TLS 1.2 still accepted (for old clients); "1.3" refuses it.
pub const DEFAULT_TLS_MIN_VERSION: &str = "1.2";
/// Default key-exchange groups: the post-quantum hybrid, and the classic
/// curves for clients without it.
pub const DEFAULT_TLS_GROUPS: [&str; 3] = ["X25519MLKEM768", "X25519", "secp256r1"];
/// Default: TLS 1.3 session tickets (and TLS 1.2 session ids) issued, so a
/// returning client resumes without a full handshake.
pub const DEFAULT_TLS_SESSION_TICKETS: bool = true;
/// Default time a client has to finish its TLS handshake.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// Default interval at which the certificate and key files are read again
/// (a change is loaded; SIGHUP loads at once too).
pub const DEFAULT_TLS_RELOAD_INTERVAL_MS: u64 = 10_000;

/// Key-exchange groups txgate knows by name.
pub const TLS_GROUPS: [&str; 4] = ["X25519MLKEM768", "X25519", "secp256r1", "secp384r1"];

/// TLS on the client port: off while both paths are empty.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerTlsConfig {
    /// PEM file: the server certificate first, then its intermediates.
    pub cert_chain_path: String,
    /// PEM file: the private key (PKCS#8, SEC1 or PKCS#1).
    pub key_path: String,
    /// Oldest protocol version accepted: "1.2" or "1.3".
    pub min_version: String,
    /// Key-exchange groups accepted (names from [`TLS_GROUPS`]); of those
    /// a client offers, its own first choice is taken.
    pub groups: Vec<String>,
    /// Issue session tickets (TLS 1.3) and keep session ids (TLS 1.2).
    pub session_tickets: bool,
    /// Time a client has to finish its handshake, from its first byte.
    #[serde(
        rename = "handshake_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub handshake_timeout: Duration,
    /// Interval at which the two files are read again; a change is loaded
    /// without dropping a connection. 0: on SIGHUP only.
    #[serde(
        rename = "reload_interval_ms",
        deserialize_with = "crate::duration::millis_or_off"
    )]
    pub reload_interval: Option<Duration>,
}

impl Default for ServerTlsConfig {
    fn default() -> Self {
        ServerTlsConfig {
            cert_chain_path: String::new(),
            key_path: String::new(),
            min_version: DEFAULT_TLS_MIN_VERSION.to_string(),
            groups: DEFAULT_TLS_GROUPS.map(String::from).to_vec(),
            session_tickets: DEFAULT_TLS_SESSION_TICKETS,
            handshake_timeout: Duration::from_millis(DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS),
            reload_interval: crate::duration::ms_or_off(DEFAULT_TLS_RELOAD_INTERVAL_MS),
        }
    }
}

impl ServerTlsConfig {
    /// Whether the client port speaks TLS.
    pub fn enabled(&self) -> bool {
        !self.cert_chain_path.is_empty() || !self.key_path.is_empty()
    }

    /// Whether TLS 1.2 is accepted beside 1.3.
    pub fn allows_tls12(&self) -> bool {
        self.min_version == "1.2"
    }

    /// Checks the `server.tls.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.enabled() && (self.cert_chain_path.is_empty() || self.key_path.is_empty()) {
            return Err(ConfigError::new(
                if self.cert_chain_path.is_empty() {
                    "server.tls.cert_chain_path"
                } else {
                    "server.tls.key_path"
                },
                "TLS needs both the certificate chain and the key (or neither, for cleartext)",
            ));
        }
        if !matches!(self.min_version.as_str(), "1.2" | "1.3") {
            return Err(ConfigError::new(
                "server.tls.min_version",
                format!("`{}` must be \"1.2\" or \"1.3\"", self.min_version),
            ));
        }
        if self.groups.is_empty() {
            return Err(ConfigError::new(
                "server.tls.groups",
                "lists no key-exchange group; no client could connect",
            ));
        }
        check_groups("server.tls.groups", &self.groups)?;
        require_positive(&[("server.tls.handshake_timeout_ms", &self.handshake_timeout)])
    }
}

fn check_groups(key: &str, groups: &[String]) -> Result<(), ConfigError> {
    for (n, group) in groups.iter().enumerate() {
        if !TLS_GROUPS.contains(&group.as_str()) {
            return Err(ConfigError::new(
                key,
                format!("`{group}` is not one of {}", TLS_GROUPS.join(", ")),
            ));
        }
        if groups[..n].contains(group) {
            return Err(ConfigError::new(key, format!("`{group}` is listed twice")));
        }
    }
    Ok(())
}

/// What an `https://` upstream is trusted by, and what txgate shows it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTlsConfig {
    /// PEM file of the CAs the node's certificate must chain to; empty:
    /// the system's roots.
    pub ca_path: String,
    /// PEM file of a client certificate chain, for a node that asks for
    /// one (mTLS); empty: none.
    pub client_cert_path: String,
    /// PEM file of that certificate's key.
    pub client_key_path: String,
}

impl UpstreamTlsConfig {
    /// Checks the `upstream.tls.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_at("upstream.tls")
    }

    /// Checks the keys of this table, found at `table` (`upstream.tls`, or
    /// a node's `upstream.nodes[1].tls`).
    pub(crate) fn validate_at(&self, table: &str) -> Result<(), ConfigError> {
        if self.client_cert_path.is_empty() != self.client_key_path.is_empty() {
            return Err(ConfigError::new(
                if self.client_cert_path.is_empty() {
                    format!("{table}.client_cert_path")
                } else {
                    format!("{table}.client_key_path")
                },
                "a client certificate needs both its chain and its key (or neither)",
            ));
        }
        Ok(())
    }

    /// Whether a client certificate is configured.
    pub fn has_client_cert(&self) -> bool {
        !self.client_cert_path.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_off() {
        let c = ServerTlsConfig::default();
        c.validate().unwrap();
        assert!(!c.enabled());
        assert!(c.allows_tls12());
        UpstreamTlsConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let refused = |change: fn(&mut ServerTlsConfig)| {
            let mut c = ServerTlsConfig::default();
            change(&mut c);
            c.validate().unwrap_err().key
        };
        assert_eq!(
            refused(|c| c.key_path = "k.pem".into()),
            "server.tls.cert_chain_path"
        );
        assert_eq!(
            refused(|c| c.cert_chain_path = "c.pem".into()),
            "server.tls.key_path"
        );
        assert_eq!(
            refused(|c| c.min_version = "1.1".into()),
            "server.tls.min_version"
        );
        assert_eq!(refused(|c| c.groups.clear()), "server.tls.groups");
        assert_eq!(
            refused(|c| c.groups = vec!["X448".into()]),
            "server.tls.groups"
        );
        assert_eq!(
            refused(|c| c.groups = vec!["X25519".into(), "X25519".into()]),
            "server.tls.groups"
        );
        assert_eq!(
            refused(|c| c.handshake_timeout = Duration::ZERO),
            "server.tls.handshake_timeout_ms"
        );
        let mut u = UpstreamTlsConfig {
            client_cert_path: "c.pem".into(),
            ..UpstreamTlsConfig::default()
        };
        assert_eq!(
            u.validate().unwrap_err().key,
            "upstream.tls.client_key_path"
        );
        u.client_key_path = "k.pem".into();
        u.validate().unwrap();
        assert!(u.has_client_cert());
    }

    #[test]
    fn a_full_section_parses() {
        let c: ServerTlsConfig = toml::from_str(
            "cert_chain_path = \"c.pem\"\nkey_path = \"k.pem\"\nmin_version = \"1.3\"\n\
             groups = [\"X25519\"]\nsession_tickets = false\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.enabled() && !c.allows_tls12() && !c.session_tickets);
        assert!(toml::from_str::<ServerTlsConfig>("cert = \"c.pem\"").is_err());
    }
}
