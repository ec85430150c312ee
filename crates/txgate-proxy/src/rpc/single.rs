//! A lone call: checked, then forwarded as the caller's bytes (pinned to
//! the group's agreed head when it reads `latest` from a replica), on the
//! worker's lane or the pool, and its answer relayed as the node gave it.

use std::time::Instant;

use bytes::Bytes;
use http::{Response, StatusCode};
use txgate_jsonrpc::Call;
use txgate_nodes::Role;

use super::{From, Shared, latest, submission_log, upstream_refusal};
use crate::limits::pacing::{Pace, answered_with_result};
use crate::metrics::{Outcome, UpstreamFailure};
use crate::request::{Body, Refuse, json_response, no_content};
use crate::rpc::rescue::Refusal;
use crate::upstream::group::is_submission;

impl Shared {
    /// A lone call: forwarded as the caller's bytes.
    pub(super) async fn single(
        &self,
        call: &Call<'_>,
        body: Bytes,
        from: &From<'_>,
    ) -> (Outcome, Response<Body>) {
        self.metrics.http.call(&call.method);
        if !self.policy.allows(&call.method) {
            if call.is_notification() {
                return (Outcome::MethodDenied, no_content());
            }
            return self.refuse(Refusal::MethodDenied, call.id);
        }
        // A sync call takes its own slot before anything else it costs.
        let sync = match self.sync.enter(&call.method) {
            Ok(slot) => slot,
            Err(refusal) if call.is_notification() => {
                return (refusal.class().outcome, no_content());
            }
            Err(refusal) => return self.refuse(refusal, call.id),
        };
        if let Some(refusal) = self.check_call(call, from).await {
            let pace = matches!(refusal, Refusal::Screened(_) | Refusal::Bundle(_))
                .then_some(Pace::Refused(1));
            let answer = if call.is_notification() {
                (refusal.class().outcome, no_content())
            } else {
                self.refuse(refusal, call.id)
            };
            return self.paced(answer, from, pace);
        }
        let mut accepted = false;
        // A group serves `latest` at its agreed head: eth_blockNumber from
        // txgate, block-tagged reads pinned to it.
        let head = self.upstream.agreed_head();
        if let Some(head) = head
            && latest::answers_locally(call)
        {
            return match call.id {
                Some(id) => (
                    Outcome::Forwarded,
                    json_response(
                        StatusCode::OK,
                        Bytes::from(latest::block_number_answer(id.as_str(), head)),
                    ),
                ),
                None => (Outcome::Notification, no_content()),
            };
        }
        let role = self
            .upstream
            .role_for(&call.method, call.params.map(|p| p.get()), from.client);
        // A read the sequencer answers for the client's own writes or the
        // pending block keeps its tag: it wants the newest state.
        let pinned = head
            .filter(|_| role == Role::Replica)
            .and_then(|head| latest::pin(&call.method, call.params, head));
        // Only a read for the replicas waits for a node at the agreed head:
        // one for the sequencer (pending, the client's own writes, filters)
        // goes to it as it stands.
        let at_head = head.is_some() && role == Role::Replica && latest::reads_blocks(&call.method);
        let body = match &pinned {
            Some(params) => {
                let mut out = Vec::with_capacity(body.len() + 16);
                txgate_jsonrpc::encode::write_call_params(&mut out, call, Some(params));
                Bytes::from(out)
            }
            None => body,
        };
        let submission = is_submission(&call.method);
        let started = Instant::now();
        let timeout = self.sync.timeout(usize::from(sync.is_some()));
        let params = pinned.as_deref().or(call.params.map(|p| p.get()));
        // `overlap` counts the call among its worker's lane calls in
        // flight until it is answered, whichever way it goes.
        let (lane, overlap) = self.on_lane(call, role, at_head, params, timeout).await;
        let result = self
            .after_lane(lane, role, !submission, at_head, body, timeout, started)
            .await;
        drop(overlap);
        let took = started.elapsed();
        if result.is_ok() {
            self.metrics
                .nodes
                .method(&call.method)
                .observe(took.as_secs_f64());
        }
        if submission {
            self.submissions.forwarded(
                Instant::now(),
                &submission_log::Forwarded {
                    method: &call.method,
                    params: call.params,
                    node: result
                        .as_ref()
                        .map_or("", |reply| self.upstream.state().name(reply.node)),
                    duration: took,
                    answer: match &result {
                        Ok(reply) if reply.status.is_success() || reply.is_json_rpc() => {
                            Ok(&reply.body)
                        }
                        Ok(_) => Err(Outcome::UpstreamUnavailable.as_str()),
                        Err(failure) => Err(upstream_refusal(*failure).class().outcome.as_str()),
                    },
                    client: from.client,
                },
            );
        }
        let answer = match result {
            Ok(reply) if reply.status.is_success() || reply.is_json_rpc() => {
                // A submission the node took ends its client's streak of
                // refusals (one the node refused does not); looked at only
                // while some client has one.
                accepted = !call.is_notification()
                    && self.tracks_acceptance(&call.method)
                    && answered_with_result(&reply.body);
                if submission && let Some(client) = from.client {
                    self.upstream.state().wrote(client);
                }
                if call.is_notification() {
                    (Outcome::Notification, no_content())
                } else {
                    (Outcome::Forwarded, json_response(reply.status, reply.body))
                }
            }
            Ok(reply) => {
                tracing::debug!(status = %reply.status, "upstream answered without JSON-RPC");
                self.metrics.upstream.failure(UpstreamFailure::Status);
                self.refuse(Refusal::UpstreamUnavailable, call.id)
            }
            Err(failure) => self.refuse(upstream_refusal(failure), call.id),
        };
        self.paced(answer, from, accepted.then_some(Pace::Cleared))
    }
}
