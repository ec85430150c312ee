//! `[admin]`: the metrics and health listener.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ConfigError;

/// Default admin listen address (loopback: metrics and health only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9545";
/// Default cap on a ban list posted to `/bans/import`.
pub const DEFAULT_MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;
/// Largest `admin.max_import_bytes`.
pub const MAX_IMPORT_BYTES: usize = 1024 * 1024 * 1024;
/// Longest admin token, in bytes.
pub const MAX_ADMIN_TOKEN_BYTES: usize = 4096;

/// Admin listener.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address for `/metrics`, `/healthz`, `/readyz` and the ban endpoints
    /// (`/bans...`).
    pub listen: SocketAddr,
    /// A file holding the bearer token the ban endpoints ask for. Unset:
    /// they answer loopback peers only.
    pub token_file: Option<PathBuf>,
    /// Largest ban list `/bans/import` reads, in bytes.
    pub max_import_bytes: usize,
}

impl AdminConfig {
    /// Checks the `admin.*` keys on their own (`admin.listen` is checked
    /// against `server.listen` by [`Config::validate`](crate::Config::validate));
    /// the token file is read by [`AdminConfig::token`], at start and by
    /// `check-config`. Returns the token.
    pub fn validate(&self) -> Result<Option<String>, ConfigError> {
        if self.max_import_bytes == 0 || self.max_import_bytes > MAX_IMPORT_BYTES {
            return Err(ConfigError::new(
                "admin.max_import_bytes",
                format!(
                    "{} is out of range (1 to {MAX_IMPORT_BYTES})",
                    self.max_import_bytes
                ),
            ));
        }
        self.token()
    }

    /// The token from `admin.token_file` (trimmed of surrounding
    /// whitespace), `None` when unset. An unreadable or empty file, or a
    /// token with spaces, control characters or over 4096 bytes, is an
    /// error that names the key, never the token.
    pub fn token(&self) -> Result<Option<String>, ConfigError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let error = |message: String| ConfigError::new("admin.token_file", message);
        let text = std::fs::read_to_string(path)
            .map_err(|e| error(format!("cannot read {}: {e}", path.display())))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(error(format!("{} holds no token", path.display())));
        }
        if token.len() > MAX_ADMIN_TOKEN_BYTES {
            return Err(error(format!(
                "the token in {} is over {MAX_ADMIN_TOKEN_BYTES} bytes",
                path.display()
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(error(format!(
                "the token in {} must be visible ASCII without spaces",
                path.display()
            )));
        }
        Ok(Some(token.to_owned()))
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: crate::parse_addr(DEFAULT_ADMIN_LISTEN),
            token_file: None,
            max_import_bytes: DEFAULT_MAX_IMPORT_BYTES,
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

    fn with_token(text: &str) -> (AdminConfig, PathBuf) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("txgate-admin-token-{}-{n}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let config = AdminConfig {
            token_file: Some(path.clone()),
            ..AdminConfig::default()
        };
        (config, path)
    }

    #[test]
    fn the_token_file_is_read_and_checked() {
        let (good, path) = with_token("  s3cret-token\n");
        assert_eq!(good.token().unwrap().as_deref(), Some("s3cret-token"));
        good.validate().unwrap();
        std::fs::remove_file(path).unwrap();
        for bad in ["", "  \n", "two words", "tab\tinside"] {
            let (config, path) = with_token(bad);
            let e = config.validate().unwrap_err();
            assert_eq!(e.key, "admin.token_file");
            // The error never shows the token.
            assert!(!e.to_string().contains("words"), "{e}");
            std::fs::remove_file(path).unwrap();
        }
        let missing = AdminConfig {
            token_file: Some("/nonexistent/txgate/token".into()),
            ..AdminConfig::default()
        };
        assert_eq!(missing.validate().unwrap_err().key, "admin.token_file");
    }

    #[test]
    fn the_import_cap_is_bounded() {
        for bad in [0, MAX_IMPORT_BYTES + 1] {
            let config = AdminConfig {
                max_import_bytes: bad,
                ..AdminConfig::default()
            };
            assert_eq!(config.validate().unwrap_err().key, "admin.max_import_bytes");
        }
    }
}
