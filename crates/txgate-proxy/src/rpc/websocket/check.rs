//! One message's checks, as an HTTP body's: parsed, charged to the
//! client's rates, admitted under the in-flight cap, and planned by the
//! same planner as an HTTP body ([`crate::rpc::plan`]: each call through
//! the method policy, the sync cap, a conditional transaction's gates and
//! the screening stack); here only the subscription caps, txgate's ids
//! and what each forwarded call waits for are added. What passes becomes
//! one upstream message with txgate's ids.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use txgate_jsonrpc::{Entry, Frame};
use txgate_nodes::Role;

use super::{Peer, WebSockets};
use crate::limits::admission::Permit;
use crate::limits::pacing::Pace;
use crate::metrics::Outcome;
use crate::request::Refuse;
use crate::rpc::plan::{Route, Slot, frame_cost, frame_refusal};
use crate::rpc::rescue::Refusal;
use crate::rpc::sync::SyncSlot;
use crate::rpc::{From, Shared};

/// What a subscription call does to the socket's count.
#[derive(Debug, Clone)]
pub(super) enum Sub {
    None,
    /// `eth_subscribe`, one reserved: kept on success, given back on error.
    Subscribe,
    /// `eth_unsubscribe` of this id: given back when the node says `true`.
    Unsubscribe(String),
}

/// A forwarded call awaiting the node, by txgate's upstream id.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) message: u64,
    pub(super) index: usize,
    /// The caller's id, as JSON text (`None`: a notification).
    pub(super) caller_id: Option<String>,
    pub(super) sub: Sub,
    /// A screened submission: the node taking it ends its client's streak
    /// of refusals.
    pub(super) submission: bool,
    /// The socket it travels on.
    pub(super) via: Via,
    /// A raw-transaction submission (read-your-writes follows it).
    pub(super) submits: bool,
    /// A submission whose log line was admitted.
    pub(super) logged: Option<Box<Logged>>,
}

/// A forwarded submission whose submission-log line was admitted, as the
/// line needs it.
#[derive(Debug)]
pub(super) struct Logged {
    pub(super) admitted: crate::rpc::submission_log::Admitted,
    pub(super) method: Box<str>,
    pub(super) params: Option<Box<serde_json::value::RawValue>>,
    pub(super) sent: Instant,
}

/// The socket a forwarded call travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// The session's own socket to this node.
    Own(usize),
    /// The worker's lane to this node, in this generation of its socket.
    Lane(usize, u64),
    /// Refused before it was sent (no node of its role, a full lane, the
    /// session leaving, a socket that did not open).
    Unsent,
}

/// A message's answer being put together.
#[derive(Debug)]
pub(super) struct Assembly {
    pub(super) batch: bool,
    pub(super) slots: Vec<Slot>,
    pub(super) waiting: usize,
    pub(super) deadline: Instant,
    /// Held until answered: the in-flight slot and any sync slots.
    pub(super) _held: Held,
    /// When the client's pacing hold ends: the whole answer, once ready,
    /// waits out what is left of it (none once a submission of the
    /// message is taken by the node).
    pub(super) hold_until: Option<tokio::time::Instant>,
    /// The message's submissions refused by screening: the client's streak
    /// starts over from them if the node takes one of its submissions, as
    /// for an HTTP batch (taken back to 0 once used).
    pub(super) refused: u32,
}

#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) _permit: Option<Permit>,
    pub(super) _syncs: Vec<SyncSlot>,
}

/// A message whose checks are done.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) message: u64,
    pub(super) batch: bool,
    pub(super) slots: Vec<Slot>,
    pub(super) pending: Vec<(u64, Pending)>,
    /// The forwarded calls, as one upstream message.
    pub(super) upstream: Option<Vec<u8>>,
    /// A call of it may not travel on a lane ([`super::lane::carries`]):
    /// the whole message goes on a socket of the session's own.
    pub(super) private: bool,
    /// The role its forwarded calls go to, over a node group (the
    /// strongest of theirs: [`super::nodes::strongest`]); `None` in the
    /// short form or with nothing forwarded.
    pub(super) role: Option<Role>,
    pub(super) outcome: Outcome,
    pub(super) timeout: Option<Duration>,
    pub(super) held: Held,
    /// See [`Assembly::hold_until`].
    pub(super) hold_until: Option<tokio::time::Instant>,
    /// See [`Assembly::refused`].
    pub(super) refused: u32,
}

pub(super) type Checking = Pin<Box<dyn Future<Output = Checked> + Send>>;

/// What every check of one socket shares.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) shared: Arc<Shared>,
    pub(super) ws: Arc<WebSockets>,
    pub(super) peer: Peer,
    /// txgate's next upstream id on this socket (without a lane).
    pub(super) next_id: AtomicUsize,
    /// Its place on the worker's lane, whose ids it then takes.
    pub(super) seat: Option<super::lane::Seat>,
    /// Subscriptions of this socket, open or asked for.
    pub(super) subscriptions: AtomicUsize,
    /// Subscriptions the node opened for this socket.
    pub(super) open_subscriptions: AtomicUsize,
}

impl Conn {
    fn upstream_id(&self) -> usize {
        match &self.seat {
            Some(seat) => seat.next_id(),
            None => self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(super) fn reserve_subscription(&self) -> Result<(), Refusal> {
        let settings = &self.ws.settings;
        let per_connection = settings.max_subscriptions_per_connection;
        let taken = self
            .subscriptions
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < per_connection).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(Refusal::TooManySubscriptions {
                max: per_connection,
                per_connection: true,
            });
        }
        if !self.ws.reserve_subscription() {
            self.subscriptions.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::TooManySubscriptions {
                max: settings.max_subscriptions,
                per_connection: false,
            });
        }
        Ok(())
    }

    pub(super) fn release_subscription(&self) {
        self.subscriptions.fetch_sub(1, Ordering::AcqRel);
        self.ws.release_subscriptions(1);
    }
}

/// Parses, charges, admits and screens one message; what passes becomes
/// one upstream message with txgate's ids.
pub(super) async fn check(conn: Arc<Conn>, message: u64, text: Bytes) -> Checked {
    let shared = &conn.shared;
    let mut checked = Checked {
        message,
        batch: false,
        slots: Vec::new(),
        pending: Vec::new(),
        upstream: None,
        private: false,
        role: None,
        outcome: Outcome::Forwarded,
        timeout: None,
        held: Held::default(),
        hold_until: None,
        refused: 0,
    };
    let refuse = |checked: &mut Checked, refusal: Refusal, id| {
        checked.outcome = refusal.class().outcome;
        let mut out = Vec::with_capacity(96);
        refusal.write(&mut out, id);
        checked.slots = vec![Slot::Done(out)];
    };
    let frame = match txgate_jsonrpc::parse(&text, shared.max_batch_size) {
        Ok(frame) => frame,
        Err(e) => {
            // One call on the client's rate, as an HTTP body that fails to
            // parse has paid before it is read.
            let refusal = match &conn.peer.charged {
                Some(charged) => charged.charge(1, 0).err().map(Refusal::from),
                None => None,
            };
            refuse(&mut checked, refusal.unwrap_or(frame_refusal(e)), None);
            return checked;
        }
    };
    let (calls, txs, id) = frame_cost(&frame);
    if let Some(refusal) = shared.too_many_txs(txs) {
        refuse(&mut checked, refusal, id);
        return checked;
    }
    if let Some(charged) = &conn.peer.charged
        && let Err(refusal) = charged.charge(calls, txs)
    {
        refuse(&mut checked, refusal.into(), id);
        return checked;
    }
    match conn.ws.admission.try_admit() {
        Ok(permit) => checked.held._permit = Some(permit),
        Err(refusal) => {
            refuse(&mut checked, refusal.into(), id);
            return checked;
        }
    }
    let entries = match frame {
        Frame::Single(Entry::Invalid(invalid)) => {
            refuse(
                &mut checked,
                Refusal::InvalidRequest(invalid.message),
                invalid.id,
            );
            return checked;
        }
        Frame::Single(entry) => vec![entry],
        Frame::Batch(entries) => {
            checked.batch = true;
            entries
        }
    };
    let from = From {
        client: conn.peer.client,
        signed: crate::rpc::conditional::Signed::new(None, &text),
    };
    let mut pending = Vec::new();
    let mut private = false;
    let mut role = None;
    let grouped = !shared.upstream.state().is_short_form();
    let submits = grouped && crate::rpc::split::submits(&entries);
    let plan = shared
        .plan(
            &entries,
            &from,
            checked.batch,
            text.len(),
            None,
            |index, call| {
                let sub = match call.method.as_ref() {
                    "eth_subscribe" => Sub::Subscribe,
                    "eth_unsubscribe" => Sub::Unsubscribe(first_string_param(call.params)),
                    _ => Sub::None,
                };
                if let Sub::Subscribe = sub {
                    // A subscription without an id could never be told its id:
                    // not opened (and no answer owed).
                    if call.is_notification() {
                        return Ok(Route::Skip);
                    }
                    conn.reserve_subscription().inspect_err(|_| {
                        shared.metrics.websocket.subscriptions_refused.inc();
                    })?;
                }
                private |= !super::lane::carries(&call.method);
                if grouped {
                    let own = shared.role_in_batch(call, &from, submits);
                    role = Some(super::nodes::strongest(role, own));
                }
                if call.is_notification() {
                    // Forwarded as a notification: the node owes no answer, so
                    // nothing waits for one.
                    return Ok(Route::Forward(0));
                }
                let upstream_id = conn.upstream_id();
                let submits = crate::upstream::group::is_submission(&call.method);
                pending.push((
                    upstream_id as u64,
                    Pending {
                        message,
                        index,
                        caller_id: call.id.map(|i| i.as_str().to_owned()),
                        sub,
                        submission: shared.screens(&call.method),
                        via: Via::Own(0),
                        submits,
                        // Kept only for a line under the log's rate: no
                        // copy for the submissions it leaves out.
                        logged: submits
                            .then(|| shared.submissions.admit(Instant::now()))
                            .flatten()
                            .map(|admitted| {
                                Box::new(Logged {
                                    admitted,
                                    method: call.method.as_ref().into(),
                                    params: call.params.map(ToOwned::to_owned),
                                    sent: Instant::now(),
                                })
                            }),
                    },
                ));
                Ok(Route::Forward(upstream_id))
            },
        )
        .await;
    checked.timeout = shared.sync.timeout(plan.syncs.len());
    checked.held._syncs = plan.syncs;
    checked.slots = plan.slots;
    checked.pending = pending;
    // A large batch keeps to the session's own socket: a few answers of
    // the largest kind a lane carries stay under what it reads.
    checked.private = private || (checked.batch && plan.forwarded > super::lane::MAX_BATCH);
    checked.upstream = plan.upstream;
    checked.role = role;
    checked.outcome = plan.outcome;
    checked.refused = plan.refused;
    pace_message(&conn, &mut checked, plan.refused);
    checked
}

/// Pacing, as for an HTTP answer: `refused` submissions of the message
/// grow its client's streak (a submission of it the node takes starts the
/// streak over from them, when its answer comes: the session). A message
/// due a hold has its forwarded calls sent at once; its whole answer, once
/// ready, waits out what is left of the hold in the session, its
/// in-flight slot given back, among the socket's messages under way (so a
/// socket holds at most `websocket.max_in_flight_per_connection`). So a
/// call added to each message does not evade the hold. A message that
/// opens a subscription counts, but is not held: the node's notifications
/// for it would reach the client before the subscription's id.
fn pace_message(conn: &Conn, checked: &mut Checked, refused: u32) {
    let (Some(pacer), Some(client)) = (&conn.shared.pacer, conn.peer.client) else {
        return;
    };
    if refused == 0 {
        return;
    }
    let subscribes = checked
        .pending
        .iter()
        .any(|(_, pending)| matches!(pending.sub, Sub::Subscribe));
    if subscribes {
        pacer.note(client, Pace::Refused(refused));
        return;
    }
    checked.hold_until = pacer.due(client, Pace::Refused(refused));
}

/// The first param as a string (`eth_unsubscribe`'s subscription id).
fn first_string_param(params: Option<&serde_json::value::RawValue>) -> String {
    params
        .and_then(|p| serde_json::from_str::<(String,)>(p.get()).ok())
        .map(|(id,)| id)
        .unwrap_or_default()
}
