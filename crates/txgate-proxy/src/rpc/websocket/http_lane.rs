//! HTTP clients on the lanes (`websocket.http_lanes`): a single plain call
//! of an HTTP client ([`lane::carries`], with an id) goes to its node on
//! the worker's lane, where the calls of every client the worker serves in
//! one turn are written together and their answers read together, in
//! place of a pooled HTTP/1.1 connection per call in flight, each paying a
//! send and a receive on both sides. A generic HTTP proxy cannot do this:
//! HTTP/1.1 carries one request per connection at a time.
//!
//! The call takes a seat for as long as it waits: its upstream id names
//! the seat (and the lane's sequence), and the node's answer comes back to
//! it alone. The answer is the node's message with the caller's id spliced
//! in where the node wrote txgate's: every other byte is the node's.
//!
//! The rules are the lane's, with one difference where an HTTP call has a
//! way a WebSocket session does not, the pool:
//! - a lane that fails after the call was written answers it -32603
//!   (it may have reached the node: never sent twice);
//! - a lane whose socket could not be opened had written nothing: the call
//!   goes over the pool, and so do the worker's calls to that node for
//!   [`lane::UNREACHABLE_FOR`] (a node without a WebSocket endpoint);
//! - a lane whose queue is over its bound (the node has not taken the last
//!   batch) and a worker that is draining send over the pool too;
//! - an answer over `upstream.max_response_bytes` is refused alone.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use txgate_jsonrpc::Call;
use txgate_jsonrpc::encode::{self, UpstreamBatch};

use super::WebSockets;
use super::lane::{self, Event};
use crate::metrics::{Metrics, UpstreamFailure};
use crate::upstream::Reply;

/// What became of a call offered to a lane.
#[derive(Debug)]
pub(crate) enum LaneCall {
    /// The node's answer, the caller's id in it.
    Answered(Reply),
    /// Written, then failed: the answer is this failure.
    Failed(UpstreamFailure),
    /// Not sent: send it over the pool.
    Unsent,
}

impl WebSockets {
    /// Whether an HTTP call of `method` may go on a lane.
    pub(crate) fn http_lane_carries(&self, method: &str) -> bool {
        self.settings.http_lanes && lane::carries(method)
    }

    /// Sends `call` (with `params` in place of its own) to node `node` on
    /// this worker's lane and waits for its answer until `timeout` (`None`:
    /// `upstream.call_timeout`).
    pub(crate) async fn http_call(
        &self,
        node: usize,
        call: &Call<'_>,
        params: Option<&str>,
        timeout: Option<Duration>,
        metrics: &Arc<Metrics>,
    ) -> LaneCall {
        let m = &metrics.websocket.http_lane;
        let Some(id) = &call.id else {
            return LaneCall::Unsent;
        };
        // Draining: a new call opens no lane.
        if self.stop.is_cancelled() {
            m.pooled.inc();
            return LaneCall::Unsent;
        }
        let here = self.lanes.here(&self.settings, &self.stop, metrics);
        if !here.reachable(node) {
            m.pooled.inc();
            return LaneCall::Unsent;
        }
        let Some((seat, mut events)) = here.seat() else {
            m.pooled.inc();
            return LaneCall::Unsent;
        };
        let upstream_id = seat.next_id();
        let mut out = Vec::with_capacity(64 + call.method.len() + params.map_or(0, str::len));
        encode::write_upstream_call_params(&mut out, call, upstream_id, params);
        // Written from UTF-8 pieces: never refused.
        let Ok(text) = Utf8Bytes::try_from(Bytes::from(out)) else {
            m.pooled.inc();
            return LaneCall::Unsent;
        };
        let Some(generation) = seat.send(node, text, self.settings.lane_queue_bytes) else {
            metrics.websocket.lane_queue_full.inc();
            m.pooled.inc();
            return LaneCall::Unsent;
        };
        let deadline = Instant::now() + timeout.unwrap_or(self.settings.call_timeout);
        loop {
            let event = match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => event,
                // The seat's route lives as long as the seat: not reached.
                Ok(None) => {
                    m.failed.inc();
                    return LaneCall::Failed(UpstreamFailure::Io);
                }
                Err(_) => {
                    m.timeout.inc();
                    return LaneCall::Failed(UpstreamFailure::Timeout);
                }
            };
            match event {
                Event::Answer(text) => {
                    // An answer for this seat's slot under another
                    // sequence is a late one for an earlier holder.
                    if let Some(body) = with_caller_id(&text, upstream_id, id.as_str()) {
                        m.answered.inc();
                        return LaneCall::Answered(Reply {
                            status: StatusCode::OK,
                            body,
                            node,
                        });
                    }
                }
                Event::TooLarge(got) if got == upstream_id as u64 => {
                    m.too_large.inc();
                    return LaneCall::Failed(UpstreamFailure::TooLarge);
                }
                Event::Down {
                    node: down,
                    generation: failed,
                    written,
                } if down == node && generation <= failed => {
                    if written {
                        m.failed.inc();
                        return LaneCall::Failed(UpstreamFailure::Io);
                    }
                    m.pooled.inc();
                    return LaneCall::Unsent;
                }
                _ => {}
            }
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
}
