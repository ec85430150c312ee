//! A batch: refusals answered by txgate, the rest forwarded as one
//! upstream batch (one per role in a node group) with positions as ids,
//! and the answers put back in the caller's order.

use std::time::Instant;

use bytes::Bytes;
use http::{Response, StatusCode};
use txgate_jsonrpc::{Call, Entry};
use txgate_nodes::Role;

use super::{From, Shared, latest, plan, split, submission_log, upstream_refusal};
use crate::limits::pacing::batch_pace;
use crate::metrics::{Outcome, UpstreamFailure};
use crate::request::{Body, Refuse, json_response, no_content};
use crate::rpc::plan::{Plan, Route};
use crate::rpc::rescue::Refusal;

impl Shared {
    /// A batch: refusals answered here, the rest forwarded as one upstream
    /// batch with positions as ids, answers put back in the caller's order.
    pub(super) async fn batch(
        &self,
        entries: &[Entry<'_>],
        body_len: usize,
        from: &From<'_>,
    ) -> (Outcome, Response<Body>) {
        let submits = split::submits(entries);
        let pinnable = |call: &Call<'_>| self.role_in_batch(call, from, submits) == Role::Replica;
        let pin = self.upstream.agreed_head().map(|head| latest::Pin {
            head,
            pinnable: &pinnable,
        });
        let plan = self
            .plan(entries, from, true, body_len, pin, |index, _| {
                Ok(Route::Forward(index))
            })
            .await;
        let refused = plan.refused;
        let (outcome, response, accepted) = self.answer_batch(entries, plan, from).await;
        self.paced((outcome, response), from, batch_pace(refused, accepted))
    }

    /// The batch's answer, given its plan, and whether the node took one
    /// of its screened submissions.
    async fn answer_batch(
        &self,
        entries: &[Entry<'_>],
        mut plan: Plan,
        from: &From<'_>,
    ) -> (Outcome, Response<Body>, bool) {
        let mut status = StatusCode::OK;
        let mut outcome = plan.outcome;
        let mut failure = None;
        let mut accepted = false;
        if let Some(body) = plan.upstream.take() {
            let awaiting = plan.awaits();
            let timeout = self.sync.timeout(plan.syncs.len());
            // The short form has one node for every role: nothing to sort.
            let parts = if self.upstream.state().is_short_form() {
                Vec::new()
            } else {
                self.parts(entries, &plan, from)
            };
            if parts.len() > 1 {
                // Roles mixed: one batch per role, at once.
                let settled = self
                    .answer_parts(entries, &mut plan, parts, from, timeout)
                    .await;
                if settled.wrote
                    && let Some(client) = from.client
                {
                    self.upstream.state().wrote(client);
                }
                accepted = settled.accepted;
                if settled.answered {
                    outcome = Outcome::Forwarded;
                } else if let Some(refusal) = &settled.failure {
                    let class = refusal.class();
                    status = class.status;
                    outcome = class.outcome;
                }
                plan.close(entries, None);
                failure = if settled.answered {
                    None
                } else {
                    settled.failure
                };
                return self.batch_response(plan, status, outcome, failure, accepted);
            }
            let (role, submits) = parts
                .first()
                .map_or((Role::Replica, false), |p| (p.role, p.submits));
            let started = Instant::now();
            let (lane, overlap) = self.batch_on_lane(entries, &plan, role, timeout).await;
            let result = self
                .after_lane(
                    lane,
                    role,
                    !submits,
                    plan.at_head,
                    Bytes::from(body),
                    timeout,
                    started,
                )
                .await;
            drop(overlap);
            let took = started.elapsed();
            if result.is_ok() {
                self.metrics.nodes.batch().observe(took.as_secs_f64());
            }
            let node = result
                .as_ref()
                .map_or("", |reply| self.upstream.state().name(reply.node));
            failure = match result {
                // Only notifications went up: nothing to read back.
                Ok(reply) if !awaiting && reply.status.is_success() => None,
                Ok(reply) => match plan.settle(entries, &reply.body, |call| {
                    self.tracks_acceptance(&call.method)
                }) {
                    Some(taken) => {
                        accepted = taken;
                        if submits && let Some(client) = from.client {
                            self.upstream.state().wrote(client);
                        }
                        outcome = Outcome::Forwarded;
                        None
                    }
                    None => {
                        self.metrics.upstream.failure(UpstreamFailure::Status);
                        Some(Refusal::UpstreamUnavailable)
                    }
                },
                Err(failure) => Some(upstream_refusal(failure)),
            };
            if let Some(refusal) = &failure {
                let class = refusal.class();
                status = class.status;
                outcome = class.outcome;
            }
            plan.close(entries, failure.as_ref());
            // (The short form sorts no parts: `submits` is the batch's own
            // test there only when a group sorted it.)
            if submits || self.upstream.state().is_short_form() {
                let sent = submission_log::BatchSent {
                    node,
                    duration: took,
                    failed: failure.as_ref().map(|r| r.class().outcome.as_str()),
                    client: from.client,
                };
                let forwarded = plan.forwarded_at.iter().copied();
                self.log_batch_submissions(entries, &plan.slots, forwarded, &sent);
            }
        }
        self.batch_response(plan, status, outcome, failure, accepted)
    }

    /// The batch's response from its settled plan.
    fn batch_response(
        &self,
        plan: Plan,
        status: StatusCode,
        mut outcome: Outcome,
        failure: Option<Refusal>,
        accepted: bool,
    ) -> (Outcome, Response<Body>, bool) {
        if let Some(body) = plan::answer(plan.slots, true) {
            return (outcome, json_response(status, body), accepted);
        }
        if let Some(refusal) = failure {
            let (outcome, response) = self.refuse(refusal, None);
            return (outcome, response, accepted);
        }
        if outcome == Outcome::Forwarded {
            outcome = Outcome::Notification;
        }
        (outcome, no_content(), accepted)
    }
}
