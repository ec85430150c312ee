//! `[log]`: log format and filter.

use serde::Deserialize;

use crate::error::ConfigError;

/// Default log format.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Human;
/// Default log filter (`RUST_LOG` syntax).
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Default refusal lines a second, per refusal reason.
pub const DEFAULT_REFUSALS_PER_SEC: u32 = 10;
/// Default refusal lines at once, per reason, before the rate applies.
pub const DEFAULT_REFUSALS_BURST: u32 = 20;
/// Default lines a second about forwarded submissions (target
/// `txgate::submission`): operators asked proxyd for one line per
/// submission; a rate keeps a flood from filling the disk.
pub const DEFAULT_SUBMISSIONS_PER_SEC: u32 = 10;
/// Default submission lines at once before the rate applies.
pub const DEFAULT_SUBMISSIONS_BURST: u32 = 20;
/// Most refusal lines a second per reason that may be asked for.
pub const MAX_REFUSALS_PER_SEC: u32 = 1000;

/// Log output format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object a line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format `{other}` (expected human or json)"
            )),
        }
    }
}

/// Logging.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `human` or `json`.
    pub format: LogFormat,
    /// Filter in `RUST_LOG` syntax; `RUST_LOG` itself wins when set.
    pub level: String,
    /// Refusal lines (target `txgate::refusal`) a second, per reason; the
    /// others are counted in `txgate_refusal_log_suppressed_total` and the
    /// next line says how many it stands for. 0: no refusal lines.
    pub refusals_per_sec: u32,
    /// Refusal lines at once, per reason.
    pub refusals_burst: u32,
    /// Lines (target `txgate::submission`) a second about forwarded
    /// submissions: tx hash, node, duration, the node's answer or error;
    /// the others are counted in `txgate_submission_log_suppressed_total`.
    /// 0: none.
    pub submissions_per_sec: u32,
    /// Submission lines at once.
    pub submissions_burst: u32,
}

impl LogConfig {
    /// Checks the `log.*` keys: serde checked the format; the filter is
    /// parsed with the logger's own parser (`tracing_subscriber`), so what
    /// passes here is what the daemon can use.
    pub fn validate(&self) -> Result<(), ConfigError> {
        tracing_subscriber::EnvFilter::try_new(&self.level).map_err(|_| ConfigError {
            key: "log.level".into(),
            message: format!(
                "`{}` is not a log filter (RUST_LOG syntax, e.g. info or txgate_proxy=debug)",
                self.level
            ),
        })?;
        if self.refusals_per_sec > MAX_REFUSALS_PER_SEC {
            return Err(ConfigError::new(
                "log.refusals_per_sec",
                format!(
                    "{} is more than {MAX_REFUSALS_PER_SEC} lines a second per reason",
                    self.refusals_per_sec
                ),
            ));
        }
        if self.refusals_per_sec > 0 && self.refusals_burst == 0 {
            return Err(ConfigError::new(
                "log.refusals_burst",
                "must be at least 1 while log.refusals_per_sec is set",
            ));
        }
        if self.submissions_per_sec > MAX_REFUSALS_PER_SEC {
            return Err(ConfigError::new(
                "log.submissions_per_sec",
                format!(
                    "{} is more than {MAX_REFUSALS_PER_SEC} lines a second",
                    self.submissions_per_sec
                ),
            ));
        }
        if self.submissions_per_sec > 0 && self.submissions_burst == 0 {
            return Err(ConfigError::new(
                "log.submissions_burst",
                "must be at least 1 while log.submissions_per_sec is set",
            ));
        }
        Ok(())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: DEFAULT_LOG_FORMAT,
            level: DEFAULT_LOG_LEVEL.to_string(),
            refusals_per_sec: DEFAULT_REFUSALS_PER_SEC,
            refusals_burst: DEFAULT_REFUSALS_BURST,
            submissions_per_sec: DEFAULT_SUBMISSIONS_PER_SEC,
            submissions_burst: DEFAULT_SUBMISSIONS_BURST,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        LogConfig::default().validate().unwrap();
    }

    #[test]
    fn refusal_rate_is_bounded() {
        let too_many = LogConfig {
            refusals_per_sec: MAX_REFUSALS_PER_SEC + 1,
            ..LogConfig::default()
        };
        assert_eq!(too_many.validate().unwrap_err().key, "log.refusals_per_sec");
        let no_burst = LogConfig {
            refusals_burst: 0,
            ..LogConfig::default()
        };
        assert_eq!(no_burst.validate().unwrap_err().key, "log.refusals_burst");
        let off = LogConfig {
            refusals_per_sec: 0,
            refusals_burst: 0,
            ..LogConfig::default()
        };
        off.validate().unwrap();
    }

    #[test]
    fn format_from_str() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("human".parse::<LogFormat>(), Ok(LogFormat::Human));
        assert!("xml".parse::<LogFormat>().unwrap_err().contains("`xml`"));
    }
}
