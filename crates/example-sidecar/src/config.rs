//! The sidecar's configuration: assertions and limits, from a TOML file.
//!
//! ```toml
//! poll_interval_ms = 100
//! # How long a fingerprint judged invalid is remembered for ShouldForward
//! # (default 128000: txgate's own denied TTL).
//! judged_ttl_ms = 128000
//! # Fingerprints remembered at most; the oldest go first (default 100000).
//! judged_max = 100000
//! # Invalidations buffered per subscriber; one further behind loses the
//! # oldest, logged (default 16384).
//! stream_buffer = 16384
//! # Where failure reports go (see `report`): POST to this URL's host
//! # with the path `/report`, the query kept, user-info as Basic auth.
//! # `--report-url` overrides it; absent, nothing is reported.
//! report_url = "http://127.0.0.1:8080/?token=abc"
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

use alloy_primitives::{Address, B256, FixedBytes};
use serde::Deserialize;
use txgate_screen::AssertionKey;

/// Default of [`Config::judged_ttl_ms`]: txgate's own denied TTL (128 s).
pub(crate) const DEFAULT_JUDGED_TTL_MS: u64 = 128_000;
/// Default of [`Config::judged_max`].
pub(crate) const DEFAULT_JUDGED_MAX: usize = 100_000;
/// Default of [`Config::stream_buffer`].
pub(crate) const DEFAULT_STREAM_BUFFER: usize = 16_384;
/// Largest [`Config::stream_buffer`] accepted (the old fixed buffer).
pub(crate) const MAX_STREAM_BUFFER: usize = 1 << 18;

/// The sidecar's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// How often the node is polled for new blocks.
    #[serde(default)]
    pub(crate) poll_interval_ms: Option<u64>,
    /// Test hook: delay every ShouldForward answer by this much.
    #[serde(default)]
    pub(crate) should_forward_delay_ms: u64,
    /// How long a fingerprint judged invalid is remembered (and denied by
    /// ShouldForward), from its latest judgement.
    #[serde(default = "default_judged_ttl_ms")]
    pub(crate) judged_ttl_ms: u64,
    /// Fingerprints judged invalid remembered at most; beyond, the oldest
    /// judgement is forgotten first.
    #[serde(default = "default_judged_max")]
    pub(crate) judged_max: usize,
    /// Invalidations buffered per subscriber; a subscriber further behind
    /// loses the oldest (logged).
    #[serde(default = "default_stream_buffer")]
    pub(crate) stream_buffer: usize,
    /// Where failure reports go (`--report-url` overrides it).
    #[serde(default)]
    pub(crate) report_url: Option<String>,
    /// The assertions.
    #[serde(default)]
    pub(crate) assertion: Vec<Assertion>,
}

fn default_judged_ttl_ms() -> u64 {
    DEFAULT_JUDGED_TTL_MS
}

fn default_judged_max() -> usize {
    DEFAULT_JUDGED_MAX
}

fn default_stream_buffer() -> usize {
    DEFAULT_STREAM_BUFFER
}

impl Default for Config {
    fn default() -> Config {
        Config {
            poll_interval_ms: None,
            should_forward_delay_ms: 0,
            judged_ttl_ms: DEFAULT_JUDGED_TTL_MS,
            judged_max: DEFAULT_JUDGED_MAX,
            stream_buffer: DEFAULT_STREAM_BUFFER,
            report_url: None,
            assertion: Vec::new(),
        }
    }
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
    /// The assertion's id, as streamed to txgate.
    pub(crate) id: B256,
    /// The assertion's version, as streamed to txgate.
    pub(crate) version: u64,
    /// What it checks.
    pub(crate) kind: Kind,
    /// The contract it protects.
    pub(crate) contract: Address,
    /// The forbidden selector (`forbidden_selector` only).
    #[serde(default)]
    pub(crate) selector: Option<FixedBytes<4>>,
}

impl Assertion {
    /// How the assertion is named to txgate.
    pub(crate) fn key(&self) -> AssertionKey {
        AssertionKey {
            id: self.id,
            version: self.version,
        }
    }
}

impl Config {
    /// Reads and checks the file at `path`.
    pub(crate) fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        Config::parse(&text)
    }

    /// Parses and checks a configuration.
    pub(crate) fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        if self.judged_ttl_ms == 0 {
            return Err("judged_ttl_ms must be at least 1".into());
        }
        if self.judged_max == 0 {
            return Err("judged_max must be at least 1".into());
        }
        if !(1..=MAX_STREAM_BUFFER).contains(&self.stream_buffer) {
            return Err(format!(
                "stream_buffer must be between 1 and {MAX_STREAM_BUFFER}"
            ));
        }
        for a in &self.assertion {
            if a.kind == Kind::ForbiddenSelector && a.selector.is_none() {
                return Err(format!(
                    "assertion {}: forbidden_selector needs `selector`",
                    a.id
                ));
            }
        }
        Ok(())
    }

    /// How often the node is polled for new blocks (default 100 ms).
    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.unwrap_or(100))
    }

    /// How long a judgement is remembered.
    pub(crate) fn judged_ttl(&self) -> Duration {
        Duration::from_millis(self.judged_ttl_ms)
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

    /// Whether judging a call to `to` needs a simulation: some assertion
    /// on it is about reverts.
    pub(crate) fn needs_simulation(&self, to: Address) -> bool {
        self.assertion
            .iter()
            .any(|a| a.contract == to && a.kind == Kind::NoRevert)
    }

    /// Whether some assertion protects the contract at `to`.
    pub(crate) fn protects(&self, to: Address) -> bool {
        self.assertion.iter().any(|a| a.contract == to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_when_absent_and_are_configurable() {
        let config = Config::parse("poll_interval_ms = 50\n").expect("parses");
        assert_eq!(config.judged_ttl_ms, 128_000);
        assert_eq!(config.judged_max, 100_000);
        assert_eq!(config.stream_buffer, 16_384);
        let default = Config::default();
        assert_eq!(default.judged_ttl(), Duration::from_secs(128));
        assert_eq!(default.judged_max, 100_000);
        assert_eq!(default.stream_buffer, 16_384);

        let config = Config::parse("judged_ttl_ms = 5000\njudged_max = 10\nstream_buffer = 64\n")
            .expect("parses");
        assert_eq!(config.judged_ttl(), Duration::from_secs(5));
        assert_eq!(config.judged_max, 10);
        assert_eq!(config.stream_buffer, 64);
    }

    #[test]
    fn zero_or_oversized_limits_are_refused() {
        for text in [
            "judged_ttl_ms = 0",
            "judged_max = 0",
            "stream_buffer = 0",
            "stream_buffer = 262145",
        ] {
            assert!(Config::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn the_shipped_example_config_still_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/example-sidecar.toml");
        let config = Config::load(&path).expect("config/example-sidecar.toml");
        assert_eq!(config.assertion.len(), 2);
        assert_eq!(config.stream_buffer, DEFAULT_STREAM_BUFFER);
        assert_eq!(config.report_url, None);
    }

    #[test]
    fn the_report_url_is_a_config_key() {
        let config =
            Config::parse("report_url = \"http://u:p@127.0.0.1:9/?token=abc\"\n").expect("parses");
        assert_eq!(
            config.report_url.as_deref(),
            Some("http://u:p@127.0.0.1:9/?token=abc")
        );
    }
}
