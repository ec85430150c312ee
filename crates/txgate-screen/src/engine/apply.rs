//! How state is learned: [`Screen::apply`] takes a batch of invalidations
//! in one pass, a step at a time, each over the whole batch so that every
//! sharded map is locked once per shard touched:
//!
//! 1. the assertions, in order: versions bumped, stale items dropped;
//! 2. the calls the items name turn (or stay) hot;
//! 3. the bans, grouped by shard;
//! 4. attribution: the tx hash and sender a source did not name, from what
//!    was forwarded;
//! 5. the recent failures, grouped by shard;
//! 6. cooldown accounting and sender charges, once per failure.

use alloy_primitives::{Address, B256};

use super::{Applied, Failure, Invalidation, Screen};
use crate::assertion::{AssertionKey, AssertionRef, Observed};
use crate::backpressure::Charged;
use crate::denied::Inserted;
use crate::ttl::Millis;

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
}

impl Screen {
    /// Applies a batch of invalidations in one pass: assertion versions,
    /// denied fingerprints (bloom and map), recent failures, sender
    /// charges (from the invalidation, else from what was forwarded),
    /// cooldown accounting.
    ///
    /// One failure, one charge: a tx hash already learned (from any
    /// source, or earlier in the batch) refreshes its ban but is neither
    /// charged nor counted towards a cooldown again.
    pub fn apply(&self, batch: &[Invalidation], now: Millis) -> Applied {
        let mut applied = Applied::default();
        let mut live = self.observe_assertions(batch, now, &mut applied);
        self.heat_calls(&live, now);
        let inserted = self.ban(&live, now);
        self.attribute(&mut live, now);
        let replaced = self.record_failures(&live, now);
        applied.recent_failures = replaced.len();
        self.charge(&live, inserted, replaced, now, &mut applied);
        applied
    }

    /// Step 1: each item's assertion, in order (a bump mid-batch makes
    /// later items of the old version stale), one table lookup per run of
    /// the same key. A source that names no assertion bans under none, and
    /// its failures count towards a cooldown under the call's key.
    fn observe_assertions<'b>(
        &self,
        batch: &'b [Invalidation],
        now: Millis,
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

    /// Step 3: the bans, grouped by shard; what each insert did, in the
    /// order of `live`.
    fn ban(&self, live: &[Live<'_>], now: Millis) -> Vec<Inserted> {
        let expires = now + self.settings.denied_ttl;
        let items: Vec<(B256, Option<AssertionRef>)> =
            live.iter().map(|l| (l.inv.fingerprint, l.ban)).collect();
        self.denied
            .insert_batch(&items, expires, expires + self.settings.suspect_window, now)
    }

    /// Step 4, attribution: what the source did not say comes from what
    /// was forwarded (a txgate.v1 sidecar says both: no lookup).
    fn attribute(&self, live: &mut [Live<'_>], now: Millis) {
        for l in live {
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

    /// Step 5: the recent failures, grouped by shard. Returns, for each
    /// item with a tx hash, in order, the failure its insert replaced:
    /// that tells a failure already learned (and charged) from a new one,
    /// at no extra lookup. A failure with nobody to charge is recorded as
    /// not charged, so a later source that names the sender does.
    fn record_failures(&self, live: &[Live<'_>], now: Millis) -> Vec<Option<Failure>> {
        let expires = now + self.settings.recent_failure_ttl;
        let failures: Vec<(B256, Failure, Millis)> = live
            .iter()
            .filter_map(|l| {
                let failure = Failure {
                    assertion: l.ban,
                    charged: l.sender.is_some(),
                };
                l.hash.map(|h| (h, failure, expires))
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

    /// Step 6: the bans counted, then cooldown accounting and the
    /// sender's charge, once per failure: a failure already charged
    /// (`replaced`, from step 5) counts as a duplicate only.
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
            let earlier = match l.hash {
                Some(_) => replaced.next().flatten().filter(|f| f.charged),
                None => None,
            };
            if earlier.is_some() {
                applied.duplicates += 1;
                continue;
            }
            if new_ban
                && let Some(cooldown) = l.cooldown
                && self
                    .assertions
                    .note_failure(cooldown, (inv.target, inv.selector), now)
            {
                applied.cooldowns += 1;
            }
            if let Some(sender) = l.sender {
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
