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
//! * [`upstream`]: `[upstream]`, [`UpstreamConfig`], and [`nodes`]: the
//!   group of nodes behind it (`[[upstream.nodes]]`, [`NodeConfig`], each
//!   with a [`Role`]), checked into a [`NodeSet`] of [`NodeSpec`]s by
//!   [`UpstreamConfig::node_set`];
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
mod duration;
pub mod error;
pub mod limits;
pub mod log;
mod net;
pub mod nodes;
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
    AegesAccess, AegesConfig, DEFAULT_AEGES_LISTEN, DEFAULT_AEGES_MAX_IN_FLIGHT,
    DEFAULT_AEGES_MAX_PROXYD_BYTES, DEFAULT_AEGES_MAX_REPORT_BYTES, DEFAULT_AEGES_MAX_VERIFY_BYTES,
    DEFAULT_AEGES_PROXYD_ALLOW, DEFAULT_AEGES_PROXYD_BURST, DEFAULT_AEGES_PROXYD_TOKEN,
    DEFAULT_AEGES_PROXYD_TXS_PER_SEC, DEFAULT_AEGES_REPORT_ALLOW, DEFAULT_AEGES_REPORT_TOKEN,
    DEFAULT_AEGES_VERIFY_ALLOW,
};
pub use conditional::{Addresses, ConditionalConfig};
pub use error::ConfigError;
pub use limits::{
    DEFAULT_IPV6_PREFIX, DEFAULT_KEY_HEADER, DEFAULT_MAX_CLIENTS, DEFAULT_UNKNOWN_KEY,
    LimitsConfig, RateConfig, TierConfig, UnknownKey,
};
pub use log::{DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL, LogConfig, LogFormat};
pub use nodes::{
    DEFAULT_CONDUCTOR_URL, DEFAULT_FAIL_AFTER, DEFAULT_MAX_BLOCK_LAG, DEFAULT_MAX_HEAD_AGE_MS,
    DEFAULT_NODE_WEIGHT, DEFAULT_PROBE_TIMEOUT_MS, DEFAULT_READ_YOUR_WRITES_MS,
    DEFAULT_RECOVER_AFTER, MAX_CONDUCTOR_ID_CHARS, MAX_CONDUCTORS, MAX_NODE_NAME_CHARS,
    MAX_NODE_WEIGHT, MAX_NODES, NodeConfig, NodeSet, NodeSpec, Role, SHORT_FORM_NAME,
};
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
    /// The node (or group of nodes) txgate forwards to.
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

    /// Checks what serde cannot, as [`Settings::new`] does (the one
    /// validation), keeping only the verdict.
    pub fn validate(&self) -> Result<(), ConfigError> {
        Settings::new(self.clone()).map(drop)
    }

    /// The rules between sections, given what the sections parsed.
    pub(crate) fn check_relations(&self, aeges: Option<SocketAddr>) -> Result<(), ConfigError> {
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
        if let Some(aeges) = aeges
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
        Ok(())
    }

    /// The node's WebSocket endpoint: `websocket.upstream_url` parsed, or,
    /// when it is empty, that of the primary node ([`NodeSet::primary`]):
    /// its `ws_url` when `[[upstream.nodes]]` gives one, else `ws://`
    /// (`wss://` for `https://`) with the authority and path of its URL
    /// (`http://node:8546/rpc` gives `ws://node:8546/rpc`).
    /// An error names the key it comes from.
    pub fn websocket_upstream(&self) -> Result<HttpUrl, ConfigError> {
        match self.websocket.upstream_endpoint()? {
            Some(url) => Ok(url),
            None => node_websocket(self.upstream.node_set()?.primary()),
        }
    }
}

/// `node`'s WebSocket endpoint: its `ws_url`, or derived from its URL.
pub(crate) fn node_websocket(node: &NodeSpec) -> Result<HttpUrl, ConfigError> {
    match &node.ws_url {
        Some(url) => Ok(url.clone()),
        None => derived_websocket(&node.url),
    }
}

/// `ws://` (`wss://` for `https://`) with the authority and path of the
/// node's HTTP endpoint.
fn derived_websocket(http: &HttpUrl) -> Result<HttpUrl, ConfigError> {
    let scheme = if http.is_tls() { "wss" } else { "ws" };
    let ws = format!("{scheme}://{}{}", http.authority(), http.path());
    HttpUrl::parse_ws(&ws).map_err(|e| ConfigError::new("upstream.url", e))
}

#[cfg(test)]
mod tests;
