//! The plan of a message of calls, an HTTP body's or a WebSocket
//! message's, written once for both.
//!
//! A frame is charged to the client's rates ([`frame_cost`]) or refused as
//! a whole ([`frame_refusal`]). Each call of it then goes through the
//! checks that answer it here: the method policy, the sync cap, a
//! conditional transaction's gates and screening. The plan is one answer
//! slot per entry in the caller's order (a refusal written under the
//! caller's id, silence for a notification, or a wait for the node) and
//! the calls that pass written as one upstream message. The transport
//! says where a passing call goes (its upstream id, or nowhere), sends
//! the message and frames the answer; the node's answers are put in their
//! slots here, and the whole answer joined here.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::stream::{self, StreamExt};
use txgate_jsonrpc::encode::{self, UpstreamBatch, UpstreamResponse};
use txgate_jsonrpc::{Call, Entry, Frame, FrameError, Id, code};

use super::{From, Shared, conditional};
use crate::metrics::Outcome;
use crate::request::Refuse;
use crate::rpc::rescue::{Refusal, refused_submissions};
use crate::rpc::sync::SyncSlot;
use crate::screening;

/// One screened call of a message, under way.
type Screened<'a> = Pin<Box<dyn Future<Output = (usize, Option<Refusal>)> + Send + 'a>>;

/// What a frame costs the client's rates (calls, submissions) and the id a
/// refusal of it is answered under.
pub(super) fn frame_cost<'a>(frame: &Frame<'a>) -> (usize, usize, Option<Id<'a>>) {
    match frame {
        Frame::Single(Entry::Call(call)) => (
            1,
            usize::from(screening::is_screened(&call.method)),
            call.id,
        ),
        Frame::Single(Entry::Invalid(_)) => (1, 0, None),
        Frame::Batch(entries) => (
            entries.len(),
            entries
                .iter()
                .filter(|e| matches!(e, Entry::Call(c) if screening::is_screened(&c.method)))
                .count(),
            None,
        ),
    }
}

/// The refusal of a body (or message) that is not a usable frame.
pub(super) fn frame_refusal(e: FrameError) -> Refusal {
    match e {
        FrameError::Parse => Refusal::Parse,
        FrameError::NotARequest => Refusal::InvalidRequest(
            "invalid request: body must be a request object or a batch array",
        ),
        FrameError::EmptyBatch => Refusal::InvalidRequest("invalid request: empty batch"),
        FrameError::TooDeep => Refusal::InvalidRequest(txgate_jsonrpc::TOO_DEEP),
        FrameError::BatchTooLarge { len, max } => Refusal::BatchTooLarge { len, max },
    }
}

/// One entry's place in the answer.
#[derive(Debug)]
pub(super) enum Slot {
    /// No answer owed (a notification).
    Silent,
    /// Forwarded; the node owes the answer.
    Awaiting,
    /// Answer ready.
    Done(Vec<u8>),
}

impl Slot {
    /// `refusal` under the caller's `id`.
    fn refused(refusal: &Refusal, id: Option<Id<'_>>) -> Slot {
        let mut out = Vec::with_capacity(96);
        refusal.write(&mut out, id);
        Slot::Done(out)
    }

    /// Puts the node's `response` in this slot under the caller's `id`
    /// (its JSON text); whether the slot awaited it.
    pub(super) fn answer(&mut self, response: &UpstreamResponse<'_>, id: Option<&str>) -> bool {
        if !matches!(self, Slot::Awaiting) {
            return false;
        }
        let mut out = Vec::with_capacity(64);
        response.write_with_id(&mut out, id);
        *self = Slot::Done(out);
        true
    }

    /// Answers this slot, if it awaits the node, with `refusal` under the
    /// caller's `id` (its JSON text).
    pub(super) fn fail(&mut self, refusal: &Refusal, id: Option<&str>) {
        if matches!(self, Slot::Awaiting) {
            let mut out = Vec::with_capacity(96);
            refusal.write_raw_id(&mut out, id);
            *self = Slot::Done(out);
        }
    }
}

/// Where a call that passed its checks goes, as its transport says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// To the node, under this upstream id (a notification: without one).
    Forward(usize),
    /// Nowhere, and no answer owed (a notification the transport drops).
    Skip,
}

/// A message's calls, checked: its answer slots and what goes upstream.
#[derive(Debug)]
pub(super) struct Plan {
    /// One slot per entry, in the caller's order.
    pub(super) slots: Vec<Slot>,
    /// The calls that pass, as one upstream message (`None`: none does).
    pub(super) upstream: Option<Vec<u8>>,
    /// How many calls `upstream` holds.
    pub(super) forwarded: usize,
    /// The first refusal's outcome, or [`Outcome::Forwarded`].
    pub(super) outcome: Outcome,
    /// The submissions screening refused (the client's pacing streak).
    pub(super) refused: u32,
    /// The sync slots of the calls that pass, held until they are
    /// answered.
    pub(super) syncs: Vec<SyncSlot>,
}

impl Plan {
    /// The plan of `entries` given each one's verdict (`Some`: refused) and
    /// the sync slots of those that pass: refusals and invalid entries
    /// answered in place (a refused notification silent), the rest routed
    /// by `route` (`Err`: refused by the transport's own checks) and
    /// written as one upstream message, an array when `batch`. `size` is
    /// the caller's message's length, about the upstream one's.
    fn new(
        entries: &[Entry<'_>],
        verdicts: Vec<Option<Refusal>>,
        syncs: Vec<(usize, SyncSlot)>,
        batch: bool,
        size: usize,
        mut route: impl FnMut(usize, &Call<'_>) -> Result<Route, Refusal>,
    ) -> Plan {
        let refused = refused_submissions(&verdicts);
        let mut slots = Vec::with_capacity(entries.len());
        let mut upstream = Vec::with_capacity(size + 16 * entries.len());
        if batch {
            upstream.push(b'[');
        }
        let mut forwarded = 0usize;
        let mut first_refusal = None;
        for (index, (entry, verdict)) in entries.iter().zip(verdicts).enumerate() {
            let slot = match entry {
                Entry::Invalid(invalid) => {
                    first_refusal.get_or_insert(Outcome::InvalidRequest);
                    Slot::refused(&Refusal::InvalidRequest(invalid.message), invalid.id)
                }
                Entry::Call(call) => match verdict.map_or_else(|| route(index, call), Err) {
                    Err(refusal) => {
                        first_refusal.get_or_insert(refusal.class().outcome);
                        if call.is_notification() {
                            Slot::Silent
                        } else {
                            Slot::refused(&refusal, call.id)
                        }
                    }
                    Ok(Route::Skip) => Slot::Silent,
                    Ok(Route::Forward(upstream_id)) => {
                        if forwarded > 0 {
                            upstream.push(b',');
                        }
                        encode::write_upstream_call(&mut upstream, call, upstream_id);
                        forwarded += 1;
                        if call.is_notification() {
                            Slot::Silent
                        } else {
                            Slot::Awaiting
                        }
                    }
                },
            };
            slots.push(slot);
        }
        if batch {
            upstream.push(b']');
        }
        Plan {
            slots,
            upstream: (forwarded > 0).then_some(upstream),
            forwarded,
            outcome: first_refusal.unwrap_or(Outcome::Forwarded),
            refused,
            syncs: syncs.into_iter().map(|(_, slot)| slot).collect(),
        }
    }

    /// Whether the node owes an answer to a call of the plan.
    pub(super) fn awaits(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Awaiting))
    }

    /// The node's answer (`body`) to a plan routed with positions as
    /// upstream ids: each answer in its call's slot, or an error for the
    /// whole message in every awaiting slot, under the callers' ids.
    /// `Some`: whether the node took a call `taken` asks about (answered
    /// it without an error); `None`: the node's answer is not JSON-RPC.
    pub(super) fn settle(
        &mut self,
        entries: &[Entry<'_>],
        body: &[u8],
        taken: impl Fn(&Call<'_>) -> bool,
    ) -> Option<bool> {
        let mut accepted = false;
        match encode::parse_upstream_batch(body)? {
            UpstreamBatch::Responses(responses) => {
                for response in &responses {
                    let Some(index) = response.index() else {
                        continue;
                    };
                    if let (Some(slot), Some(Entry::Call(call))) =
                        (self.slots.get_mut(index), entries.get(index))
                        && slot.answer(response, call.id.map(|i| i.as_str()))
                    {
                        accepted |= response.error().is_none() && taken(call);
                    }
                }
            }
            // The node refused the message as a whole: every forwarded
            // call gets its error, under its own id.
            UpstreamBatch::Whole(response) if response.error().is_some() => {
                for (slot, entry) in self.slots.iter_mut().zip(entries) {
                    if let Entry::Call(call) = entry {
                        slot.answer(&response, call.id.map(|i| i.as_str()));
                    }
                }
            }
            UpstreamBatch::Whole(_) => return None,
        }
        Some(accepted)
    }

    /// Answers every call still awaiting the node: with `failure`, else
    /// (the node left it out of its answer) with an internal error.
    pub(super) fn close(&mut self, entries: &[Entry<'_>], failure: Option<&Refusal>) {
        for (slot, entry) in self.slots.iter_mut().zip(entries) {
            let (Slot::Awaiting, Entry::Call(call)) = (&slot, entry) else {
                continue;
            };
            let id = call.id.map(|i| i.as_str());
            match failure {
                Some(refusal) => slot.fail(refusal, id),
                None => {
                    let mut out = Vec::with_capacity(96);
                    encode::write_error(
                        &mut out,
                        id,
                        code::INTERNAL_ERROR,
                        "upstream returned no response for this call",
                        None,
                    );
                    *slot = Slot::Done(out);
                }
            }
        }
    }
}

/// A message's whole answer from its slots: a batch's ready answers joined
/// in the caller's order, a lone call's as it was written (no copy);
/// `None` when no answer is owed.
pub(super) fn answer(slots: Vec<Slot>, batch: bool) -> Option<Bytes> {
    if !batch {
        return match slots.into_iter().next() {
            Some(Slot::Done(out)) => Some(Bytes::from(out)),
            _ => None,
        };
    }
    let done: Vec<&[u8]> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Done(out) => Some(out.as_slice()),
            _ => None,
        })
        .collect();
    if done.is_empty() {
        return None;
    }
    let capacity = done.iter().map(|p| p.len() + 1).sum();
    Some(encode::join_batch(done.into_iter(), capacity))
}

impl Shared {
    /// Checks every call of `entries` and plans the message (see
    /// [`Plan::new`] for `batch`, `size` and `route`).
    pub(super) async fn plan(
        &self,
        entries: &[Entry<'_>],
        from: &From<'_>,
        batch: bool,
        size: usize,
        route: impl FnMut(usize, &Call<'_>) -> Result<Route, Refusal>,
    ) -> Plan {
        let (verdicts, syncs) = self.verdicts(entries, from).await;
        Plan::new(entries, verdicts, syncs, batch, size, route)
    }

    /// Policy and screening of every call of a message, in the caller's
    /// order (`Some`: refused), and the sync slots of the calls that pass,
    /// held until the message is answered. The screened calls run at most
    /// `batch_concurrency` at once (a ShouldForward probe is a network round
    /// trip).
    async fn verdicts(
        &self,
        entries: &[Entry<'_>],
        from: &From<'_>,
    ) -> (Vec<Option<Refusal>>, Vec<(usize, SyncSlot)>) {
        let mut verdicts: Vec<Option<Refusal>> = Vec::with_capacity(entries.len());
        let mut screened: Vec<Screened<'_>> = Vec::new();
        let mut syncs = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let verdict = match entry {
                Entry::Call(call) => {
                    self.metrics.http.call(&call.method);
                    if !self.policy.allows(&call.method) {
                        Some(Refusal::MethodDenied)
                    } else if let Err(refusal) = self
                        .sync
                        .enter(&call.method)
                        .map(|slot| syncs.extend(slot.map(|slot| (index, slot))))
                    {
                        Some(refusal)
                    } else {
                        let checked = call.method == conditional::METHOD
                            || (self.screening.is_some() && screening::is_screened(&call.method));
                        if checked {
                            screened.push(Box::pin(
                                self.check_call(call, from)
                                    .map(move |verdict| (index, verdict)),
                            ));
                        }
                        None
                    }
                }
                Entry::Invalid(_) => None,
            };
            verdicts.push(verdict);
        }
        if !screened.is_empty() {
            let concurrency = self
                .screening
                .as_ref()
                .map_or(1, |screening| screening.batch_concurrency);
            let mut results = stream::iter(screened).buffered(concurrency);
            while let Some((index, verdict)) = results.next().await {
                verdicts[index] = verdict;
            }
        }
        // A sync call refused by its checks gives its slot back now.
        syncs.retain(|(index, _)| verdicts[*index].is_none());

        (verdicts, syncs)
    }
}
