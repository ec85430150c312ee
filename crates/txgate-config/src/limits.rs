//! `[limits]`: per-client rate limits, by client IP (after client
//! identity, `[server] trusted_proxies`) and by API key.
//!
//! Off by default: every rate is 0 (no limit) until set. An IPv6 client is
//! limited by its `/ipv6_prefix` (64), since one subscriber holds a whole
//! /64. A request with a known API key is limited by its key's tier
//! instead of its IP, so partners behind one NAT do not share a bucket.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Deserialize;

use crate::error::{ConfigError, require_positive};
use crate::net::nets;

/// Default: clients tracked per table (IPs; keys are bounded by the list).
pub const DEFAULT_MAX_CLIENTS: usize = 100_000;
/// Default: IPv6 clients are limited by /64.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// Default header carrying the API key (`Authorization: Bearer` is read
/// too).
pub const DEFAULT_KEY_HEADER: &str = "x-api-key";
/// Default: an unknown API key is refused (401).
pub const DEFAULT_UNKNOWN_KEY: UnknownKey = UnknownKey::Refuse;

/// What a request with a key that is not listed gets.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnknownKey {
    /// HTTP 401 and a JSON-RPC error.
    Refuse,
    /// Limited by its IP, as if it had sent no key.
    Anonymous,
}

/// Two rates: all calls (each call of a batch counts) and raw-transaction
/// submissions. 0 calls per second: no limit. A burst of 0 means one
/// second's worth.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RateConfig {
    /// Calls per second (0: no limit).
    pub calls_per_sec: u32,
    /// Calls at once above the rate (0: `calls_per_sec`).
    pub calls_burst: u32,
    /// Raw-transaction submissions per second (0: no limit).
    pub tx_per_sec: u32,
    /// Submissions at once above the rate (0: `tx_per_sec`).
    pub tx_burst: u32,
}

/// A tier of API keys.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TierConfig {
    /// The tier's rates, per key.
    #[serde(flatten)]
    pub rates: RateConfig,
    /// No limit at all (partners).
    pub exempt: bool,
}

/// Per-client limits.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Client IPs tracked at most; beyond, paid-up clients are dropped and
    /// newcomers to a full table share one bucket per shard.
    pub max_clients: usize,
    /// IPv6 clients are limited by this prefix length.
    pub ipv6_prefix: u8,
    /// Client networks never limited (CIDR or addresses).
    pub exempt: Vec<String>,
    /// Rates per client IP (requests without a known key).
    pub ip: RateConfig,
    /// The header carrying the API key; `Authorization: Bearer <key>` is
    /// read too.
    pub key_header: String,
    /// `refuse` (401) or `anonymous` (limited by IP).
    pub unknown_key: UnknownKey,
    /// Tiers by name: `[limits.tiers.partner]`.
    pub tiers: BTreeMap<String, TierConfig>,
    /// API keys and their tier: `[limits.keys]` `"the-key" = "partner"`.
    pub keys: BTreeMap<String, String>,
}

impl LimitsConfig {
    /// `limits.exempt` parsed.
    pub fn exempt(&self) -> Result<Vec<IpNet>, ConfigError> {
        nets("limits.exempt", &self.exempt)
    }

    /// Checks the `limits.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[("limits.max_clients", self.max_clients as u64)])?;
        if self.ipv6_prefix > 128 {
            return Err(ConfigError::new(
                "limits.ipv6_prefix",
                format!("{} is not a prefix length (0..=128)", self.ipv6_prefix),
            ));
        }
        self.exempt()?;
        if http_header_name(&self.key_header).is_none() {
            return Err(ConfigError::new(
                "limits.key_header",
                format!("`{}` is not an HTTP header name", self.key_header),
            ));
        }
        for (key, tier) in &self.keys {
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::new(
                    "limits.keys",
                    "a key must be printable ASCII without spaces",
                ));
            }
            if !self.tiers.contains_key(tier) {
                return Err(ConfigError::new(
                    "limits.keys",
                    format!("a key names tier `{tier}`, which is not in limits.tiers"),
                ));
            }
        }
        Ok(())
    }
}

/// A header name in lower case, as HTTP/2 requires.
fn http_header_name(name: &str) -> Option<&str> {
    let tchar =
        |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b);
    (!name.is_empty() && name.bytes().all(tchar)).then_some(name)
}

impl std::fmt::Debug for LimitsConfig {
    /// The keys are secrets: only their number is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitsConfig")
            .field("max_clients", &self.max_clients)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("exempt", &self.exempt)
            .field("ip", &self.ip)
            .field("key_header", &self.key_header)
            .field("unknown_key", &self.unknown_key)
            .field("tiers", &self.tiers)
            .field("keys", &format_args!("{} keys", self.keys.len()))
            .finish()
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_clients: DEFAULT_MAX_CLIENTS,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            exempt: Vec::new(),
            ip: RateConfig::default(),
            key_header: DEFAULT_KEY_HEADER.to_string(),
            unknown_key: DEFAULT_UNKNOWN_KEY,
            tiers: BTreeMap::new(),
            keys: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> LimitsConfig {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_limit_nothing_and_are_valid() {
        let c = LimitsConfig::default();
        c.validate().unwrap();
        assert_eq!(c.ip, RateConfig::default());
        assert!(c.keys.is_empty());
    }

    #[test]
    fn tiers_and_keys_parse() {
        let c = parse(
            "ip = { calls_per_sec = 50, tx_per_sec = 2 }\n\
             exempt = [\"10.0.0.0/8\"]\n\
             [tiers.partner]\ncalls_per_sec = 1000\ncalls_burst = 2000\n\
             [tiers.ops]\nexempt = true\n\
             [keys]\n\"k-1\" = \"partner\"\n\"k-2\" = \"ops\"\n",
        );
        c.validate().unwrap();
        assert_eq!(c.ip.calls_per_sec, 50);
        assert_eq!(c.tiers["partner"].rates.calls_burst, 2000);
        assert!(c.tiers["ops"].exempt);
        assert_eq!(c.keys["k-2"], "ops");
    }

    #[test]
    fn each_rule_names_its_key() {
        let refused = |s: &str| parse(s).validate().unwrap_err().key;
        assert_eq!(refused("max_clients = 0"), "limits.max_clients");
        assert_eq!(refused("ipv6_prefix = 129"), "limits.ipv6_prefix");
        assert_eq!(refused("exempt = [\"10.0.0.0/33\"]"), "limits.exempt");
        assert_eq!(refused("key_header = \"X-Api-Key\""), "limits.key_header");
        assert_eq!(refused("key_header = \"\""), "limits.key_header");
        assert_eq!(refused("[keys]\n\"k\" = \"gold\""), "limits.keys");
        assert_eq!(
            refused("[tiers.t]\n[keys]\n\"a key\" = \"t\""),
            "limits.keys"
        );
        assert!(toml::from_str::<LimitsConfig>("unknown_key = \"allow\"").is_err());
        assert!(toml::from_str::<LimitsConfig>("ip = { calls = 1 }").is_err());
    }
}
