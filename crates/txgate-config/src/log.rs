//! `[log]`: log format and filter.

use serde::Deserialize;

use crate::error::ConfigError;

/// Default log format.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Human;
/// Default log filter (`RUST_LOG` syntax).
pub const DEFAULT_LOG_LEVEL: &str = "info";

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
        Ok(())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: DEFAULT_LOG_FORMAT,
            level: DEFAULT_LOG_LEVEL.to_string(),
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
    fn format_from_str() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("human".parse::<LogFormat>(), Ok(LogFormat::Human));
        assert!("xml".parse::<LogFormat>().unwrap_err().contains("`xml`"));
    }
}
