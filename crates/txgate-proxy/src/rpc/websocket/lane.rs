//! Lanes: one shared socket per worker thread and node, carrying the
//! plain calls of every client session on that worker to that node
//! (`websocket.shared_upstream`). A worker's lanes share one table of
//! seats, so an id names its session whichever node answers it; each node
//! has its own queue, socket and task, started on its first call.
//!
//! A call that opens or closes no subscription needs no socket of its own:
//! its answer comes back under txgate's id, whatever socket it travels on.
//! Sent on the worker's lane, the calls of the sessions that the worker
//! serves in one turn go out in one write, and their answers come back in
//! one read, where a socket per session pays a send and a receive per
//! message on each side, and so does the node.
//!
//! A lane id carries the session's slot in its low bits, so an answer is
//! routed without a table of calls; the rest of the id is the lane's
//! sequence, so a late answer for an ended session is never taken for a
//! call of the session that got its slot after it.
//!
//! Only calls whose answers are small go on the lane ([`carries`]), alone
//! or in batches of at most [`MAX_BATCH`]: subscriptions stay on the
//! session's own socket (their notifications belong to it, and a node's
//! caps per connection must count one client), and so do calls whose
//! answers can be large (logs, blocks, traces), so that no client can hold
//! the shared socket with one huge answer. The lane reads messages up to
//! [`MIN_MESSAGE_CAP`] (or `upstream.max_response_bytes`, if larger), above
//! what its calls return under a node's gas cap (a node without one can
//! be made to exceed it, failing the lane: HEURISTICS.md); an answer over
//! `upstream.max_response_bytes` fails its own message, not the lane.
//!
//! A node's lane fails as a whole (its socket closes, errs, or stays
//! silent a whole ping interval, or cannot be opened): the calls sent on
//! it until then are answered -32603 by their sessions, which stay open,
//! and a call after it opens a new socket, a pause after the failure at the
//! soonest. Each failure starts a new generation of that node's lane: a
//! call queued after it is not among those answered, and the worker's
//! lanes to other nodes go on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_util::sync::CancellationToken;
use txgate_jsonrpc::encode::{self, UpstreamBatch};

use super::io::{Socket, Turn, io_or_flushed};
use super::{Settings, connect_upstream};
use crate::metrics::{Metrics, UpstreamFailure};

/// Bits of a lane id that name the session's slot: a lane seats this many
/// sessions at once (more take their own socket, as with lanes off).
const SLOT_BITS: u32 = 20;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// The sequence's bits: ids stay below 2^53, exact even for a node or a
/// gateway that reads numbers as doubles (the sequence wraps after 2^33
/// calls, long after any call of the first pass has been answered).
const SEQ_MASK: u64 = (1 << (53 - SLOT_BITS)) - 1;

/// Calls a batch may hold to travel on a lane: a few answers of the
/// largest kind carried (an `eth_call`'s return data, bounded by its gas)
/// stay far below [`MIN_MESSAGE_CAP`].
pub(super) const MAX_BATCH: usize = 4;

/// The least a lane reads in one message, whatever
/// `upstream.max_response_bytes` says: an answer between the two is
/// refused alone.
pub(super) const MIN_MESSAGE_CAP: usize = 128 * 1024 * 1024;

/// The pause after a lane's socket failed to open, before the next try.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How long HTTP calls keep to the pool after a node's lane failed to
/// open (WebSocket sessions, which have no pool, wait only the pause).
pub(super) const UNREACHABLE_FOR: Duration = Duration::from_secs(10);

/// A lane's liveness check when `websocket.ping_interval_ms` is 0: a
/// half-open socket must not time every call of the worker out for ever.
const DEFAULT_PING: Duration = Duration::from_secs(30);

/// How long a stopping lane waits for its close frame to go out.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// Whether a call of `method` may travel on a lane: its answer is small and
/// bounded, and it belongs to no connection.
pub(super) fn carries(method: &str) -> bool {
    matches!(
        method,
        "eth_chainId"
            | "net_version"
            | "net_listening"
            | "net_peerCount"
            | "web3_clientVersion"
            | "web3_sha3"
            | "eth_blockNumber"
            | "eth_syncing"
            | "eth_gasPrice"
            | "eth_maxPriorityFeePerGas"
            | "eth_blobBaseFee"
            | "eth_feeHistory"
            | "eth_getBalance"
            | "eth_getTransactionCount"
            | "eth_getStorageAt"
            | "eth_getCode"
            | "eth_call"
            | "eth_estimateGas"
            | "eth_createAccessList"
            | "eth_getTransactionByHash"
            | "eth_getTransactionReceipt"
            | "eth_sendRawTransaction"
            | "eth_sendRawTransactionConditional"
    )
}

/// What a lane tells a session.
#[derive(Debug)]
pub(super) enum Event {
    /// A message from the node for this session's calls.
    Answer(Utf8Bytes),
    /// The socket to `node` failed: the calls queued for it in
    /// `generation` or an earlier one are owed an error. Those of
    /// `generation` whose [`Ticket::take`] is `taken` or more were still
    /// queued (or the socket never opened): they reached nowhere, so a
    /// caller that has another way to the node may send them there.
    Down {
        /// The node's index.
        node: usize,
        /// The generation that failed.
        generation: u64,
        /// The node's queue had been taken this many times when it failed.
        taken: u64,
    },
    /// The answer to the call with this id was over
    /// `upstream.max_response_bytes`: its message is owed an error.
    TooLarge(u64),
}

/// The lanes of the process: per worker thread, one slot table and one
/// socket per node, each opened on first use.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    by_thread: Mutex<HashMap<ThreadId, Arc<Lane>>>,
}

impl Lanes {
    /// A seat on this thread's lanes; `None` when every slot is taken.
    pub(super) fn join(
        &self,
        settings: &Arc<Settings>,
        stop: &CancellationToken,
        metrics: &Arc<Metrics>,
    ) -> Option<(Seat, mpsc::UnboundedReceiver<Event>)> {
        // Draining: a lane may end with its last session; a new one keeps
        // to its own socket.
        if stop.is_cancelled() {
            return None;
        }
        self.here(settings, stop, metrics).seat()
    }

    /// This thread's lanes, made on first use.
    pub(super) fn here(
        &self,
        settings: &Arc<Settings>,
        stop: &CancellationToken,
        metrics: &Arc<Metrics>,
    ) -> Arc<Lane> {
        lock(&self.by_thread)
            .entry(std::thread::current().id())
            .or_insert_with(|| {
                Arc::new(Lane::new(
                    settings.nodes.len(),
                    Some(Driver {
                        settings: settings.clone(),
                        stop: stop.clone(),
                        metrics: metrics.clone(),
                    }),
                ))
            })
            .clone()
    }

    /// Ends this thread's lanes before its runtime is dropped: each writes
    /// a close frame on its socket (whatever sessions are left: the
    /// runtime's end cuts them anyway), and opens none if it has none; this
    /// waits for them, at most [`CLOSE_FLUSH`] and a little (a connect
    /// under way is not interrupted: past that wait the runtime's end cuts
    /// it), so each node sees a WebSocket close rather than a connection
    /// that just ends.
    pub(crate) async fn close_here(&self) {
        let Some(lane) = lock(&self.by_thread).remove(&std::thread::current().id()) else {
            return;
        };
        lane.closing.store(true, Ordering::Relaxed);
        lane.wake_all();
        let tasks: Vec<JoinHandle<()>> = lock(&lane.tasks)
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        let all = futures_util::future::join_all(tasks);
        let _ = tokio::time::timeout(CLOSE_FLUSH + Duration::from_millis(100), all).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a lane's sockets are opened and run with.
#[derive(Debug)]
struct Driver {
    settings: Arc<Settings>,
    stop: CancellationToken,
    metrics: Arc<Metrics>,
}

/// One worker's lanes: the routes of its seated sessions, shared by every
/// node's socket (an id names its session whatever node answers it), and a
/// queue per node.
#[derive(Debug)]
pub(super) struct Lane {
    state: Mutex<State>,
    /// Per node: something to send, or a seat given back.
    wakes: Vec<Notify>,
    /// Per node: the task driving its socket, started on the first send.
    tasks: Mutex<Vec<Option<JoinHandle<()>>>>,
    /// Per node: whether its task was started (a task ends only with the
    /// worker or the drain, when no seat is given any more: it is never
    /// started twice). Read on every send, without the lock.
    started: Vec<AtomicBool>,
    seq: AtomicU64,
    /// The worker is ending: close the sockets now, seats or not.
    closing: AtomicBool,
    /// Per node: when its socket last failed to open (ms since `epoch`,
    /// 0: it has not, or it opened since). HTTP calls keep to the pool
    /// for a while after ([`Lane::reachable`]).
    refused_at: Vec<AtomicU64>,
    epoch: std::time::Instant,
    /// Per node: its socket is open (HTTP calls go on it only then).
    open: Vec<AtomicBool>,
    /// Per node: an HTTP call found the socket closed: open it, with
    /// nothing queued (the calls meanwhile go over the pool).
    wanted: Vec<AtomicBool>,
    /// `None` in unit tests: nothing is started.
    driver: Option<Driver>,
    /// HTTP calls of this worker between their offer to a lane and their
    /// answer, on a lane or the pool (`http_lane::Overlap`).
    pub(super) http_calls: AtomicUsize,
}

#[derive(Debug)]
struct State {
    /// Per node, what is queued for it.
    queues: Vec<Queue>,
    /// Each seated session's way back, by slot.
    routes: HashMap<u64, mpsc::UnboundedSender<Event>>,
    free: Vec<u64>,
    next_slot: u64,
}

/// Messages for one node, written together on its task's next turn.
#[derive(Debug, Default)]
struct Queue {
    out: Vec<Utf8Bytes>,
    out_bytes: usize,
    /// Failures of the node's socket so far: what a queued call is sent
    /// under.
    generation: u64,
    /// Times the socket took what was queued (never reset): a message
    /// queued now goes in the next take.
    taken: u64,
}

/// Where a message was queued: the generation of the node's socket, and
/// the number of takes before its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket {
    /// [`Queue::generation`] when queued.
    pub(super) generation: u64,
    /// [`Queue::taken`] when queued.
    pub(super) take: u64,
}

impl Ticket {
    /// Whether a failure of the node's socket (`Event::Down`) left this
    /// message unwritten: it was still queued, in the failed generation.
    pub(super) fn unsent(self, generation: u64, taken: u64) -> bool {
        self.generation == generation && self.take >= taken
    }
}

/// A session's place on its worker's lanes: its slot, given back when
/// dropped.
#[derive(Debug)]
pub(super) struct Seat {
    lane: Arc<Lane>,
    slot: u64,
}

impl Lane {
    fn new(nodes: usize, driver: Option<Driver>) -> Lane {
        Lane {
            state: Mutex::new(State {
                queues: (0..nodes).map(|_| Queue::default()).collect(),
                routes: HashMap::new(),
                free: Vec::new(),
                next_slot: 0,
            }),
            wakes: (0..nodes).map(|_| Notify::new()).collect(),
            tasks: Mutex::new((0..nodes).map(|_| None).collect()),
            started: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            seq: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            refused_at: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            epoch: std::time::Instant::now(),
            open: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            wanted: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            driver,
            http_calls: AtomicUsize::new(0),
        }
    }

    pub(super) fn seat(self: &Arc<Self>) -> Option<(Seat, mpsc::UnboundedReceiver<Event>)> {
        let mut state = lock(&self.state);
        let slot = match state.free.pop() {
            Some(slot) => slot,
            None if state.next_slot <= SLOT_MASK => {
                state.next_slot += 1;
                state.next_slot - 1
            }
            None => return None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        state.routes.insert(slot, tx);
        Some((
            Seat {
                lane: self.clone(),
                slot,
            },
            rx,
        ))
    }

    /// Whether an HTTP call may go on node `node`'s lane: its socket is
    /// open. When it is not, it is opened in the background (unless it
    /// failed to open within the last [`UNREACHABLE_FOR`]: a node without
    /// a WebSocket endpoint costs one try per worker that often), and the
    /// call goes over the pool: an HTTP call never waits for a lane to
    /// open.
    pub(super) fn ready_for_http(self: &Arc<Self>, node: usize) -> bool {
        let Some(open) = self.open.get(node) else {
            return false;
        };
        if open.load(Ordering::Acquire) {
            return true;
        }
        let at = self.refused_at[node].load(Ordering::Relaxed);
        let refused_lately =
            at != 0 && self.millis().saturating_sub(at) < UNREACHABLE_FOR.as_millis() as u64;
        if !refused_lately && !self.wanted[node].swap(true, Ordering::AcqRel) {
            self.start(node);
            self.wakes[node].notify_one();
        }
        false
    }

    fn millis(&self) -> u64 {
        // Never 0: 0 means "not refused".
        (self.epoch.elapsed().as_millis() as u64).max(1)
    }

    fn wake_all(&self) {
        for wake in &self.wakes {
            wake.notify_one();
        }
    }

    /// Starts node `node`'s task if it was never started (on the calling
    /// session's runtime: the worker's).
    fn start(self: &Arc<Self>, node: usize) {
        let Some(driver) = &self.driver else {
            return;
        };
        if self
            .started
            .get(node)
            .is_none_or(|s| s.load(Ordering::Acquire))
        {
            return;
        }
        let mut tasks = lock(&self.tasks);
        let Some(task) = tasks.get_mut(node) else {
            return;
        };
        // Rechecked under the lock: `close_here` takes the handles under it
        // after setting `closing`, so no task escapes it.
        if self.closing.load(Ordering::Relaxed) || self.started[node].swap(true, Ordering::AcqRel) {
            return;
        }
        *task = Some(tokio::spawn(drive(
            self.clone(),
            node,
            driver.settings.clone(),
            driver.stop.clone(),
            driver.metrics.clone(),
        )));
    }
}

impl Seat {
    /// A new upstream id for one of this session's calls.
    pub(super) fn next_id(&self) -> usize {
        loop {
            let seq = self.lane.seq.fetch_add(1, Ordering::Relaxed) & SEQ_MASK;
            let id = (seq << SLOT_BITS) | self.slot;
            // 0 is the session's own: its unsubscribe of a late
            // subscription.
            if id != 0 {
                return id as usize;
            }
        }
    }

    /// Queues `text` for node `node`: where it was queued, or `None` when
    /// that queue is over `max_bytes` (the node has not taken the last
    /// batch yet, or the socket is opening): the message's calls are then
    /// refused, not queued.
    pub(super) fn send(&self, node: usize, text: Utf8Bytes, max_bytes: usize) -> Option<Ticket> {
        let mut state = lock(&self.lane.state);
        let queue = state.queues.get_mut(node)?;
        if !queue.out.is_empty() && queue.out_bytes + text.len() > max_bytes {
            return None;
        }
        queue.out_bytes += text.len();
        queue.out.push(text);
        let ticket = Ticket {
            generation: queue.generation,
            take: queue.taken,
        };
        drop(state);
        self.lane.start(node);
        self.lane.wakes[node].notify_one();
        Some(ticket)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = lock(&self.lane.state);
        if state.routes.remove(&self.slot).is_some() {
            state.free.push(self.slot);
        }
        drop(state);
        // A stopping lane ends with its last session (otherwise nothing to
        // tell its tasks: an HTTP call's seat lasts one call).
        let stopping = self
            .lane
            .driver
            .as_ref()
            .is_some_and(|d| d.stop.is_cancelled());
        if stopping || self.lane.closing.load(Ordering::Relaxed) {
            self.lane.wake_all();
        }
    }
}

/// Runs the lane of `node` until txgate stops and its worker's last
/// session has ended: opens its socket when there is something to send,
/// writes what is queued in one go each time the socket has taken the last
/// batch, routes what the node answers, and pings the node.
async fn drive(
    lane: Arc<Lane>,
    node: usize,
    settings: Arc<Settings>,
    stop: CancellationToken,
    metrics: Arc<Metrics>,
) {
    let ws = &metrics.websocket;
    let endpoint = &settings.nodes[node];
    let wake = &lane.wakes[node];
    let ping_every = settings.ping_interval.unwrap_or(DEFAULT_PING);
    let ended = || {
        lane.closing.load(Ordering::Relaxed)
            || (stop.is_cancelled() && lock(&lane.state).routes.is_empty())
    };
    let queued = || lock(&lane.state).queues[node].out.is_empty();
    let wanted = || lane.wanted[node].load(Ordering::Acquire);
    loop {
        // Nothing to send and no HTTP call asking for it: no socket to
        // open.
        while queued() && !wanted() {
            if ended() {
                return;
            }
            tokio::select! {
                () = wake.notified() => {}
                () = stop.cancelled(), if !stop.is_cancelled() => {}
            }
        }
        // A worker ending opens no socket only to close it.
        if lane.closing.load(Ordering::Relaxed) {
            return;
        }
        let mut socket = match connect_upstream(&settings, node, settings.lane_codec).await {
            Ok(socket) => Socket::new(socket),
            Err((failure, e)) => {
                lane.wanted[node].store(false, Ordering::Release);
                metrics.upstream.failure(failure);
                // At most once a pause per worker and node: clients cannot
                // fill the log (a TLS failure is logged by the connector).
                if failure == UpstreamFailure::Tls {
                    tracing::debug!(error = %e, node = %endpoint.name, "upstream WebSocket lane unavailable");
                } else {
                    tracing::warn!(error = %e, node = %endpoint.name, "upstream WebSocket lane unavailable");
                }
                if let Some(at) = lane.refused_at.get(node) {
                    at.store(lane.millis(), Ordering::Relaxed);
                }
                down(&lane, node, &metrics);
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        ws.lane_opened.inc();
        ws.lanes_open.inc();
        if let Some(at) = lane.refused_at.get(node) {
            at.store(0, Ordering::Relaxed);
        }
        lane.open[node].store(true, Ordering::Release);
        lane.wanted[node].store(false, Ordering::Release);
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut silent = false;
        let why = loop {
            if ended() {
                lane.open[node].store(false, Ordering::Release);
                let _ = tokio::time::timeout(CLOSE_FLUSH, socket.close(None)).await;
                ws.lanes_open.dec();
                return;
            }
            // A node that has not taken the last batch gets no more: the
            // queue stays in `out`, under its bound.
            if socket.flushed() {
                let out = take(&lane, node);
                // Framed into the socket's buffer; written on the poll
                // below, all in one go.
                if out
                    .into_iter()
                    .any(|text| socket.send(Message::Text(text)).is_err())
                {
                    break "the node stopped reading";
                }
            }
            tokio::select! {
                () = wake.notified() => {}
                () = stop.cancelled(), if !stop.is_cancelled() => {}
                turn = io_or_flushed(&mut socket) => match turn {
                    Turn::Flushed => {}
                    Turn::Message(message) => {
                        silent = false;
                        match message {
                            Some(Ok(Message::Text(text))) => {
                                route(&lane, text, settings.max_response_bytes);
                            }
                            Some(Ok(Message::Close(_))) => break "the node closed it",
                            Some(Err(_)) | None => break "the connection failed",
                            // Pings are answered by tungstenite; a pong
                            // shows the node is there.
                            Some(Ok(_)) => {}
                        }
                    }
                },
                _ = ping.tick() => {
                    if silent {
                        break "the node was silent a whole ping interval";
                    }
                    if socket.send(Message::Ping(Bytes::from_static(b"txgate"))).is_err() {
                        break "the node stopped reading";
                    }
                    silent = true;
                }
            }
        };
        // At most once a pause per worker and node.
        tracing::warn!(why, node = %endpoint.name, "upstream WebSocket lane failed: its calls answered -32603");
        lane.open[node].store(false, Ordering::Release);
        ws.lanes_open.dec();
        down(&lane, node, &metrics);
        // A node that closes each new socket at once (a cap on connections
        // per peer) is not hammered.
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// What is queued for node `node`, for its socket: a message queued from
/// now on goes in the next take.
fn take(lane: &Lane, node: usize) -> Vec<Utf8Bytes> {
    let mut state = lock(&lane.state);
    let queue = &mut state.queues[node];
    if queue.out.is_empty() {
        return Vec::new();
    }
    queue.out_bytes = 0;
    queue.taken += 1;
    std::mem::take(&mut queue.out)
}

/// Gives a message from a node to the session its id names (a batch's
/// answers are all one session's); one over `max_bytes`, only its id.
fn route(lane: &Lane, text: Utf8Bytes, max_bytes: usize) {
    let id = match encode::parse_upstream_batch(text.as_bytes()) {
        Some(UpstreamBatch::Whole(response)) => response.index(),
        Some(UpstreamBatch::Responses(responses)) => responses.iter().find_map(|r| r.index()),
        None => None,
    };
    let Some(id) = id else {
        tracing::debug!("upstream WebSocket lane sent a message without an id of ours");
        return;
    };
    let id = id as u64;
    let event = match text.len() > max_bytes {
        true => Event::TooLarge(id),
        false => Event::Answer(text),
    };
    let state = lock(&lane.state);
    if let Some(tx) = state.routes.get(&(id & SLOT_MASK)) {
        let _ = tx.send(event);
    }
}

/// Node `node`'s socket failed (or never opened): every seated session is
/// told which of its generations failed and how many takes the socket had
/// made, and what was queued for it is dropped (its calls are among those
/// the sessions answer, as never written); what is queued from now on is
/// the next generation's.
fn down(lane: &Lane, node: usize, metrics: &Metrics) {
    metrics.websocket.lane_failed.inc();
    let mut state = lock(&lane.state);
    let Some(queue) = state.queues.get_mut(node) else {
        return;
    };
    queue.out.clear();
    queue.out_bytes = 0;
    let failed = queue.generation;
    let taken = queue.taken;
    queue.generation += 1;
    for tx in state.routes.values() {
        let _ = tx.send(Event::Down {
            node,
            generation: failed,
            taken,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_seat_and_a_late_answer_finds_no_new_call() {
        let lane = Arc::new(Lane::new(2, None));
        let (first, _) = lane.seat().unwrap();
        let (second, _) = lane.seat().unwrap();
        let a = first.next_id() as u64;
        let b = second.next_id() as u64;
        assert_eq!(a & SLOT_MASK, first.slot);
        assert_eq!(b & SLOT_MASK, second.slot);
        assert_ne!(first.slot, second.slot);
        assert!(a < 1 << 53 && b < 1 << 53);
        // The first session ends; a new one takes its slot, but none of
        // its ids is the ended session's.
        let old = first.slot;
        drop(first);
        let (third, _) = lane.seat().unwrap();
        assert_eq!(third.slot, old);
        let ids: Vec<u64> = (0..1000).map(|_| third.next_id() as u64).collect();
        assert!(ids.iter().all(|id| id & SLOT_MASK == old && *id != a));
        // The sequence wraps below 2^53, never to id 0, keeping the slot.
        lane.seq.store(SEQ_MASK, Ordering::Relaxed);
        let last = third.next_id() as u64;
        assert_eq!(last, (SEQ_MASK << SLOT_BITS) | old);
        assert!(last < 1 << 53);
        assert_eq!(third.next_id() as u64 & SLOT_MASK, old);
        assert!((0..10).all(|_| third.next_id() != 0));
    }

    fn answer(id: usize, result: &str) -> Utf8Bytes {
        Utf8Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":"{result}"}}"#
        ))
    }

    #[test]
    fn answers_go_to_their_session_and_a_failure_to_every_one() {
        let lane = Arc::new(Lane::new(2, None));
        let (first, mut first_events) = lane.seat().unwrap();
        let (second, mut second_events) = lane.seat().unwrap();
        route(&lane, answer(second.next_id(), "0x1"), 1024);
        let to_first = first.next_id();
        route(
            &lane,
            Utf8Bytes::from(format!(
                r#"[{{"jsonrpc":"2.0","id":{to_first},"result":"0x2"}}]"#
            )),
            1024,
        );
        // Not JSON-RPC, or no id of a seated session: dropped.
        route(&lane, Utf8Bytes::from_static("not json"), 1024);
        route(
            &lane,
            answer(((7u64 << SLOT_BITS) | 999) as usize, "0x3"),
            1024,
        );
        match second_events.try_recv() {
            Ok(Event::Answer(text)) => assert!(text.as_str().contains("0x1")),
            other => panic!("{other:?}"),
        }
        match first_events.try_recv() {
            Ok(Event::Answer(text)) => assert!(text.as_str().contains("0x2")),
            other => panic!("{other:?}"),
        }
        assert!(first_events.try_recv().is_err());
        assert!(second_events.try_recv().is_err());
        // An answer over the bound: only its id, to its session.
        let big = first.next_id();
        route(&lane, answer(big, &"f".repeat(2000)), 1024);
        assert!(matches!(first_events.try_recv(), Ok(Event::TooLarge(id)) if id == big as u64));
        // A queued message is dropped with the socket; both are told which
        // generation failed, and what is queued next is the next one's.
        let generation = |t: Option<Ticket>| t.map(|t| t.generation);
        assert_eq!(
            generation(first.send(0, Utf8Bytes::from_static("{}"), 1024)),
            Some(0)
        );
        assert_eq!(
            generation(first.send(1, Utf8Bytes::from_static("{}"), 1024)),
            Some(0)
        );
        down(&lane, 0, &Metrics::new());
        assert!(lock(&lane.state).queues[0].out.is_empty());
        let down_0 = |e| {
            matches!(
                e,
                Ok(Event::Down {
                    node: 0,
                    generation: 0,
                    taken: 0
                })
            )
        };
        assert!(down_0(first_events.try_recv()));
        assert!(down_0(second_events.try_recv()));
        assert_eq!(
            generation(second.send(0, Utf8Bytes::from_static("{}"), 1024)),
            Some(1)
        );
        // The other node's queue and generation are its own.
        assert_eq!(lock(&lane.state).queues[1].out.len(), 1);
        assert_eq!(
            generation(second.send(1, Utf8Bytes::from_static("{}"), 1024)),
            Some(0)
        );
        // A node the lane does not know takes nothing.
        assert_eq!(second.send(2, Utf8Bytes::from_static("{}"), 1024), None);
    }

    /// The generation and takes of the failure `events` was told of next.
    fn told_down(events: &mut mpsc::UnboundedReceiver<Event>) -> (u64, u64) {
        match events.try_recv() {
            Ok(Event::Down {
                generation, taken, ..
            }) => (generation, taken),
            other => panic!("no failure told: {other:?}"),
        }
    }

    #[test]
    fn a_failure_tells_what_its_socket_took_from_what_was_still_queued() {
        let lane = Arc::new(Lane::new(1, None));
        let (seat, mut events) = lane.seat().unwrap();
        let text = || Utf8Bytes::from_static("{}");
        let first = seat.send(0, text(), 1024).unwrap();
        let second = seat.send(0, text(), 1024).unwrap();
        // The socket takes both in one go; a third waits for the next take.
        assert_eq!(take(&lane, 0).len(), 2);
        assert!(take(&lane, 0).is_empty(), "nothing queued: no take counted");
        let third = seat.send(0, text(), 1024).unwrap();
        down(&lane, 0, &Metrics::new());
        let (generation, taken) = told_down(&mut events);
        assert!(
            !first.unsent(generation, taken),
            "taken: it may have been written"
        );
        assert!(!second.unsent(generation, taken));
        assert!(
            third.unsent(generation, taken),
            "still queued: written nowhere"
        );
        // The next generation's socket fails to open: what was queued for
        // it was taken by none.
        let fourth = seat.send(0, text(), 1024).unwrap();
        assert_eq!(fourth.generation, 1);
        down(&lane, 0, &Metrics::new());
        let (generation, taken) = told_down(&mut events);
        assert_eq!(generation, 1);
        assert!(fourth.unsent(generation, taken));
        // A call of an earlier generation is not among a later one's
        // unwritten calls (it was answered at its own failure).
        assert!(!third.unsent(generation, taken));
    }

    #[test]
    fn the_queue_is_bounded_but_takes_one_message_whatever_its_size() {
        let lane = Arc::new(Lane::new(2, None));
        let (seat, _) = lane.seat().unwrap();
        assert!(seat.send(0, Utf8Bytes::from("x".repeat(100)), 10).is_some());
        assert!(seat.send(0, Utf8Bytes::from_static("y"), 10).is_none());
        // Another node's queue has its own bound.
        assert!(seat.send(1, Utf8Bytes::from_static("y"), 10).is_some());
        lock(&lane.state).queues[0].out.clear();
        lock(&lane.state).queues[0].out_bytes = 0;
        assert!(seat.send(0, Utf8Bytes::from_static("y"), 10).is_some());
    }

    #[test]
    fn only_small_answers_travel_on_a_lane() {
        for method in ["eth_chainId", "eth_call", "eth_sendRawTransaction"] {
            assert!(carries(method), "{method}");
        }
        for method in [
            "eth_subscribe",
            "eth_unsubscribe",
            "eth_getLogs",
            "eth_getBlockByNumber",
            "debug_traceTransaction",
            "eth_newFilter",
        ] {
            assert!(!carries(method), "{method}");
        }
    }
}
