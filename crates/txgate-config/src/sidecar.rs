//! `[sidecar]`: the gRPC links to the sidecars that judge transactions.
//!
//! txgate is a client of one or more sidecars, its *sources*, each speaking
//! one [`Protocol`]:
//!
//! * `txgate.v1`: txgate's own protocol (`txgate.sidecar.v1`): a stream of
//!   invalidations, and the ShouldForward question;
//! * `rpcproxy.v1`: the reference screening proxy's protocol, the same two
//!   methods with another wire form;
//! * `sidecar.transport.v1`: the Credible Layer sidecar's result stream,
//!   which names only the tx hash of a failed transaction (txgate looks the
//!   hash up among the transactions it forwarded, see
//!   `screen.forwarded_ttl_secs`), and has no ShouldForward.
//!
//! Sources are written as `[[sidecar.sources]]` entries ([`SourceConfig`]);
//! `sidecar.url` is the short form of one `txgate.v1` source. Every other
//! `sidecar.*` key applies to every source. [`SidecarConfig::sources`]
//! gives the list, checked ([`Source`]): the one entry point for the
//! clients.

use std::fmt;

use std::time::Duration;

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
/// Default: an HTTP/2 PING to each sidecar connection after this long
/// without a frame from it.
pub const DEFAULT_SIDECAR_KEEPALIVE_MS: u64 = 1_000;
/// Default: a connection whose PING goes unanswered this long is closed.
pub const DEFAULT_SIDECAR_KEEPALIVE_TIMEOUT_MS: u64 = 3_000;
/// Default: largest sidecar message accepted (1 MiB; an invalidation is a
/// few hundred bytes).
pub const DEFAULT_SIDECAR_MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Default: invalidations queued between the stream and the worker.
pub const DEFAULT_SIDECAR_CHANNEL_CAPACITY: usize = 65_536;
/// Default: invalidations applied in one pass at most.
pub const DEFAULT_SIDECAR_BATCH_MAX: usize = 4_096;
/// Default: the short-form source (`sidecar.url`) is not asked
/// ShouldForward.
pub const DEFAULT_SHOULD_FORWARD: bool = false;
/// Default: ShouldForward deadline.
pub const DEFAULT_SHOULD_FORWARD_TIMEOUT_MS: u64 = 20;
/// Default: how long a "forward" verdict is kept.
pub const DEFAULT_VERDICT_TTL_MS: u64 = 10_000;
/// Default: ShouldForward "forward" verdicts cached at most.
pub const DEFAULT_MAX_VERDICTS: usize = 100_000;
/// Default: ShouldForward questions in flight at most, process-wide.
pub const DEFAULT_MAX_PROBES_IN_FLIGHT: usize = 256;
/// Default: ShouldForward is asked about new fingerprints on hot calls
/// only.
pub const DEFAULT_SHOULD_FORWARD_SCOPE: ShouldForwardScope = ShouldForwardScope::Hot;
/// Default: a call stays hot 5 minutes after an invalidation named it.
pub const DEFAULT_HOT_WINDOW_MS: u64 = 300_000;
/// Default: hot calls held at most.
pub const DEFAULT_MAX_HOT_CALLS: usize = 65_536;

/// Which fingerprints with no local verdict ShouldForward is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShouldForwardScope {
    /// Those on a *hot* call: a (target, selector) pair an invalidation
    /// named within `sidecar.hot_window_ms`. Calls to anything else are
    /// never asked about.
    Hot,
    /// Every one.
    All,
}

impl ShouldForwardScope {
    /// The name written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            ShouldForwardScope::Hot => "hot",
            ShouldForwardScope::All => "all",
        }
    }
}

/// A sidecar protocol txgate speaks as a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Protocol {
    /// txgate's own protocol (`txgate.sidecar.v1`): invalidations and
    /// ShouldForward.
    #[serde(rename = "txgate.v1")]
    TxgateV1,
    /// The reference screening proxy's protocol (`rpcproxy.v1`):
    /// invalidations and ShouldForward.
    #[serde(rename = "rpcproxy.v1")]
    RpcproxyV1,
    /// The Credible Layer sidecar's result stream
    /// (`sidecar.transport.v1`): failures by tx hash, no ShouldForward.
    #[serde(rename = "sidecar.transport.v1")]
    TransportV1,
}

impl Protocol {
    /// Every protocol, in the order of [`Protocol::index`].
    pub const ALL: [Protocol; 3] = [
        Protocol::TxgateV1,
        Protocol::RpcproxyV1,
        Protocol::TransportV1,
    ];

    /// The name written in the config file (`txgate.v1`, `rpcproxy.v1`,
    /// `sidecar.transport.v1`), also fit for a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::TxgateV1 => "txgate.v1",
            Protocol::RpcproxyV1 => "rpcproxy.v1",
            Protocol::TransportV1 => "sidecar.transport.v1",
        }
    }

    /// Whether the protocol has the ShouldForward question.
    pub fn has_should_forward(self) -> bool {
        match self {
            Protocol::TxgateV1 | Protocol::RpcproxyV1 => true,
            Protocol::TransportV1 => false,
        }
    }

    /// Position in [`Protocol::ALL`] (for per-protocol arrays).
    pub fn index(self) -> usize {
        match self {
            Protocol::TxgateV1 => 0,
            Protocol::RpcproxyV1 => 1,
            Protocol::TransportV1 => 2,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[sidecar.sources]]` entry, as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `http://host:port` of the sidecar's gRPC server, no path; parsed like
    /// `sidecar.url`.
    pub url: String,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Ask this source ShouldForward (one source at most, and only one
    /// whose protocol has it).
    #[serde(default)]
    pub should_forward: bool,
}

/// A source, checked: what [`SidecarConfig::sources`] gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The sidecar's gRPC endpoint (its path is `/`).
    pub url: HttpUrl,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Ask this source ShouldForward (true for one source at most).
    pub should_forward: bool,
}

/// The sidecar links (gRPC).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SidecarConfig {
    /// Short form of one `txgate.v1` source: `http://host:port` of the
    /// sidecar's gRPC server; empty: none. Parsed like `upstream.url` (see
    /// [`HttpUrl`]), and takes no path: the gRPC client would drop it.
    pub url: String,
    /// The sources, beside the short form (`[[sidecar.sources]]`).
    /// Several sources of one protocol at different URLs are fine: txgate
    /// deduplicates what they report by tx hash.
    pub sources: Vec<SourceConfig>,
    /// Connect timeout (every source).
    #[serde(
        rename = "connect_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub connect_timeout: Duration,
    /// First reconnect delay; doubled per failure, with jitter.
    #[serde(
        rename = "reconnect_initial_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    #[serde(
        rename = "reconnect_max_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub reconnect_max: Duration,
    /// An HTTP/2 PING on each connection to a sidecar (the stream and the
    /// ShouldForward channel) after this long without a frame from it,
    /// idle or not; 0: none. A sidecar whose host went silent (a
    /// partition, a dead host: no reset ever comes) is found within this
    /// plus `keepalive_timeout`, and the stream reconnects.
    #[serde(rename = "keepalive_ms", deserialize_with = "crate::duration::millis")]
    pub keepalive: Duration,
    /// A PING unanswered this long closes its connection.
    #[serde(
        rename = "keepalive_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub keepalive_timeout: Duration,
    /// Largest message accepted on a stream. A larger one is refused from
    /// its length prefix, before it is read, and breaks the stream
    /// (`txgate_sidecar_stream_ends_total{reason="too_large"}`).
    pub max_message_bytes: usize,
    /// Invalidations queued between the stream and the batching worker.
    /// When full, the stream is read no further until there is room (the
    /// sidecar is slowed by HTTP/2 flow control); nothing is dropped.
    pub channel_capacity: usize,
    /// Invalidations applied in one pass at most.
    pub batch_max: usize,
    /// Ask the short-form source (`sidecar.url`) about fingerprints with no
    /// local verdict. Needs a `sidecar.url`; to ask a `[[sidecar.sources]]`
    /// entry, set `should_forward` on that entry.
    pub should_forward: bool,
    /// Which fingerprints are asked about: `hot` (on a call an
    /// invalidation named within `hot_window_ms`) or `all`.
    pub should_forward_scope: ShouldForwardScope,
    /// How long a call (target, selector) stays hot after an invalidation
    /// named it.
    #[serde(rename = "hot_window_ms", deserialize_with = "crate::duration::millis")]
    pub hot_window: Duration,
    /// Hot calls held at most (a full table drops the oldest first).
    pub max_hot_calls: usize,
    /// Deadline of that question; late or failed answers forward.
    #[serde(
        rename = "should_forward_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub should_forward_timeout: Duration,
    /// How long a "forward" verdict is kept.
    #[serde(
        rename = "verdict_ttl_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub verdict_ttl: Duration,
    /// ShouldForward "forward" verdicts cached at most.
    pub max_verdicts: usize,
    /// ShouldForward questions in flight at most, across the process;
    /// beyond it a call is forwarded without asking (counted).
    pub max_probes_in_flight: usize,
}

impl SidecarConfig {
    /// Every source, checked: the short form (`sidecar.url`, a `txgate.v1`
    /// source asked ShouldForward when `sidecar.should_forward` is set)
    /// first when it is not empty, then each `[[sidecar.sources]]` entry in
    /// order. Empty: no sidecar.
    ///
    /// Refused, naming the key: a URL that does not parse or has a path;
    /// `sidecar.should_forward` without `sidecar.url`; `should_forward` on
    /// a protocol without ShouldForward; more than one source asked
    /// ShouldForward; the same URL and protocol twice.
    pub fn sources(&self) -> Result<Vec<Source>, ConfigError> {
        let mut sources: Vec<Source> = Vec::with_capacity(self.sources.len() + 1);
        // How each of `sources` is named in the file (its key, and its
        // `should_forward` key), for the relations below.
        let mut names: Vec<(String, String)> = Vec::with_capacity(self.sources.len() + 1);
        if self.url.is_empty() {
            if self.should_forward {
                return Err(ConfigError::new(
                    "sidecar.should_forward",
                    "is true but sidecar.url is empty: it asks the sidecar.url source; to ask \
                     a [[sidecar.sources]] entry, set should_forward on that entry instead",
                ));
            }
        } else {
            sources.push(Source {
                url: grpc_url("sidecar.url", &self.url)?,
                protocol: Protocol::TxgateV1,
                should_forward: self.should_forward,
            });
            names.push(("sidecar.url".into(), "sidecar.should_forward".into()));
        }
        for (n, entry) in self.sources.iter().enumerate() {
            let key = format!("sidecar.sources[{n}]");
            let source = Source {
                url: grpc_url(&format!("{key}.url"), &entry.url)?,
                protocol: entry.protocol,
                should_forward: entry.should_forward,
            };
            if source.should_forward && !source.protocol.has_should_forward() {
                return Err(ConfigError::new(
                    format!("{key}.should_forward"),
                    format!(
                        "protocol {} has no ShouldForward; set should_forward on a txgate.v1 \
                         or rpcproxy.v1 source",
                        source.protocol
                    ),
                ));
            }
            if source.should_forward
                && let Some(i) = sources.iter().position(|s| s.should_forward)
            {
                return Err(ConfigError::new(
                    format!("{key}.should_forward"),
                    format!(
                        "{} is already true: the ShouldForward probe asks one \
                         sidecar; set should_forward on one source only",
                        names[i].1
                    ),
                ));
            }
            if let Some(i) = sources.iter().position(|s| same_endpoint(s, &source)) {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "`{}` with protocol {} is already a source ({}): each sidecar is \
                         subscribed to once",
                        entry.url, source.protocol, names[i].0
                    ),
                ));
            }
            sources.push(source);
            names.push((key.clone(), format!("{key}.should_forward")));
        }
        Ok(sources)
    }

    /// Whether calls are tracked hot or cold: one of `sources` (these
    /// keys, checked) is asked ShouldForward, about hot calls only.
    pub fn tracks_hot_calls(&self, sources: &[Source]) -> bool {
        self.should_forward_scope == ShouldForwardScope::Hot
            && sources.iter().any(|s| s.should_forward)
    }

    /// Checks the `sidecar.*` keys, `sidecar.sources` included (see
    /// [`SidecarConfig::sources`]).
    /// Returns the sources.
    pub fn validate(&self) -> Result<Vec<Source>, ConfigError> {
        let sources = self.sources()?;
        require_positive(&[
            ("sidecar.connect_timeout_ms", &self.connect_timeout),
            ("sidecar.reconnect_initial_ms", &self.reconnect_initial),
            ("sidecar.keepalive_timeout_ms", &self.keepalive_timeout),
            ("sidecar.max_message_bytes", &self.max_message_bytes),
            ("sidecar.channel_capacity", &self.channel_capacity),
            ("sidecar.batch_max", &self.batch_max),
            (
                "sidecar.should_forward_timeout_ms",
                &self.should_forward_timeout,
            ),
            ("sidecar.max_verdicts", &self.max_verdicts),
            ("sidecar.hot_window_ms", &self.hot_window),
            ("sidecar.max_hot_calls", &self.max_hot_calls),
            ("sidecar.max_probes_in_flight", &self.max_probes_in_flight),
        ])?;
        require_at_least(
            "sidecar.reconnect_max_ms",
            self.reconnect_max,
            "sidecar.reconnect_initial_ms",
            self.reconnect_initial,
        )?;
        Ok(sources)
    }
}

/// A gRPC endpoint: an [`HttpUrl`] without a path (the gRPC client would
/// drop it); errors name `key`.
fn grpc_url(key: &str, value: &str) -> Result<HttpUrl, ConfigError> {
    let url = HttpUrl::parse(value).map_err(|e| ConfigError::new(key, e))?;
    if url.path() != "/" {
        return Err(ConfigError::new(
            key,
            format!(
                "`{value}` has a path (`{}`): a gRPC endpoint is http://host:port",
                url.path()
            ),
        ));
    }
    Ok(url)
}

/// Same protocol, same host (names compare case-insensitively) and port.
fn same_endpoint(a: &Source, b: &Source) -> bool {
    a.protocol == b.protocol
        && a.url.port() == b.url.port()
        && a.url.host().eq_ignore_ascii_case(b.url.host())
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            url: DEFAULT_SIDECAR_URL.to_string(),
            sources: Vec::new(),
            connect_timeout: Duration::from_millis(DEFAULT_SIDECAR_CONNECT_TIMEOUT_MS),
            reconnect_initial: Duration::from_millis(DEFAULT_SIDECAR_RECONNECT_INITIAL_MS),
            reconnect_max: Duration::from_millis(DEFAULT_SIDECAR_RECONNECT_MAX_MS),
            keepalive: Duration::from_millis(DEFAULT_SIDECAR_KEEPALIVE_MS),
            keepalive_timeout: Duration::from_millis(DEFAULT_SIDECAR_KEEPALIVE_TIMEOUT_MS),
            max_message_bytes: DEFAULT_SIDECAR_MAX_MESSAGE_BYTES,
            channel_capacity: DEFAULT_SIDECAR_CHANNEL_CAPACITY,
            batch_max: DEFAULT_SIDECAR_BATCH_MAX,
            should_forward: DEFAULT_SHOULD_FORWARD,
            should_forward_scope: DEFAULT_SHOULD_FORWARD_SCOPE,
            hot_window: Duration::from_millis(DEFAULT_HOT_WINDOW_MS),
            max_hot_calls: DEFAULT_MAX_HOT_CALLS,
            should_forward_timeout: Duration::from_millis(DEFAULT_SHOULD_FORWARD_TIMEOUT_MS),
            verdict_ttl: Duration::from_millis(DEFAULT_VERDICT_TTL_MS),
            max_verdicts: DEFAULT_MAX_VERDICTS,
            max_probes_in_flight: DEFAULT_MAX_PROBES_IN_FLIGHT,
        }
    }
}

#[cfg(test)]
mod tests;
