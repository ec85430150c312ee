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

/// Refuses the first of `fields` (key, value) whose value is 0.
pub(crate) fn require_positive(fields: &[(&str, u64)]) -> Result<(), ConfigError> {
    match fields.iter().find(|(_, value)| *value == 0) {
        Some((key, _)) => Err(ConfigError::new(*key, "must be greater than 0")),
        None => Ok(()),
    }
}

/// Refuses `key` unless `value` is at least `floor` (named `floor_key`).
pub(crate) fn require_at_least(
    key: &str,
    value: u64,
    floor_key: &str,
    floor: u64,
) -> Result<(), ConfigError> {
    if value < floor {
        return Err(ConfigError::new(
            key,
            format!("must be at least {floor_key} ({floor}), is {value}"),
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
        assert_eq!(require_positive(&[("a", 1), ("b", 2)]), Ok(()));
        let e = require_positive(&[("a", 1), ("b", 0), ("c", 0)]).unwrap_err();
        assert_eq!(e.key, "b");
    }
}
