//! `[aeges]`: the Aeges listener, where the Credible Layer sidecar posts
//! its failure reports (`POST /report`; the sidecar's `aeges_url` setting
//! points here) and the sequencer's pool plugin asks about each
//! transaction entering its pool (gRPC `aeges.v1.AegesService/
//! VerifyTransaction` over HTTP/2 cleartext, on the same port; the
//! plugin's `--plugin-credible-aeges-grpc-endpoint` points here).
//!
//! A report bans traffic, so whoever can post one can ban honest
//! transactions: the defaults are closed. The listener is off until
//! `aeges.listen` is set, and then takes reports only from the addresses in
//! `aeges.report_allow` (loopback by default) and, when `aeges.report_token`
//! is set, only with that token. The pool plugin sends no credentials: its
//! questions are taken from `aeges.verify_allow` only (loopback by
//! default), never checked against the token.

use std::fmt;
use std::net::SocketAddr;

use ipnet::IpNet;
use serde::Deserialize;

use crate::error::{ConfigError, require_positive};
use crate::net::nets;

/// Default: no Aeges listener.
pub const DEFAULT_AEGES_LISTEN: &str = "";
/// Default: no report token.
pub const DEFAULT_AEGES_REPORT_TOKEN: &str = "";
/// Default: reports taken from loopback only.
pub const DEFAULT_AEGES_REPORT_ALLOW: [&str; 2] = ["127.0.0.0/8", "::1/128"];
/// Default: report body cap in bytes. A report carries the failed
/// transaction's TxEnv as JSON: a 128 KiB transaction's calldata doubles
/// as hex, and access and authorization lists grow two to three times
/// from RLP to JSON (an attacker can pad an access list without changing
/// the fingerprint), so 1 MiB keeps every report of a valid transaction.
pub const DEFAULT_AEGES_MAX_REPORT_BYTES: usize = 1_048_576;

/// Default: pool questions taken from loopback only.
pub const DEFAULT_AEGES_VERIFY_ALLOW: [&str; 2] = ["127.0.0.0/8", "::1/128"];
/// Default: pool questions in flight at most, over every connection; one
/// over it is answered `RESOURCE_EXHAUSTED` at once (the plugin then lets
/// the transaction in). A verdict takes microseconds: at 20 000 calls/s
/// about 20 are in flight.
pub const DEFAULT_AEGES_MAX_IN_FLIGHT: usize = 1024;
/// Default: gRPC message cap of a pool question, in bytes (the gRPC
/// message size limit, set explicitly). Twice the 128 KiB that common
/// transaction pools accept as one transaction, so no valid transaction is
/// refused; with [`DEFAULT_AEGES_MAX_IN_FLIGHT`] it bounds what questions
/// in flight can hold (256 MiB).
pub const DEFAULT_AEGES_MAX_VERIFY_BYTES: usize = 262_144;

/// Default: proxyd's validation hook (`POST /proxyd/validate`) answered
/// for loopback only.
pub const DEFAULT_AEGES_PROXYD_ALLOW: [&str; 2] = ["127.0.0.0/8", "::1/128"];
/// Default: no hook token.
pub const DEFAULT_AEGES_PROXYD_TOKEN: &str = "";
/// Default: hook body cap in bytes. proxyd sends one call's transactions
/// as JSON, at most about 4.6 times their raw size (hex doubles every
/// byte; field names and the sender are added; the worst case is a list of
/// small authorizations): proxyd's own 256 KiB request cap gives at most
/// about 1.2 MiB, which 2 MiB holds. An answer over the cap is an error,
/// which proxyd lets through when it fails open: the cap must stay above
/// what proxyd accepts (raise it with proxyd's `max_body_size_bytes`).
pub const DEFAULT_AEGES_MAX_PROXYD_BYTES: usize = 2_097_152;
/// Default: transactions a second remembered for one hook source (and its
/// burst); beyond, the source's requests still get their verdicts (an
/// error would let proxyd through while it fails open) but nothing of them
/// is remembered. Well above a rollup's submission rate: it bounds what a
/// source can put into the forwarded map, not proxyd's traffic.
pub const DEFAULT_AEGES_PROXYD_TXS_PER_SEC: u32 = 20_000;
/// Default burst of [`DEFAULT_AEGES_PROXYD_TXS_PER_SEC`].
pub const DEFAULT_AEGES_PROXYD_BURST: u32 = 20_000;

/// Longest report token, in bytes.
const MAX_TOKEN_BYTES: usize = 256;

/// The Aeges listener.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AegesConfig {
    /// `host:port` to listen on, an IP address and a port like
    /// `server.listen`; empty: no listener.
    pub listen: String,
    /// Token a report must carry; empty: none asked. Visible ASCII, at most
    /// 256 bytes. Never printed ([`fmt::Debug`] shows whether it is set).
    pub report_token: String,
    /// Source addresses allowed to post, as CIDRs (`10.0.0.0/8`,
    /// `fd00::/8`); a bare address is that address alone (`/32`, `/128`).
    /// Others are refused. Empty: nobody.
    pub report_allow: Vec<String>,
    /// Report body cap in bytes.
    pub max_report_bytes: usize,
    /// Source addresses allowed to ask `VerifyTransaction`, as CIDRs like
    /// `report_allow`; others get `PERMISSION_DENIED`. Empty: nobody.
    pub verify_allow: Vec<String>,
    /// Pool questions in flight at most (`RESOURCE_EXHAUSTED` beyond).
    pub max_in_flight: usize,
    /// gRPC message cap of a pool question, in bytes
    /// (`INVALID_ARGUMENT` beyond).
    pub max_verify_bytes: usize,
    /// Source addresses allowed to ask proxyd's validation hook (`POST
    /// /proxyd/validate`), as CIDRs like `report_allow`. Empty: the route
    /// is off.
    pub proxyd_allow: Vec<String>,
    /// Token a hook request must carry (proxyd sends Basic auth from its
    /// endpoint URL's user-info); empty: none asked. Same form as
    /// `report_token`.
    pub proxyd_token: String,
    /// Hook body cap in bytes.
    pub max_proxyd_bytes: usize,
    /// Transactions a second remembered for one hook source (over it the
    /// verdicts are still given, nothing is remembered).
    pub proxyd_txs_per_sec: u32,
    /// Burst of `proxyd_txs_per_sec`, in transactions (at least one
    /// request's worth: 100).
    pub proxyd_burst: u32,
}

/// The Aeges listener's address and who may use it, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AegesAccess {
    /// `aeges.listen` (`None`: off).
    pub listen: Option<SocketAddr>,
    /// `aeges.report_allow`.
    pub report_allow: Vec<IpNet>,
    /// `aeges.verify_allow`.
    pub verify_allow: Vec<IpNet>,
    /// `aeges.proxyd_allow`.
    pub proxyd_allow: Vec<IpNet>,
}

impl AegesConfig {
    /// `aeges.listen` parsed; `None` when it is empty (no listener).
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.listen.is_empty() {
            return Ok(None);
        }
        self.listen.parse().map(Some).map_err(|_| {
            ConfigError::new(
                "aeges.listen",
                format!(
                    "`{}` is not an IP address and port (`127.0.0.1:9546`, `[::1]:9546`); \
                     empty turns the listener off",
                    self.listen
                ),
            )
        })
    }

    /// `aeges.report_allow` parsed, each network truncated to its prefix
    /// (`10.1.2.3/8` is `10.0.0.0/8`), a bare address as `/32` or `/128`.
    pub fn allow(&self) -> Result<Vec<IpNet>, ConfigError> {
        nets("aeges.report_allow", &self.report_allow)
    }

    /// `aeges.verify_allow` parsed like [`AegesConfig::allow`].
    pub fn verify_allow(&self) -> Result<Vec<IpNet>, ConfigError> {
        nets("aeges.verify_allow", &self.verify_allow)
    }

    /// Checks the `aeges.*` keys (`aeges.listen` is checked against the
    /// other listeners by [`Config::validate`](crate::Config::validate)).
    /// Returns the listener's address and source lists parsed.
    pub fn validate(&self) -> Result<AegesAccess, ConfigError> {
        // Closed by default: a listener other hosts can reach takes reports
        // only with a token (or none at all: an empty `report_allow`).
        let listen = self.listen_addr()?;
        if let Some(addr) = listen
            && !addr.ip().is_loopback()
            && self.report_token.is_empty()
            && !self.report_allow.is_empty()
        {
            return Err(ConfigError::new(
                "aeges.report_token",
                format!(
                    "aeges.listen {addr} can be reached from other hosts, and whoever can \
                     post a report there can ban traffic: set a token, or take no reports \
                     (report_allow = [])"
                ),
            ));
        }
        validate_token("aeges.report_token", &self.report_token)?;
        validate_token("aeges.proxyd_token", &self.proxyd_token)?;
        let access = AegesAccess {
            listen,
            report_allow: self.allow()?,
            verify_allow: self.verify_allow()?,
            proxyd_allow: nets("aeges.proxyd_allow", &self.proxyd_allow)?,
        };
        require_positive(&[
            ("aeges.max_report_bytes", &self.max_report_bytes),
            ("aeges.max_in_flight", &self.max_in_flight),
            ("aeges.max_verify_bytes", &self.max_verify_bytes),
            ("aeges.max_proxyd_bytes", &self.max_proxyd_bytes),
            ("aeges.proxyd_txs_per_sec", &self.proxyd_txs_per_sec),
        ])?;
        if self.proxyd_burst < 100 {
            return Err(ConfigError::new(
                "aeges.proxyd_burst",
                format!(
                    "{} is below 100: a request of proxyd's largest (a 100-transaction \
                     bundle) could never be judged",
                    self.proxyd_burst
                ),
            ));
        }
        Ok(access)
    }
}

/// A token (the setting `key`) is compared with what a URL carries:
/// visible ASCII only, and bounded. The messages never quote it.
fn validate_token(key: &str, token: &str) -> Result<(), ConfigError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(ConfigError::new(
            key,
            format!("is {} bytes long; at most {MAX_TOKEN_BYTES}", token.len()),
        ));
    }
    // Unreserved URL characters only: the sidecar's URL carries the
    // token, and anything else would be percent-encoded on the way.
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    if let Some(at) = token.bytes().position(|b| !unreserved(b)) {
        return Err(ConfigError::new(
            key,
            format!(
                "byte {at} is not allowed: the token may hold only letters, digits \
                 and `-._~` (it travels in a URL)"
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for AegesConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AegesConfig")
            .field("listen", &self.listen)
            .field(
                "report_token",
                &if self.report_token.is_empty() {
                    "none"
                } else {
                    "set"
                },
            )
            .field("report_allow", &self.report_allow)
            .field("max_report_bytes", &self.max_report_bytes)
            .field("verify_allow", &self.verify_allow)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_verify_bytes", &self.max_verify_bytes)
            .field("proxyd_allow", &self.proxyd_allow)
            .field(
                "proxyd_token",
                &if self.proxyd_token.is_empty() {
                    "none"
                } else {
                    "set"
                },
            )
            .field("max_proxyd_bytes", &self.max_proxyd_bytes)
            .field("proxyd_txs_per_sec", &self.proxyd_txs_per_sec)
            .field("proxyd_burst", &self.proxyd_burst)
            .finish()
    }
}

impl Default for AegesConfig {
    fn default() -> Self {
        AegesConfig {
            listen: DEFAULT_AEGES_LISTEN.to_string(),
            report_token: DEFAULT_AEGES_REPORT_TOKEN.to_string(),
            report_allow: DEFAULT_AEGES_REPORT_ALLOW.map(String::from).to_vec(),
            max_report_bytes: DEFAULT_AEGES_MAX_REPORT_BYTES,
            verify_allow: DEFAULT_AEGES_VERIFY_ALLOW.map(String::from).to_vec(),
            max_in_flight: DEFAULT_AEGES_MAX_IN_FLIGHT,
            max_verify_bytes: DEFAULT_AEGES_MAX_VERIFY_BYTES,
            proxyd_allow: DEFAULT_AEGES_PROXYD_ALLOW.map(String::from).to_vec(),
            proxyd_token: DEFAULT_AEGES_PROXYD_TOKEN.to_string(),
            max_proxyd_bytes: DEFAULT_AEGES_MAX_PROXYD_BYTES,
            proxyd_txs_per_sec: DEFAULT_AEGES_PROXYD_TXS_PER_SEC,
            proxyd_burst: DEFAULT_AEGES_PROXYD_BURST,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    type Change = fn(&mut AegesConfig);

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn defaults_are_valid_and_closed() {
        let c = AegesConfig::default();
        c.validate().unwrap();
        assert_eq!(c.listen_addr().unwrap(), None);
        assert!(c.report_token.is_empty());
        let allow = c.allow().unwrap();
        assert_eq!(allow.len(), 2);
        for addr in ["127.0.0.1", "127.255.0.9", "::1"] {
            assert!(allow.iter().any(|n| n.contains(&ip(addr))), "{addr}");
        }
        for addr in ["10.0.0.1", "192.168.1.1", "::2", "fe80::1", "0.0.0.0"] {
            assert!(!allow.iter().any(|n| n.contains(&ip(addr))), "{addr}");
        }
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 16] = [
            // Reachable from other hosts without a token: refused.
            (|c| c.listen = "0.0.0.0:9546".into(), "aeges.report_token"),
            (|c| c.listen = "10.1.2.3:9546".into(), "aeges.report_token"),
            (|c| c.listen = "nowhere".into(), "aeges.listen"),
            (|c| c.listen = "127.0.0.1".into(), "aeges.listen"),
            (|c| c.listen = "localhost:9546".into(), "aeges.listen"),
            (|c| c.listen = "::1:9546".into(), "aeges.listen"),
            (
                |c| c.report_allow = vec!["10.0.0.0/33".into()],
                "aeges.report_allow",
            ),
            (
                |c| c.report_allow = vec!["::/129".into()],
                "aeges.report_allow",
            ),
            (
                |c| c.report_allow = vec!["127.0.0.1".into(), "host.internal".into()],
                "aeges.report_allow",
            ),
            (
                |c| c.report_allow = vec![String::new()],
                "aeges.report_allow",
            ),
            (
                |c| c.report_token = "has space".into(),
                "aeges.report_token",
            ),
            (|c| c.report_token = "x".repeat(257), "aeges.report_token"),
            (|c| c.max_report_bytes = 0, "aeges.max_report_bytes"),
            (
                |c| c.verify_allow = vec!["10.0.0.0/8".into(), "sequencer".into()],
                "aeges.verify_allow",
            ),
            (|c| c.max_in_flight = 0, "aeges.max_in_flight"),
            (|c| c.max_verify_bytes = 0, "aeges.max_verify_bytes"),
        ];
        for (change, key) in cases {
            let mut c = AegesConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key, "{c:?}");
        }
    }

    /// The pool plugin on another host needs a listener other hosts can
    /// reach; with reports turned off (`report_allow = []`) no token is
    /// asked, and the plugin is never asked for one.
    #[test]
    fn a_verify_only_listener_needs_no_token() {
        let c = AegesConfig {
            listen: "0.0.0.0:9546".into(),
            report_allow: Vec::new(),
            verify_allow: vec!["10.0.0.7".into()],
            ..AegesConfig::default()
        };
        c.validate().unwrap();
        let allow = c.verify_allow().unwrap();
        assert_eq!(allow.len(), 1);
        assert!(allow[0].contains(&ip("10.0.0.7")));
        assert!(c.allow().unwrap().is_empty());
        // Reports from elsewhere still need one.
        let c = AegesConfig {
            report_allow: vec!["10.0.0.8".into()],
            ..c
        };
        assert_eq!(c.validate().unwrap_err().key, "aeges.report_token");
    }

    #[test]
    fn listen_is_parsed_like_the_other_listeners() {
        for (listen, want) in [
            ("127.0.0.1:9546", "127.0.0.1:9546"),
            ("[::1]:9546", "[::1]:9546"),
            ("0.0.0.0:0", "0.0.0.0:0"),
        ] {
            let c = AegesConfig {
                listen: listen.into(),
                // Not loopback: it needs a token.
                report_token: "t0ken".into(),
                ..AegesConfig::default()
            };
            c.validate().unwrap();
            assert_eq!(c.listen_addr().unwrap().unwrap().to_string(), want);
        }
    }

    #[test]
    fn cidrs_v4_v6_and_bare_addresses() {
        let c = AegesConfig {
            report_allow: vec![
                "10.1.0.0/16".into(),
                "fd00:1::/32".into(),
                "192.0.2.7".into(),
                "2001:db8::5".into(),
                // Host bits are dropped: this is 172.16.0.0/12.
                "172.16.5.4/12".into(),
            ],
            ..AegesConfig::default()
        };
        c.validate().unwrap();
        let allow = c.allow().unwrap();
        let nets: Vec<String> = allow.iter().map(ToString::to_string).collect();
        assert_eq!(
            nets,
            [
                "10.1.0.0/16",
                "fd00:1::/32",
                "192.0.2.7/32",
                "2001:db8::5/128",
                "172.16.0.0/12"
            ]
        );
        let allowed = |addr: &str| allow.iter().any(|n| n.contains(&ip(addr)));
        for addr in [
            "10.1.255.255",
            "fd00:1:ffff::1",
            "192.0.2.7",
            "2001:db8::5",
            "172.31.0.1",
        ] {
            assert!(allowed(addr), "{addr}");
        }
        for addr in [
            "10.2.0.0",
            "fd00:2::1",
            "192.0.2.8",
            "2001:db8::6",
            "172.32.0.1",
            "127.0.0.1",
        ] {
            assert!(!allowed(addr), "{addr}");
        }
        // The error names the entry, not just the key.
        let c = AegesConfig {
            report_allow: vec!["127.0.0.1".into(), "10.0.0.0/8/8".into()],
            ..AegesConfig::default()
        };
        let e = c.allow().unwrap_err();
        assert!(
            e.message.contains("entry 1") && e.message.contains("10.0.0.0/8/8"),
            "{e}"
        );
    }

    #[test]
    fn tokens_are_visible_ascii_and_never_shown() {
        for token in ["s3cret", "a-b.c_d~e", &"x".repeat(256)] {
            let c = AegesConfig {
                report_token: token.to_string(),
                ..AegesConfig::default()
            };
            c.validate().unwrap();
        }
        for token in [
            "tab\there",
            "new\nline",
            "caf\u{e9}-secret",
            "nul\0",
            "a&b",
            "p%41ss",
            "x#y",
        ] {
            let c = AegesConfig {
                report_token: token.to_string(),
                ..AegesConfig::default()
            };
            let e = c.validate().unwrap_err();
            assert_eq!(e.key, "aeges.report_token");
            assert!(!e.to_string().contains(token), "{e}");
        }
        let c = AegesConfig {
            report_token: "hunter2-secret".into(),
            ..AegesConfig::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("set"),
            "{shown}"
        );
    }

    #[test]
    fn the_section_is_read_from_toml() {
        let c: AegesConfig = toml::from_str(
            "listen = \"127.0.0.1:9546\"\nreport_token = \"t\"\n\
             report_allow = [\"10.0.0.0/8\"]\nmax_report_bytes = 1024\n\
             verify_allow = [\"10.1.0.0/16\"]\nmax_in_flight = 8\nmax_verify_bytes = 4096\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.report_allow, ["10.0.0.0/8"]);
        assert_eq!(c.max_report_bytes, 1024);
        assert_eq!(c.verify_allow, ["10.1.0.0/16"]);
        assert_eq!((c.max_in_flight, c.max_verify_bytes), (8, 4096));
        assert!(toml::from_str::<AegesConfig>("token = \"t\"\n").is_err());
    }

    #[test]
    fn the_proxyd_hook_keys_are_checked() {
        let cases: [(Change, &str); 5] = [
            (
                |c| c.proxyd_allow = vec!["10.0.0.0/33".into()],
                "aeges.proxyd_allow",
            ),
            (|c| c.proxyd_token = "a b".into(), "aeges.proxyd_token"),
            (|c| c.max_proxyd_bytes = 0, "aeges.max_proxyd_bytes"),
            (|c| c.proxyd_txs_per_sec = 0, "aeges.proxyd_txs_per_sec"),
            (|c| c.proxyd_burst = 99, "aeges.proxyd_burst"),
        ];
        for (change, key) in cases {
            let mut c = AegesConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
        let c = AegesConfig {
            proxyd_allow: vec!["10.1.2.3".into()],
            ..AegesConfig::default()
        };
        let access = c.validate().unwrap();
        assert!(access.proxyd_allow[0].contains(&ip("10.1.2.3")));
        assert!(!access.proxyd_allow[0].contains(&ip("10.1.2.4")));
        assert!(!format!("{c:?}").contains("a b"));
    }
}
