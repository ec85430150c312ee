//! One client WebSocket and its sockets to the nodes, until it ends.
//!
//! One task runs the session: it reads the client, runs each message's
//! checks (at most `websocket.max_in_flight_per_connection` at once; at the
//! cap it stops reading, so TCP pushes back), sends what passes to the
//! node with txgate's ids (on the worker's lane, [`super::lane`], when
//! every call of the message may travel there; else on its own socket),
//! and reads the node: answers go back under the caller's ids,
//! notifications as they came, in the node's order on each socket. A lane
//! that fails is told to the session, which answers the calls it sent on
//! it and goes on.
//! The same task writes every socket: a message is framed into the
//! socket's buffer and sent at once if the socket takes it, else flushed
//! when it is writable again. The client's buffer is bounded in bytes
//! (`websocket.max_send_queue_bytes`): a client that does not read is
//! dropped, never buffered without end. A paced client's answer that
//! waits out its hold waits in the session, counted among the messages
//! under way; the drain ends its hold, and a closing session sends it at
//! once.
//!
//! Over a node group a session has a home node and may open a socket to
//! another node when a message must go there ([`super::nodes`]); when one
//! of its nodes fails or is taken out, it answers what it owes and closes.
//!
//! Here the session and what the client sends; [`upstream`] what the nodes
//! send back, the sockets to them, and the calls that fail there.

mod upstream;

use upstream::{Opening, Own, Waiting, close_all, own_io};

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::CapacityError;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use txgate_jsonrpc::encode::{self, UpstreamBatch, UpstreamResponse};
use txgate_limits::gcra::Nanos;

use super::check::{Assembly, Checked, Checking, Conn, Logged, Pending, Sub, Via, check};
use super::io::{Socket, io};
use super::lane::Event;
use super::{Peer, Upstream, WebSockets};
use crate::limits::pacing::{Hold, Pace};
use crate::metrics::{UpstreamFailure, WsClose, WsSent};
use crate::rpc::Shared;
use crate::rpc::plan::{self, Slot};
use crate::rpc::rescue::Refusal;

pub(super) type Client = WebSocketStream<TokioIo<Upgraded>>;

/// How often pending calls are checked against the call timeout and the
/// socket against the idle timeout.
const SWEEP: Duration = Duration::from_millis(250);

/// Timed-out `eth_subscribe` calls remembered per session, to close the
/// node's subscription if it answers late.
const MAX_EXPIRED_SUBSCRIBES: usize = 1024;

/// How long a closing session waits for its close frames to be written.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// Runs one session to its end.
pub(super) async fn run(
    shared: Arc<Shared>,
    ws: Arc<WebSockets>,
    client: Client,
    (home, upstream): (usize, Upstream),
    peer: Peer,
) {
    let metrics = shared.metrics.clone();
    metrics.websocket.open.inc();
    let seated = match ws.settings.shared_upstream {
        true => ws.lanes.join(&ws.settings, &ws.stop, &metrics),
        false => None,
    };
    let (seat, lane) = seated.unzip();
    let conn = Arc::new(Conn {
        shared,
        ws,
        peer,
        next_id: AtomicUsize::new(1),
        seat,
        subscriptions: AtomicUsize::new(0),
        open_subscriptions: AtomicUsize::new(0),
    });
    let homed = conn.ws.home(home);
    let reason = Session::new(conn.clone(), client, (home, upstream), lane)
        .run()
        .await;
    drop(homed);
    metrics.websocket.closed(reason);
    metrics.websocket.open.dec();
    // Every subscription of the socket ends with it (the node drops them
    // with its socket).
    let held = conn.subscriptions.swap(0, Ordering::AcqRel);
    conn.ws.release_subscriptions(held);
    let open = conn.open_subscriptions.swap(0, Ordering::AcqRel);
    metrics
        .websocket
        .subscriptions
        .sub(i64::try_from(open).unwrap_or(i64::MAX));
}

struct Session {
    conn: Arc<Conn>,
    client: Socket<TokioIo<Upgraded>>,
    /// The node it reads from ([`super::nodes`]).
    home: usize,
    /// Its own sockets to nodes: home's, and any other opened since.
    own: Vec<Own>,
    /// Sockets being opened, one per node at most.
    opening: FuturesUnordered<Opening>,
    /// Messages waiting for a socket being opened.
    waiting: Vec<Waiting>,
    /// A node it used failed or was taken out: it reads no more from the
    /// client and closes once its calls are answered.
    leaving: Option<WsClose>,
    /// Where the next read of its own sockets starts (they take turns).
    turn: usize,
    /// What the worker's lane brings back for this session's calls.
    lane: Option<mpsc::UnboundedReceiver<Event>>,
    checking: FuturesUnordered<Checking>,
    assemblies: HashMap<u64, Assembly>,
    /// Whole answers waiting out their client's pacing hold.
    held: FuturesUnordered<HeldAnswer>,
    pending: HashMap<u64, Pending>,
    /// Subscription ids the node gave this socket.
    /// Subscription ids the nodes gave this socket, with the node that
    /// holds each (an unsubscribe goes there).
    subscribed: HashMap<String, usize>,
    next_message: u64,
    /// The frame rate's theoretical arrival time.
    tat: Nanos,
    epoch: Instant,
    last_activity: Instant,
    awaiting_pong: bool,
    /// `eth_subscribe` calls answered by a timeout: a late success from
    /// the node is unsubscribed at once, so it holds nothing uncounted.
    expired_subscribes: HashSet<u64>,
}

impl Session {
    fn new(
        conn: Arc<Conn>,
        client: Client,
        (home, upstream): (usize, Upstream),
        lane: Option<mpsc::UnboundedReceiver<Event>>,
    ) -> Session {
        let now = Instant::now();
        Session {
            conn,
            client: Socket::new(client),
            home,
            own: vec![Own::new(home, upstream)],
            opening: FuturesUnordered::new(),
            waiting: Vec::new(),
            leaving: None,
            turn: 0,
            lane,
            checking: FuturesUnordered::new(),
            assemblies: HashMap::new(),
            held: FuturesUnordered::new(),
            pending: HashMap::new(),
            subscribed: HashMap::new(),
            next_message: 0,
            tat: 0,
            epoch: now,
            last_activity: now,
            awaiting_pong: false,
            expired_subscribes: HashSet::new(),
        }
    }

    async fn run(mut self) -> WsClose {
        let settings = &self.conn.ws.settings;
        let max_in_flight = settings.max_in_flight;
        let idle_timeout = settings.idle_timeout;
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ping_every = settings.ping_interval.unwrap_or(Duration::from_secs(3600));
        let pinging = settings.ping_interval.is_some();
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        // One waiter on the drain for the whole session, not one per turn.
        let stop = self.conn.ws.stop.clone();
        let stopped = stop.cancelled();
        tokio::pin!(stopped);
        let mut draining = false;
        loop {
            let in_flight = self.checking.len() + self.assemblies.len() + self.held.len();
            if in_flight == 0 {
                if let Some(reason) = self.leaving {
                    return self.end(reason).await;
                }
                if draining {
                    return self
                        .close(WsClose::Shutdown, CloseCode::Away, "txgate shutting down")
                        .await;
                }
            }
            let reading = !draining && self.leaving.is_none() && in_flight < max_in_flight;
            tokio::select! {
                // Held answers end their holds by themselves once the drain
                // has begun (the pacer's), and none is held from then on.
                () = &mut stopped, if !draining => draining = true,
                message = io(&mut self.client, reading) => {
                    if let Err(reason) = self.client_message(message) {
                        return self.end(reason).await;
                    }
                }
                Some(checked) = self.checking.next() => {
                    if let Err(reason) = self.checked(checked) {
                        return self.end(reason).await;
                    }
                }
                Some(body) = self.held.next(), if !self.held.is_empty() => {
                    if let Some(body) = body
                        && let Err(reason) = self.send_client(body, WsSent::Answer)
                    {
                        return self.end(reason).await;
                    }
                }
                Some(event) = lane_event(&mut self.lane) => {
                    let done = match event {
                        Event::Answer(text) => self.upstream_text(text, None),
                        Event::Down { node, generation, .. } => self.fail_lane(node, generation),
                        Event::TooLarge(id) => self.too_large(id),
                    };
                    if let Err(reason) = done {
                        return self.end(reason).await;
                    }
                }
                (node, message) = own_io(&mut self.own, &mut self.turn) => {
                    if let Err(reason) = self.upstream_message(node, message) {
                        return self.end(reason).await;
                    }
                }
                Some((node, opened)) = self.opening.next(), if !self.opening.is_empty() => {
                    if let Err(reason) = self.opened(node, opened) {
                        return self.end(reason).await;
                    }
                }
                _ = sweep.tick() => {
                    if let Err(reason) = self.expire().and_then(|()| self.watch_nodes()) {
                        return self.end(reason).await;
                    }
                    if self.last_activity.elapsed() >= idle_timeout {
                        return self.close(WsClose::Idle, CloseCode::Normal, "idle timeout").await;
                    }
                }
                _ = ping.tick(), if pinging => {
                    // Each node: silent for a whole interval after a ping,
                    // it is gone (a half-open socket answers nothing).
                    if let Err(reason) = self.ping_nodes() {
                        return self.end(reason).await;
                    }
                    // The client's pong can only be read while the socket
                    // is read: not at the in-flight cap or while draining.
                    if !reading {
                        self.awaiting_pong = false;
                        continue;
                    }
                    if self.awaiting_pong {
                        return self.close(WsClose::PingTimeout, CloseCode::Policy, "ping timeout").await;
                    }
                    self.awaiting_pong = true;
                    if let Err(reason) = self.frame_to_client(Message::Ping(Bytes::from_static(b"txgate"))) {
                        return self.end(reason).await;
                    }
                }
            }
        }
    }

    /// A message from the client.
    fn client_message(&mut self, message: Option<Result<Message, WsError>>) -> Result<(), WsClose> {
        let message = match message {
            None => return Err(WsClose::Client),
            Some(Ok(message)) => message,
            Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                return Err(WsClose::TooBig);
            }
            Some(Err(WsError::Utf8(_))) => return Err(WsClose::Protocol),
            Some(Err(WsError::Protocol(_))) => return Err(WsClose::Protocol),
            Some(Err(_)) => return Err(WsClose::Client),
        };
        if let Some(rate) = &self.conn.ws.settings.frame_rate {
            let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if rate.charge(&mut self.tat, now, 1).is_err() {
                return Err(WsClose::FrameRate);
            }
        }
        match message {
            Message::Text(text) => self.take(Bytes::from(text)),
            // web3.py sends its JSON in binary frames, and nodes take
            // them: UTF-8 JSON is a message whatever its frame type.
            Message::Binary(payload) if std::str::from_utf8(&payload).is_ok() => self.take(payload),
            Message::Binary(_) => Err(WsClose::Binary),
            Message::Ping(payload) => {
                self.last_activity = Instant::now();
                // tungstenite answers too; a second pong is harmless and
                // this one is written at once.
                self.frame_to_client(Message::Pong(payload))
            }
            Message::Pong(_) => {
                self.last_activity = Instant::now();
                self.awaiting_pong = false;
                Ok(())
            }
            Message::Close(_) => Err(WsClose::Client),
            Message::Frame(_) => Ok(()),
        }
    }

    /// Starts a message's checks.
    fn take(&mut self, payload: Bytes) -> Result<(), WsClose> {
        self.last_activity = Instant::now();
        let id = self.next_message;
        self.next_message += 1;
        let mut checking: Checking = Box::pin(check(self.conn.clone(), id, payload));
        // Most messages need no wait (no ShouldForward probe): done on
        // the first poll, they skip the set of checks under way. One that
        // waits is polled again there, with the session's waker.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match checking.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(checked) => self.checked(checked),
            std::task::Poll::Pending => {
                self.checking.push(checking);
                Ok(())
            }
        }
    }

    /// A message whose checks are done: refusals answered, the rest sent
    /// to the node. Its answer is put together (or sent) before the send,
    /// so that a send that fails answers its calls too.
    fn checked(&mut self, checked: Checked) -> Result<(), WsClose> {
        let metrics = &self.conn.shared.metrics.websocket;
        metrics.received(checked.outcome);
        let waiting = checked
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Awaiting))
            .count();
        let key = checked.message;
        // A body that is not UTF-8 (never: the checks write UTF-8 JSON) is
        // not sent; its calls are answered at once.
        let (mut text, unsendable) = match checked.upstream.map(Utf8Bytes::try_from) {
            Some(Ok(text)) => (Some(text), false),
            Some(Err(_)) => (None, true),
            None => (None, false),
        };
        // The node its role goes to (home, in the short form or for
        // reads; the node holding the subscription, for an unsubscribe);
        // none: no node of the role is in.
        let holder = checked.pending.iter().find_map(|(_, p)| match &p.sub {
            Sub::Unsubscribe(id) => self.subscribed.get(id).copied(),
            _ => None,
        });
        let node = match (holder, checked.role) {
            (Some(node), _) => Some(node),
            (None, Some(role)) if text.is_some() => self.conn.ws.node_for(role, self.home),
            _ => Some(self.home),
        };
        let no_node = node.is_none();
        if no_node && let Some(role) = checked.role {
            self.conn.shared.metrics.nodes.no_healthy(role.as_str());
        }
        // Leaving (a node it used failed): nothing new is sent, and no
        // socket opened.
        let leaving = self.leaving.is_some() && text.is_some();
        let unsent = no_node || leaving || unsendable;
        if unsent {
            text = None;
        }
        let node = node.unwrap_or(self.home);
        // On the worker's lane to it when every call may travel there:
        // queued first, so that its calls know the lane's generation they
        // went under (a failure of an earlier one does not answer them).
        let mut via = if unsent { Via::Unsent } else { Via::Own(node) };
        let mut lane_full = false;
        if let (Some(seat), false) = (&self.conn.seat, checked.private)
            && let Some(body) = text.take()
        {
            match seat.send(node, body, self.conn.ws.settings.lane_queue_bytes) {
                Some(ticket) => via = Via::Lane(node, ticket.generation),
                None => {
                    lane_full = true;
                    via = Via::Unsent;
                }
            }
        }
        for (id, mut pending) in checked.pending {
            pending.via = via;
            self.pending.insert(id, pending);
        }
        let assembly = Assembly {
            batch: checked.batch,
            slots: checked.slots,
            waiting,
            deadline: Instant::now()
                + checked
                    .timeout
                    .unwrap_or(self.conn.ws.settings.call_timeout),
            _held: checked.held,
            hold_until: checked.hold_until,
            refused: checked.refused,
        };
        if waiting == 0 {
            self.answer(assembly)?;
        } else {
            self.assemblies.insert(checked.message, assembly);
        }
        if lane_full {
            // The lane's node has not taken its last batch: this message's
            // calls are refused, the session goes on.
            self.conn.shared.metrics.websocket.lane_queue_full.inc();
        }
        if no_node {
            return self.fail_message(key, &Refusal::NoHealthyUpstream);
        }
        if lane_full || unsendable || leaving {
            return self.fail_message(key, &Refusal::UpstreamUnavailable);
        }
        match text {
            Some(text) => self.send_own(node, key, text, waiting > 0),
            None => Ok(()),
        }
    }

    /// Sends a message's whole answer (nothing when every part is silent),
    /// or keeps it until its pacing hold is over (the pacer holds nothing
    /// once the drain has begun). Either way its in-flight slot goes back
    /// now.
    fn answer(&mut self, assembly: Assembly) -> Result<(), WsClose> {
        let Assembly {
            batch,
            slots,
            hold_until,
            ..
        } = assembly;
        let Some(body) = plan::answer(slots, batch) else {
            return Ok(());
        };
        let hold = match (hold_until, &self.conn.shared.pacer) {
            (Some(end), Some(pacer)) => pacer.hold_until(end),
            _ => None,
        };
        match hold {
            Some(hold) => {
                self.held.push(HeldAnswer {
                    hold,
                    body: Some(body),
                });
                Ok(())
            }
            None => self.send_client(body, WsSent::Answer),
        }
    }

    /// Sends every held answer at once (a closing session).
    fn flush_held(&mut self) -> Result<(), WsClose> {
        let bodies: Vec<Bytes> = self
            .held
            .iter_mut()
            .filter_map(|held| held.body.take())
            .collect();
        self.held.clear();
        for body in bodies {
            self.send_client(body, WsSent::Answer)?;
        }
        Ok(())
    }

    /// Frames `message` to the client: sent now if the socket takes it,
    /// else held in the socket's bounded buffer until it is writable.
    fn frame_to_client(&mut self, message: Message) -> Result<(), WsClose> {
        self.client.send(message).map_err(|e| match e {
            WsError::WriteBufferFull(_) => WsClose::SlowReader,
            _ => WsClose::Client,
        })
    }

    fn send_client(&mut self, body: Bytes, kind: WsSent) -> Result<(), WsClose> {
        let Ok(text) = Utf8Bytes::try_from(body) else {
            return Ok(());
        };
        self.frame_to_client(Message::Text(text))?;
        self.last_activity = Instant::now();
        self.conn.shared.metrics.websocket.sent(kind);
        Ok(())
    }

    /// Ends the session for `reason` with the close frame it calls for.
    async fn end(self, reason: WsClose) -> WsClose {
        match reason {
            WsClose::Upstream => {
                self.close(reason, CloseCode::Error, "upstream closed")
                    .await
            }
            WsClose::NodeOut => {
                self.close(
                    reason,
                    CloseCode::Restart,
                    "upstream node out of service: reconnect",
                )
                .await
            }
            WsClose::TooBig => self.close(reason, CloseCode::Size, "message too big").await,
            WsClose::FrameRate => {
                self.close(reason, CloseCode::Policy, "frame rate exceeded")
                    .await
            }
            WsClose::Binary => {
                self.close(
                    reason,
                    CloseCode::Unsupported,
                    "binary messages must hold UTF-8 JSON",
                )
                .await
            }
            WsClose::Protocol => {
                self.close(reason, CloseCode::Protocol, "protocol error")
                    .await
            }
            WsClose::SlowReader => {
                // The writer is stuck on the client: drop the connection.
                let Session { client, own, .. } = self;
                drop(client);
                let _ = tokio::time::timeout(CLOSE_FLUSH, close_all(own)).await;
                reason
            }
            _ => self.close(reason, CloseCode::Normal, "").await,
        }
    }

    /// Sends a close frame each way and waits briefly for them to go out;
    /// before it, the answers held for pacing (unless the client closed).
    async fn close(mut self, reason: WsClose, code: CloseCode, why: &'static str) -> WsClose {
        if reason != WsClose::Client {
            let _ = self.flush_held();
        }
        let frame = CloseFrame {
            code,
            reason: Utf8Bytes::from_static(why),
        };
        let Session {
            mut client, own, ..
        } = self;
        let both = async {
            // A client that closed gets the reply tungstenite queued to
            // its close frame; any other gets ours.
            if reason == WsClose::Client {
                let _ = client.flush().await;
            } else {
                let _ = client.close(Some(frame)).await;
            }
            close_all(own).await;
        };
        let _ = tokio::time::timeout(CLOSE_FLUSH, both).await;
        reason
    }
}

/// The next event of the session's lane (never, without one).
async fn lane_event(lane: &mut Option<mpsc::UnboundedReceiver<Event>>) -> Option<Event> {
    match lane {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// A message's whole answer waiting out its client's pacing hold; yields
/// the answer (taken once) when the hold is over.
struct HeldAnswer {
    hold: Hold,
    body: Option<Bytes>,
}

impl Future for HeldAnswer {
    type Output = Option<Bytes>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Bytes>> {
        let this = self.get_mut();
        std::task::ready!(this.hold.poll_over(cx));
        std::task::Poll::Ready(this.body.take())
    }
}
