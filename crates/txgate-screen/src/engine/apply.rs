//! How state is learned: [`Screen::apply`] takes a batch of invalidations
//! in one pass, a step at a time, each over the whole batch so that every
//! sharded map is locked once per shard touched:
//!
//! 0. each item's times, from its own start (see [`crate::wall`]): its ban
//!    ends a ban's life after it, its failure stays recent
//!    `recent_failure_ttl` after it; an item whose ban's life is over is
//!    dropped (expired);
//! 1. the assertions, in order: versions bumped, stale items dropped;
//! 2. the calls the items name turn (or stay) hot;
//! 3. the bans, grouped by shard;
//! 4. attribution: the tx hash and sender a source did not name, from what
//!    was forwarded;
//! 5. the recent failures, grouped by shard;
//! 6. cooldown accounting, once per ban inserted (the one applier whose
//!    insert made the ban counts it, even when another applier of the same
//!    failure at the same moment charged it first), and sender charges,
//!    once per failure.
//!
//! Replaying is harmless. A ban ends at its start plus its life whatever
//! applies it, and when: a repeat or a replay finds it ending as late and
//! moves nothing. A sender is charged for a failure only while the failure
//! is recent (within `recent_failure_ttl` of its start), and its
//! recent-failure entry, which lives exactly that window (never
//! restarted), remembers the charge: a repeat within the window finds it,
//! a repeat after it finds none but is past the window. A failure without
//! a tx hash is remembered by its ban instead: a repeat does not extend
//! it (a later failure of the same fingerprint does, and charges). So a sender is charged at most once per failure, however often the
//! failure is applied, and with no memory beyond the recent-failure cache
//! and the denied set (each bounded by its own setting; see the limits in
//! HEURISTICS.md, "One failure, one charge").

use alloy_primitives::{Address, B256};

use super::{Applied, Failure, Invalidation, Screen};
use crate::assertion::{AssertionKey, AssertionRef, Observed};
use crate::backpressure::Charged;
use crate::denied::Inserted;
use crate::ttl::Millis;
use crate::wall::{UnixMillis, remaining};

/// An invalidation of the batch that is not stale, and what the steps
/// learn about it.
struct Live<'b> {
    inv: &'b Invalidation,
    /// The assertion its ban is under; `None` when the source named none.
    ban: Option<AssertionRef>,
    /// The assertion (or, when the source named none, the call's key) its
    /// failure counts towards a cooldown of.
    cooldown: Option<AssertionRef>,
    /// The failing tx hash, named by the source or attributed.
    hash: Option<B256>,
    /// The sender to charge, named by the source or attributed.
    sender: Option<Address>,
    /// When its ban ends: its start plus the ban's life.
    ends: Millis,
    /// Until when its failure is recent (its start plus
    /// `recent_failure_ttl`); `None` once it is not: its hash is not
    /// refused for it, and nobody is charged.
    recent_until: Option<Millis>,
}

impl Live<'_> {
    /// The failure it records: its tx hash, while the failure is recent.
    fn failure(&self) -> Option<(B256, Millis)> {
        self.hash.zip(self.recent_until)
    }
}

impl Screen {
    /// Applies a batch of invalidations in one pass: assertion versions,
    /// denied fingerprints (bloom and map), recent failures, sender
    /// charges (from the invalidation, else from what was forwarded),
    /// cooldown accounting. `now` is the engine's clock, `wall` what the
    /// wall clock reads at the same moment: each item's start is told on
    /// the wall clock.
    ///
    /// One failure, one charge: a tx hash already learned (from any
    /// source, earlier in the batch, or replayed) keeps its ban's end and
    /// is not charged again; a ban already held is not counted towards a
    /// cooldown again; see the module docs.
    pub fn apply(&self, batch: &[Invalidation], now: Millis, wall: UnixMillis) -> Applied {
        let mut applied = Applied::default();
        let mut live = self.observe_assertions(batch, now, wall, &mut applied);
        self.heat_calls(&live, now);
        let inserted = self.ban(&live, now);
        self.attribute(&mut live, now);
        let replaced = self.record_failures(&live, now);
        applied.recent_failures = replaced.len();
        self.charge(&live, inserted, replaced, now, &mut applied);
        applied
    }

    /// Steps 0 and 1: each item's times, and its assertion, in order (a
    /// bump mid-batch makes later items of the old version stale), one
    /// table lookup per run of the same key. An item whose ban's life is
    /// over touches nothing, not even its assertion. A source that names
    /// no assertion bans under none, and its failures count towards a
    /// cooldown under the call's key.
    fn observe_assertions<'b>(
        &self,
        batch: &'b [Invalidation],
        now: Millis,
        wall: UnixMillis,
        applied: &mut Applied,
    ) -> Vec<Live<'b>> {
        // The last key looked up, and its answer (`None`: stale).
        let mut last: Option<(AssertionKey, Option<Option<AssertionRef>>)> = None;
        let mut observe = |key: AssertionKey, applied: &mut Applied| match last {
            Some((seen, aref)) if seen == key => aref,
            _ => {
                let aref = match self.assertions.observe(key, now) {
                    Observed::Stale => None,
                    Observed::Bumped(aref) => {
                        applied.bumped += 1;
                        Some(Some(aref))
                    }
                    Observed::Current(aref) => Some(Some(aref)),
                    Observed::Untracked => Some(None),
                };
                last = Some((key, aref));
                aref
            }
        };
        let mut live = Vec::with_capacity(batch.len());
        for inv in batch {
            let Some(left) = remaining(inv.started, self.settings.denied_ttl, wall) else {
                applied.expired += 1;
                continue;
            };
            let recent_until = remaining(inv.started, self.settings.recent_failure_ttl, wall)
                .map(|left| now + left);
            let (ban, cooldown) = match inv.assertion {
                Some(key) => match observe(key, applied) {
                    Some(aref) => (aref, aref),
                    None => {
                        applied.stale += 1;
                        continue;
                    }
                },
                None => {
                    let call = (inv.target != Address::ZERO)
                        .then(|| observe(AssertionKey::of_call(inv.target, inv.selector), applied))
                        .flatten()
                        .flatten();
                    (None, call)
                }
            };
            live.push(Live {
                inv,
                ban,
                cooldown,
                hash: None,
                sender: None,
                ends: now + left,
                recent_until,
            });
        }
        live
    }

    /// Step 2: every call an applied invalidation names turns (or stays)
    /// hot.
    fn heat_calls(&self, live: &[Live<'_>], now: Millis) {
        self.hot.heat(
            live.iter()
                .map(|l| l.inv)
                .filter(|inv| inv.target != Address::ZERO)
                .map(|inv| (inv.target, inv.selector)),
            now,
        );
    }

    /// Step 3: the bans, grouped by shard, each until its own end; what
    /// each insert did, in the order of `live`.
    fn ban(&self, live: &[Live<'_>], now: Millis) -> Vec<Inserted> {
        let items: Vec<(B256, Option<AssertionRef>)> =
            live.iter().map(|l| (l.inv.fingerprint, l.ban)).collect();
        let suspect = self.settings.suspect_window;
        self.denied
            .insert_batch_with(&items, |i| (live[i].ends, live[i].ends + suspect), now)
    }

    /// Step 4, attribution: what the source did not say comes from what
    /// was forwarded (a txgate.v1 sidecar says both: no lookup). Not for a
    /// failure that is no longer recent (nothing to record or charge): the
    /// forward stays for a later one.
    fn attribute(&self, live: &mut [Live<'_>], now: Millis) {
        for l in live {
            if l.recent_until.is_none() {
                continue;
            }
            let inv = l.inv;
            l.hash = inv.tx_hash.or_else(|| {
                self.pending
                    .remove(&inv.fingerprint, now)
                    .map(|p| p.tx_hash)
            });
            l.sender = inv
                .sender
                .or_else(|| {
                    l.hash
                        .and_then(|h| self.forwarded.get(&h, now))
                        .map(|f| f.sender)
                })
                .filter(|s| *s != Address::ZERO);
        }
    }

    /// Step 5: the recent failures, grouped by shard, each until the end
    /// of its own window (a copy keeps the earlier end: never restarted).
    /// Returns, for each item with a failure to record
    /// ([`Live::failure`]), in order, the failure its insert replaced:
    /// that tells a failure already learned (and charged) from a new one,
    /// at no extra lookup. A failure with nobody to charge is recorded as
    /// not charged, so a later source that names the sender does.
    fn record_failures(&self, live: &[Live<'_>], now: Millis) -> Vec<Option<Failure>> {
        let failures: Vec<(B256, Failure, Millis)> = live
            .iter()
            .filter_map(|l| {
                let failure = Failure {
                    assertion: l.ban,
                    charged: l.sender.is_some(),
                };
                l.failure().map(|(h, until)| (h, failure, until))
            })
            .collect();
        // A copy keeps what an earlier one knew: charged, and the
        // assertion it named if this one names none.
        self.recent_failures
            .insert_batch_merging(&failures, now, |earlier, new| match earlier {
                Some(e) => Failure {
                    assertion: new.assertion.or(e.assertion),
                    charged: new.charged || e.charged,
                },
                None => new,
            })
    }

    /// Step 6: the bans counted; cooldown accounting, once per ban this
    /// batch inserted; then the sender's charge, once per failure: a
    /// failure already charged (`replaced`, from step 5) counts as a
    /// duplicate only; so does, with no recent failure to record (no tx
    /// hash, or past its window), one whose ban it did not extend. Nobody
    /// is charged for a failure that is no longer recent.
    fn charge(
        &self,
        live: &[Live<'_>],
        inserted: Vec<Inserted>,
        replaced: Vec<Option<Failure>>,
        now: Millis,
        applied: &mut Applied,
    ) {
        let mut replaced = replaced.into_iter();
        for (l, result) in live.iter().zip(inserted) {
            let inv = l.inv;
            let new_ban = result == Inserted::New;
            if new_ban {
                applied.banned += 1;
            } else {
                applied.refreshed += 1;
            }
            // A cooldown counts distinct failing fingerprints: the one
            // applier whose insert made the ban (decided under its shard's
            // lock) counts it, whoever charged the failure; a copy applied
            // at the same moment by another source (which may record and
            // charge the failure first) must not lose it.
            if new_ban
                && let Some(cooldown) = l.cooldown
                && self
                    .assertions
                    .note_failure(cooldown, (inv.target, inv.selector), now)
            {
                applied.cooldowns += 1;
            }
            let repeat = match l.failure() {
                Some(_) => replaced.next().flatten().is_some_and(|f| f.charged),
                None => result == Inserted::Held,
            };
            if repeat {
                applied.duplicates += 1;
                continue;
            }
            if let Some(sender) = l.sender
                && l.recent_until.is_some()
            {
                applied.charged += 1;
                match self.buckets.charge(sender, now) {
                    Charged::Taken => {}
                    Charged::BackedOff(_) => applied.backoffs += 1,
                    Charged::Untracked => applied.untracked += 1,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
