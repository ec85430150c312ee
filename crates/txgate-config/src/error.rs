//! [`ConfigError`]: what is wrong, and the dotted key at fault.

/// A configuration error that names the key at fault.
///
/// Displayed as `` `key`: message ``, or just the message when the error
/// concerns the file as a whole (empty key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", key_prefix(.key))]
pub struct ConfigError {
    /// Dotted key path (`upstream.url`), or empty for the file as a whole.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `key` (empty: the file as a whole).
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("`{key}`: ")
    }
}

/// A count or a time, checked for zero by [`require_positive`].
pub(crate) trait Positive {
    /// Whether the value is 0 (or zero long).
    fn is_zero(&self) -> bool;
}

macro_rules! positive_int {
    ($($t:ty),*) => {$(
        impl Positive for $t {
            fn is_zero(&self) -> bool {
                *self == 0
            }
        }
    )*};
}

positive_int!(u32, u64, usize);

impl Positive for std::time::Duration {
    fn is_zero(&self) -> bool {
        std::time::Duration::is_zero(self)
    }
}

/// Refuses the first of `fields` (key, value) whose value is 0.
pub(crate) fn require_positive(fields: &[(&str, &dyn Positive)]) -> Result<(), ConfigError> {
    match fields.iter().find(|(_, value)| value.is_zero()) {
        Some((key, _)) => Err(ConfigError::new(*key, "must be greater than 0")),
        None => Ok(()),
    }
}

/// Refuses `key` unless `value` is at least `floor` (named `floor_key`);
/// both are times from `*_ms` keys.
pub(crate) fn require_at_least(
    key: &str,
    value: std::time::Duration,
    floor_key: &str,
    floor: std::time::Duration,
) -> Result<(), ConfigError> {
    if value < floor {
        return Err(ConfigError::new(
            key,
            format!(
                "must be at least {floor_key} ({}), is {}",
                floor.as_millis(),
                value.as_millis()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_key_when_there_is_one() {
        assert_eq!(
            ConfigError::new("upstream.url", "bad").to_string(),
            "`upstream.url`: bad"
        );
        assert_eq!(
            ConfigError::new("", "cannot read x").to_string(),
            "cannot read x"
        );
    }

    #[test]
    fn positive_names_the_first_zero() {
        assert_eq!(require_positive(&[("a", &1u64), ("b", &2usize)]), Ok(()));
        let zero = std::time::Duration::ZERO;
        let e = require_positive(&[("a", &1u64), ("b", &zero), ("c", &0u32)]).unwrap_err();
        assert_eq!(e.key, "b");
    }
}
