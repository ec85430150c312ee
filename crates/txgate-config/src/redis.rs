//! `[redis]`: the fleet's shared store, off by default.
//!
//! With a URL, every instance reports the usage of its per-IP and per-key
//! limits to Redis in the background every `sync_interval_ms` and takes
//! back the fleet's totals, so that the limits hold for the fleet, not per
//! instance. No call ever waits on Redis. While Redis is unreachable each
//! instance enforces `local_share` of every limit on its own.
//!
//! Redis is one `url` (`redis://`, or `rediss://` for TLS), or a primary
//! found through Sentinel: `sentinels` (`host:port` each), `master_name`,
//! the primary's `username`/`password` and the sentinels'
//! `sentinel_password`, TLS to both with `tls`. `tls_ca_file` names the CA
//! that signed Redis's certificate (else the system's roots). Redis Cluster
//! is not supported.

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;

/// Default: how often usage is reported and the fleet's totals read back.
pub const DEFAULT_SYNC_INTERVAL_MS: u64 = 20;
/// Default: a sync or connect that takes longer counts as Redis down.
pub const DEFAULT_TIMEOUT_MS: u64 = 250;
/// Default share of each limit an instance enforces alone while Redis is
/// down: a client spread over two or more instances by a round-robin
/// balancer is never refused below its limit.
pub const DEFAULT_LOCAL_SHARE: f64 = 0.5;
/// Default prefix of every key txgate writes.
pub const DEFAULT_KEY_PREFIX: &str = "txgate";
/// Default: entries the fleet's ban log keeps at most (each up to 32 bans,
/// about 12.6 KB in Redis): at most about 50 MiB.
pub const DEFAULT_BAN_LOG_MAX_ENTRIES: usize = 4096;

/// The shared store.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` (`rediss://`: TLS);
    /// empty, with no `sentinels`: no shared store, limits are per
    /// instance.
    pub url: String,
    /// The sentinels to ask for the primary, `host:port` each (instead of
    /// `url`).
    pub sentinels: Vec<String>,
    /// The primary's name at the sentinels (`sentinel monitor <name> ...`).
    pub master_name: String,
    /// The ACL user of the primary found through the sentinels (empty: the
    /// default user).
    pub username: String,
    /// The password of the primary found through the sentinels.
    pub password: String,
    /// The sentinels' own password (their `requirepass`).
    pub sentinel_password: String,
    /// TLS to the sentinels and to the primary they name (with `url`, its
    /// scheme says: `rediss://`).
    pub tls: bool,
    /// A PEM file of the CA that signed Redis's certificates (empty: the
    /// system's roots).
    pub tls_ca_file: String,
    /// Prefix of the keys txgate writes (several fleets on one Redis).
    pub key_prefix: String,
    /// Milliseconds between two reports of usage.
    #[serde(
        rename = "sync_interval_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub sync_interval: Duration,
    /// Milliseconds a connect or a sync may take before Redis counts as
    /// down; the ban log's connects, appends and reads keep to it too.
    #[serde(rename = "timeout_ms", deserialize_with = "crate::duration::millis")]
    pub timeout: Duration,
    /// Share of each limit an instance enforces alone while Redis is down
    /// (0 < share ≤ 1).
    pub local_share: f64,
    /// Entries the fleet's ban log (`<key_prefix>:bans:log`) keeps at most,
    /// besides its trimming by age; an instance whose unread entries are
    /// cut by it counts a gap.
    pub ban_log_max_entries: usize,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("key_prefix", &self.key_prefix)
            .field("sync_interval_ms", &self.sync_interval)
            .field("timeout_ms", &self.timeout)
            .field("local_share", &self.local_share)
            .field("ban_log_max_entries", &self.ban_log_max_entries)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: String::new(),
            sentinels: Vec::new(),
            master_name: String::new(),
            username: String::new(),
            password: String::new(),
            sentinel_password: String::new(),
            tls: false,
            tls_ca_file: String::new(),
            key_prefix: DEFAULT_KEY_PREFIX.into(),
            sync_interval: Duration::from_millis(DEFAULT_SYNC_INTERVAL_MS),
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            local_share: DEFAULT_LOCAL_SHARE,
            ban_log_max_entries: DEFAULT_BAN_LOG_MAX_ENTRIES,
        }
    }
}

impl RedisConfig {
    /// Whether a shared store is configured.
    pub fn enabled(&self) -> bool {
        !self.url.is_empty() || self.uses_sentinel()
    }

    /// Whether the primary is found through Sentinel.
    pub fn uses_sentinel(&self) -> bool {
        !self.sentinels.is_empty()
    }

    /// Where Redis is, without a password, for logs and `check-config`.
    pub fn redacted_url(&self) -> String {
        if self.uses_sentinel() {
            return format!(
                "sentinel{} primary `{}` via {}",
                if self.tls { " (TLS)" } else { "" },
                self.master_name,
                self.sentinels.join(", ")
            );
        }
        let Some((scheme, rest)) = self.url.split_once("://") else {
            return self.url.clone();
        };
        match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => self.url.clone(),
        }
    }

    /// Checks the `redis.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.url.is_empty()
            && !self.url.starts_with("redis://")
            && !self.url.starts_with("rediss://")
        {
            return Err(ConfigError::new(
                "redis.url",
                format!(
                    "`{}` is not a redis:// or rediss:// URL",
                    self.redacted_url()
                ),
            ));
        }
        self.validate_sentinel()?;
        let uses_tls = self.tls || self.url.starts_with("rediss://");
        if !self.tls_ca_file.is_empty() && !uses_tls {
            return Err(ConfigError::new(
                "redis.tls_ca_file",
                "names a CA, but Redis is reached without TLS (rediss:// or tls = true)",
            ));
        }
        if !self.tls_ca_file.is_empty() {
            // Read here, so that a missing or empty CA fails the start
            // (and check-config), not every connect later.
            match std::fs::read_to_string(&self.tls_ca_file) {
                Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {}
                Ok(_) => {
                    return Err(ConfigError::new(
                        "redis.tls_ca_file",
                        format!("`{}` holds no PEM certificate", self.tls_ca_file),
                    ));
                }
                Err(e) => {
                    return Err(ConfigError::new(
                        "redis.tls_ca_file",
                        format!("`{}` cannot be read: {e}", self.tls_ca_file),
                    ));
                }
            }
        }
        let prefix_ok = !self.key_prefix.is_empty()
            && self.key_prefix.len() <= 64
            && self.key_prefix.bytes().all(|b| b.is_ascii_graphic());
        if !prefix_ok {
            return Err(ConfigError::new(
                "redis.key_prefix",
                "must be 1 to 64 printable characters without spaces",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&self.sync_interval) {
            return Err(ConfigError::new(
                "redis.sync_interval_ms",
                format!("{} is not within 1..=1000", self.sync_interval.as_millis()),
            ));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(10)).contains(&self.timeout) {
            return Err(ConfigError::new(
                "redis.timeout_ms",
                format!("{} is not within 10..=10000", self.timeout.as_millis()),
            ));
        }
        if !(self.local_share > 0.0 && self.local_share <= 1.0) {
            return Err(ConfigError::new(
                "redis.local_share",
                format!("{} is not within (0, 1]", self.local_share),
            ));
        }
        if !(16..=1_000_000).contains(&self.ban_log_max_entries) {
            return Err(ConfigError::new(
                "redis.ban_log_max_entries",
                format!("{} is not within 16..=1000000", self.ban_log_max_entries),
            ));
        }
        Ok(())
    }
}

impl RedisConfig {
    /// The Sentinel keys: a set of sentinels or a URL, never both; each
    /// sentinel `host:port`; a primary's name with them; the primary's
    /// credentials and `tls` only with them.
    fn validate_sentinel(&self) -> Result<(), ConfigError> {
        if !self.uses_sentinel() {
            for (key, set) in [
                ("redis.master_name", !self.master_name.is_empty()),
                ("redis.username", !self.username.is_empty()),
                ("redis.password", !self.password.is_empty()),
                (
                    "redis.sentinel_password",
                    !self.sentinel_password.is_empty(),
                ),
                ("redis.tls", self.tls),
            ] {
                if set {
                    return Err(ConfigError::new(
                        key,
                        "is for a primary found through Sentinel (redis.sentinels); with redis.url, the URL carries it (rediss:// for TLS)",
                    ));
                }
            }
            return Ok(());
        }
        if !self.url.is_empty() {
            return Err(ConfigError::new(
                "redis.sentinels",
                "either redis.url or redis.sentinels, not both",
            ));
        }
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            let valid = sentinel.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !valid {
                return Err(ConfigError::new(
                    format!("redis.sentinels[{i}]"),
                    format!("`{sentinel}` is not host:port"),
                ));
            }
        }
        if self.master_name.is_empty() {
            return Err(ConfigError::new(
                "redis.master_name",
                "names the primary the sentinels monitor; required with redis.sentinels",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_valid() {
        let c = RedisConfig::default();
        assert!(!c.enabled());
        c.validate().unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |f: &dyn Fn(&mut RedisConfig)| {
            let mut c = RedisConfig::default();
            f(&mut c);
            c.validate().unwrap_err().key
        };
        assert_eq!(
            bad(&|c| c.url = "http://127.0.0.1:6379".into()),
            "redis.url"
        );
        assert_eq!(
            bad(&|c| c.url = "redis-sentinel://h:26379".into()),
            "redis.url"
        );
        assert_eq!(bad(&|c| c.key_prefix = "a b".into()), "redis.key_prefix");
        assert_eq!(
            bad(&|c| c.sync_interval = Duration::ZERO),
            "redis.sync_interval_ms"
        );
        assert_eq!(
            bad(&|c| c.timeout = Duration::from_millis(5)),
            "redis.timeout_ms"
        );
        assert_eq!(bad(&|c| c.local_share = 0.0), "redis.local_share");
        assert_eq!(bad(&|c| c.local_share = 1.5), "redis.local_share");
        assert_eq!(bad(&|c| c.local_share = f64::NAN), "redis.local_share");
        assert_eq!(
            bad(&|c| c.ban_log_max_entries = 15),
            "redis.ban_log_max_entries"
        );
        assert_eq!(
            bad(&|c| c.ban_log_max_entries = 1_000_001),
            "redis.ban_log_max_entries"
        );
    }

    #[test]
    fn a_url_or_a_sentinel_set_with_its_keys() {
        let ca = std::env::temp_dir().join(format!("txgate-redis-ca-{}.pem", std::process::id()));
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let tls = RedisConfig {
            url: "rediss://10.0.0.5:6380".into(),
            tls_ca_file: ca.display().to_string(),
            ..RedisConfig::default()
        };
        tls.validate().unwrap();
        let missing = RedisConfig {
            tls_ca_file: "/nonexistent/ca.pem".into(),
            ..tls.clone()
        };
        assert_eq!(missing.validate().unwrap_err().key, "redis.tls_ca_file");
        std::fs::write(&ca, "not a certificate").unwrap();
        assert_eq!(tls.validate().unwrap_err().key, "redis.tls_ca_file");
        let _ = std::fs::remove_file(&ca);
        let sentinel = RedisConfig {
            sentinels: vec!["10.0.0.1:26379".into(), "redis-s2:26379".into()],
            master_name: "txgate".into(),
            password: "s3cret".into(),
            tls: true,
            ..RedisConfig::default()
        };
        sentinel.validate().unwrap();
        assert!(sentinel.enabled() && sentinel.uses_sentinel());
        assert!(!sentinel.redacted_url().contains("s3cret"));
        assert!(!format!("{sentinel:?}").contains("s3cret"));
        let bad = |f: &dyn Fn(&mut RedisConfig)| {
            let mut c = sentinel.clone();
            f(&mut c);
            c.validate().unwrap_err().key
        };
        assert_eq!(bad(&|c| c.url = "redis://h:1".into()), "redis.sentinels");
        assert_eq!(bad(&|c| c.master_name.clear()), "redis.master_name");
        assert_eq!(
            bad(&|c| c.sentinels[1] = "nohost".into()),
            "redis.sentinels[1]"
        );
        assert_eq!(
            bad(&|c| c.sentinels[0] = "h:0".into()),
            "redis.sentinels[0]"
        );
        let url_only = |f: &dyn Fn(&mut RedisConfig)| {
            let mut c = RedisConfig {
                url: "redis://h:6379".into(),
                ..RedisConfig::default()
            };
            f(&mut c);
            c.validate().unwrap_err().key
        };
        assert_eq!(
            url_only(&|c| c.master_name = "x".into()),
            "redis.master_name"
        );
        assert_eq!(url_only(&|c| c.password = "x".into()), "redis.password");
        assert_eq!(url_only(&|c| c.tls = true), "redis.tls");
        assert_eq!(
            url_only(&|c| c.tls_ca_file = "/ca.pem".into()),
            "redis.tls_ca_file"
        );
    }

    #[test]
    fn the_password_never_shows() {
        let c = RedisConfig {
            url: "redis://user:s3cret@10.0.0.5:6379/0".into(),
            ..RedisConfig::default()
        };
        assert_eq!(c.redacted_url(), "redis://***@10.0.0.5:6379/0");
        assert!(!format!("{c:?}").contains("s3cret"));
        let bad = RedisConfig {
            url: "http://user:s3cret@h".into(),
            ..RedisConfig::default()
        };
        assert!(!bad.validate().unwrap_err().message.contains("s3cret"));
    }
}
