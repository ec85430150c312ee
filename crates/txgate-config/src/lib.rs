//! txgate's configuration.
//!
//! Plain structs with a `DEFAULT_*` constant for every setting, parsed once
//! at the edge: [`Config::from_toml`] rejects unknown keys and bad values
//! with the dotted path of the key at fault, and [`Config::validate`] checks
//! what serde cannot. `config/txgate.toml` in the repository documents every
//! key with these defaults.
//!
//! One module per section of the file, each with its struct, its
//! `DEFAULT_*` constants (all re-exported here) and a `validate` for its own
//! keys:
//!
//! * [`server`]: `[server]`, [`ServerConfig`], with [`ProxyProtocol`] and
//!   [`ForwardedHeader`];
//! * [`admission`]: `[admission]`, [`AdmissionConfig`];
//! * [`limits`]: `[limits]`, [`LimitsConfig`]: per-client rates by IP and
//!   by API key tier;
//! * [`rpc`]: `[rpc]`, [`RpcConfig`] and [`PolicyMode`];
//! * [`upstream`]: `[upstream]`, [`UpstreamConfig`];
//! * [`admin`]: `[admin]`, [`AdminConfig`];
//! * [`conditional`]: `[conditional]`, [`ConditionalConfig`];
//! * [`shutdown`]: `[shutdown]`, [`ShutdownConfig`];
//! * [`log`]: `[log]`, [`LogConfig`] and [`LogFormat`];
//! * [`screen`]: `[screen]`, [`ScreenConfig`], with
//!   [`screen::backpressure`] (`[screen.backpressure]`,
//!   [`BackpressureConfig`]) and [`screen::cooldown`] (`[screen.cooldown]`,
//!   [`CooldownConfig`]);
//! * [`sidecar`]: `[sidecar]`, [`SidecarConfig`], its sources
//!   (`[[sidecar.sources]]`, [`SourceConfig`], checked into [`Source`] by
//!   [`SidecarConfig::sources`]) and their [`Protocol`];
//! * [`aeges`]: `[aeges]`, [`AegesConfig`], the listener the Credible Layer
//!   sidecar posts its failure reports to (source networks as [`IpNet`],
//!   re-exported from the `ipnet` crate);
//! * [`websocket`]: `[websocket]`, [`WebSocketConfig`]: JSON-RPC over
//!   WebSocket on the client port, its per-connection limits, and the
//!   node's WebSocket endpoint ([`Config::websocket_upstream`]);
//! * [`tls`]: `[server.tls]`, [`ServerTlsConfig`] (TLS on the client port)
//!   and `[upstream.tls]`, [`UpstreamTlsConfig`] (an `https://` node).
//!
//! And two shared by all of them:
//!
//! * [`error`]: [`ConfigError`], which names the key at fault;
//! * [`url`]: [`HttpUrl`], the one parser of `upstream.url`, the sidecar
//!   URLs and `websocket.upstream_url`, used by `check-config` and by the
//!   clients alike.

pub mod admin;
pub mod admission;
pub mod aeges;
pub mod conditional;
pub mod error;
pub mod limits;
pub mod log;
mod net;
pub mod redis;
pub mod rpc;
pub mod screen;
pub mod server;
pub mod settings;
pub mod shutdown;
pub mod sidecar;
pub mod tls;
pub mod upstream;
pub mod url;
pub mod websocket;

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

pub use admin::{AdminConfig, DEFAULT_ADMIN_LISTEN};
pub use admission::{
    AdmissionConfig, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_SYNC_IN_FLIGHT, DEFAULT_RETRY_AFTER_SECS,
};
pub use aeges::{
    AegesConfig, DEFAULT_AEGES_LISTEN, DEFAULT_AEGES_MAX_IN_FLIGHT, DEFAULT_AEGES_MAX_REPORT_BYTES,
    DEFAULT_AEGES_MAX_VERIFY_BYTES, DEFAULT_AEGES_REPORT_ALLOW, DEFAULT_AEGES_REPORT_TOKEN,
    DEFAULT_AEGES_VERIFY_ALLOW,
};
pub use conditional::ConditionalConfig;
pub use error::ConfigError;
pub use limits::{
    DEFAULT_IPV6_PREFIX, DEFAULT_KEY_HEADER, DEFAULT_MAX_CLIENTS, DEFAULT_UNKNOWN_KEY,
    LimitsConfig, RateConfig, TierConfig, UnknownKey,
};
pub use log::{DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL, LogConfig, LogFormat};
pub use redis::RedisConfig;
pub use rpc::{
    DEFAULT_DENIED_METHODS, DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BODY_BYTES, DEFAULT_METHOD_POLICY,
    PolicyMode, RpcConfig,
};
pub use screen::backpressure::{
    BackpressureConfig, DEFAULT_BACKOFF_INITIAL_MS, DEFAULT_BACKOFF_MAX_MS,
    DEFAULT_BACKPRESSURE_REFILL_PER_SEC, DEFAULT_BACKPRESSURE_TOKENS, DEFAULT_MAX_TRACKED_SENDERS,
};
pub use screen::cooldown::{
    CooldownConfig, DEFAULT_ASSERTION_IDLE_SECS, DEFAULT_COOLDOWN_DISTINCT_FINGERPRINTS,
    DEFAULT_COOLDOWN_SECS, DEFAULT_MAX_ASSERTIONS, DEFAULT_TRICKLE_INTERVAL_MS,
};
pub use screen::pacing::{
    DEFAULT_PACING_AFTER, DEFAULT_PACING_ENABLED, DEFAULT_PACING_INITIAL_HOLD_MS,
    DEFAULT_PACING_MAX_CLIENTS, DEFAULT_PACING_MAX_HELD, DEFAULT_PACING_MAX_HOLD_MS,
    DEFAULT_PACING_WINDOW_SECS, MAX_HOLD_MS_BOUND, PacingConfig,
};
pub use screen::{
    DEFAULT_BATCH_CONCURRENCY, DEFAULT_DENIED_TTL_SECS, DEFAULT_FORWARDED_TTL_SECS,
    DEFAULT_MAX_CACHED_SENDERS, DEFAULT_MAX_DENIED, DEFAULT_MAX_FORWARDED, DEFAULT_MAX_PENDING,
    DEFAULT_MAX_RECENT_FAILURES, DEFAULT_MONITOR_ONLY, DEFAULT_PENDING_TIMEOUT_SECS,
    DEFAULT_RECENT_FAILURE_TTL_SECS, DEFAULT_SCREEN_ENABLED, DEFAULT_SENDER_CACHE_TTL_SECS,
    DEFAULT_SHAPING_HOLD_MS, DEFAULT_SNAPSHOT_INTERVAL_SECS, DEFAULT_SNAPSHOT_PATH,
    DEFAULT_SUSPECT_WINDOW_SECS, ScreenConfig,
};
pub use server::{
    DEFAULT_BODY_READ_TIMEOUT_MS, DEFAULT_FORWARDED_HEADER, DEFAULT_HEADER_READ_TIMEOUT_MS,
    DEFAULT_HTTP2, DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS, DEFAULT_PROXY_PROTOCOL,
    DEFAULT_TRUSTED_PROXIES, DEFAULT_WORKERS, ForwardedHeader, ProxyProtocol, ServerConfig,
};
pub use settings::Settings;
pub use shutdown::{
    DEFAULT_DRAIN_DELAY_MS, DEFAULT_GRACE_PERIOD_MS, MAX_DRAIN_DELAY_MS, ShutdownConfig,
};
pub use sidecar::{
    DEFAULT_HOT_WINDOW_MS, DEFAULT_MAX_HOT_CALLS, DEFAULT_MAX_PROBES_IN_FLIGHT,
    DEFAULT_MAX_VERDICTS, DEFAULT_SHOULD_FORWARD, DEFAULT_SHOULD_FORWARD_SCOPE,
    DEFAULT_SHOULD_FORWARD_TIMEOUT_MS, DEFAULT_SIDECAR_BATCH_MAX, DEFAULT_SIDECAR_CHANNEL_CAPACITY,
    DEFAULT_SIDECAR_CONNECT_TIMEOUT_MS, DEFAULT_SIDECAR_RECONNECT_INITIAL_MS,
    DEFAULT_SIDECAR_RECONNECT_MAX_MS, DEFAULT_SIDECAR_URL, DEFAULT_VERDICT_TTL_MS, Protocol,
    ShouldForwardScope, SidecarConfig, Source, SourceConfig,
};
pub use tls::{
    DEFAULT_TLS_GROUPS, DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS, DEFAULT_TLS_MIN_VERSION,
    DEFAULT_TLS_RELOAD_INTERVAL_MS, DEFAULT_TLS_SESSION_TICKETS, ServerTlsConfig, TLS_GROUPS,
    UpstreamTlsConfig,
};
pub use upstream::{
    DEFAULT_CALL_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_HEALTH_INTERVAL_MS,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_POOL_IDLE_TIMEOUT_MS, DEFAULT_POOL_MAX_IDLE,
    DEFAULT_SYNC_CALL_TIMEOUT_MS, DEFAULT_UPSTREAM, UpstreamConfig,
};
pub use url::HttpUrl;
pub use websocket::{
    DEFAULT_WEBSOCKET_ENABLED, DEFAULT_WEBSOCKET_FRAME_BURST, DEFAULT_WEBSOCKET_IDLE_TIMEOUT_MS,
    DEFAULT_WEBSOCKET_MAX_FRAME_BYTES, DEFAULT_WEBSOCKET_MAX_FRAMES_PER_SEC,
    DEFAULT_WEBSOCKET_MAX_IN_FLIGHT_PER_CONNECTION, DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES,
    DEFAULT_WEBSOCKET_MAX_SEND_QUEUE_BYTES, DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS,
    DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS_PER_CONNECTION, DEFAULT_WEBSOCKET_PING_INTERVAL_MS,
    DEFAULT_WEBSOCKET_SHARED_UPSTREAM, DEFAULT_WEBSOCKET_UPSTREAM_URL, WebSocketConfig,
};

/// A network of source addresses (`aeges.report_allow`), from the `ipnet`
/// crate, re-exported so that users of this crate need not depend on it.
pub use ipnet::IpNet;

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Client-facing server.
    pub server: ServerConfig,
    /// Global admission control.
    pub admission: AdmissionConfig,
    /// Per-client limits.
    pub limits: LimitsConfig,
    /// JSON-RPC limits and method policy.
    pub rpc: RpcConfig,
    /// The node txgate forwards to.
    pub upstream: UpstreamConfig,
    /// Metrics and health listener.
    pub admin: AdminConfig,
    /// Shutdown behaviour.
    pub shutdown: ShutdownConfig,
    /// Logging.
    pub log: LogConfig,
    /// Screening of raw-transaction submissions.
    pub screen: ScreenConfig,
    /// The sidecars that judge transactions.
    pub sidecar: SidecarConfig,
    /// The listener the Credible Layer sidecar posts failure reports to.
    pub aeges: AegesConfig,
    /// The fleet's shared store.
    pub redis: RedisConfig,
    /// Conditional transactions.
    pub conditional: ConditionalConfig,
    /// JSON-RPC over WebSocket on the client port, and its limits.
    pub websocket: WebSocketConfig,
}

/// A default address constant, known to parse.
pub(crate) fn parse_addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| unreachable!("default address {s} is valid"))
}

impl Config {
    /// Parses TOML text; unknown keys and bad values are errors naming the key.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            // toml's message carries a source excerpt; keep its first line.
            let message = inner
                .message()
                .lines()
                .next()
                .unwrap_or("invalid value")
                .to_string();
            ConfigError {
                key: if key == "." { String::new() } else { key },
                message,
            }
        })?;
        Ok(config)
    }

    /// Reads and parses a file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))?;
        Config::from_toml(&text)
    }

    /// Checks what serde cannot: each section's own keys (its `validate`),
    /// then the relations between sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.admission.validate()?;
        self.limits.validate()?;
        self.rpc.validate()?;
        self.upstream.validate()?;
        self.admin.validate()?;
        self.shutdown.validate()?;
        self.log.validate()?;
        self.screen.validate()?;
        self.sidecar.validate()?;
        self.aeges.validate()?;
        self.redis.validate()?;
        self.conditional.validate()?;
        self.websocket.validate()?;

        let pool_max_idle = self.upstream.pool_max_idle;
        let max_in_flight = self.admission.max_in_flight;
        if pool_max_idle != 0 && pool_max_idle < max_in_flight {
            return Err(ConfigError::new(
                "upstream.pool_max_idle",
                format!(
                    "{pool_max_idle} is below admission.max_in_flight ({max_in_flight}): calls \
                     in flight would open connections the pool cannot keep"
                ),
            ));
        }
        if self.server.listen == self.admin.listen && self.server.listen.port() != 0 {
            return Err(ConfigError::new(
                "admin.listen",
                "must differ from server.listen",
            ));
        }
        if let Some(aeges) = self.aeges.listen_addr()?
            && aeges.port() != 0
        {
            for (key, other) in [
                ("server.listen", self.server.listen),
                ("admin.listen", self.admin.listen),
            ] {
                if aeges == other {
                    return Err(ConfigError::new(
                        "aeges.listen",
                        format!("must differ from {key}"),
                    ));
                }
            }
        }
        // The node's WebSocket endpoint, set or derived from upstream.url.
        self.websocket_upstream()?;
        Ok(())
    }

    /// The node's WebSocket endpoint: `websocket.upstream_url` parsed, or,
    /// when it is empty, `ws://` (`wss://` for `https://`) with the
    /// authority and path of `upstream.url` (`http://node:8546/rpc` gives
    /// `ws://node:8546/rpc`).
    /// An error names the key it comes from.
    pub fn websocket_upstream(&self) -> Result<HttpUrl, ConfigError> {
        if let Some(url) = self.websocket.upstream_endpoint()? {
            return Ok(url);
        }
        let http = self.upstream.endpoint()?;
        let scheme = if http.is_tls() { "wss" } else { "ws" };
        let ws = format!("{scheme}://{}{}", http.authority(), http.path());
        HttpUrl::parse_ws(&ws).map_err(|e| ConfigError::new("upstream.url", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        Config::default().validate().unwrap();
    }

    #[test]
    fn shipped_file_matches_the_defaults() {
        let text = include_str!("../../../config/txgate.toml");
        let config = Config::from_toml(text).unwrap();
        assert_eq!(
            config,
            Config::default(),
            "config/txgate.toml drifted from the DEFAULT_* constants"
        );
    }

    /// The commented-out `[[sidecar.sources]]` example works as written
    /// once uncommented, where it stands.
    #[test]
    fn shipped_sources_example_parses_when_uncommented() {
        let text = include_str!("../../../config/txgate.toml");
        let mut in_example = false;
        let uncommented: String = text
            .lines()
            .map(|line| {
                let bare = line.strip_prefix("# ").unwrap_or(line);
                if bare == "[[sidecar.sources]]" {
                    in_example = true;
                } else if line.starts_with('[') {
                    in_example = false;
                }
                if in_example { bare } else { line }
            })
            .fold(String::new(), |text, line| text + line + "\n");
        let config = Config::from_toml(&uncommented).unwrap();
        config.validate().unwrap();
        let sources = config.sidecar.sources().unwrap();
        assert_eq!(sources.len(), 2, "{sources:?}");
        assert_eq!(sources[0].protocol, Protocol::RpcproxyV1);
        assert!(sources[0].should_forward);
        assert_eq!(sources[1].protocol, Protocol::TransportV1);
    }

    #[test]
    fn unknown_keys_name_the_key() {
        let e = Config::from_toml("[server]\nlisten_addr = \"1.2.3.4:1\"\n").unwrap_err();
        assert!(e.message.contains("listen_addr"), "{e}");
        let e = Config::from_toml("[nope]\n").unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = Config::from_toml("[server]\nlisten = \"not an address\"\n").unwrap_err();
        assert_eq!(e.key, "server.listen", "{e}");
        let e = Config::from_toml("[rpc]\nmax_batch_size = -1\n").unwrap_err();
        assert_eq!(e.key, "rpc.max_batch_size", "{e}");
        let e = Config::from_toml("[rpc]\npolicy = \"maybe\"\n").unwrap_err();
        assert_eq!(e.key, "rpc.policy", "{e}");
        let e = Config::from_toml("[log]\nformat = \"xml\"\n").unwrap_err();
        assert_eq!(e.key, "log.format", "{e}");
        let e = Config::from_toml("[screen.cooldown]\nduration_secs = \"long\"\n").unwrap_err();
        assert_eq!(e.key, "screen.cooldown.duration_secs", "{e}");
        let e = Config::from_toml("[sidecar]\nmax_verdicts = -1\n").unwrap_err();
        assert_eq!(e.key, "sidecar.max_verdicts", "{e}");
        let e = Config::from_toml("[sidecar]\nshould_forward_scope = \"cold\"\n").unwrap_err();
        assert_eq!(e.key, "sidecar.should_forward_scope", "{e}");
        let e = Config::from_toml(
            "[[sidecar.sources]]\nurl = \"http://h:1\"\nprotocol = \"txgate.v1\"\n\
             [[sidecar.sources]]\nurl = \"http://h:2\"\nprotocol = \"grpc\"\n",
        )
        .unwrap_err();
        assert_eq!(e.key, "sidecar.sources[1].protocol", "{e}");
        let e = Config::from_toml("[[sidecar.sources]]\nurl = \"http://h:1\"\n").unwrap_err();
        assert!(e.key.starts_with("sidecar.sources[0]"), "{e}");
        assert!(e.message.contains("protocol"), "{e}");
        let e = Config::from_toml(
            "[[sidecar.sources]]\nurl = \"http://h:1\"\nprotocol = \"txgate.v1\"\nforward = 1\n",
        )
        .unwrap_err();
        assert!(e.message.contains("forward"), "{e}");
        let e = Config::from_toml("[aeges]\nreport_allow = \"127.0.0.1\"\n").unwrap_err();
        assert_eq!(e.key, "aeges.report_allow", "{e}");
    }

    #[test]
    fn new_settings_are_read() {
        let c = Config::from_toml(
            "[screen]\nbatch_concurrency = 4\n[screen.cooldown]\nassertion_idle_secs = 60\n\
             [sidecar]\nmax_verdicts = 10\n",
        )
        .unwrap();
        assert_eq!(c.screen.batch_concurrency, 4);
        assert_eq!(c.screen.cooldown.assertion_idle_secs, 60);
        assert_eq!(c.sidecar.max_verdicts, 10);
    }

    #[test]
    fn should_forward_asks_about_hot_calls_unless_told_otherwise() {
        let c = Config::from_toml(
            "[sidecar]\nurl = \"http://h:1\"\nshould_forward = true\nhot_window_ms = 60000\n",
        )
        .unwrap();
        assert_eq!(c.sidecar.should_forward_scope, ShouldForwardScope::Hot);
        assert_eq!(c.sidecar.hot_window_ms, 60_000);
        assert!(c.sidecar.tracks_hot_calls());
        let all = Config::from_toml(
            "[sidecar]\nurl = \"http://h:1\"\nshould_forward = true\n\
             should_forward_scope = \"all\"\n",
        )
        .unwrap();
        assert!(!all.sidecar.tracks_hot_calls());
        // Nobody asked: nothing to track.
        let none = Config::from_toml("[sidecar]\nurl = \"http://h:1\"\n").unwrap();
        assert!(!none.sidecar.tracks_hot_calls());
    }

    #[test]
    fn sources_and_aeges_are_read() {
        let c = Config::from_toml(
            "[screen]\nforwarded_ttl_secs = 30\nmax_forwarded = 1000\n\
             [sidecar]\nurl = \"\"\n\
             [[sidecar.sources]]\nurl = \"http://127.0.0.1:50051\"\n\
             protocol = \"rpcproxy.v1\"\nshould_forward = true\n\
             [[sidecar.sources]]\nurl = \"http://127.0.0.1:50052\"\n\
             protocol = \"sidecar.transport.v1\"\n\
             [aeges]\nlisten = \"127.0.0.1:9546\"\nreport_token = \"s3cret\"\n\
             report_allow = [\"10.0.0.0/8\", \"::1\"]\nmax_report_bytes = 4096\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.screen.forwarded_ttl_secs, 30);
        assert_eq!(c.screen.max_forwarded, 1000);
        let sources = c.sidecar.sources().unwrap();
        assert_eq!(sources.len(), 2);
        assert_eq!(sources[0].protocol, Protocol::RpcproxyV1);
        assert!(sources[0].should_forward);
        assert_eq!(sources[1].protocol, Protocol::TransportV1);
        assert!(!sources[1].should_forward);
        assert_eq!(
            c.aeges.listen_addr().unwrap(),
            Some(parse_addr("127.0.0.1:9546"))
        );
        assert_eq!(c.aeges.allow().unwrap().len(), 2);
        assert_eq!(c.aeges.max_report_bytes, 4096);
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = Config::default();
        c.upstream.url = "ftp://x".into();
        assert_eq!(c.validate().unwrap_err().key, "upstream.url");
        let mut c = Config::default();
        c.upstream.url = "http://127.0.0.1:notaport".into();
        assert_eq!(c.validate().unwrap_err().key, "upstream.url");
        let mut c = Config::default();
        c.admission.max_in_flight = 0;
        assert_eq!(c.validate().unwrap_err().key, "admission.max_in_flight");
        let mut c = Config::default();
        c.upstream.pool_max_idle = 10;
        assert_eq!(c.validate().unwrap_err().key, "upstream.pool_max_idle");
        let mut c = Config::default();
        c.rpc.methods = vec!["eth_*call".into()];
        assert_eq!(c.validate().unwrap_err().key, "rpc.methods[0]");
        let mut c = Config::default();
        c.admin.listen = c.server.listen;
        assert_eq!(c.validate().unwrap_err().key, "admin.listen");
        let mut c = Config::default();
        c.screen.denied_ttl_secs = 0;
        assert_eq!(c.validate().unwrap_err().key, "screen.denied_ttl_secs");
        let mut c = Config::default();
        c.screen.backpressure.refill_per_sec = f64::NAN;
        assert_eq!(
            c.validate().unwrap_err().key,
            "screen.backpressure.refill_per_sec"
        );
        let mut c = Config::default();
        c.screen.backpressure.backoff_max_ms = 1;
        assert_eq!(
            c.validate().unwrap_err().key,
            "screen.backpressure.backoff_max_ms"
        );
        let mut c = Config::default();
        c.server.max_connections = 0;
        assert_eq!(c.validate().unwrap_err().key, "server.max_connections");
        let mut c = Config::default();
        c.sidecar.url = "http://h:0".into();
        assert_eq!(c.validate().unwrap_err().key, "sidecar.url");
        let mut c = Config::default();
        c.sidecar.should_forward = true;
        assert_eq!(c.validate().unwrap_err().key, "sidecar.should_forward");
        let mut c = Config::default();
        c.sidecar.sources = vec![SourceConfig {
            url: "http://h:1".into(),
            protocol: Protocol::TransportV1,
            should_forward: true,
        }];
        assert_eq!(
            c.validate().unwrap_err().key,
            "sidecar.sources[0].should_forward"
        );
        let mut c = Config::default();
        c.screen.forwarded_ttl_secs = 0;
        assert_eq!(c.validate().unwrap_err().key, "screen.forwarded_ttl_secs");
        let mut c = Config::default();
        c.screen.max_forwarded = 0;
        assert_eq!(c.validate().unwrap_err().key, "screen.max_forwarded");
        let mut c = Config::default();
        c.aeges.listen = "anywhere".into();
        assert_eq!(c.validate().unwrap_err().key, "aeges.listen");
        let mut c = Config::default();
        c.aeges.report_allow = vec!["10.0.0.0/40".into()];
        assert_eq!(c.validate().unwrap_err().key, "aeges.report_allow");
        let mut c = Config::default();
        c.aeges.report_token = "two words".into();
        assert_eq!(c.validate().unwrap_err().key, "aeges.report_token");
        let mut c = Config::default();
        c.aeges.max_report_bytes = 0;
        assert_eq!(c.validate().unwrap_err().key, "aeges.max_report_bytes");
        for other in [DEFAULT_LISTEN, DEFAULT_ADMIN_LISTEN] {
            let mut c = Config::default();
            c.aeges.listen = other.into();
            let e = c.validate().unwrap_err();
            assert_eq!(e.key, "aeges.listen", "{other}");
        }
    }

    #[test]
    fn relations_between_sections() {
        // A pool at least the in-flight cap is fine, and so is 0 (= the cap).
        let mut c = Config::default();
        c.upstream.pool_max_idle = c.admission.max_in_flight;
        c.validate().unwrap();
        // Both listeners on port 0 (tests) get different ports from the OS.
        let mut c = Config::default();
        c.server.listen = parse_addr("127.0.0.1:0");
        c.admin.listen = c.server.listen;
        c.aeges.listen = "127.0.0.1:0".into();
        c.validate().unwrap();
        // The Aeges listener on its own port.
        let mut c = Config::default();
        c.aeges.listen = "127.0.0.1:9546".into();
        c.validate().unwrap();
    }

    #[test]
    fn websocket_upstream_is_set_or_derived_from_upstream_url() {
        let c = Config::default();
        let u = c.websocket_upstream().unwrap();
        assert_eq!(
            (u.host(), u.port(), u.authority(), u.path()),
            ("127.0.0.1", 8546, "127.0.0.1:8546", "/")
        );
        let mut c = Config::default();
        c.upstream.url = "http://[::1]:9000/rpc?key=a".into();
        let u = c.websocket_upstream().unwrap();
        assert_eq!(
            (u.host(), u.port(), u.authority(), u.path()),
            ("::1", 9000, "[::1]:9000", "/rpc?key=a")
        );
        c.upstream.url = "HTTP://node.internal".into();
        let u = c.websocket_upstream().unwrap();
        assert_eq!((u.host(), u.port(), u.path()), ("node.internal", 80, "/"));
        assert!(!u.is_tls());
        // An https:// node gives wss://, on its port.
        c.upstream.url = "https://node.internal/rpc".into();
        let u = c.websocket_upstream().unwrap();
        assert_eq!((u.port(), u.path(), u.is_tls()), (443, "/rpc", true));
        // Set, it wins over upstream.url.
        c.websocket.upstream_url = "ws://10.0.0.2:8547/ws".into();
        c.validate().unwrap();
        let u = c.websocket_upstream().unwrap();
        assert_eq!((u.host(), u.port(), u.path()), ("10.0.0.2", 8547, "/ws"));
        // Errors name the key they come from.
        let mut c = Config::default();
        c.websocket.upstream_url = "http://10.0.0.2:8547".into();
        assert_eq!(
            c.websocket_upstream().unwrap_err().key,
            "websocket.upstream_url"
        );
        assert_eq!(c.validate().unwrap_err().key, "websocket.upstream_url");
        let mut c = Config::default();
        c.upstream.url = "ftp://node".into();
        assert_eq!(c.websocket_upstream().unwrap_err().key, "upstream.url");
    }

    #[test]
    fn websocket_section_is_read_and_checked() {
        let c = Config::from_toml(
            "[websocket]\nenabled = false\nupstream_url = \"ws://127.0.0.1:8547\"\n\
             max_subscriptions = 5\nping_interval_ms = 0\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(!c.websocket.enabled);
        assert_eq!(c.websocket.max_subscriptions, 5);
        assert_eq!(c.websocket.ping_interval_ms, 0);
        assert_eq!(
            c.websocket.max_frames_per_sec,
            DEFAULT_WEBSOCKET_MAX_FRAMES_PER_SEC
        );
        let e = Config::from_toml("[websocket]\nmax_frame_size = 1\n").unwrap_err();
        assert!(e.message.contains("max_frame_size"), "{e}");
        let e = Config::from_toml("[websocket]\nframe_burst = -1\n").unwrap_err();
        assert_eq!(e.key, "websocket.frame_burst", "{e}");
        let mut c = Config::default();
        c.websocket.max_frame_bytes = c.websocket.max_message_bytes + 1;
        assert_eq!(c.validate().unwrap_err().key, "websocket.max_frame_bytes");
        let mut c = Config::default();
        c.websocket.max_subscriptions = 0;
        assert_eq!(c.validate().unwrap_err().key, "websocket.max_subscriptions");
    }

    #[test]
    fn pool_defaults_to_in_flight_cap() {
        let c = Config::default();
        assert_eq!(
            c.upstream.effective_pool_max_idle(&c.admission),
            DEFAULT_MAX_IN_FLIGHT
        );
    }
}
