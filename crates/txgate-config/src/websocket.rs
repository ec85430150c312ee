//! `[websocket]`: JSON-RPC over WebSocket on the client port, relayed to
//! the node's WebSocket endpoint, and the limits that keep one socket from
//! holding more than its share.
//!
//! Every limit is per connection except `max_subscriptions`, which holds
//! for the whole process. The node's endpoint defaults to `upstream.url`
//! with the scheme `ws://` ([`Config::websocket_upstream`]).
//!
//! [`Config::websocket_upstream`]: crate::Config::websocket_upstream

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};
use crate::url::HttpUrl;

/// Default: WebSocket upgrades taken on the client port.
pub const DEFAULT_WEBSOCKET_ENABLED: bool = true;
/// Default: the node's WebSocket endpoint is `upstream.url` with `ws://`.
pub const DEFAULT_WEBSOCKET_UPSTREAM_URL: &str = "";
/// Default: largest message after reassembly, as `rpc.max_body_bytes`
/// (5 MiB).
pub const DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES: usize = 5 * 1024 * 1024;
/// Default: largest single frame (1 MiB).
pub const DEFAULT_WEBSOCKET_MAX_FRAME_BYTES: usize = 1024 * 1024;
/// Default: frames a second from one client, sustained.
pub const DEFAULT_WEBSOCKET_MAX_FRAMES_PER_SEC: u32 = 500;
/// Default: frames one client may send at once above its rate.
pub const DEFAULT_WEBSOCKET_FRAME_BURST: u32 = 1000;
/// Default: subscriptions one connection may hold.
pub const DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 32;
/// Default: subscriptions the whole process may hold.
pub const DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS: usize = 10_000;
/// Default: calls of one socket awaiting an answer.
pub const DEFAULT_WEBSOCKET_MAX_IN_FLIGHT_PER_CONNECTION: usize = 256;
/// Default: bytes queued to one client that does not read (8 MiB).
pub const DEFAULT_WEBSOCKET_MAX_SEND_QUEUE_BYTES: usize = 8 * 1024 * 1024;
/// Default: silence, either way, before a socket is closed (5 minutes).
pub const DEFAULT_WEBSOCKET_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default: interval of txgate's pings to the client.
pub const DEFAULT_WEBSOCKET_PING_INTERVAL_MS: u64 = 30_000;
/// Default: plain calls of every socket on a worker share one node socket.
pub const DEFAULT_WEBSOCKET_SHARED_UPSTREAM: bool = true;
/// Default: HTTP clients' plain calls go on the workers' lanes too.
pub const DEFAULT_WEBSOCKET_HTTP_LANES: bool = true;
/// Default: HTTP clients' submissions keep the pool (see the field).
pub const DEFAULT_WEBSOCKET_HTTP_LANE_SUBMISSIONS: bool = false;
/// Default `websocket.http_lane_min_overlap`.
pub const DEFAULT_WEBSOCKET_HTTP_LANE_MIN_OVERLAP: usize = 1;

/// JSON-RPC over WebSocket.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebSocketConfig {
    /// Whether WebSocket upgrades are taken on the client port; false: no
    /// WebSocket, the port serves JSON-RPC over HTTP only.
    pub enabled: bool,
    /// The node's WebSocket endpoint, `ws://host[:port][/path]` (the rules
    /// of [`HttpUrl`]), or `wss://...` (trusted as `[upstream.tls]` says);
    /// empty: `ws://` (`wss://` for an `https://` upstream) and the
    /// authority and path of `upstream.url`.
    pub upstream_url: String,
    /// Largest message from a client, in bytes, once its frames are
    /// reassembled; one byte more closes the socket with 1009 (message too
    /// big).
    pub max_message_bytes: usize,
    /// Largest single frame from a client, in bytes (at most
    /// `max_message_bytes`); one byte more closes the socket with 1009.
    pub max_frame_bytes: usize,
    /// Frames a second one connection may send, sustained (GCRA, with
    /// `frame_burst`); a frame beyond the rate closes the socket with 1008
    /// (policy violation).
    pub max_frames_per_sec: u32,
    /// Frames one connection may send at once above `max_frames_per_sec`;
    /// beyond it, 1008 as for the rate.
    pub frame_burst: u32,
    /// Subscriptions one connection may hold; one more `eth_subscribe` is
    /// refused with a JSON-RPC error, and the socket stays open.
    pub max_subscriptions_per_connection: usize,
    /// Subscriptions the whole process may hold, over every connection; one
    /// more `eth_subscribe` is refused with a JSON-RPC error.
    pub max_subscriptions: usize,
    /// Calls of one socket awaiting an answer from the node; at the cap
    /// txgate stops reading that socket until an answer frees a slot.
    pub max_in_flight_per_connection: usize,
    /// Bytes queued to a client that does not read its messages; beyond it
    /// the connection is dropped and counted (`slow_reader`).
    pub max_send_queue_bytes: usize,
    /// Milliseconds with no message either way before the socket is closed
    /// with 1000 "idle".
    #[serde(
        rename = "idle_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub idle_timeout: Duration,
    /// Milliseconds between txgate's pings to the client; a pong not back
    /// within another interval closes the socket. 0: no pings.
    #[serde(
        rename = "ping_interval_ms",
        deserialize_with = "crate::duration::millis_or_off"
    )]
    pub ping_interval: Option<Duration>,
    /// Whether the plain calls of every client socket on a worker thread
    /// (those whose answers are small: `eth_call`, `eth_chainId`,
    /// `eth_sendRawTransaction`..., alone or in batches of at most 4) share
    /// one socket to the node, the worker's lane; subscriptions, calls with
    /// large answers and larger batches keep each client's own socket.
    /// false: every call on the client's own socket.
    pub shared_upstream: bool,
    /// Whether the plain calls of HTTP clients (the same methods, with an
    /// id, alone or in batches of at most 4) travel on the worker's lane as
    /// well, in place of a
    /// pooled HTTP/1.1 connection each: many clients' calls written and
    /// read in one go. A node whose WebSocket endpoint cannot be opened
    /// gets them over HTTP. Needs `enabled` (the lanes belong to it).
    pub http_lanes: bool,
    /// Whether HTTP clients' submissions (`eth_sendRawTransaction`,
    /// `eth_sendRawTransactionConditional`) take the lanes with the other
    /// plain calls. false (the default): they keep the pool. On anvil a
    /// submission on a lane waited 0.7 ms longer at p50 than on the pool,
    /// at half the node's maximum rate (PERFORMANCE.md, "What a user
    /// feels"): the
    /// node takes a submission's time on the one socket it shares. true
    /// for a node that answers one socket's calls at once, where the lane
    /// saves txgate 17-24% of its CPU per submission.
    pub http_lane_submissions: bool,
    /// How many other HTTP calls of the same worker that lanes carry must
    /// be in flight (on a lane or the pool) for an HTTP call to take a
    /// lane: a lane saves only by writing overlapping calls together, and a
    /// call alone answers sooner over the pool, one task hop fewer. 1 (the
    /// default): lanes under load, the pool at light load; 0: the lane
    /// whenever it is open.
    pub http_lane_min_overlap: usize,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        WebSocketConfig {
            enabled: DEFAULT_WEBSOCKET_ENABLED,
            upstream_url: DEFAULT_WEBSOCKET_UPSTREAM_URL.to_string(),
            max_message_bytes: DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES,
            max_frame_bytes: DEFAULT_WEBSOCKET_MAX_FRAME_BYTES,
            max_frames_per_sec: DEFAULT_WEBSOCKET_MAX_FRAMES_PER_SEC,
            frame_burst: DEFAULT_WEBSOCKET_FRAME_BURST,
            max_subscriptions_per_connection: DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS_PER_CONNECTION,
            max_subscriptions: DEFAULT_WEBSOCKET_MAX_SUBSCRIPTIONS,
            max_in_flight_per_connection: DEFAULT_WEBSOCKET_MAX_IN_FLIGHT_PER_CONNECTION,
            max_send_queue_bytes: DEFAULT_WEBSOCKET_MAX_SEND_QUEUE_BYTES,
            idle_timeout: Duration::from_millis(DEFAULT_WEBSOCKET_IDLE_TIMEOUT_MS),
            ping_interval: crate::duration::ms_or_off(DEFAULT_WEBSOCKET_PING_INTERVAL_MS),
            shared_upstream: DEFAULT_WEBSOCKET_SHARED_UPSTREAM,
            http_lanes: DEFAULT_WEBSOCKET_HTTP_LANES,
            http_lane_submissions: DEFAULT_WEBSOCKET_HTTP_LANE_SUBMISSIONS,
            http_lane_min_overlap: DEFAULT_WEBSOCKET_HTTP_LANE_MIN_OVERLAP,
        }
    }
}

impl WebSocketConfig {
    /// `websocket.upstream_url` parsed, `None` when it is empty (then the
    /// endpoint comes from `upstream.url`:
    /// [`Config::websocket_upstream`](crate::Config::websocket_upstream)).
    pub fn upstream_endpoint(&self) -> Result<Option<HttpUrl>, ConfigError> {
        if self.upstream_url.is_empty() {
            return Ok(None);
        }
        HttpUrl::parse_ws(&self.upstream_url)
            .map(Some)
            .map_err(|e| ConfigError::new("websocket.upstream_url", e))
    }

    /// Checks the `websocket.*` keys on their own: the URL when set, every
    /// number above 0 (but `ping_interval_ms`, 0: no pings), and a frame
    /// no larger than a message. Checked whether or not `enabled`.
    /// Returns `websocket.upstream_url` parsed (`None`: derived from
    /// `upstream.url`).
    pub fn validate(&self) -> Result<Option<HttpUrl>, ConfigError> {
        let url = self.upstream_endpoint()?;
        require_positive(&[
            ("websocket.max_message_bytes", &self.max_message_bytes),
            ("websocket.max_frame_bytes", &self.max_frame_bytes),
            ("websocket.max_frames_per_sec", &self.max_frames_per_sec),
            ("websocket.frame_burst", &self.frame_burst),
            (
                "websocket.max_subscriptions_per_connection",
                &self.max_subscriptions_per_connection,
            ),
            ("websocket.max_subscriptions", &self.max_subscriptions),
            (
                "websocket.max_in_flight_per_connection",
                &self.max_in_flight_per_connection,
            ),
            ("websocket.max_send_queue_bytes", &self.max_send_queue_bytes),
            ("websocket.idle_timeout_ms", &self.idle_timeout),
        ])?;
        if self.max_frame_bytes > self.max_message_bytes {
            return Err(ConfigError::new(
                "websocket.max_frame_bytes",
                format!(
                    "{} is above websocket.max_message_bytes ({}): a message is one frame or more",
                    self.max_frame_bytes, self.max_message_bytes
                ),
            ));
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut WebSocketConfig);

    fn refused(change: impl FnOnce(&mut WebSocketConfig)) -> ConfigError {
        let mut c = WebSocketConfig::default();
        change(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn defaults_are_valid() {
        let c = WebSocketConfig::default();
        c.validate().unwrap();
        assert!(c.enabled);
        assert_eq!(c.upstream_endpoint().unwrap(), None);
        assert_eq!(c.max_message_bytes, 5_242_880);
        assert_eq!(c.max_frame_bytes, 1_048_576);
        assert_eq!(c.max_send_queue_bytes, 8_388_608);
        assert!(c.shared_upstream);
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 13] = [
            (|c| c.max_message_bytes = 0, "websocket.max_message_bytes"),
            (|c| c.max_frame_bytes = 0, "websocket.max_frame_bytes"),
            (|c| c.max_frames_per_sec = 0, "websocket.max_frames_per_sec"),
            (|c| c.frame_burst = 0, "websocket.frame_burst"),
            (
                |c| c.max_subscriptions_per_connection = 0,
                "websocket.max_subscriptions_per_connection",
            ),
            (|c| c.max_subscriptions = 0, "websocket.max_subscriptions"),
            (
                |c| c.max_in_flight_per_connection = 0,
                "websocket.max_in_flight_per_connection",
            ),
            (
                |c| c.max_send_queue_bytes = 0,
                "websocket.max_send_queue_bytes",
            ),
            (
                |c| c.idle_timeout = Duration::ZERO,
                "websocket.idle_timeout_ms",
            ),
            (
                |c| c.max_frame_bytes = c.max_message_bytes + 1,
                "websocket.max_frame_bytes",
            ),
            (
                |c| c.upstream_url = "http://127.0.0.1:8546".into(),
                "websocket.upstream_url",
            ),
            (
                |c| c.upstream_url = "https://node:8546".into(),
                "websocket.upstream_url",
            ),
            (
                |c| c.upstream_url = "ws://node:0".into(),
                "websocket.upstream_url",
            ),
        ];
        for (change, key) in cases {
            let e = refused(change);
            assert_eq!(e.key, key, "{e}");
        }
    }

    #[test]
    fn what_is_allowed() {
        // No pings; a frame as large as a message; off, still checked.
        let c = WebSocketConfig {
            ping_interval: crate::duration::ms_or_off(0),
            max_frame_bytes: DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES,
            enabled: false,
            ..WebSocketConfig::default()
        };
        c.validate().unwrap();
        let c = WebSocketConfig {
            enabled: false,
            idle_timeout: Duration::from_millis(0),
            ..WebSocketConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "websocket.idle_timeout_ms");
    }

    #[test]
    fn a_set_url_is_parsed() {
        let c = WebSocketConfig {
            upstream_url: "ws://[::1]:8546/ws".into(),
            ..WebSocketConfig::default()
        };
        c.validate().unwrap();
        let u = c.upstream_endpoint().unwrap().unwrap();
        assert_eq!((u.host(), u.port(), u.path()), ("::1", 8546, "/ws"));
        let e = refused(|c| c.upstream_url = "http://h:1".into());
        assert!(e.message.contains("must start with ws:// or wss://"), "{e}");
        assert!(
            e.to_string().starts_with("`websocket.upstream_url`: "),
            "{e}"
        );
    }
}
