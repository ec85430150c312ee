//! txgate's configuration.
//!
//! Plain structs with a `DEFAULT_*` constant for every setting, parsed once
//! at the edge: [`Config::from_toml`] rejects unknown keys and bad values
//! with the dotted path of the key at fault, and [`Config::validate`] checks
//! what serde cannot (relations between settings). `config/txgate.toml` in
//! the repository documents every key with these defaults.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

/// Default RPC listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8545";
/// Default admin listen address (loopback: metrics and health only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9545";
/// Default upstream node.
pub const DEFAULT_UPSTREAM: &str = "http://127.0.0.1:8546";
/// Default worker threads (0: one per available core).
pub const DEFAULT_WORKERS: usize = 0;
/// Default cap on open client connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time a client has to send its request headers.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 5_000;
/// Default time a client has to send its request body.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Default: serve HTTP/2 cleartext (h2c, prior knowledge) beside HTTP/1.1.
pub const DEFAULT_HTTP2: bool = true;
/// Default global cap on calls in flight.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;
/// Default `Retry-After` seconds sent with HTTP 429.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
/// Default cap on a request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Default cap on calls in one batch.
pub const DEFAULT_MAX_BATCH_SIZE: usize = 100;
/// Default method policy mode.
pub const DEFAULT_METHOD_POLICY: PolicyMode = PolicyMode::Deny;
/// Default denied methods (`*` matches any suffix).
pub const DEFAULT_DENIED_METHODS: &[&str] =
    &["admin_*", "debug_*", "personal_*", "miner_*", "engine_*"];
/// Default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Default upstream call timeout (headers and body).
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
/// Default cap on an upstream response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;
/// Default idle keep-alive connections kept to the upstream (0: same as
/// `admission.max_in_flight`).
pub const DEFAULT_POOL_MAX_IDLE: usize = 0;
/// Default idle time before a pooled upstream connection is closed.
pub const DEFAULT_POOL_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default interval of the upstream health probe behind `/readyz`.
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 2_000;
/// Default time in-flight calls get to finish at shutdown.
pub const DEFAULT_GRACE_PERIOD_MS: u64 = 30_000;
/// Default log format.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Human;
/// Default log filter (`RUST_LOG` syntax).
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Default: screening on (`screen.enabled`).
pub const DEFAULT_SCREEN_ENABLED: bool = true;
/// Default: refuse for real, not monitor-only.
pub const DEFAULT_MONITOR_ONLY: bool = false;
/// Default: how long a denied fingerprint stays denied (DESIGN: 128 s).
pub const DEFAULT_DENIED_TTL_SECS: u64 = 128;
/// Default: how long a fingerprint stays suspect after its ban.
pub const DEFAULT_SUSPECT_WINDOW_SECS: u64 = 128;
/// Default: denied and suspect fingerprints held at most.
pub const DEFAULT_MAX_DENIED: usize = 1_000_000;
/// Default: how long a failed tx hash is refused outright.
pub const DEFAULT_RECENT_FAILURE_TTL_SECS: u64 = 60;
/// Default: failed tx hashes held at most.
pub const DEFAULT_MAX_RECENT_FAILURES: usize = 1_000_000;
/// Default: how long a recovered sender stays cached by tx hash.
pub const DEFAULT_SENDER_CACHE_TTL_SECS: u64 = 300;
/// Default: senders cached at most.
pub const DEFAULT_MAX_CACHED_SENDERS: usize = 1_000_000;
/// Default: how long a forward is remembered for attribution.
pub const DEFAULT_PENDING_TIMEOUT_SECS: u64 = 30;
/// Default: pending forwards remembered at most.
pub const DEFAULT_MAX_PENDING: usize = 262_144;
/// Default: how long one forward of a suspect fingerprint holds its slot.
pub const DEFAULT_SHAPING_HOLD_MS: u64 = 4_000;
/// Default: tokens in a sender's bucket.
pub const DEFAULT_BACKPRESSURE_TOKENS: u32 = 20;
/// Default: tokens returned per second.
pub const DEFAULT_BACKPRESSURE_REFILL_PER_SEC: f64 = 5.0;
/// Default: first backoff.
pub const DEFAULT_BACKOFF_INITIAL_MS: u64 = 1_000;
/// Default: longest backoff.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 30_000;
/// Default: senders under backpressure tracked at most.
pub const DEFAULT_MAX_TRACKED_SENDERS: usize = 100_000;
/// Default: distinct failing fingerprints that start a cooldown.
pub const DEFAULT_COOLDOWN_DISTINCT_FINGERPRINTS: usize = 10;
/// Default: cooldown length.
pub const DEFAULT_COOLDOWN_SECS: u64 = 300;
/// Default: one call per this interval passes during a cooldown.
pub const DEFAULT_TRICKLE_INTERVAL_MS: u64 = 2_000;
/// Default: assertions tracked at most.
pub const DEFAULT_MAX_ASSERTIONS: usize = 65_536;

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
/// Default: no ban snapshot.
pub const DEFAULT_SNAPSHOT_PATH: &str = "";
/// Default: snapshot every 30 s (and at shutdown).
pub const DEFAULT_SNAPSHOT_INTERVAL_SECS: u64 = 30;

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Client-facing server.
    pub server: Server,
    /// Global admission control.
    pub admission: Admission,
    /// JSON-RPC limits and method policy.
    pub rpc: Rpc,
    /// The node txgate forwards to.
    pub upstream: Upstream,
    /// Metrics and health listener.
    pub admin: Admin,
    /// Shutdown behaviour.
    pub shutdown: Shutdown,
    /// Logging.
    pub log: Log,
    /// Screening of raw-transaction submissions.
    pub screen: Screen,
    /// The sidecar that judges transactions.
    pub sidecar: Sidecar,
}

/// The sidecar link (gRPC, `txgate.sidecar.v1`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Sidecar {
    /// `http://host:port` of the sidecar's gRPC server; empty: no sidecar.
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
}

impl Default for Sidecar {
    fn default() -> Self {
        Sidecar {
            url: DEFAULT_SIDECAR_URL.to_string(),
            connect_timeout_ms: DEFAULT_SIDECAR_CONNECT_TIMEOUT_MS,
            reconnect_initial_ms: DEFAULT_SIDECAR_RECONNECT_INITIAL_MS,
            reconnect_max_ms: DEFAULT_SIDECAR_RECONNECT_MAX_MS,
            channel_capacity: DEFAULT_SIDECAR_CHANNEL_CAPACITY,
            batch_max: DEFAULT_SIDECAR_BATCH_MAX,
            should_forward: DEFAULT_SHOULD_FORWARD,
            should_forward_timeout_ms: DEFAULT_SHOULD_FORWARD_TIMEOUT_MS,
            verdict_ttl_ms: DEFAULT_VERDICT_TTL_MS,
        }
    }
}

/// Client-facing server settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// Address for JSON-RPC clients.
    pub listen: SocketAddr,
    /// Worker threads, each with its own listener (`SO_REUSEPORT`), runtime
    /// and upstream pool; 0 means one per available core.
    pub workers: usize,
    /// Open connections at most; further clients wait in the accept queue.
    pub max_connections: usize,
    /// Time a client has to send its request headers (HTTP/1.1).
    pub header_read_timeout_ms: u64,
    /// Time a client has to send its request body.
    pub body_read_timeout_ms: u64,
    /// Serve h2c (HTTP/2 with prior knowledge) beside HTTP/1.1.
    pub http2: bool,
}

impl Server {
    /// Worker threads to run.
    pub fn effective_workers(&self) -> usize {
        if self.workers == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            self.workers
        }
    }
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: parse_addr(DEFAULT_LISTEN),
            workers: DEFAULT_WORKERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            body_read_timeout_ms: DEFAULT_BODY_READ_TIMEOUT_MS,
            http2: DEFAULT_HTTP2,
        }
    }
}

/// Global admission control.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Admission {
    /// Requests in flight at most, across all connections.
    pub max_in_flight: usize,
    /// `Retry-After` seconds on HTTP 429.
    pub retry_after_secs: u64,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            retry_after_secs: DEFAULT_RETRY_AFTER_SECS,
        }
    }
}

/// Whether `rpc.methods` lists what is allowed or what is denied.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Only the listed methods pass.
    Allow,
    /// Every method passes but the listed ones.
    Deny,
}

/// JSON-RPC limits and method policy.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Rpc {
    /// Request body size cap (HTTP 413 above it).
    pub max_body_bytes: usize,
    /// Calls per batch at most.
    pub max_batch_size: usize,
    /// `allow` or `deny`.
    pub policy: PolicyMode,
    /// Method names; a trailing `*` matches any suffix.
    pub methods: Vec<String>,
}

impl Default for Rpc {
    fn default() -> Self {
        Rpc {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            policy: DEFAULT_METHOD_POLICY,
            methods: DEFAULT_DENIED_METHODS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// The upstream node.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Upstream {
    /// `http://host:port[/path]` of the node.
    pub url: String,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
    /// Whole-call timeout: request sent, response headers and body read.
    pub call_timeout_ms: u64,
    /// Upstream response body cap.
    pub max_response_bytes: usize,
    /// Idle keep-alive connections kept; 0 means `admission.max_in_flight`.
    pub pool_max_idle: usize,
    /// Idle time before a pooled connection is closed.
    pub pool_idle_timeout_ms: u64,
    /// Interval of the health probe (`eth_chainId`) behind `/readyz`.
    pub health_interval_ms: u64,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            url: DEFAULT_UPSTREAM.to_string(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            call_timeout_ms: DEFAULT_CALL_TIMEOUT_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            pool_max_idle: DEFAULT_POOL_MAX_IDLE,
            pool_idle_timeout_ms: DEFAULT_POOL_IDLE_TIMEOUT_MS,
            health_interval_ms: DEFAULT_HEALTH_INTERVAL_MS,
        }
    }
}

impl Upstream {
    /// The idle pool size to use, never below the in-flight cap.
    pub fn effective_pool_max_idle(&self, admission: &Admission) -> usize {
        if self.pool_max_idle == 0 {
            admission.max_in_flight
        } else {
            self.pool_max_idle
        }
    }
}

/// Admin listener.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Admin {
    /// Address for `/metrics`, `/healthz` and `/readyz`.
    pub listen: SocketAddr,
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            listen: parse_addr(DEFAULT_ADMIN_LISTEN),
        }
    }
}

/// Shutdown behaviour.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Shutdown {
    /// Time in-flight calls get to finish after SIGTERM or SIGINT.
    pub grace_period_ms: u64,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            grace_period_ms: DEFAULT_GRACE_PERIOD_MS,
        }
    }
}

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
pub struct Log {
    /// `human` or `json`.
    pub format: LogFormat,
    /// Filter in `RUST_LOG` syntax; `RUST_LOG` itself wins when set.
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            format: DEFAULT_LOG_FORMAT,
            level: DEFAULT_LOG_LEVEL.to_string(),
        }
    }
}

/// Screening of `eth_sendRawTransaction` and its siblings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Screen {
    /// Screen at all; off forwards the screened methods like any other.
    pub enabled: bool,
    /// Count and log what would be refused, forward everything.
    pub monitor_only: bool,
    /// Accepted chain ids; empty accepts every chain id.
    pub chain_ids: Vec<u64>,
    /// How long a denied fingerprint stays denied.
    pub denied_ttl_secs: u64,
    /// How long a fingerprint stays suspect (shaped) after its ban.
    pub suspect_window_secs: u64,
    /// Denied and suspect fingerprints held at most.
    pub max_denied: usize,
    /// How long a failed tx hash is refused before any ECDSA.
    pub recent_failure_ttl_secs: u64,
    /// Failed tx hashes held at most.
    pub max_recent_failures: usize,
    /// How long a recovered sender stays cached by tx hash.
    pub sender_cache_ttl_secs: u64,
    /// Senders cached at most.
    pub max_cached_senders: usize,
    /// How long a forward is remembered to charge a later invalidation.
    pub pending_timeout_secs: u64,
    /// Pending forwards remembered at most.
    pub max_pending: usize,
    /// How long one forward of a suspect fingerprint holds its slot.
    pub shaping_hold_ms: u64,
    /// Sender backpressure.
    pub backpressure: Backpressure,
    /// Assertion cooldowns.
    pub cooldown: Cooldown,
    /// File the denied set is written to (periodically and at shutdown)
    /// and read from at start; empty: no snapshot.
    pub snapshot_path: String,
    /// Seconds between snapshots.
    pub snapshot_interval_secs: u64,
}

impl Default for Screen {
    fn default() -> Self {
        Screen {
            enabled: DEFAULT_SCREEN_ENABLED,
            monitor_only: DEFAULT_MONITOR_ONLY,
            chain_ids: Vec::new(),
            denied_ttl_secs: DEFAULT_DENIED_TTL_SECS,
            suspect_window_secs: DEFAULT_SUSPECT_WINDOW_SECS,
            max_denied: DEFAULT_MAX_DENIED,
            recent_failure_ttl_secs: DEFAULT_RECENT_FAILURE_TTL_SECS,
            max_recent_failures: DEFAULT_MAX_RECENT_FAILURES,
            sender_cache_ttl_secs: DEFAULT_SENDER_CACHE_TTL_SECS,
            max_cached_senders: DEFAULT_MAX_CACHED_SENDERS,
            pending_timeout_secs: DEFAULT_PENDING_TIMEOUT_SECS,
            max_pending: DEFAULT_MAX_PENDING,
            shaping_hold_ms: DEFAULT_SHAPING_HOLD_MS,
            backpressure: Backpressure::default(),
            cooldown: Cooldown::default(),
            snapshot_path: DEFAULT_SNAPSHOT_PATH.to_string(),
            snapshot_interval_secs: DEFAULT_SNAPSHOT_INTERVAL_SECS,
        }
    }
}

/// Token bucket per sender, charged only by invalidations.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Backpressure {
    /// Tokens in a full bucket: invalidations a sender may cause before it
    /// is backed off.
    pub tokens: u32,
    /// Tokens returned per second.
    pub refill_per_sec: f64,
    /// First backoff.
    pub backoff_initial_ms: u64,
    /// Longest backoff (each further dry run doubles the last).
    pub backoff_max_ms: u64,
    /// Senders tracked at most.
    pub max_senders: usize,
}

impl Default for Backpressure {
    fn default() -> Self {
        Backpressure {
            tokens: DEFAULT_BACKPRESSURE_TOKENS,
            refill_per_sec: DEFAULT_BACKPRESSURE_REFILL_PER_SEC,
            backoff_initial_ms: DEFAULT_BACKOFF_INITIAL_MS,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
            max_senders: DEFAULT_MAX_TRACKED_SENDERS,
        }
    }
}

/// Assertion cooldowns.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Cooldown {
    /// Distinct failing fingerprints under one assertion (within the denied
    /// TTL) that start a cooldown; 0 turns cooldowns off.
    pub distinct_fingerprints: usize,
    /// Cooldown length.
    pub duration_secs: u64,
    /// During a cooldown, one matching call passes per this interval.
    pub trickle_interval_ms: u64,
    /// Assertions tracked at most.
    pub max_assertions: usize,
}

impl Default for Cooldown {
    fn default() -> Self {
        Cooldown {
            distinct_fingerprints: DEFAULT_COOLDOWN_DISTINCT_FINGERPRINTS,
            duration_secs: DEFAULT_COOLDOWN_SECS,
            trickle_interval_ms: DEFAULT_TRICKLE_INTERVAL_MS,
            max_assertions: DEFAULT_MAX_ASSERTIONS,
        }
    }
}

fn parse_addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| unreachable!("default address {s} is valid"))
}

/// A configuration error that names the key at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key path (`upstream.url`), or empty for the file as a whole.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
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
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        Config::from_toml(&text)
    }

    /// Checks relations serde cannot see.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.upstream.url;
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(err(
                "upstream.url",
                format!("`{url}` must start with http://"),
            ));
        };
        if rest.is_empty() || rest.starts_with('/') {
            return Err(err("upstream.url", format!("`{url}` has no host")));
        }
        let positive = [
            ("server.max_connections", self.server.max_connections as u64),
            (
                "server.header_read_timeout_ms",
                self.server.header_read_timeout_ms,
            ),
            (
                "server.body_read_timeout_ms",
                self.server.body_read_timeout_ms,
            ),
            (
                "admission.max_in_flight",
                self.admission.max_in_flight as u64,
            ),
            ("rpc.max_body_bytes", self.rpc.max_body_bytes as u64),
            ("rpc.max_batch_size", self.rpc.max_batch_size as u64),
            (
                "upstream.connect_timeout_ms",
                self.upstream.connect_timeout_ms,
            ),
            ("upstream.call_timeout_ms", self.upstream.call_timeout_ms),
            (
                "upstream.max_response_bytes",
                self.upstream.max_response_bytes as u64,
            ),
            (
                "upstream.pool_idle_timeout_ms",
                self.upstream.pool_idle_timeout_ms,
            ),
            (
                "upstream.health_interval_ms",
                self.upstream.health_interval_ms,
            ),
        ];
        let screen = &self.screen;
        let positive_screen = [
            ("screen.denied_ttl_secs", screen.denied_ttl_secs),
            ("screen.max_denied", screen.max_denied as u64),
            (
                "screen.recent_failure_ttl_secs",
                screen.recent_failure_ttl_secs,
            ),
            (
                "screen.max_recent_failures",
                screen.max_recent_failures as u64,
            ),
            ("screen.sender_cache_ttl_secs", screen.sender_cache_ttl_secs),
            (
                "screen.max_cached_senders",
                screen.max_cached_senders as u64,
            ),
            ("screen.pending_timeout_secs", screen.pending_timeout_secs),
            ("screen.max_pending", screen.max_pending as u64),
            (
                "screen.backpressure.tokens",
                u64::from(screen.backpressure.tokens),
            ),
            (
                "screen.backpressure.backoff_initial_ms",
                screen.backpressure.backoff_initial_ms,
            ),
            (
                "screen.backpressure.max_senders",
                screen.backpressure.max_senders as u64,
            ),
            (
                "screen.cooldown.trickle_interval_ms",
                screen.cooldown.trickle_interval_ms,
            ),
            (
                "screen.cooldown.max_assertions",
                screen.cooldown.max_assertions as u64,
            ),
            (
                "screen.snapshot_interval_secs",
                screen.snapshot_interval_secs,
            ),
            (
                "sidecar.connect_timeout_ms",
                self.sidecar.connect_timeout_ms,
            ),
            (
                "sidecar.reconnect_initial_ms",
                self.sidecar.reconnect_initial_ms,
            ),
            (
                "sidecar.channel_capacity",
                self.sidecar.channel_capacity as u64,
            ),
            ("sidecar.batch_max", self.sidecar.batch_max as u64),
            (
                "sidecar.should_forward_timeout_ms",
                self.sidecar.should_forward_timeout_ms,
            ),
        ];
        for (key, value) in positive.into_iter().chain(positive_screen) {
            if value == 0 {
                return Err(err(key, "must be greater than 0"));
            }
        }
        if self.upstream.pool_max_idle != 0
            && self.upstream.pool_max_idle < self.admission.max_in_flight
        {
            return Err(err(
                "upstream.pool_max_idle",
                format!(
                    "{} is below admission.max_in_flight ({}): calls in flight would open \
                     connections the pool cannot keep",
                    self.upstream.pool_max_idle, self.admission.max_in_flight
                ),
            ));
        }
        for (i, m) in self.rpc.methods.iter().enumerate() {
            let stem = m.strip_suffix('*').unwrap_or(m);
            if stem.is_empty() && m != "*" || stem.contains('*') {
                return Err(err(
                    &format!("rpc.methods[{i}]"),
                    format!("`{m}`: `*` may only end a pattern"),
                ));
            }
        }
        let refill = screen.backpressure.refill_per_sec;
        if !(refill.is_finite() && refill > 0.0) {
            return Err(err(
                "screen.backpressure.refill_per_sec",
                "must be a number greater than 0",
            ));
        }
        if screen.backpressure.backoff_max_ms < screen.backpressure.backoff_initial_ms {
            return Err(err(
                "screen.backpressure.backoff_max_ms",
                "must be at least screen.backpressure.backoff_initial_ms",
            ));
        }
        let sidecar = &self.sidecar.url;
        if !sidecar.is_empty()
            && (!sidecar.starts_with("http://") || sidecar.len() <= "http://".len())
        {
            return Err(err(
                "sidecar.url",
                format!("`{sidecar}` must be http://host:port"),
            ));
        }
        if self.sidecar.reconnect_max_ms < self.sidecar.reconnect_initial_ms {
            return Err(err(
                "sidecar.reconnect_max_ms",
                "must be at least sidecar.reconnect_initial_ms",
            ));
        }
        if self.server.listen == self.admin.listen && self.server.listen.port() != 0 {
            return Err(err("admin.listen", "must differ from server.listen"));
        }
        Ok(())
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
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = Config::default();
        c.upstream.url = "https://x".into();
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
