//! Time settings: the file spells them as whole numbers with their unit in
//! the key (`call_timeout_ms`, `denied_ttl_secs`); the structs hold
//! [`Duration`]s, read here once, so no stage converts a raw number.
//!
//! Used as `#[serde(rename = "call_timeout_ms", deserialize_with =
//! "crate::duration::millis")] pub call_timeout: Duration`.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A `*_ms` key.
pub(crate) fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

/// A `*_secs` key.
pub(crate) fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_secs)
}

/// A `*_ms` key where 0 means off (`None`).
pub(crate) fn millis_or_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    u64::deserialize(d).map(|ms| (ms > 0).then(|| Duration::from_millis(ms)))
}

/// A default `*_ms` value where 0 means off.
pub(crate) const fn ms_or_off(ms: u64) -> Option<Duration> {
    if ms == 0 {
        None
    } else {
        Some(Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct T {
        #[serde(rename = "a_ms", deserialize_with = "millis")]
        a: Duration,
        #[serde(rename = "b_secs", deserialize_with = "secs")]
        b: Duration,
        #[serde(rename = "c_ms", deserialize_with = "millis_or_off")]
        c: Option<Duration>,
        #[serde(rename = "d_ms", deserialize_with = "millis_or_off")]
        d: Option<Duration>,
    }

    #[test]
    fn units_come_from_the_key() {
        let t: T = toml::from_str("a_ms = 1500\nb_secs = 3\nc_ms = 0\nd_ms = 7").unwrap();
        assert_eq!(t.a, Duration::from_millis(1500));
        assert_eq!(t.b, Duration::from_secs(3));
        assert_eq!(t.c, None);
        assert_eq!(t.d, Some(Duration::from_millis(7)));
        assert_eq!(ms_or_off(0), None);
        assert_eq!(ms_or_off(5), Some(Duration::from_millis(5)));
    }

    #[test]
    fn a_negative_or_fractional_number_is_refused() {
        assert!(toml::from_str::<T>("a_ms = -1\nb_secs = 1\nc_ms = 0\nd_ms = 0").is_err());
        assert!(toml::from_str::<T>("a_ms = 1.5\nb_secs = 1\nc_ms = 0\nd_ms = 0").is_err());
    }
}
