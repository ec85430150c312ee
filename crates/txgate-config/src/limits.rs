//! `[limits]`: per-client rate limits, by client IP (after client
//! identity, `[server] trusted_proxies`) and by API key.
//!
//! Off by default: every rate is 0 (no limit) until set. An IPv6 client is
//! limited by its `/ipv6_prefix` (64), since one subscriber holds a whole
//! /64. A request with a known API key is limited by its key's tier
//! instead of its IP, so partners behind one NAT do not share a bucket.

use std::collections::BTreeMap;

use http::HeaderName;
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
    #[serde(deserialize_with = "header_name")]
    pub key_header: HeaderName,
    /// `refuse` (401) or `anonymous` (limited by IP).
    pub unknown_key: UnknownKey,
    /// Tiers by name: `[limits.tiers.partner]`.
    pub tiers: BTreeMap<String, TierConfig>,
    /// API keys and their tier: `[limits.keys]` `"the-key" = "partner"`.
    pub keys: BTreeMap<String, String>,
    /// A TOML file with more keys (`[keys]` `"the-key" = "tier"`), read at
    /// start and again on SIGHUP; empty: none.
    pub keys_file: String,
}

/// The keys file's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: BTreeMap<String, String>,
}

impl LimitsConfig {
    /// `limits.exempt` parsed.
    pub fn exempt(&self) -> Result<Vec<IpNet>, ConfigError> {
        nets("limits.exempt", &self.exempt)
    }

    /// Checks the `limits.*` keys; `limits.exempt` parsed.
    pub fn validate(&self) -> Result<Vec<IpNet>, ConfigError> {
        require_positive(&[("limits.max_clients", &self.max_clients)])?;
        if self.ipv6_prefix > 128 {
            return Err(ConfigError::new(
                "limits.ipv6_prefix",
                format!("{} is not a prefix length (0..=128)", self.ipv6_prefix),
            ));
        }
        let exempt = self.exempt()?;
        self.check_keys("limits.keys", &self.keys)?;
        self.file_keys()?;
        Ok(exempt)
    }

    /// Every key: the config's and the file's (read now). A key in both
    /// takes the file's tier.
    pub fn all_keys(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        let mut keys = self.keys.clone();
        keys.extend(self.file_keys()?);
        Ok(keys)
    }

    /// The keys of `keys_file`, checked (none when it is not set).
    fn file_keys(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        if self.keys_file.is_empty() {
            return Ok(BTreeMap::new());
        }
        let text = std::fs::read_to_string(&self.keys_file).map_err(|e| {
            ConfigError::new(
                "limits.keys_file",
                format!("cannot read {}: {e}", self.keys_file),
            )
        })?;
        let file: KeysFile = toml::from_str(&text).map_err(|e| {
            ConfigError::new(
                "limits.keys_file",
                format!(
                    "{} is not a keys file ([keys] \"key\" = \"tier\"): {}",
                    self.keys_file,
                    e.message()
                ),
            )
        })?;
        self.check_keys("limits.keys_file", &file.keys)?;
        Ok(file.keys)
    }

    fn check_keys(
        &self,
        key: &'static str,
        keys: &BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        for (api_key, tier) in keys {
            if api_key.is_empty() || !api_key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::new(
                    key,
                    "a key must be printable ASCII without spaces",
                ));
            }
            if !self.tiers.contains_key(tier) {
                return Err(ConfigError::new(
                    key,
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

/// `limits.key_header`: a lowercase HTTP header name, read once.
fn header_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HeaderName, D::Error> {
    let name = String::deserialize(d)?;
    http_header_name(&name)
        .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .ok_or_else(|| {
            serde::de::Error::custom(format!("`{name}` is not a lowercase HTTP header name"))
        })
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
            .field("keys_file", &self.keys_file)
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
            key_header: HeaderName::from_static(DEFAULT_KEY_HEADER),
            unknown_key: DEFAULT_UNKNOWN_KEY,
            tiers: BTreeMap::new(),
            keys: BTreeMap::new(),
            keys_file: String::new(),
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
    fn a_keys_file_adds_keys_and_is_checked() {
        let path = std::env::temp_dir().join(format!("txgate-keys-{}.toml", std::process::id()));
        std::fs::write(&path, "[keys]\n\"f-1\" = \"t\"\n\"c-1\" = \"u\"\n").unwrap();
        let mut c = parse("[tiers.t]\n[tiers.u]\n[keys]\n\"c-1\" = \"t\"\n");
        c.keys_file = path.display().to_string();
        c.validate().unwrap();
        let keys = c.all_keys().unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys["c-1"], "u", "the file's tier wins");
        std::fs::write(&path, "[keys]\n\"f-1\" = \"gold\"\n").unwrap();
        assert_eq!(c.validate().unwrap_err().key, "limits.keys_file");
        std::fs::write(&path, "keys = 3\n").unwrap();
        assert_eq!(c.validate().unwrap_err().key, "limits.keys_file");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn each_rule_names_its_key() {
        let refused = |s: &str| parse(s).validate().unwrap_err().key;
        assert_eq!(refused("max_clients = 0"), "limits.max_clients");
        assert_eq!(refused("ipv6_prefix = 129"), "limits.ipv6_prefix");
        assert_eq!(refused("exempt = [\"10.0.0.0/33\"]"), "limits.exempt");
        for bad in ["X-Api-Key", "", "a key"] {
            let text = format!("[limits]\nkey_header = \"{bad}\"");
            let e = crate::Config::from_toml(&text).unwrap_err();
            assert_eq!(e.key, "limits.key_header", "{bad}: {e}");
        }
        assert_eq!(refused("[keys]\n\"k\" = \"gold\""), "limits.keys");
        assert_eq!(
            refused("[tiers.t]\n[keys]\n\"a key\" = \"t\""),
            "limits.keys"
        );
        assert_eq!(
            refused("keys_file = \"/nonexistent/keys.toml\""),
            "limits.keys_file"
        );
        assert!(toml::from_str::<LimitsConfig>("unknown_key = \"allow\"").is_err());
        assert!(toml::from_str::<LimitsConfig>("ip = { calls = 1 }").is_err());
    }
}
