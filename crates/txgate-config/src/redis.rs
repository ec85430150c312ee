//! `[redis]`: the fleet's shared store, off by default.
//!
//! With a URL, every instance reports the usage of its per-IP and per-key
//! limits to Redis in the background every `sync_interval_ms` and takes
//! back the fleet's totals, so that the limits hold for the fleet, not per
//! instance. No call ever waits on Redis. While Redis is unreachable each
//! instance enforces `local_share` of every limit on its own.

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
/// about 11 KiB): at most about 45 MiB in Redis.
pub const DEFAULT_BAN_LOG_MAX_ENTRIES: usize = 4096;

/// The shared store.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`; empty: no shared store,
    /// limits are per instance.
    pub url: String,
    /// Prefix of the keys txgate writes (several fleets on one Redis).
    pub key_prefix: String,
    /// Milliseconds between two reports of usage.
    #[serde(
        rename = "sync_interval_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub sync_interval: Duration,
    /// Milliseconds a connect or a sync may take before Redis counts as
    /// down; the ban channel's connect, subscribe and each publish keep to
    /// it too.
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
        !self.url.is_empty()
    }

    /// The URL without its password, for logs and `check-config`.
    pub fn redacted_url(&self) -> String {
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
        if self.enabled() && !self.url.starts_with("redis://") {
            return Err(ConfigError::new(
                "redis.url",
                format!(
                    "`{}` is not a redis:// URL (TLS to Redis is not supported: keep Redis on a private network)",
                    self.redacted_url()
                ),
            ));
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
        assert_eq!(bad(&|c| c.url = "rediss://h:6379".into()), "redis.url");
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
