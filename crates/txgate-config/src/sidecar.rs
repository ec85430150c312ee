//! `[sidecar]`: the gRPC link to the sidecar that judges transactions.

use serde::Deserialize;

use crate::error::{ConfigError, require_at_least, require_positive};
use crate::url::HttpUrl;

/// Default: no sidecar.
pub const DEFAULT_SIDECAR_URL: &str = "";
/// Default: sidecar connect timeout.
pub const DEFAULT_SIDECAR_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Default: first reconnect delay.
pub const DEFAULT_SIDECAR_RECONNECT_INITIAL_MS: u64 = 100;
/// Default: longest reconnect delay.
pub const DEFAULT_SIDECAR_RECONNECT_MAX_MS: u64 = 5_000;
/// Default: invalidations queued between the stream and the worker.
pub const DEFAULT_SIDECAR_CHANNEL_CAPACITY: usize = 65_536;
/// Default: invalidations applied in one pass at most.
pub const DEFAULT_SIDECAR_BATCH_MAX: usize = 4_096;
/// Default: no ShouldForward probe.
pub const DEFAULT_SHOULD_FORWARD: bool = false;
/// Default: ShouldForward deadline.
pub const DEFAULT_SHOULD_FORWARD_TIMEOUT_MS: u64 = 20;
/// Default: how long a "forward" verdict is kept.
pub const DEFAULT_VERDICT_TTL_MS: u64 = 10_000;
/// Default: ShouldForward "forward" verdicts cached at most.
pub const DEFAULT_MAX_VERDICTS: usize = 100_000;
/// Default: ShouldForward questions in flight at most, process-wide.
pub const DEFAULT_MAX_PROBES_IN_FLIGHT: usize = 256;

/// The sidecar link (gRPC, `txgate.sidecar.v1`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SidecarConfig {
    /// `http://host:port` of the sidecar's gRPC server; empty: no sidecar.
    /// Parsed like `upstream.url` (see [`HttpUrl`]), and takes no path: the
    /// gRPC client would drop it.
    pub url: String,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// First reconnect delay; doubled per failure, with jitter.
    pub reconnect_initial_ms: u64,
    /// Longest reconnect delay.
    pub reconnect_max_ms: u64,
    /// Invalidations queued between the stream and the batching worker.
    /// When full, the stream is read no further until there is room (the
    /// sidecar is slowed by HTTP/2 flow control); nothing is dropped.
    pub channel_capacity: usize,
    /// Invalidations applied in one pass at most.
    pub batch_max: usize,
    /// Ask the sidecar about fingerprints with no local verdict.
    pub should_forward: bool,
    /// Deadline of that question; late or failed answers forward.
    pub should_forward_timeout_ms: u64,
    /// How long a "forward" verdict is kept.
    pub verdict_ttl_ms: u64,
    /// ShouldForward "forward" verdicts cached at most.
    pub max_verdicts: usize,
    /// ShouldForward questions in flight at most, across the process;
    /// beyond it a call is forwarded without asking (counted).
    pub max_probes_in_flight: usize,
}

impl SidecarConfig {
    /// `sidecar.url` parsed; `None` when it is empty (no sidecar).
    pub fn endpoint(&self) -> Result<Option<HttpUrl>, ConfigError> {
        if self.url.is_empty() {
            return Ok(None);
        }
        let url = HttpUrl::parse(&self.url).map_err(|e| ConfigError::new("sidecar.url", e))?;
        if url.path() != "/" {
            return Err(ConfigError::new(
                "sidecar.url",
                format!(
                    "`{}` has a path (`{}`): a gRPC endpoint is http://host:port",
                    self.url,
                    url.path()
                ),
            ));
        }
        Ok(Some(url))
    }

    /// Checks the `sidecar.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.endpoint()?;
        require_positive(&[
            ("sidecar.connect_timeout_ms", self.connect_timeout_ms),
            ("sidecar.reconnect_initial_ms", self.reconnect_initial_ms),
            ("sidecar.channel_capacity", self.channel_capacity as u64),
            ("sidecar.batch_max", self.batch_max as u64),
            (
                "sidecar.should_forward_timeout_ms",
                self.should_forward_timeout_ms,
            ),
            ("sidecar.max_verdicts", self.max_verdicts as u64),
            (
                "sidecar.max_probes_in_flight",
                self.max_probes_in_flight as u64,
            ),
        ])?;
        require_at_least(
            "sidecar.reconnect_max_ms",
            self.reconnect_max_ms,
            "sidecar.reconnect_initial_ms",
            self.reconnect_initial_ms,
        )
    }
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            url: DEFAULT_SIDECAR_URL.to_string(),
            connect_timeout_ms: DEFAULT_SIDECAR_CONNECT_TIMEOUT_MS,
            reconnect_initial_ms: DEFAULT_SIDECAR_RECONNECT_INITIAL_MS,
            reconnect_max_ms: DEFAULT_SIDECAR_RECONNECT_MAX_MS,
            channel_capacity: DEFAULT_SIDECAR_CHANNEL_CAPACITY,
            batch_max: DEFAULT_SIDECAR_BATCH_MAX,
            should_forward: DEFAULT_SHOULD_FORWARD,
            should_forward_timeout_ms: DEFAULT_SHOULD_FORWARD_TIMEOUT_MS,
            verdict_ttl_ms: DEFAULT_VERDICT_TTL_MS,
            max_verdicts: DEFAULT_MAX_VERDICTS,
            max_probes_in_flight: DEFAULT_MAX_PROBES_IN_FLIGHT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut SidecarConfig);

    #[test]
    fn defaults_are_valid_and_name_no_sidecar() {
        let c = SidecarConfig::default();
        c.validate().unwrap();
        assert_eq!(c.endpoint().unwrap(), None);
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 12] = [
            (|c| c.url = "https://x".into(), "sidecar.url"),
            (|c| c.url = "http://".into(), "sidecar.url"),
            (
                |c| c.url = "http://127.0.0.1:notaport".into(),
                "sidecar.url",
            ),
            (|c| c.url = "http://h:1/judge".into(), "sidecar.url"),
            (|c| c.connect_timeout_ms = 0, "sidecar.connect_timeout_ms"),
            (
                |c| c.reconnect_initial_ms = 0,
                "sidecar.reconnect_initial_ms",
            ),
            (|c| c.channel_capacity = 0, "sidecar.channel_capacity"),
            (|c| c.batch_max = 0, "sidecar.batch_max"),
            (
                |c| c.should_forward_timeout_ms = 0,
                "sidecar.should_forward_timeout_ms",
            ),
            (|c| c.max_verdicts = 0, "sidecar.max_verdicts"),
            (
                |c| c.max_probes_in_flight = 0,
                "sidecar.max_probes_in_flight",
            ),
            (|c| c.reconnect_max_ms = 1, "sidecar.reconnect_max_ms"),
        ];
        for (change, key) in cases {
            let mut c = SidecarConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }

    #[test]
    fn url_is_parsed_like_the_upstream() {
        for url in ["http://127.0.0.1:50051", "http://sidecar:50051/"] {
            let c = SidecarConfig {
                url: url.into(),
                ..SidecarConfig::default()
            };
            c.validate().unwrap();
            let e = c.endpoint().unwrap().unwrap();
            assert_eq!(e.port(), 50051, "{url}");
        }
    }
}
