//! `[rpc]`: JSON-RPC limits and the method policy.

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

/// Default cap on a request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Default cap on calls in one batch.
pub const DEFAULT_MAX_BATCH_SIZE: usize = 100;
/// Default cap on transactions in one `eth_sendBundle` (proxyd's own).
pub const DEFAULT_MAX_BUNDLE_TXS: usize = 100;
/// Default cap on transactions screened for one message (an HTTP body or
/// a WebSocket frame): a full batch of raw transactions, or two full
/// bundles. Each costs a sender recovery on the worker that reads the
/// message; 200 hold it for about 10 ms, where a batch of 100 bundles of
/// 100 would hold it for half a second.
pub const DEFAULT_MAX_MESSAGE_TXS: usize = 200;
/// The most `rpc.max_bundle_txs` and `rpc.max_message_txs` may be: a
/// message's transactions are counted one by one only up to it (beyond,
/// a bundle counts it plus one, and counting stops), so that a bundle of
/// a million empty strings is not collected whole only to be refused.
pub const MAX_COUNTED_TXS: usize = 65_536;
/// Default method policy mode.
pub const DEFAULT_METHOD_POLICY: PolicyMode = PolicyMode::Deny;
/// Default denied methods (`*` matches any suffix).
pub const DEFAULT_DENIED_METHODS: &[&str] =
    &["admin_*", "debug_*", "personal_*", "miner_*", "engine_*"];

/// Whether `rpc.methods` lists what is allowed or what is denied.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Only the listed methods pass.
    Allow,
    /// Every method passes but the listed ones.
    Deny,
}

/// JSON-RPC limits and method policy.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RpcConfig {
    /// Request body size cap (HTTP 413 above it).
    pub max_body_bytes: usize,
    /// Calls per batch at most.
    pub max_batch_size: usize,
    /// Transactions in one `eth_sendBundle` at most, when screening is on
    /// (-32602 above it).
    pub max_bundle_txs: usize,
    /// Transactions screened for one message at most (raw-transaction
    /// submissions plus every transaction of every bundle), when screening
    /// is on: a message over it is refused whole before any is screened
    /// (-32005, HTTP 413).
    pub max_message_txs: usize,
    /// `allow` or `deny`.
    pub policy: PolicyMode,
    /// Method names; a trailing `*` matches any suffix.
    pub methods: Vec<String>,
}

impl RpcConfig {
    /// Checks the `rpc.*` keys: positive limits, and `*` only at the end of
    /// a method pattern (or alone).
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("rpc.max_body_bytes", &self.max_body_bytes),
            ("rpc.max_batch_size", &self.max_batch_size),
            ("rpc.max_bundle_txs", &self.max_bundle_txs),
            ("rpc.max_message_txs", &self.max_message_txs),
        ])?;
        for (key, value) in [
            ("rpc.max_bundle_txs", self.max_bundle_txs),
            ("rpc.max_message_txs", self.max_message_txs),
        ] {
            if value > MAX_COUNTED_TXS {
                return Err(ConfigError::new(
                    key,
                    format!("{value}: at most {MAX_COUNTED_TXS}"),
                ));
            }
        }
        for (i, m) in self.methods.iter().enumerate() {
            let stem = m.strip_suffix('*').unwrap_or(m);
            if stem.is_empty() && m != "*" || stem.contains('*') {
                return Err(ConfigError::new(
                    format!("rpc.methods[{i}]"),
                    format!("`{m}`: `*` may only end a pattern"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            max_bundle_txs: DEFAULT_MAX_BUNDLE_TXS,
            max_message_txs: DEFAULT_MAX_MESSAGE_TXS,
            policy: DEFAULT_METHOD_POLICY,
            methods: DEFAULT_DENIED_METHODS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(change: impl FnOnce(&mut RpcConfig)) -> String {
        let mut c = RpcConfig::default();
        change(&mut c);
        c.validate().unwrap_err().key
    }

    #[test]
    fn defaults_are_valid() {
        RpcConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        assert_eq!(refused(|c| c.max_body_bytes = 0), "rpc.max_body_bytes");
        assert_eq!(refused(|c| c.max_batch_size = 0), "rpc.max_batch_size");
        assert_eq!(refused(|c| c.max_bundle_txs = 0), "rpc.max_bundle_txs");
        assert_eq!(refused(|c| c.max_message_txs = 0), "rpc.max_message_txs");
        assert_eq!(
            refused(|c| c.max_bundle_txs = MAX_COUNTED_TXS + 1),
            "rpc.max_bundle_txs"
        );
        assert_eq!(
            refused(|c| c.max_message_txs = MAX_COUNTED_TXS + 1),
            "rpc.max_message_txs"
        );
        assert_eq!(
            refused(|c| c.methods = vec!["eth_*call".into()]),
            "rpc.methods[0]"
        );
        assert_eq!(
            refused(|c| c.methods = vec!["eth_call".into(), "**".into()]),
            "rpc.methods[1]"
        );
    }

    #[test]
    fn star_patterns() {
        let c = RpcConfig {
            methods: vec!["*".into(), "eth_*".into(), "net_version".into()],
            ..RpcConfig::default()
        };
        c.validate().unwrap();
    }
}
