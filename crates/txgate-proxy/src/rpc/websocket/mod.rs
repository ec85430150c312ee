//! WebSocket on the client port: the upgrade (same listener, admission,
//! client identity and rates as HTTP), a socket to the node per client
//! socket for its subscriptions, a shared one per worker for plain calls
//! ([`lane`]), and every message through the same checks as an HTTP body
//! ([`session`]).
//!
//! A message is parsed, charged to the client's rates, admitted under the
//! in-flight cap, and its calls go through the method policy and the
//! screening stack exactly as an HTTP body's; refusals are answered on the
//! socket under the caller's ids and never reach the node. The rest is sent
//! to the node with txgate's ids (on the worker's lane when every call of
//! the message may travel there, else on the client's own socket), and
//! answers come back under the caller's. Subscription notifications are
//! relayed as the node sent them, in the node's order.

mod check;
pub(crate) mod http_lane;
mod io;
mod lane;
mod nodes;
mod session;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{
    CONNECTION, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION,
    UPGRADE,
};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;
use txgate_config::{HttpUrl, NodeSet, UpstreamConfig, WebSocketConfig as WebSocketSection};
use txgate_limits::gcra::Rate;

use super::Shared;
use crate::limits::admission::AdmissionLayer;
use crate::limits::clients::Charged;
use crate::metrics::{Metrics, Outcome, UpstreamFailure};
use crate::request::{Body, Client, ConnectionSlot};
use crate::rpc::rescue::Refusal;
use crate::upstream::group::GroupState;
use crate::upstream::tls::{self as upstream_tls, Conn, Connector};

/// The read buffer of each socket: small, since most messages are small, a
/// busy endpoint holds thousands of sockets, and tungstenite zeroes the
/// free part of it before every read.
const READ_BUFFER: usize = 4 * 1024;

/// Client WebSockets: settings and what every session of the process
/// shares.
#[derive(Debug)]
pub struct WebSockets {
    settings: Arc<Settings>,
    /// The shared upstream sockets of plain calls, one per worker.
    lanes: lane::Lanes,
    /// Subscriptions open (or asked for) on every socket of the process.
    subscriptions: AtomicUsize,
    admission: AdmissionLayer,
    /// Cancelled when txgate drains: sessions answer what is in flight
    /// and close with 1001.
    stop: CancellationToken,
    /// The node group: where each message goes, and whether a session's
    /// nodes are still in.
    group: Arc<GroupState>,
    /// Per node, the sessions whose reads it serves (their home).
    homed: Vec<AtomicU64>,
    /// Per node, `txgate_ws_sessions_by_node`.
    homed_series: Vec<prometheus::IntGauge>,
}

#[derive(Debug)]
struct Settings {
    /// Each node's WebSocket endpoint, by the group's index.
    nodes: Vec<Endpoint>,
    /// For the whole opening: TCP, TLS and the WebSocket handshake.
    connect_timeout: Duration,
    call_timeout: Duration,
    client_codec: WebSocketConfig,
    upstream_codec: WebSocketConfig,
    /// A lane's: frames of many sessions buffered, written together.
    lane_codec: WebSocketConfig,
    /// Bytes queued on a lane before its calls are refused.
    lane_queue_bytes: usize,
    /// An answer over it is refused (on a lane, alone).
    max_response_bytes: usize,
    /// Plain calls go on the worker's lane ([`lane`]), not the session's
    /// own socket.
    shared_upstream: bool,
    /// HTTP clients' plain calls go on the worker's lane too
    /// ([`http_lane`]).
    http_lanes: bool,
    /// HTTP clients' submissions too (else the pool).
    http_lane_submissions: bool,
    /// Other HTTP calls in flight an HTTP call needs to take a lane
    /// (`websocket.http_lane_min_overlap`).
    http_lane_min_overlap: usize,
    /// An HTTP call's message larger than this goes over the pool
    /// (`websocket.max_message_bytes`: what the lane's write buffer is
    /// sized for).
    lane_message_bytes: usize,
    frame_rate: Option<Rate>,
    max_subscriptions_per_connection: usize,
    max_subscriptions: usize,
    max_in_flight: usize,
    idle_timeout: Duration,
    ping_interval: Option<Duration>,
}

impl WebSockets {
    /// Closes the calling worker's lane, if it has one, before the worker's
    /// runtime ends (see `Lanes::close_here`).
    pub(crate) async fn close_lane_here(&self) {
        self.lanes.close_here().await;
    }

    /// From the validated config and each node's WebSocket endpoint (set
    /// or derived, parsed; in the order of `nodes`); `None` when
    /// `websocket.enabled` is off.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ws: &WebSocketSection,
        upstream: &UpstreamConfig,
        nodes: &NodeSet,
        urls: &[HttpUrl],
        group: Arc<GroupState>,
        admission: AdmissionLayer,
        stop: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Result<Option<WebSockets>, String> {
        if !ws.enabled {
            return Ok(None);
        }
        let connect_timeout = upstream.connect_timeout;
        let endpoints = nodes
            .nodes()
            .iter()
            .zip(urls)
            .map(|(node, url)| Endpoint::new(&node.name, url, &node.tls, connect_timeout, &metrics))
            .collect::<Result<Vec<_>, String>>()?;
        let client_codec = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .write_buffer_size(0)
            // The queue, plus room for the largest answer the node may
            // send: a client that reads is never dropped for one answer.
            .max_write_buffer_size(
                ws.max_send_queue_bytes
                    .saturating_add(upstream.max_response_bytes),
            )
            .max_message_size(Some(ws.max_message_bytes))
            .max_frame_size(Some(ws.max_frame_bytes));
        let upstream_codec = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .write_buffer_size(0)
            // A node that stops reading: the session closes with 1011
            // instead of buffering the client's calls without end.
            .max_write_buffer_size(ws.max_send_queue_bytes.saturating_add(ws.max_message_bytes))
            .max_message_size(Some(upstream.max_response_bytes))
            .max_frame_size(Some(upstream.max_response_bytes));
        // A lane's queue towards the node: what its sessions may have
        // queued while the node has not taken the last batch.
        let lane_queue_bytes = ws.max_send_queue_bytes.saturating_mul(4);
        let lane_message_cap = upstream.max_response_bytes.max(lane::MIN_MESSAGE_CAP);
        let lane_codec = upstream_codec
            .read_buffer_size(64 * 1024)
            // Frames buffered until the batch is written in one go.
            .write_buffer_size(64 * 1024)
            // One batch: the queue's bound, twice over for the frame
            // headers (a sixth of the smallest calls), its first message
            // whatever its size, and a ping; above the write buffer, as the
            // codec requires.
            .max_write_buffer_size(
                lane_queue_bytes
                    .saturating_mul(2)
                    .saturating_add(ws.max_message_bytes)
                    .max(1024 * 1024),
            )
            .max_message_size(Some(lane_message_cap))
            .max_frame_size(Some(lane_message_cap));
        Ok(Some(WebSockets {
            lanes: lane::Lanes::default(),
            homed: endpoints.iter().map(|_| AtomicU64::new(0)).collect(),
            homed_series: endpoints
                .iter()
                .map(|e| metrics.websocket.home(&e.name))
                .collect(),
            group,
            settings: Arc::new(Settings {
                nodes: endpoints,
                connect_timeout,
                call_timeout: upstream.call_timeout,
                client_codec,
                upstream_codec,
                lane_codec,
                lane_queue_bytes,
                max_response_bytes: upstream.max_response_bytes,
                shared_upstream: ws.shared_upstream,
                http_lanes: ws.http_lanes,
                http_lane_submissions: ws.http_lane_submissions,
                http_lane_min_overlap: ws.http_lane_min_overlap,
                lane_message_bytes: ws.max_message_bytes,
                frame_rate: Rate::new(ws.max_frames_per_sec, ws.frame_burst),
                max_subscriptions_per_connection: ws.max_subscriptions_per_connection,
                max_subscriptions: ws.max_subscriptions,
                max_in_flight: ws.max_in_flight_per_connection.max(1),
                idle_timeout: ws.idle_timeout,
                ping_interval: ws.ping_interval,
            }),
            subscriptions: AtomicUsize::new(0),
            admission,
            stop,
        }))
    }

    /// Reserves one subscription of the process's; `false` at the cap.
    fn reserve_subscription(&self) -> bool {
        self.subscriptions
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.settings.max_subscriptions).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back `n` subscriptions of the process's.
    fn release_subscriptions(&self, n: usize) {
        if n > 0 {
            self.subscriptions.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// Whether a request asks for a WebSocket (a GET with `Upgrade:
/// websocket`; a POST is JSON-RPC whatever its headers).
pub(super) fn wants_upgrade<B>(req: &Request<B>) -> bool {
    req.method() == Method::GET
        && req
            .headers()
            .get_all(UPGRADE)
            .iter()
            .any(|v| has_token(v, "websocket"))
}

/// Whether a comma-separated header value holds `token` (any case).
fn has_token(value: &HeaderValue, token: &str) -> bool {
    value.to_str().is_ok_and(|v| {
        v.split(',')
            .any(|part| part.trim().eq_ignore_ascii_case(token))
    })
}

/// What is wrong with an upgrade request, as the client reads it.
fn bad_handshake<B>(req: &Request<B>) -> Option<(StatusCode, &'static str)> {
    let headers = req.headers();
    if req.method() != Method::GET {
        return Some((
            StatusCode::BAD_REQUEST,
            "invalid request: a WebSocket upgrade must be a GET",
        ));
    }
    if req.version() != Version::HTTP_11 {
        return Some((
            StatusCode::BAD_REQUEST,
            "invalid request: a WebSocket upgrade needs HTTP/1.1",
        ));
    }
    if !headers
        .get_all(CONNECTION)
        .iter()
        .any(|v| has_token(v, "upgrade"))
    {
        return Some((
            StatusCode::BAD_REQUEST,
            "invalid request: a WebSocket upgrade needs `Connection: upgrade`",
        ));
    }
    if headers
        .get(SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Some((
            StatusCode::UPGRADE_REQUIRED,
            "invalid request: only WebSocket version 13 is spoken",
        ));
    }
    let key_ok = headers
        .get(SEC_WEBSOCKET_KEY)
        .is_some_and(|k| k.len() == 24 && k.as_bytes().ends_with(b"=="));
    if !key_ok {
        return Some((
            StatusCode::BAD_REQUEST,
            "invalid request: a WebSocket upgrade needs a 16-byte Sec-WebSocket-Key",
        ));
    }
    None
}

/// Answers an upgrade request: 101 and a session once the node's socket is
/// open, else a JSON-RPC error with the HTTP status that says why.
pub(super) async fn accept<B>(
    shared: Arc<Shared>,
    ws: &Arc<WebSockets>,
    mut req: Request<B>,
) -> (Outcome, Response<Body>) {
    let metrics = shared.metrics.clone();
    let metrics = &metrics.websocket;
    if let Some((status, message)) = bad_handshake(&req) {
        metrics.upgrade("bad_handshake");
        let (outcome, mut response) = shared.refuse(Refusal::InvalidRequest(message), None);
        *response.status_mut() = status;
        if status == StatusCode::UPGRADE_REQUIRED {
            response
                .headers_mut()
                .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        }
        return (outcome, response);
    }
    let (home, upstream) = match ws.open_home().await {
        Ok(opened) => opened,
        Err(nodes::Unavailable::NoHealthy) => {
            metrics.upgrade("upstream_unavailable");
            return shared.refuse(Refusal::NoHealthyUpstream, None);
        }
        Err(nodes::Unavailable::Failed(failure, e)) => {
            metrics.upgrade("upstream_unavailable");
            shared.metrics.upstream.failure(failure);
            let node = &ws.settings.nodes[0].name;
            // A failed TLS handshake is logged by the connector, once per
            // interval: clients must not be able to fill the log.
            if failure == UpstreamFailure::Tls {
                tracing::debug!(error = %e, node = %node, "upstream WebSocket unavailable");
                return shared.refuse(Refusal::UpstreamTls, None);
            }
            tracing::warn!(error = %e, node = %node, "upstream WebSocket unavailable");
            return shared.refuse(Refusal::UpstreamUnavailable, None);
        }
    };
    let key = req
        .headers()
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()))
        .unwrap_or_default();
    let peer = Peer {
        charged: req.extensions_mut().remove::<Charged>(),
        client: req.extensions().get::<Client>().map(|c| c.ip),
        _slot: req.extensions_mut().remove::<Arc<ConnectionSlot>>(),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (ws, codec) = (ws.clone(), ws.settings.client_codec);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let client = WebSocketStream::from_raw_socket(
                    TokioIo::new(upgraded),
                    Role::Server,
                    Some(codec),
                )
                .await;
                session::run(shared, ws, client, (home, upstream), peer).await;
            }
            Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
        }
    });
    metrics.upgrade("upgraded");
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&key) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    (Outcome::Upgraded, response)
}

/// The client side of a session, from its upgrade request.
#[derive(Debug)]
struct Peer {
    /// Its rates, charged per message (the upgrade paid one call).
    charged: Option<Charged>,
    client: Option<IpAddr>,
    /// Its place under `server.max_connections`, held until the session
    /// ends.
    _slot: Option<Arc<ConnectionSlot>>,
}

type Upstream = WebSocketStream<Conn>;

/// One node's WebSocket endpoint.
#[derive(Debug)]
struct Endpoint {
    /// Its label in logs (never the URL, which may carry a key).
    name: String,
    /// `ws://host:port/path` (or `wss://`).
    url: String,
    /// Opens the connection: TCP, and TLS for `wss://`, with the node's
    /// own TLS settings.
    connector: Connector,
}

impl Endpoint {
    fn new(
        name: &str,
        url: &HttpUrl,
        tls: &txgate_config::UpstreamTlsConfig,
        connect_timeout: Duration,
        metrics: &Arc<Metrics>,
    ) -> Result<Endpoint, String> {
        let client_tls = match url.is_tls() {
            true => Some(upstream_tls::client_config(tls, &[])?),
            false => None,
        };
        Ok(Endpoint {
            name: name.to_owned(),
            url: format!(
                "{}://{}{}",
                if url.is_tls() { "wss" } else { "ws" },
                url.authority(),
                url.path()
            ),
            connector: Connector::new(url, client_tls, connect_timeout, metrics.clone())?,
        })
    }
}

/// Opens a socket to node `node`: TCP and TLS for `wss://` within the
/// upstream connect timeout, then the WebSocket handshake within another.
async fn connect_upstream(
    settings: &Settings,
    node: usize,
    codec: WebSocketConfig,
) -> Result<Upstream, (UpstreamFailure, String)> {
    let Some(endpoint) = settings.nodes.get(node) else {
        return Err((UpstreamFailure::Connect, "no such node".into()));
    };
    // The connector bounds TCP and TLS by the connect timeout itself (and
    // counts a TLS timeout as TLS); the WebSocket handshake gets its own.
    let conn = endpoint
        .connector
        .connect()
        .await
        .map_err(|e| (e.failure(), e.to_string()))?;
    let open = async {
        tokio_tungstenite::client_async_with_config(endpoint.url.as_str(), conn, Some(codec))
            .await
            .map(|(socket, _)| socket)
            .map_err(|e| {
                // A node that refuses txgate's client certificate after a
                // TLS 1.3 handshake says so on the first read: the
                // upgrade's.
                let failure = match &e {
                    WsError::Io(io) => endpoint
                        .connector
                        .refused_after_handshake(io)
                        .unwrap_or(UpstreamFailure::Connect),
                    // The node answered the upgrade, but not with 101 (it
                    // serves no WebSocket there).
                    WsError::Http(_) => UpstreamFailure::Status,
                    _ => UpstreamFailure::Connect,
                };
                (failure, e.to_string())
            })
    };
    match tokio::time::timeout(settings.connect_timeout, open).await {
        Ok(result) => result,
        Err(_) => Err((UpstreamFailure::Connect, "connect timed out".into())),
    }
}
