//! A batch over a node group, split by role: its forwarded calls grouped
//! by the role of the node each goes to (reads to a replica, submissions
//! to the sequencer, bundle methods to a builder), one upstream batch per
//! role, sent at once, each answer put back in the caller's order under
//! the caller's ids. A large read batch holding one submission does not
//! land on the sequencer; a batch of one role goes whole, as before.
//!
//! A part that fails answers its own calls with its failure; the others
//! keep their answers. A part holding a submission is never sent twice.

use bytes::Bytes;
use futures_util::future::join_all;
use txgate_jsonrpc::{Call, Entry, encode};
use txgate_nodes::Role;

use std::time::Instant;

use super::plan::{Plan, Slot};
use super::rescue::Refusal;
use super::submission_log::BatchSent;
use super::{From, Shared, latest, upstream_refusal};
use crate::metrics::UpstreamFailure;
use crate::request::Refuse;
use crate::upstream::group::is_submission;

/// The calls of a batch that go to one role.
#[derive(Debug)]
pub(super) struct Part {
    pub(super) role: Role,
    /// One of them submits: the part is never sent twice.
    pub(super) submits: bool,
    /// One of them was pinned to the agreed head.
    pub(super) at_head: bool,
    /// The entries it holds (their upstream ids).
    pub(super) indices: Vec<usize>,
}

/// What the parts' answers made of the plan.
#[derive(Debug, Default)]
pub(super) struct Settled {
    /// The node took one of the screened submissions.
    pub(super) accepted: bool,
    /// A part that submitted was answered.
    pub(super) wrote: bool,
    /// The failure of the first part that failed.
    pub(super) failure: Option<Refusal>,
    /// Some part was answered.
    pub(super) answered: bool,
}

impl Shared {
    /// The plan's forwarded calls grouped by role, in the order each role
    /// first appears.
    pub(super) fn parts(&self, entries: &[Entry<'_>], plan: &Plan, from: &From<'_>) -> Vec<Part> {
        let mut parts: Vec<Part> = Vec::new();
        let submits = submits(entries);
        for &index in &plan.forwarded_at {
            let Some(Entry::Call(call)) = entries.get(index) else {
                continue;
            };
            let role = self.role_in_batch(call, from, submits);
            let submits = is_submission(&call.method);
            let part = match parts.iter_mut().position(|p| p.role == role) {
                Some(i) => &mut parts[i],
                None => {
                    parts.push(Part {
                        role,
                        submits: false,
                        at_head: false,
                        indices: Vec::new(),
                    });
                    let last = parts.len() - 1;
                    &mut parts[last]
                }
            };
            part.submits |= submits;
            part.indices.push(index);
        }
        parts
    }

    /// The role of `call` in a batch: its own, except that a read of the
    /// client's own writes goes to the sequencer when the batch itself
    /// `submits` (a nonce or receipt read beside the submission it is
    /// about).
    pub(super) fn role_in_batch(&self, call: &Call<'_>, from: &From<'_>, submits: bool) -> Role {
        let role = self
            .upstream
            .role_for(&call.method, call.params.map(|p| p.get()), from.client);
        if submits && role == Role::Replica && txgate_nodes::reads_own_writes(&call.method) {
            Role::Sequencer
        } else {
            role
        }
    }

    /// Sends each part to its role at once and settles the plan with the
    /// answers.
    pub(super) async fn answer_parts(
        &self,
        entries: &[Entry<'_>],
        plan: &mut Plan,
        mut parts: Vec<Part>,
        from: &From<'_>,
        timeout: Option<std::time::Duration>,
    ) -> Settled {
        let head = self.upstream.agreed_head();
        let bodies: Vec<Bytes> = parts
            .iter_mut()
            .map(|part| {
                let mut out = Vec::with_capacity(128 * part.indices.len());
                out.push(b'[');
                for (n, &index) in part.indices.iter().enumerate() {
                    let Some(Entry::Call(call)) = entries.get(index) else {
                        continue;
                    };
                    if n > 0 {
                        out.push(b',');
                    }
                    part.at_head |= head.is_some()
                        && part.role == Role::Replica
                        && latest::reads_blocks(&call.method);
                    let pinned = head
                        .filter(|_| part.role == Role::Replica)
                        .and_then(|h| latest::pin(&call.method, call.params, h));
                    match &pinned {
                        Some(params) => {
                            part.at_head = true;
                            encode::write_upstream_call_params(&mut out, call, index, Some(params));
                        }
                        None => encode::write_upstream_call(&mut out, call, index),
                    }
                }
                out.push(b']');
                Bytes::from(out)
            })
            .collect();
        let replies = join_all(parts.iter().zip(bodies).map(|(part, body)| async move {
            let started = Instant::now();
            let reply = self
                .upstream
                .call(part.role, !part.submits, part.at_head, body, timeout)
                .await;
            (reply, started.elapsed())
        }))
        .await;
        let mut settled = Settled::default();
        for (part, (reply, took)) in parts.iter().zip(replies) {
            let node = reply
                .as_ref()
                .map_or("", |reply| self.upstream.state().name(reply.node));
            let indices = Some(part.indices.as_slice());
            let owed = part
                .indices
                .iter()
                .any(|&i| matches!(plan.slots.get(i), Some(Slot::Awaiting)));
            let failure = match reply {
                // Only notifications went to this node: nothing to read.
                Ok(reply) if !owed && reply.status.is_success() => {
                    settled.wrote |= part.submits;
                    settled.answered = true;
                    None
                }
                Ok(reply) => match plan.settle_part(
                    entries,
                    &reply.body,
                    |call| self.tracks_acceptance(&call.method),
                    indices,
                ) {
                    Some(taken) => {
                        settled.accepted |= taken;
                        settled.wrote |= part.submits;
                        settled.answered = true;
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
                plan.close_part(entries, Some(refusal), indices);
            }
            if part.submits {
                let sent = BatchSent {
                    node,
                    duration: took,
                    failed: failure.as_ref().map(|r| r.class().outcome.as_str()),
                    client: from.client,
                };
                let indices = part.indices.iter().copied();
                self.log_batch_submissions(entries, &plan.slots, indices, &sent);
            }
            if let Some(refusal) = failure {
                settled.failure.get_or_insert(refusal);
            }
        }
        settled
    }
}

/// Whether a batch holds a submission.
pub(super) fn submits(entries: &[Entry<'_>]) -> bool {
    entries
        .iter()
        .any(|e| matches!(e, Entry::Call(call) if is_submission(&call.method)))
}
