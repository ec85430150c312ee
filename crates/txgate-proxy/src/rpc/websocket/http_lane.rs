//! HTTP clients on the lanes (`websocket.http_lanes`): a single plain call
//! of an HTTP client ([`lane::carries`], with an id), or a batch of at most
//! [`MAX_CALLS`] of them, goes to its node on the worker's lane, where the calls of every client the worker serves in
//! one turn are written together and their answers read together, in
//! place of a pooled HTTP/1.1 connection per call in flight, each paying a
//! send and a receive on both sides. A generic HTTP proxy cannot do this:
//! HTTP/1.1 carries one request per connection at a time.
//!
//! The call takes a seat for as long as it waits: its upstream id names
//! the seat (and the lane's sequence), and the node's answer comes back to
//! it alone. A lone call's answer is the node's message with the caller's
//! id spliced in where the node wrote txgate's: every other byte is the
//! node's. A batch's answers are put under the calls' positions, as the
//! pool's answer to the batch would be, for the batch path to settle.
//!
//! The rules are the lane's, with one difference where an HTTP call has a
//! way a WebSocket session does not, the pool:
//! - a call takes the lane only while at least
//!   `websocket.http_lane_min_overlap` other HTTP calls of its worker that
//!   lanes carry are in flight, over a lane or the pool (1 by default): a
//!   lane saves by writing overlapping calls together, and a call alone
//!   gets its answer sooner over the pool, one task hop fewer
//!   ([`Overlap`]);
//! - a call takes the lane only while its socket is open; otherwise it
//!   goes over the pool and the lane is opened in the background (not for
//!   [`lane::UNREACHABLE_FOR`] after a failed open: a node without a
//!   WebSocket endpoint), so no call waits for a connect;
//! - a lane that fails after its socket took the call answers it -32603
//!   (it may have reached the node: a submission is never sent twice; the
//!   caller asks a read again elsewhere);
//! - one the socket had not taken yet when it failed (or failed to open)
//!   had been written nowhere: it goes over the pool;
//! - a lane whose queue is over its bound (the node has not taken the last
//!   batch), a message over `websocket.max_message_bytes` and a worker that
//!   is draining send over the pool too;
//! - an answer over `upstream.max_response_bytes` is refused alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use txgate_jsonrpc::Call;
use txgate_jsonrpc::encode::{self, UpstreamBatch};

use super::WebSockets;
use super::lane::{self, Event};
use crate::metrics::{Metrics, UpstreamFailure};
use crate::upstream::Reply;
use crate::upstream::group::is_submission;

/// Calls a batch may hold to go on a lane (the lanes' own bound).
pub(crate) const MAX_CALLS: usize = lane::MAX_BATCH;

/// What became of a call queued on a lane.
#[derive(Debug)]
pub(crate) enum LaneCall {
    /// The node's answer, the caller's id in it.
    Answered(Reply),
    /// Written, then failed: the answer is this failure.
    Failed(UpstreamFailure),
    /// The lane failed before it was written: send it over the pool.
    Unsent,
}

/// One HTTP call, from its offer to a lane to its answer (the lane's or
/// the pool's): its worker's lanes, and how many other calls of that
/// worker were in flight when it started. Counted per worker, because a
/// lane is: a call alone on its worker would be written alone, whatever
/// the other workers do (and the count stays on the worker's core).
#[derive(Debug)]
pub(crate) struct Overlap {
    lane: Option<Arc<lane::Lane>>,
    others: usize,
}

impl Drop for Overlap {
    fn drop(&mut self) {
        if let Some(lane) = &self.lane {
            lane.http_calls.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl WebSockets {
    /// Counts an HTTP call in flight on this worker until the guard is
    /// dropped: hold it until the call is answered, whichever way it went.
    /// A worker that is draining counts none (its calls take no lane).
    pub(crate) fn overlap(&self, metrics: &Arc<Metrics>) -> Overlap {
        if !self.settings.http_lanes || self.stop.is_cancelled() {
            return Overlap {
                lane: None,
                others: 0,
            };
        }
        let lane = self.lanes.here(&self.settings, &self.stop, metrics);
        let others = lane.http_calls.fetch_add(1, Ordering::Relaxed);
        Overlap {
            lane: Some(lane),
            others,
        }
    }

    /// Whether an HTTP call of `method` may go on a lane: one of the
    /// lanes' methods, and a submission only with
    /// `websocket.http_lane_submissions`.
    pub(crate) fn http_lane_carries(&self, method: &str) -> bool {
        self.settings.http_lanes
            && lane::carries(method)
            && (self.settings.http_lane_submissions || !is_submission(method))
    }

    /// Queues `calls` for node `node` on this worker's lane, each with its
    /// params (`None`: its own) and the id the caller's answer must carry
    /// (the caller's own for a lone call, the call's position in a batch):
    /// one call alone, or (`batch`) an array of at most
    /// [`lane::MAX_BATCH`], one call included. `None` (counted as pooled): send them over the
    /// pool, because too few other HTTP calls are in flight (`overlap`),
    /// the worker is draining, the lane is not open (it is
    /// then opened in the background), it has no free seat, the message is
    /// over `websocket.max_message_bytes`, the lane's queue is full, or a
    /// call is a notification.
    pub(crate) fn http_send(
        &self,
        node: usize,
        calls: &[(&Call<'_>, Option<&str>, String)],
        batch: bool,
        overlap: &Overlap,
        metrics: &Arc<Metrics>,
    ) -> Option<Sent> {
        let sent = match &overlap.lane {
            Some(here) if overlap.others >= self.settings.http_lane_min_overlap => {
                self.try_send(here, node, calls, batch, metrics)
            }
            _ => None,
        };
        if sent.is_none() {
            metrics
                .websocket
                .http_lane
                .pooled
                .inc_by(calls.len() as u64);
        }
        sent
    }

    fn try_send(
        &self,
        here: &Arc<lane::Lane>,
        node: usize,
        calls: &[(&Call<'_>, Option<&str>, String)],
        batch: bool,
        metrics: &Arc<Metrics>,
    ) -> Option<Sent> {
        if calls.is_empty()
            || calls.len() > lane::MAX_BATCH
            || (!batch && calls.len() > 1)
            || calls.iter().any(|(call, ..)| call.is_notification())
        {
            return None;
        }
        // Draining: a new call opens no lane.
        if self.stop.is_cancelled() {
            return None;
        }
        if !here.ready_for_http(node) {
            return None;
        }
        let (seat, events) = here.seat()?;
        let mut out = Vec::with_capacity(96 * calls.len());
        let mut ids = Vec::with_capacity(calls.len());
        if batch {
            out.push(b'[');
        }
        for (n, (call, params, answer_id)) in calls.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let upstream_id = seat.next_id();
            let params = params.or(call.params.map(|p| p.get()));
            encode::write_upstream_call_params(&mut out, call, upstream_id, params);
            ids.push((upstream_id, answer_id.clone()));
        }
        if batch {
            out.push(b']');
        }
        // The lane's write buffer holds a message up to a client's largest
        // (and its queue): a larger one would fail every call on it.
        if out.len() > self.settings.lane_message_bytes {
            return None;
        }
        // Written from UTF-8 pieces: never refused.
        let text = Utf8Bytes::try_from(Bytes::from(out)).ok()?;
        let Some(ticket) = seat.send(node, text, self.settings.lane_queue_bytes) else {
            metrics.websocket.lane_queue_full.inc();
            return None;
        };
        Some(Sent {
            _seat: seat,
            events,
            ids,
            batch,
            ticket,
            node,
            call_timeout: self.settings.call_timeout,
        })
    }
}

/// Calls queued on a lane: their seat (held until they are answered) and
/// what the lane tells it.
#[derive(Debug)]
pub(crate) struct Sent {
    _seat: lane::Seat,
    events: mpsc::UnboundedReceiver<Event>,
    /// Each call's upstream id and the id its answer carries.
    ids: Vec<(usize, String)>,
    batch: bool,
    ticket: lane::Ticket,
    node: usize,
    call_timeout: Duration,
}

impl Sent {
    /// Waits for the node's answer until `timeout` (`None`:
    /// `upstream.call_timeout`): a lone call's answer with the caller's
    /// id in it; a batch's with each call's answer id in place of its
    /// upstream id (the node's error for the whole batch as it came).
    pub(crate) async fn answer(mut self, timeout: Option<Duration>, metrics: &Metrics) -> LaneCall {
        let m = &metrics.websocket.http_lane;
        let calls = self.ids.len() as u64;
        let deadline = Instant::now() + timeout.unwrap_or(self.call_timeout);
        let ours = |id: u64| self.ids.iter().any(|(upstream, _)| *upstream as u64 == id);
        loop {
            let event = match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => event,
                // The seat's route lives as long as the seat: not reached.
                Ok(None) => {
                    m.failed.inc_by(calls);
                    return LaneCall::Failed(UpstreamFailure::Io);
                }
                Err(_) => {
                    m.timeout.inc_by(calls);
                    return LaneCall::Failed(UpstreamFailure::Timeout);
                }
            };
            match event {
                Event::Answer(text) => {
                    // An answer for this seat's slot under another
                    // sequence is a late one for an earlier holder.
                    let body = match (self.batch, self.ids.first()) {
                        (false, Some((upstream, id))) => with_caller_id(&text, *upstream, id),
                        _ => with_batch_ids(&text, &self.ids),
                    };
                    if let Some(body) = body {
                        m.answered.inc_by(calls);
                        return LaneCall::Answered(Reply {
                            status: StatusCode::OK,
                            body,
                            node: self.node,
                        });
                    }
                }
                Event::TooLarge(got) if ours(got) => {
                    m.too_large.inc_by(calls);
                    return LaneCall::Failed(UpstreamFailure::TooLarge);
                }
                Event::Down {
                    node,
                    generation,
                    taken,
                } if node == self.node && self.ticket.generation <= generation => {
                    if self.ticket.unsent(generation, taken) {
                        m.pooled.inc_by(calls);
                        return LaneCall::Unsent;
                    }
                    m.failed.inc_by(calls);
                    return LaneCall::Failed(UpstreamFailure::Io);
                }
                _ => {}
            }
        }
    }
}

/// The node's answer `text` to a batch sent under `ids` (upstream id,
/// answer id): an array of its answers to these calls, each under its
/// answer id, or its error for the whole batch as it came; `None` when it
/// answers none of them.
fn with_batch_ids(text: &str, ids: &[(usize, String)]) -> Option<Bytes> {
    match encode::parse_upstream_batch(text.as_bytes())? {
        UpstreamBatch::Responses(responses) => {
            let mut out = Vec::with_capacity(text.len() + 8 * ids.len());
            out.push(b'[');
            let mut any = false;
            for response in &responses {
                let Some((_, id)) = response
                    .index()
                    .and_then(|i| ids.iter().find(|(upstream, _)| *upstream == i))
                else {
                    continue;
                };
                if any {
                    out.push(b',');
                }
                response.write_with_id(&mut out, Some(id));
                any = true;
            }
            out.push(b']');
            any.then(|| Bytes::from(out))
        }
        UpstreamBatch::Whole(response) => {
            // One of our ids: the node's error for the whole batch (one
            // with a null id names no seat: the lane cannot route it, and
            // the calls time out, as on a WebSocket session's lane).
            let ours = response
                .index()
                .is_some_and(|i| ids.iter().any(|(upstream, _)| *upstream == i));
            ours.then(|| Bytes::copy_from_slice(text.as_bytes()))
        }
    }
}

/// The node's answer `text` to the call sent as `upstream_id`, with the
/// caller's `id` where the node wrote txgate's; `None` when it answers
/// another call (or is not a lone answer).
fn with_caller_id(text: &str, upstream_id: usize, id: &str) -> Option<Bytes> {
    let Some(UpstreamBatch::Whole(answer)) = encode::parse_upstream_batch(text.as_bytes()) else {
        return None;
    };
    if answer.index() != Some(upstream_id) {
        return None;
    }
    let raw = answer.id?.get();
    // The id as the node wrote it, a slice of `text`.
    let start = (raw.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start + raw.len();
    if text.get(start..end) != Some(raw) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + id.len());
    out.extend_from_slice(&text.as_bytes()[..start]);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&text.as_bytes()[end..]);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_id_replaces_txgates_and_nothing_else_moves() {
        let text = "{\"jsonrpc\":\"2.0\",\"id\":1048577,\"result\":\"0x1\"}\n";
        let out = with_caller_id(text, 1_048_577, "\"abc\"").unwrap();
        assert_eq!(
            &out[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"result\":\"0x1\"}\n"
        );
        // The id anywhere, and spaces as the node wrote them.
        let text = "{ \"result\" : {\"id\":5}, \"id\" : 7 , \"jsonrpc\":\"2.0\"}";
        let out = with_caller_id(text, 7, "99").unwrap();
        assert_eq!(
            &out[..],
            b"{ \"result\" : {\"id\":5}, \"id\" : 99 , \"jsonrpc\":\"2.0\"}"
        );
        // Another call's answer, a batch, or not JSON: not this call's.
        assert!(with_caller_id(text, 8, "1").is_none());
        assert!(with_caller_id("[{\"id\":7,\"result\":1}]", 7, "1").is_none());
        assert!(with_caller_id("nope", 7, "1").is_none());
    }

    #[test]
    fn a_batchs_answers_go_back_under_their_positions_and_no_one_elses() {
        let ids = vec![(1_048_577, "0".to_string()), (2_097_153, "3".to_string())];
        // In any order, with an answer that is not ours and one missing.
        let text = r#"[{"jsonrpc":"2.0","id":2097153,"result":"0xb"},
            {"jsonrpc":"2.0","id":99,"result":"0xz"},
            {"jsonrpc":"2.0","id":1048577,"error":{"code":3,"message":"reverted"}}]"#;
        let out = with_batch_ids(text, &ids).unwrap();
        let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            out,
            serde_json::json!([
                {"jsonrpc": "2.0", "id": 3, "result": "0xb"},
                {"jsonrpc": "2.0", "id": 0, "error": {"code": 3, "message": "reverted"}}
            ])
        );
        // None of ours: not this batch's answer.
        assert!(with_batch_ids(r#"[{"jsonrpc":"2.0","id":5,"result":1}]"#, &ids).is_none());
        // The node's error for the whole batch, under one of our ids: as it
        // came, for the batch path to give every call.
        let whole = r#"{"jsonrpc":"2.0","id":1048577,"error":{"code":-32600,"message":"no"}}"#;
        assert_eq!(&with_batch_ids(whole, &ids).unwrap()[..], whole.as_bytes());
        assert!(with_batch_ids(r#"{"jsonrpc":"2.0","id":7,"error":{}}"#, &ids).is_none());
        assert!(with_batch_ids("nope", &ids).is_none());
    }
}
