//! HTTP calls on the worker's lanes, from the JSON-RPC stage's side: which
//! calls and batches are offered to a lane ([`websocket::http_lane`]), to
//! which node, and their answers as the pool's would be.

use std::time::{Duration, Instant};

use bytes::Bytes;

use txgate_jsonrpc::{Call, Entry};
use txgate_nodes::Role;

use super::Shared;
use super::plan::Plan;
use super::websocket::{
    self,
    http_lane::{LaneCall, Overlap},
};
use crate::metrics::{Failover, UpstreamFailure};
use crate::upstream::Reply;
use crate::upstream::group::CallError;

/// What became of calls offered to a lane.
#[derive(Debug)]
pub(super) enum OnLane {
    /// Send them over the pool: not offered (`waited` false), or queued on
    /// a socket that then failed to open (`waited`: part of the deadline
    /// is spent).
    Pool {
        /// Whether they waited on the lane first.
        waited: bool,
    },
    /// The lane's answer (or failure), and the node it went to.
    Done(Result<Reply, CallError>, usize),
}

const NOT_OFFERED: OnLane = OnLane::Pool { waited: false };

impl Shared {
    /// The answer to calls first offered to a lane (`lane`), started at
    /// `started` with `timeout` (`None`: the call timeout): the lane's, or
    /// the pool's with `body`. A read (`resend`) the lane lost after it was
    /// queued is asked once more over the pool on another node, as the
    /// group asks a read again (the short form has none: the call fails,
    /// as one on a broken pooled connection does there). The pool gets
    /// `timeout` itself when the calls did not wait on the lane (none
    /// named stays none: its timeout then counts against the node), else
    /// what is left of it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn after_lane(
        &self,
        lane: OnLane,
        role: Role,
        resend: bool,
        at_head: bool,
        body: Bytes,
        timeout: Option<Duration>,
        started: Instant,
    ) -> Result<Reply, CallError> {
        let left = || {
            Some(
                timeout
                    .unwrap_or(self.upstream.call_timeout())
                    .saturating_sub(started.elapsed()),
            )
        };
        match lane {
            OnLane::Done(Err(CallError::Upstream(UpstreamFailure::Io)), node)
                if resend && !self.upstream.state().is_short_form() =>
            {
                self.metrics.nodes.failover(Failover::ReadRetry);
                self.upstream
                    .call_avoiding(role, false, at_head, body, left(), Some(node))
                    .await
            }
            OnLane::Done(result, _) => result,
            OnLane::Pool { waited: false } => {
                self.upstream
                    .call(role, resend, at_head, body, timeout)
                    .await
            }
            OnLane::Pool { waited: true } => {
                self.upstream
                    .call(role, resend, at_head, body, left())
                    .await
            }
        }
    }

    /// A lone call sent on the worker's lane to its node (with `params`),
    /// when lanes carry it ([`websocket::http_lane`]). With it, when lanes
    /// may carry it, its count among the worker's calls in flight
    /// ([`Overlap`]): hold it until the call is answered, by the lane or by
    /// the pool.
    pub(super) async fn on_lane(
        &self,
        call: &Call<'_>,
        role: Role,
        at_head: bool,
        params: Option<&str>,
        timeout: Option<Duration>,
    ) -> (OnLane, Option<Overlap>) {
        let Some(ws) = &self.websockets else {
            return (NOT_OFFERED, None);
        };
        let Some(id) = &call.id else {
            return (NOT_OFFERED, None);
        };
        if !ws.http_lane_carries(&call.method) {
            return (NOT_OFFERED, None);
        }
        let Some(node) = self.upstream.pick(role, at_head) else {
            return (NOT_OFFERED, None);
        };
        let overlap = ws.overlap(&self.metrics);
        let calls = [(call, params, id.as_str().to_string())];
        let Some(sent) = ws.http_send(node, &calls, false, &overlap, &self.metrics) else {
            return (NOT_OFFERED, Some(overlap));
        };
        (self.lane_answer(sent, node, timeout).await, Some(overlap))
    }

    /// A batch's calls sent on the worker's lane to the node of `role`,
    /// when lanes carry every one (at most four, none pinned to the agreed
    /// head, none a notification), always as an array: the node's answer
    /// with the positions as ids, as the pool's would be.
    /// With it, as for a lone call, its count in flight.
    pub(super) async fn batch_on_lane(
        &self,
        entries: &[Entry<'_>],
        plan: &Plan,
        role: Role,
        timeout: Option<Duration>,
    ) -> (OnLane, Option<Overlap>) {
        let Some(ws) = &self.websockets else {
            return (NOT_OFFERED, None);
        };
        if plan.at_head
            || plan.forwarded_at.is_empty()
            || plan.forwarded_at.len() > websocket::http_lane::MAX_CALLS
        {
            return (NOT_OFFERED, None);
        }
        let mut calls = Vec::with_capacity(plan.forwarded_at.len());
        for &index in &plan.forwarded_at {
            match entries.get(index) {
                Some(Entry::Call(call))
                    if !call.is_notification() && ws.http_lane_carries(&call.method) =>
                {
                    calls.push((call, None, index.to_string()));
                }
                _ => return (NOT_OFFERED, None),
            }
        }
        let Some(node) = self.upstream.pick(role, false) else {
            return (NOT_OFFERED, None);
        };
        let overlap = ws.overlap(&self.metrics);
        let Some(sent) = ws.http_send(node, &calls, true, &overlap, &self.metrics) else {
            return (NOT_OFFERED, Some(overlap));
        };
        (self.lane_answer(sent, node, timeout).await, Some(overlap))
    }

    /// The answer to calls queued on a lane to `node`, as the pool's.
    async fn lane_answer(
        &self,
        sent: websocket::http_lane::Sent,
        node: usize,
        timeout: Option<Duration>,
    ) -> OnLane {
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
            LaneCall::Unsent => return OnLane::Pool { waited: true },
        };
        OnLane::Done(result, node)
    }
}
