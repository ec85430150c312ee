//! `[conditional]`: checks on `eth_sendRawTransactionConditional` before
//! anything costly touches it (see the `txgate-conditional` crate).

use serde::Deserialize;

use crate::error::ConfigError;

/// The ERC-4337 EntryPoint v0.6 and v0.7: the targets op-txproxy allows.
pub const DEFAULT_TARGETS: [&str; 2] = [
    "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789",
    "0x0000000071727De22E5E9d8BAf0edAc6f37da032",
];
/// op-geth's limit on a condition's cost in state lookups (inclusive).
pub const DEFAULT_MAX_COST: u64 = 1000;
/// The highest `conditional.max_cost` that may be set.
pub const MAX_MAX_COST: u64 = 1_000_000;
/// Default lookups a second the conditional calls of one instance may cost
/// (op-txproxy's default).
pub const DEFAULT_RATE_PER_SEC: u32 = 5000;
/// Default lookups at once before the rate applies (op-txproxy's burst).
pub const DEFAULT_BURST: u32 = 1000;
/// Default callers whose rate is tracked at once (per instance).
pub const DEFAULT_MAX_CALLERS: usize = 10_000;
/// The most callers that may be tracked.
pub const MAX_MAX_CALLERS: usize = 10_000_000;
/// The most addresses `conditional.callers` may list.
pub const MAX_CALLERS_LISTED: usize = 100_000;

/// Conditional transactions.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConditionalConfig {
    /// Accept the method at all; false refuses every call (-32003
    /// "endpoint disabled").
    pub enabled: bool,
    /// Most state lookups a condition may cost (-32005 above).
    pub max_cost: u64,
    /// Addresses a conditional transaction may call (0x-hex); empty: any.
    pub targets: Vec<String>,
    /// Lookups a second the conditional calls of this instance may cost
    /// (a token bucket in lookups); over it, -32005 "rate limited" at
    /// once. 0: no limit.
    pub rate_per_sec: u32,
    /// Lookups at once before the rate applies.
    pub burst: u32,
    /// Callers allowed to send conditional transactions (0x-hex addresses
    /// that sign the body in `X-Optimism-Signature`); empty: anyone, a
    /// signature checked when present.
    pub callers: Vec<String>,
    /// Lookups a second one signed caller may cost (on top of the
    /// instance's rate); 0: no per-caller limit.
    pub caller_rate_per_sec: u32,
    /// Lookups at once before a caller's rate applies (0: its rate).
    pub caller_burst: u32,
    /// Callers whose rate is tracked at once.
    pub max_callers: usize,
}

/// `conditional.callers` and `conditional.targets`, as addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    /// The callers allowed to submit conditional transactions (empty: any).
    pub callers: Vec<[u8; 20]>,
    /// The contracts whose storage conditions are checked.
    pub targets: Vec<[u8; 20]>,
}

impl ConditionalConfig {
    /// Checks the `conditional.*` keys; the callers and the targets
    /// parsed.
    pub fn validate(&self) -> Result<Addresses, ConfigError> {
        if self.max_cost == 0 || self.max_cost > MAX_MAX_COST {
            return Err(ConfigError::new(
                "conditional.max_cost",
                format!("{} is out of range (1 to {MAX_MAX_COST})", self.max_cost),
            ));
        }
        if self.rate_per_sec > 0 && self.burst == 0 {
            return Err(ConfigError::new(
                "conditional.burst",
                "must be at least 1 while conditional.rate_per_sec is set",
            ));
        }
        if self.max_callers == 0 || self.max_callers > MAX_MAX_CALLERS {
            return Err(ConfigError::new(
                "conditional.max_callers",
                format!(
                    "{} is out of range (1 to {MAX_MAX_CALLERS})",
                    self.max_callers
                ),
            ));
        }
        if self.callers.len() > MAX_CALLERS_LISTED {
            return Err(ConfigError::new(
                "conditional.callers",
                format!("more than {MAX_CALLERS_LISTED} addresses"),
            ));
        }
        Ok(Addresses {
            callers: self.caller_addresses()?,
            targets: self.target_addresses()?,
        })
    }

    /// The allowed callers as 20-byte addresses, or the key of the first
    /// that is not one.
    pub fn caller_addresses(&self) -> Result<Vec<[u8; 20]>, ConfigError> {
        addresses("conditional.callers", &self.callers)
    }

    /// The targets as 20-byte addresses, or the key of the first that is
    /// not one.
    pub fn target_addresses(&self) -> Result<Vec<[u8; 20]>, ConfigError> {
        addresses("conditional.targets", &self.targets)
    }
}

/// `list` (the setting `key`) as addresses, or the key of the first that
/// is not one.
fn addresses(key: &str, list: &[String]) -> Result<Vec<[u8; 20]>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            parse_address(text).ok_or_else(|| {
                ConfigError::new(
                    format!("{key}[{i}]"),
                    format!("`{text}` is not a 0x-prefixed 20-byte address"),
                )
            })
        })
        .collect()
}

fn parse_address(text: &str) -> Option<[u8; 20]> {
    let digits = text.strip_prefix("0x")?;
    if digits.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (byte, pair) in out.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
        let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

impl Default for ConditionalConfig {
    fn default() -> Self {
        ConditionalConfig {
            enabled: true,
            max_cost: DEFAULT_MAX_COST,
            targets: DEFAULT_TARGETS.iter().map(|t| (*t).to_owned()).collect(),
            rate_per_sec: DEFAULT_RATE_PER_SEC,
            burst: DEFAULT_BURST,
            callers: Vec::new(),
            caller_rate_per_sec: 0,
            caller_burst: 0,
            max_callers: DEFAULT_MAX_CALLERS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_entry_points() {
        let c = ConditionalConfig::default();
        c.validate().unwrap();
        let targets = c.target_addresses().unwrap();
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[1][..4], [0, 0, 0, 0]);
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad_target = ConditionalConfig {
            targets: vec![DEFAULT_TARGETS[0].into(), "0x12".into()],
            ..ConditionalConfig::default()
        };
        assert_eq!(
            bad_target.validate().unwrap_err().key,
            "conditional.targets[1]"
        );
        for max_cost in [0, MAX_MAX_COST + 1] {
            let c = ConditionalConfig {
                max_cost,
                ..ConditionalConfig::default()
            };
            assert_eq!(c.validate().unwrap_err().key, "conditional.max_cost");
        }
        let no_burst = ConditionalConfig {
            burst: 0,
            ..ConditionalConfig::default()
        };
        assert_eq!(no_burst.validate().unwrap_err().key, "conditional.burst");
        let bad_caller = ConditionalConfig {
            callers: vec!["0x5FF137D4b0FDCD49DcA30c7CF57E578a026d27".into()],
            ..ConditionalConfig::default()
        };
        assert_eq!(
            bad_caller.validate().unwrap_err().key,
            "conditional.callers[0]"
        );
        let no_callers = ConditionalConfig {
            max_callers: 0,
            ..ConditionalConfig::default()
        };
        assert_eq!(
            no_callers.validate().unwrap_err().key,
            "conditional.max_callers"
        );
        let any = ConditionalConfig {
            targets: Vec::new(),
            ..ConditionalConfig::default()
        };
        any.validate().unwrap();
    }
}
