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

use super::{From, Shared, bundle, conditional, latest};
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
        Frame::Single(Entry::Call(call)) => (1, submissions(call), call.id),
        Frame::Single(Entry::Invalid(_)) => (1, 0, None),
        Frame::Batch(entries) => (
            entries.len(),
            entries
                .iter()
                .map(|e| match e {
                    Entry::Call(c) => submissions(c),
                    Entry::Invalid(_) => 0,
                })
                .sum(),
            None,
        ),
    }
}

/// The transactions of one bundle counted one by one, at most: a bundle
/// holding more counts as this many plus one, over the largest
/// `rpc.max_message_txs` and `rpc.max_bundle_txs` the config takes, so it
/// is refused all the same. The count stops there: a 5 MiB bundle of empty
/// strings (1.7 million of them) is not first collected whole, at 24
/// bytes each, only to be refused.
const COUNTED_AT_MOST: usize = txgate_config::rpc::MAX_COUNTED_TXS;

/// The submissions `call` is charged: one for a raw transaction, one per
/// transaction for a bundle (each costs a screening, a sender recovery
/// included; a bundle that does not parse is charged one and refused).
fn submissions(call: &Call<'_>) -> usize {
    if screening::is_screened(&call.method) {
        1
    } else if call.method == bundle::METHOD {
        match bundle::parse_txs(call.params, COUNTED_AT_MOST) {
            Ok(txs) => txs.len().max(1),
            Err(bundle::Malformed::TooMany { .. }) => COUNTED_AT_MOST + 1,
            Err(_) => 1,
        }
    } else {
        0
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

    /// Answers this slot, if it awaits the node, with the error of a call
    /// the node's answer to its message left out, under the caller's `id`
    /// (its JSON text).
    pub(super) fn unanswered(&mut self, id: Option<&str>) {
        if matches!(self, Slot::Awaiting) {
            let mut out = Vec::with_capacity(96);
            encode::write_error(
                &mut out,
                id,
                code::INTERNAL_ERROR,
                "upstream returned no response for this call",
                None,
            );
            *self = Slot::Done(out);
        }
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
    /// Some forwarded read was pinned to the group's agreed head: the
    /// message goes only to a node at or above it.
    pub(super) at_head: bool,
    /// The entries forwarded, in order (their upstream ids are the
    /// route's).
    pub(super) forwarded_at: Vec<usize>,
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
        pin: Option<latest::Pin<'_>>,
        mut route: impl FnMut(usize, &Call<'_>) -> Result<Route, Refusal>,
    ) -> Plan {
        let refused = refused_submissions(&verdicts);
        let mut at_head = false;
        let mut forwarded_at = Vec::new();
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
                    // The group's agreed head answers eth_blockNumber.
                    Ok(Route::Forward(_)) if pin.is_some() && latest::answers_locally(call) => {
                        match (call.id, pin) {
                            (Some(id), Some(pin)) => {
                                Slot::Done(latest::block_number_answer(id.as_str(), pin.head))
                            }
                            _ => Slot::Silent,
                        }
                    }
                    Ok(Route::Forward(upstream_id)) => {
                        if forwarded > 0 {
                            upstream.push(b',');
                        }
                        at_head |= pin.is_some_and(|pin| (pin.pinnable)(call))
                            && latest::reads_blocks(&call.method);
                        let pinned = pin
                            .filter(|pin| (pin.pinnable)(call))
                            .and_then(|pin| latest::pin(&call.method, call.params, pin.head));
                        match &pinned {
                            Some(params) => {
                                at_head = true;
                                encode::write_upstream_call_params(
                                    &mut upstream,
                                    call,
                                    upstream_id,
                                    Some(params),
                                );
                            }
                            None => encode::write_upstream_call(&mut upstream, call, upstream_id),
                        }
                        forwarded += 1;
                        forwarded_at.push(index);
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
            at_head,
            forwarded_at,
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
        self.settle_part(entries, body, taken, None)
    }

    /// [`Plan::settle`] for the calls at `part` only (`None`: all), the
    /// part of a batch sent to one node.
    pub(super) fn settle_part(
        &mut self,
        entries: &[Entry<'_>],
        body: &[u8],
        taken: impl Fn(&Call<'_>) -> bool,
        part: Option<&[usize]>,
    ) -> Option<bool> {
        let in_part = |index: usize| part.is_none_or(|part| part.contains(&index));
        let mut accepted = false;
        match encode::parse_upstream_batch(body)? {
            UpstreamBatch::Responses(responses) => {
                for response in &responses {
                    let Some(index) = response.index().filter(|i| in_part(*i)) else {
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
                for (index, (slot, entry)) in self.slots.iter_mut().zip(entries).enumerate() {
                    if let Entry::Call(call) = entry
                        && in_part(index)
                    {
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
        self.close_part(entries, failure, None);
    }

    /// [`Plan::close`] for the calls at `part` only (`None`: all).
    pub(super) fn close_part(
        &mut self,
        entries: &[Entry<'_>],
        failure: Option<&Refusal>,
        part: Option<&[usize]>,
    ) {
        for (index, (slot, entry)) in self.slots.iter_mut().zip(entries).enumerate() {
            let (Slot::Awaiting, Entry::Call(call)) = (&slot, entry) else {
                continue;
            };
            if part.is_some_and(|part| !part.contains(&index)) {
                continue;
            }
            let id = call.id.map(|i| i.as_str());
            match failure {
                Some(refusal) => slot.fail(refusal, id),
                None => slot.unanswered(id),
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
        pin: Option<latest::Pin<'_>>,
        route: impl FnMut(usize, &Call<'_>) -> Result<Route, Refusal>,
    ) -> Plan {
        let (verdicts, syncs) = self.verdicts(entries, from).await;
        Plan::new(entries, verdicts, syncs, batch, size, pin, route)
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
                        let checked =
                            call.method == conditional::METHOD || self.screens(&call.method);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A call, a notification, a call the policy refuses, an invalid entry
    /// and a second call, in that order.
    const BATCH: &[u8] = br#"[{"jsonrpc":"2.0","id":"a","method":"eth_chainId"},{"jsonrpc":"2.0","method":"eth_x"},{"jsonrpc":"2.0","id":7,"method":"admin_peers"},{"jsonrpc":"2.0","id":8},{"jsonrpc":"2.0","id":9,"method":"eth_blockNumber"}]"#;

    fn entries(body: &[u8]) -> Vec<Entry<'_>> {
        match txgate_jsonrpc::parse(body, 100).unwrap() {
            Frame::Batch(entries) => entries,
            Frame::Single(entry) => vec![entry],
        }
    }

    /// The plan of [`BATCH`]'s `entries`, the third call refused by the
    /// policy, the rest routed by `route`.
    fn batch_plan(
        entries: &[Entry<'_>],
        route: impl FnMut(usize, &Call<'_>) -> Result<Route, Refusal>,
    ) -> Plan {
        let verdicts = vec![None, None, Some(Refusal::MethodDenied), None, None];
        Plan::new(
            entries,
            verdicts,
            Vec::new(),
            true,
            BATCH.len(),
            None,
            route,
        )
    }

    /// A raw transaction costs one submission, a bundle one per
    /// transaction it holds (one if it does not parse), anything else none.
    #[test]
    fn bundles_are_charged_per_transaction() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"method":"eth_sendBundle","params":[{"txs":["0x01","0x02","0x03"]}]},{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":["0x01"]},{"jsonrpc":"2.0","id":3,"method":"eth_sendBundle","params":[{"txs":5}]},{"jsonrpc":"2.0","id":4,"method":"eth_chainId"}]"#;
        let frame = txgate_jsonrpc::parse(body, 100).unwrap();
        let (calls, txs, _) = frame_cost(&frame);
        assert_eq!((calls, txs), (4, 3 + 1 + 1));
        let single = br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendBundle","params":[{"txs":["0x01","0x02"]}]}"#;
        let frame = txgate_jsonrpc::parse(single, 100).unwrap();
        assert_eq!(frame_cost(&frame).1, 2);
        // Exact up to the counting bound; beyond it, one more than it
        // (and the count stops there).
        for (n, charged) in [
            (COUNTED_AT_MOST, COUNTED_AT_MOST),
            (COUNTED_AT_MOST + 1, COUNTED_AT_MOST + 1),
            (3 * COUNTED_AT_MOST, COUNTED_AT_MOST + 1),
        ] {
            let txs = vec!["\"\""; n].join(",");
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendBundle","params":[{{"txs":[{txs}]}}]}}"#
            );
            let frame = txgate_jsonrpc::parse(body.as_bytes(), 100).unwrap();
            assert_eq!(frame_cost(&frame).1, charged, "{n} transactions");
        }
    }

    fn by_position(index: usize, _: &Call<'_>) -> Result<Route, Refusal> {
        Ok(Route::Forward(index))
    }

    fn json(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    fn done(slot: &Slot) -> serde_json::Value {
        match slot {
            Slot::Done(out) => json(out),
            other => panic!("not answered: {other:?}"),
        }
    }

    /// Over a node group, eth_blockNumber is answered at the agreed head
    /// and a `latest` read is pinned to it; other reads go as sent.
    #[test]
    fn a_group_serves_latest_at_its_agreed_head() {
        let body = br#"[{"jsonrpc":"2.0","id":"n","method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0xab","latest"]},{"jsonrpc":"2.0","id":3,"method":"eth_getBalance","params":["0xab","0x1"]}]"#;
        let entries = entries(body);
        let plan = Plan::new(
            &entries,
            vec![None, None, None],
            Vec::new(),
            true,
            body.len(),
            Some(latest::Pin {
                head: 0x10,
                pinnable: &|_| true,
            }),
            |i, _| Ok(Route::Forward(i)),
        );
        assert_eq!(done(&plan.slots[0])["result"], "0x10");
        assert_eq!(done(&plan.slots[0])["id"], "n");
        assert!(plan.at_head);
        assert_eq!(
            String::from_utf8(plan.upstream.unwrap()).unwrap(),
            r#"[{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xab","0x10"]},{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0xab","0x1"]}]"#
        );
        assert_eq!(plan.forwarded, 2);
    }

    #[test]
    fn refusals_are_answered_in_place_and_the_rest_goes_up_under_the_routes_ids() {
        let entries = entries(BATCH);
        let plan = batch_plan(&entries, |i, _| Ok(Route::Forward(100 + i)));
        assert_eq!(
            String::from_utf8(plan.upstream.unwrap()).unwrap(),
            r#"[{"jsonrpc":"2.0","id":100,"method":"eth_chainId"},{"jsonrpc":"2.0","method":"eth_x"},{"jsonrpc":"2.0","id":104,"method":"eth_blockNumber"}]"#
        );
        assert_eq!(plan.forwarded, 3);
        assert_eq!(plan.outcome, Outcome::MethodDenied, "the first refusal's");
        assert_eq!(plan.refused, 0, "screening refused nothing");
        assert!(matches!(plan.slots[0], Slot::Awaiting));
        assert!(matches!(plan.slots[1], Slot::Silent));
        assert_eq!(done(&plan.slots[2])["id"], 7);
        assert_eq!(
            done(&plan.slots[2])["error"]["code"],
            code::METHOD_NOT_FOUND
        );
        assert_eq!(done(&plan.slots[3])["id"], 8);
        assert_eq!(done(&plan.slots[3])["error"]["code"], code::INVALID_REQUEST);
        assert!(matches!(plan.slots[4], Slot::Awaiting));
    }

    #[test]
    fn a_lone_call_goes_up_without_brackets() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
        let entries = entries(body);
        let plan = Plan::new(
            &entries,
            vec![None],
            Vec::new(),
            false,
            body.len(),
            None,
            |_, _| Ok(Route::Forward(42)),
        );
        assert_eq!(
            plan.upstream.as_deref(),
            Some(&br#"{"jsonrpc":"2.0","id":42,"method":"eth_chainId","params":[]}"#[..])
        );
        assert_eq!(plan.outcome, Outcome::Forwarded);
    }

    #[test]
    fn the_transports_refusal_is_answered_as_a_verdict_and_a_skip_is_silent() {
        let entries = entries(BATCH);
        let plan = batch_plan(&entries, |_, call| match call.is_notification() {
            true => Ok(Route::Skip),
            false => Err(Refusal::UpstreamUnavailable),
        });
        assert!(plan.upstream.is_none(), "nothing goes up");
        assert_eq!(plan.forwarded, 0);
        assert_eq!(plan.outcome, Outcome::UpstreamUnavailable);
        assert_eq!(done(&plan.slots[0])["id"], "a");
        assert!(matches!(plan.slots[1], Slot::Silent));
        assert!(!plan.awaits());
    }

    #[test]
    fn the_nodes_answers_go_to_their_places_under_the_callers_ids() {
        let entries = entries(BATCH);
        let mut plan = batch_plan(&entries, by_position);
        // The node answers out of order, once twice, and leaves one out.
        let node =
            br#"[{"jsonrpc":"2.0","id":0,"result":"0x1"},{"jsonrpc":"2.0","id":0,"result":"0x2"}]"#;
        let taken = plan.settle(&entries, node, |call| call.method == "eth_chainId");
        assert_eq!(taken, Some(true));
        plan.close(&entries, None);
        let answer = answer(plan.slots, true).unwrap();
        let answer = json(&answer);
        assert_eq!(
            answer.as_array().unwrap().len(),
            4,
            "no answer to the notification"
        );
        assert_eq!(
            answer[0],
            serde_json::json!({"jsonrpc": "2.0", "id": "a", "result": "0x1"})
        );
        assert_eq!(answer[1]["id"], 7);
        assert_eq!(answer[2]["id"], 8);
        assert_eq!(answer[3]["id"], 9);
        assert_eq!(answer[3]["error"]["code"], code::INTERNAL_ERROR);
        assert_eq!(
            answer[3]["error"]["message"],
            "upstream returned no response for this call"
        );
    }

    #[test]
    fn an_error_for_the_whole_message_answers_every_forwarded_call() {
        let entries = entries(BATCH);
        let mut plan = batch_plan(&entries, by_position);
        let node = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no batches"}}"#;
        assert_eq!(plan.settle(&entries, node, |_| true), Some(false));
        assert!(!plan.awaits());
        assert_eq!(done(&plan.slots[0])["id"], "a");
        assert_eq!(done(&plan.slots[0])["error"]["message"], "no batches");
        assert_eq!(done(&plan.slots[4])["id"], 9);
        assert!(matches!(plan.slots[1], Slot::Silent));
    }

    #[test]
    fn an_answer_that_is_not_json_rpc_settles_nothing() {
        let entries = entries(BATCH);
        let mut plan = batch_plan(&entries, by_position);
        assert_eq!(plan.settle(&entries, b"<html>", |_| true), None);
        let lone = br#"{"jsonrpc":"2.0","id":0,"result":"0x1"}"#;
        assert_eq!(plan.settle(&entries, lone, |_| true), None);
        assert!(plan.awaits());
        plan.close(&entries, Some(&Refusal::UpstreamTimeout));
        assert_eq!(
            done(&plan.slots[0])["error"]["message"],
            "upstream timed out"
        );
        assert_eq!(done(&plan.slots[4])["id"], 9);
    }

    #[test]
    fn a_slot_takes_one_answer_only_while_it_awaits() {
        let node = br#"{"jsonrpc":"2.0","id":3,"result":true}"#;
        let Some(UpstreamBatch::Whole(response)) = encode::parse_upstream_batch(node) else {
            panic!("a response");
        };
        let mut slot = Slot::Awaiting;
        assert!(slot.answer(&response, Some("\"x\"")));
        assert!(!slot.answer(&response, Some("\"y\"")), "answered already");
        slot.fail(&Refusal::UpstreamTimeout, Some("\"z\""));
        assert_eq!(
            done(&slot),
            serde_json::json!({"jsonrpc": "2.0", "id": "x", "result": true})
        );
        let mut silent = Slot::Silent;
        assert!(!silent.answer(&response, None));
        silent.fail(&Refusal::UpstreamTimeout, None);
        assert!(
            matches!(silent, Slot::Silent),
            "a notification is owed nothing"
        );
    }

    #[test]
    fn the_whole_answer_joins_a_batch_and_keeps_a_lone_answer_as_written() {
        assert_eq!(answer(vec![Slot::Silent, Slot::Silent], true), None);
        assert_eq!(answer(vec![Slot::Silent], false), None);
        let lone = answer(vec![Slot::Done(b"{\"a\":1}".to_vec())], false).unwrap();
        assert_eq!(&lone[..], b"{\"a\":1}");
        let batch = answer(
            vec![
                Slot::Done(b"1".to_vec()),
                Slot::Silent,
                Slot::Done(b"2".to_vec()),
            ],
            true,
        )
        .unwrap();
        assert_eq!(&batch[..], b"[1,2]");
    }
}
