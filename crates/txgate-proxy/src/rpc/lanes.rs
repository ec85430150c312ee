//! HTTP calls on the worker's lanes, from the JSON-RPC stage's side: which
//! calls and batches are offered to a lane ([`websocket::http_lane`]), to
//! which node, and their answers as the pool's would be.

use std::time::Duration;

use txgate_jsonrpc::{Call, Entry};
use txgate_nodes::Role;

use super::Shared;
use super::plan::Plan;
use super::websocket::{self, http_lane::LaneCall};
use crate::upstream::Reply;
use crate::upstream::group::CallError;

impl Shared {
    /// A lone call sent on the worker's lane to its node (with `params`),
    /// when lanes carry it ([`websocket::http_lane`]): its result and the
    /// node; `None`: send it over the pool.
    pub(super) async fn on_lane(
        &self,
        call: &Call<'_>,
        role: Role,
        at_head: bool,
        params: Option<&str>,
        timeout: Option<Duration>,
    ) -> Option<(Result<Reply, CallError>, usize)> {
        let ws = self.websockets.as_ref()?;
        if call.is_notification() || !ws.http_lane_carries(&call.method) {
            return None;
        }
        let id = call.id.as_ref()?.as_str().to_string();
        let node = self.upstream.pick(role, at_head)?;
        let sent = ws.http_send(node, &[(call, params, id)], &self.metrics)?;
        self.lane_answer(sent, node, timeout).await
    }

    /// A batch's calls sent on the worker's lane to the node of `role`,
    /// when lanes carry every one (at most four, none pinned to the agreed
    /// head, none a notification): the node's answer with the positions as
    /// ids, as the pool's would be, and the node; `None`: over the pool.
    pub(super) async fn batch_on_lane(
        &self,
        entries: &[Entry<'_>],
        plan: &Plan,
        role: Role,
        timeout: Option<Duration>,
    ) -> Option<(Result<Reply, CallError>, usize)> {
        let ws = self.websockets.as_ref()?;
        if plan.at_head
            || plan.forwarded_at.is_empty()
            || plan.forwarded_at.len() > websocket::http_lane::MAX_CALLS
        {
            return None;
        }
        let mut calls = Vec::with_capacity(plan.forwarded_at.len());
        for &index in &plan.forwarded_at {
            match entries.get(index) {
                Some(Entry::Call(call))
                    if !call.is_notification() && ws.http_lane_carries(&call.method) =>
                {
                    calls.push((call, None, index.to_string()));
                }
                _ => return None,
            }
        }
        let node = self.upstream.pick(role, false)?;
        let sent = ws.http_send(node, &calls, &self.metrics)?;
        self.lane_answer(sent, node, timeout).await
    }

    /// The answer to calls queued on a lane to `node`, as the pool's.
    async fn lane_answer(
        &self,
        sent: websocket::http_lane::Sent,
        node: usize,
        timeout: Option<Duration>,
    ) -> Option<(Result<Reply, CallError>, usize)> {
        let answer = {
            let _in_flight = self.upstream.state().begin(node);
            sent.answer(timeout, &self.metrics).await
        };
        let result = match answer {
            LaneCall::Answered(reply) => Ok(reply),
            // Not counted against the node: a lane fails for all its calls
            // at once, and may fail by one client's doing (an answer over
            // its read cap), as WebSocket sessions' lanes are not.
            LaneCall::Failed(failure) => {
                self.metrics.upstream.failure(failure);
                Err(CallError::Upstream(failure))
            }
            LaneCall::Unsent => return None,
        };
        Some((result, node))
    }
}
