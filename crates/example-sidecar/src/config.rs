//! Assertions from a TOML file.
//!
//! ```toml
//! poll_interval_ms = 100
//! [[assertion]]
//! id = "0x…32 bytes"
//! version = 1
//! kind = "no_revert"            # a call to `contract` must not revert
//! contract = "0x…"
//! [[assertion]]
//! id = "0x…"
//! version = 1
//! kind = "forbidden_selector"   # `selector` on `contract` is forbidden
//! contract = "0x…"
//! selector = "0x…4 bytes"
//! ```

use std::path::Path;
use std::time::Duration;

use alloy_primitives::{Address, B256};
use serde::Deserialize;

/// The sidecar's configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// How often the node is polled for new blocks.
    #[serde(default)]
    pub(crate) poll_interval_ms: Option<u64>,
    /// Test hook: delay every ShouldForward answer by this much.
    #[serde(default)]
    pub(crate) should_forward_delay_ms: u64,
    /// The assertions.
    #[serde(default)]
    pub(crate) assertion: Vec<Assertion>,
}

/// What an assertion checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A call to the contract must not revert.
    NoRevert,
    /// The selector on the contract is forbidden.
    ForbiddenSelector,
}

/// One assertion.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Assertion {
    pub(crate) id: B256,
    pub(crate) version: u64,
    pub(crate) kind: Kind,
    pub(crate) contract: Address,
    #[serde(default)]
    pub(crate) selector: Option<alloy_primitives::FixedBytes<4>>,
}

impl Config {
    pub(crate) fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let config: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
        for a in &config.assertion {
            if a.kind == Kind::ForbiddenSelector && a.selector.is_none() {
                return Err(format!(
                    "assertion {}: forbidden_selector needs `selector`",
                    a.id
                ));
            }
        }
        Ok(config)
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.unwrap_or(100))
    }

    /// The assertions a call to `to` with `input` violates, given whether it
    /// reverted (`None`: not known, only selector rules apply).
    pub(crate) fn violated(
        &self,
        to: Address,
        input: &[u8],
        reverted: Option<bool>,
    ) -> Vec<&Assertion> {
        self.assertion
            .iter()
            .filter(|a| a.contract == to)
            .filter(|a| match a.kind {
                Kind::NoRevert => reverted == Some(true),
                Kind::ForbiddenSelector => a
                    .selector
                    .is_some_and(|s| input.len() >= 4 && input[..4] == s[..]),
            })
            .collect()
    }

    pub(crate) fn protects(&self, to: Address) -> bool {
        self.assertion.iter().any(|a| a.contract == to)
    }
}
