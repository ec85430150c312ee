//! WebSocket metrics: open sockets, upgrades, messages each way,
//! subscriptions, and why sockets closed.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::Outcome;
use super::registrar::Registrar;

/// Why a WebSocket session ended; one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsClose {
    /// The client closed (or its connection ended).
    Client,
    /// The node's socket closed or failed: the client got 1011.
    Upstream,
    /// No message either way for `websocket.idle_timeout_ms`: 1000.
    Idle,
    /// A ping went unanswered: 1008.
    PingTimeout,
    /// txgate is shutting down: 1001 once in-flight calls are answered.
    Shutdown,
    /// The client did not read: its send queue passed
    /// `websocket.max_send_queue_bytes` and the connection was dropped.
    SlowReader,
    /// A message or frame over its cap: 1009.
    TooBig,
    /// Frames faster than `websocket.max_frames_per_sec`: 1008.
    FrameRate,
    /// A binary message that is not UTF-8: 1003.
    Binary,
    /// A protocol error or invalid UTF-8: 1002 or 1007.
    Protocol,
    /// A node the session used was taken out of the node group: 1012 once
    /// its calls are answered.
    NodeOut,
}

impl WsClose {
    /// Every reason, in declaration order (indexed by `reason as usize`).
    pub const ALL: [WsClose; 11] = [
        WsClose::Client,
        WsClose::Upstream,
        WsClose::Idle,
        WsClose::PingTimeout,
        WsClose::Shutdown,
        WsClose::SlowReader,
        WsClose::TooBig,
        WsClose::FrameRate,
        WsClose::Binary,
        WsClose::Protocol,
        WsClose::NodeOut,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            WsClose::Client => "client",
            WsClose::Upstream => "upstream",
            WsClose::Idle => "idle",
            WsClose::PingTimeout => "ping_timeout",
            WsClose::Shutdown => "shutdown",
            WsClose::SlowReader => "slow_reader",
            WsClose::TooBig => "too_big",
            WsClose::FrameRate => "frame_rate",
            WsClose::Binary => "binary",
            WsClose::Protocol => "protocol",
            WsClose::NodeOut => "node_out",
        }
    }
}

/// What txgate sent a client on its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsSent {
    /// The answer to a message (forwarded calls, refusals, or both).
    Answer,
    /// A subscription notification relayed from the node.
    Notification,
}

/// The `txgate_ws_*` series.
pub struct WebSocketMetrics {
    /// Sessions open now.
    pub open: IntGauge,
    /// Upgrades by result.
    upgrades: IntCounterVec,
    /// Messages from clients, by the outcome of each call (like
    /// `txgate_requests_total`).
    received: Vec<IntCounter>,
    /// Messages to clients, by kind.
    answers: IntCounter,
    notifications: IntCounter,
    /// Subscriptions open now, in the whole process.
    pub subscriptions: IntGauge,
    /// `eth_subscribe` refused over a cap.
    pub subscriptions_refused: IntCounter,
    closes: Vec<IntCounter>,
    /// Lanes (shared node sockets of plain calls) open now.
    pub lanes_open: IntGauge,
    /// A lane's socket opened.
    pub lane_opened: IntCounter,
    /// A lane's socket failed or fell silent: its calls were answered
    /// -32603.
    pub lane_failed: IntCounter,
    /// A message's calls refused: its lane's queue was over its bound.
    pub lane_queue_full: IntCounter,
    /// HTTP clients' calls on lanes, by result.
    pub http_lane: HttpLaneCalls,
    /// Sessions by the node they read from (their home).
    by_home: IntGaugeVec,
    /// Messages refused while their socket to a node was opening: more
    /// than `websocket.max_in_flight_per_connection` waited.
    pub opening_full: IntCounter,
}

impl std::fmt::Debug for WebSocketMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketMetrics").finish_non_exhaustive()
    }
}

impl WebSocketMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> WebSocketMetrics {
        let messages = r.counter_vec(
            "ws_messages_total",
            "WebSocket messages by direction (in: from clients, by outcome; out: to clients, \
             by kind)",
            &["direction", "outcome"],
        );
        let received = Outcome::ALL
            .iter()
            .map(|o| messages.with_label_values(&["in", o.as_str()]))
            .collect();
        let closes = r.counter_vec(
            "ws_closes_total",
            "WebSocket sessions ended, by reason",
            &["reason"],
        );
        let upgrades = r.counter_vec(
            "ws_upgrades_total",
            "WebSocket upgrade requests by result (upgraded, bad_handshake, \
             upstream_unavailable)",
            &["result"],
        );
        for result in ["upgraded", "bad_handshake", "upstream_unavailable"] {
            upgrades.with_label_values(&[result]);
        }
        let lanes = r.counter_vec(
            "ws_lane_events_total",
            "Shared node sockets of plain WebSocket calls (one per worker and node): opened, failed \
             (a socket that failed or could not be opened; calls on it answered -32603), \
             queue_full (a message refused: the lane's queue over its bound)",
            &["event"],
        );
        WebSocketMetrics {
            open: r.gauge("ws_open_sockets", "WebSocket sessions open"),
            upgrades,
            received,
            answers: messages.with_label_values(&["out", "answer"]),
            notifications: messages.with_label_values(&["out", "notification"]),
            subscriptions: r.gauge(
                "ws_subscriptions",
                "Subscriptions open on client WebSockets",
            ),
            subscriptions_refused: r.counter(
                "ws_subscriptions_refused_total",
                "eth_subscribe calls refused over websocket.max_subscriptions_per_connection or \
                 websocket.max_subscriptions",
            ),
            closes: WsClose::ALL
                .iter()
                .map(|c| closes.with_label_values(&[c.as_str()]))
                .collect(),
            lanes_open: r.gauge(
                "ws_lanes_open",
                "Shared node sockets of plain WebSocket calls open (one per worker and node at \
                 most)",
            ),
            lane_opened: lanes.with_label_values(&["opened"]),
            lane_failed: lanes.with_label_values(&["failed"]),
            lane_queue_full: lanes.with_label_values(&["queue_full"]),
            http_lane: HttpLaneCalls::new(r),
            opening_full: r.counter(
                "ws_opening_full_total",
                "WebSocket messages answered -32603 while their session's socket to a node was \
                 opening: more than websocket.max_in_flight_per_connection waited for it",
            ),
            by_home: r.gauge_vec(
                "ws_sessions_by_node",
                "WebSocket sessions open, by the node they read from (their home)",
                &["node"],
            ),
        }
    }

    /// The `txgate_ws_sessions_by_node` series of node `name`.
    pub fn home(&self, name: &str) -> IntGauge {
        self.by_home.with_label_values(&[name])
    }

    /// Counts an upgrade request by its result.
    pub fn upgrade(&self, result: &str) {
        self.upgrades.with_label_values(&[result]).inc();
    }

    /// Counts a message from a client by its outcome.
    pub fn received(&self, outcome: Outcome) {
        // `Outcome::ALL` is in declaration order, as for the HTTP outcomes.
        self.received[outcome as usize].inc();
    }

    /// Counts a message to a client.
    pub fn sent(&self, kind: WsSent) {
        match kind {
            WsSent::Answer => self.answers.inc(),
            WsSent::Notification => self.notifications.inc(),
        }
    }

    /// Counts a session's end.
    pub fn closed(&self, reason: WsClose) {
        self.closes[reason as usize].inc();
    }
}

/// `txgate_http_lane_calls_total{result}`: HTTP clients' calls (a batch's
/// each) sent on a worker's lane, and those that went over the pool
/// instead.
#[derive(Debug, Clone)]
pub struct HttpLaneCalls {
    /// Answered by the node on the lane.
    pub answered: IntCounter,
    /// The lane failed after it was written: answered -32603.
    pub failed: IntCounter,
    /// No answer within the call's deadline.
    pub timeout: IntCounter,
    /// The answer was over `upstream.max_response_bytes`: refused alone.
    pub too_large: IntCounter,
    /// Sent over the pool: the lane's socket could not be opened (lately),
    /// its queue was full, or the worker is draining.
    pub pooled: IntCounter,
}

impl HttpLaneCalls {
    fn new(r: &Registrar<'_>) -> HttpLaneCalls {
        let calls = r.counter_vec(
            "http_lane_calls_total",
            "HTTP clients' calls on a worker's shared node socket (websocket.http_lanes): \
             answered, failed (the socket failed after the call was written: -32603), timeout, \
             too_large (answer over upstream.max_response_bytes), pooled (sent over a pooled \
             HTTP connection instead: the socket could not be opened, its queue was full, or \
             the worker is draining)",
            &["result"],
        );
        HttpLaneCalls {
            answered: calls.with_label_values(&["answered"]),
            failed: calls.with_label_values(&["failed"]),
            timeout: calls.with_label_values(&["timeout"]),
            too_large: calls.with_label_values(&["too_large"]),
            pooled: calls.with_label_values(&["pooled"]),
        }
    }
}
