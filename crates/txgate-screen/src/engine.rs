//! The screening state and its stages, cheapest first.
//!
//! [`Screen`] holds every cache; its `stage_*` methods are the steps of the
//! request path, each a plain function of the [`Candidate`] so far. Their
//! order is written once, in [`crate::stage::Stages`]: the proxy builds its
//! tower stack from that list, and `Screen::screen` (in [`crate::stage`])
//! runs the same list in a row for tests and benches. [`Screen::apply`]
//! (in `apply`) is the one way state is learned: a batch of invalidations
//! in one pass.
//!
//! 1. hex, then the tx hash straight from the raw bytes (no decoding):
//!    [`Screen::candidate`], which makes the [`Candidate`];
//! 2. fast-reject: the hash in the recent-failure cache;
//! 3. envelope decoding and the chain-id allow-list;
//! 4. fingerprint: denied (bloom, then map), assertion cooldown, queue
//!    shaping of suspect fingerprints (no sender needed, so before any
//!    ECDSA);
//! 5. sender: cache by tx hash, else libsecp256k1 recovery;
//! 6. sender backpressure;
//! 7. the commit ([`Screen::commit`]): a call on a cooldown's open trickle
//!    slot takes it (the fingerprint stage only peeked), then the pending
//!    attribution. A unit of calls (a bundle) runs the stages over every
//!    call first and commits them all or none (`Screen::commit_unit`, in
//!    `unit`).
//!
//! The values handed in and out are in `types`, the tunables in
//! `settings`; `inspect` and `pool` answer operators and the sequencer's
//! pool from the same state.

use std::time::Instant;

use alloy_primitives::{Address, B256};

use crate::assertion::{AssertionRef, Assertions, CallKey, CooldownCheck, Observed};
use crate::backpressure::SenderBuckets;
use crate::denied::{Ban, DeniedSet};
use crate::fingerprint::Fingerprint;
use crate::forwarded::{Forward, ForwardedMap};
use crate::hot::HotCalls;
use crate::recover::recover_sender;
use crate::snapshot::BanRecord;
use crate::ttl::{Millis, TtlMap};
use crate::tx::{Tx, check_chain_id, decode_hex, decode_with_hash, tx_hash};

mod apply;
mod inspect;
mod pool;
mod settings;
mod types;
mod unit;

pub use inspect::{BanView, CooldownView, FailureView, SenderView};
pub use pool::{PoolTx, PoolVerdict};
pub use settings::ScreenSettings;
pub use types::{
    Admitted, Applied, Candidate, Invalidation, Reason, Rejection, Sizes, UnitRejection,
};

/// The latest forward of a fingerprint (for shaping, and for sources that
/// name only the fingerprint); its sender is in the forwarded map.
#[derive(Debug, Clone, Copy)]
struct Pending {
    tx_hash: B256,
    at: Millis,
}

/// A recently failed tx hash.
#[derive(Debug, Clone, Copy)]
struct Failure {
    /// The assertion it failed, when named.
    assertion: Option<AssertionRef>,
    /// Whether its failure was charged and counted (false: only its hash
    /// was known), so that the same failure from another source is not.
    charged: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct Screen {
    settings: ScreenSettings,
    epoch: Instant,
    recent_failures: TtlMap<B256, Failure>,
    senders: TtlMap<B256, Address>,
    buckets: SenderBuckets,
    denied: DeniedSet,
    assertions: Assertions,
    pending: TtlMap<B256, Pending>,
    forwarded: ForwardedMap,
    hot: HotCalls,
}

impl Screen {
    /// Empty state; `epoch` is time zero of [`Millis`].
    pub fn new(settings: ScreenSettings, epoch: Instant) -> Screen {
        // An assertion leaves the table only once no ban can still name
        // it: after the longest a ban lives, suspect window included.
        let mut cooldown = settings.cooldown;
        cooldown.idle = cooldown
            .idle
            .max(settings.denied_ttl.saturating_add(settings.suspect_window));
        Screen {
            recent_failures: TtlMap::new(settings.max_recent_failures),
            senders: TtlMap::new(settings.max_cached_senders),
            buckets: SenderBuckets::new(settings.backpressure),
            denied: DeniedSet::new(settings.max_denied),
            assertions: Assertions::new(cooldown),
            pending: TtlMap::new(settings.max_pending),
            forwarded: ForwardedMap::new(settings.max_forwarded),
            hot: HotCalls::new(settings.hot_window, settings.max_hot_calls),
            settings,
            epoch,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ScreenSettings {
        &self.settings
    }

    /// `at` in milliseconds since the epoch.
    pub fn millis(&self, at: Instant) -> Millis {
        at.saturating_duration_since(self.epoch).as_millis() as Millis
    }

    /// Stage 1: hex, and the tx hash from the raw bytes: the candidate the
    /// other stages ([`crate::stage::Stages`]) work on.
    pub fn candidate(&self, param: &str, now: Millis) -> Result<Candidate, Rejection> {
        let raw = decode_hex(param).map_err(Rejection::Invalid)?;
        let hash = tx_hash(&raw);
        Ok(Candidate {
            now,
            raw,
            hash,
            tx: None,
            sender: None,
            fingerprint: None,
            sender_cached: false,
            suspect: false,
            trickle: false,
        })
    }

    /// Stage 2: refuse a tx hash that failed recently, before any ECDSA.
    #[inline]
    pub fn stage_fast_reject(&self, c: &Candidate) -> Result<(), Rejection> {
        match self.recent_failures.get(&c.hash, c.now) {
            None => Ok(()),
            Some(failure) => Err(Rejection::RecentFailure {
                tx_hash: c.hash,
                assertion: failure
                    .assertion
                    .and_then(|a| self.assertions.describe(a))
                    .map(|k| k.id),
            }),
        }
    }

    /// Stage 3: the envelope and the chain id.
    pub fn stage_decode(&self, c: &mut Candidate) -> Result<(), Rejection> {
        self.decoded(c).map(|_| ())
    }

    /// The decoded transaction: decoded here if no stage did yet, so a
    /// stage that needs it never depends on running after the decoder.
    fn decoded<'c>(&self, c: &'c mut Candidate) -> Result<&'c Tx, Rejection> {
        match &mut c.tx {
            Some(tx) => Ok(tx),
            slot @ None => {
                let tx = decode_with_hash(&c.raw, c.hash).map_err(Rejection::Invalid)?;
                check_chain_id(&tx, &self.settings.chain_ids).map_err(Rejection::Invalid)?;
                Ok(slot.insert(tx))
            }
        }
    }

    /// Stage 5: the sender, from the cache by tx hash or by recovery.
    pub fn stage_recover(&self, c: &mut Candidate) -> Result<(), Rejection> {
        if let Some(sender) = self.senders.get(&c.hash, c.now) {
            c.sender = Some(sender);
            c.sender_cached = true;
            return Ok(());
        }
        let sender = recover_sender(self.decoded(c)?).map_err(Rejection::Signature)?;
        self.senders
            .insert(c.hash, sender, c.now + self.settings.sender_cache_ttl);
        c.sender = Some(sender);
        Ok(())
    }

    /// Stage 6, the last: sender backpressure. (A cooldown's trickle slot
    /// is taken by [`Screen::commit`], once every check passed.)
    #[inline]
    pub fn stage_backpressure(&self, c: &Candidate) -> Result<(), Rejection> {
        if let Some(sender) = &c.sender
            && let Some(retry_after) = self.buckets.backoff(sender, c.now)
        {
            return Err(Rejection::SenderBackoff { retry_after });
        }
        Ok(())
    }

    /// Stage 4: fingerprint checks: denied, cooldown, shaping.
    pub fn stage_fingerprint(&self, c: &mut Candidate) -> Result<(), Rejection> {
        // Contract creations bypass.
        let Some(fp) = Fingerprint::of(self.decoded(c)?) else {
            return Ok(());
        };
        c.fingerprint = Some(fp);
        let now = c.now;
        let mut suspect = false;
        if let Some(ban) = self.denied.get(&fp.hash) {
            match self.ban_state(&ban, now) {
                BanState::Denied => {
                    return Err(Rejection::Denied {
                        fingerprint: fp.hash,
                        assertions: self.assertion_ids(&ban),
                    });
                }
                BanState::Suspect => suspect = true,
                BanState::Dead => {}
            }
        }
        let call: CallKey = (fp.target, fp.selector);
        // Peeked: the slot is taken by the commit, once every other check
        // passed (`take_trickle`).
        match self.assertions.peek(&call, now) {
            CooldownCheck::Clear => {}
            CooldownCheck::Trickle(_) => {
                suspect = true;
                c.trickle = true;
            }
            CooldownCheck::Refuse {
                assertion,
                retry_after,
            } => return Err(self.cooldown_refusal(fp.hash, assertion, retry_after)),
        }
        if suspect && let Some(p) = self.pending.get(&fp.hash, now) {
            let slot_end = p.at + self.settings.shaping_hold;
            if slot_end > now && p.tx_hash != c.hash {
                return Err(Rejection::Shaped {
                    fingerprint: fp.hash,
                    retry_after: slot_end - now,
                });
            }
        }
        c.suspect = suspect;
        Ok(())
    }

    /// The commit of a call every stage let through: it takes its
    /// cooldown's trickle slot if it found one open (refused if another
    /// call took it meanwhile: one call per trickle interval), then its
    /// forward is remembered for attribution (`admit`). The only
    /// step of the request path that changes what later calls are told
    /// (the sender cache aside, which only saves work); a unit's is
    /// `Screen::commit_unit`.
    pub fn commit(&self, c: &Candidate) -> Result<Admitted, Rejection> {
        self.take_trickle(c)?;
        Ok(self.admit(c))
    }

    /// A call that found its cooldown's trickle slot open takes it, once
    /// every other check passed. Refused if another call took it meanwhile
    /// (one call per trickle interval, as before).
    fn take_trickle(&self, c: &Candidate) -> Result<(), Rejection> {
        let (true, Some(fp)) = (c.trickle, c.fingerprint) else {
            return Ok(());
        };
        match self.assertions.check(&(fp.target, fp.selector), c.now) {
            CooldownCheck::Refuse {
                assertion,
                retry_after,
            } => Err(self.cooldown_refusal(fp.hash, assertion, retry_after)),
            CooldownCheck::Clear | CooldownCheck::Trickle(_) => Ok(()),
        }
    }

    /// The refusal of a call in cooldown: the assertion named unless the
    /// cooldown is keyed by the call itself.
    fn cooldown_refusal(
        &self,
        fingerprint: B256,
        assertion: AssertionRef,
        retry_after: Millis,
    ) -> Rejection {
        Rejection::Cooldown {
            fingerprint,
            assertion: self
                .assertions
                .describe(assertion)
                .filter(|k| !k.is_call())
                .map(|k| k.id),
            retry_after,
        }
    }

    /// Last step of a commit: remember the forward for attribution (by
    /// fingerprint, for shaping and fingerprint-only sources; by tx hash,
    /// for hash-only sources).
    fn admit(&self, c: &Candidate) -> Admitted {
        let sender = c.sender.unwrap_or(Address::ZERO);
        if let Some(fp) = &c.fingerprint {
            self.pending.insert(
                fp.hash,
                Pending {
                    tx_hash: c.hash,
                    at: c.now,
                },
                c.now + self.settings.pending_timeout,
            );
            self.forwarded.insert(
                c.hash,
                &Forward {
                    fingerprint: *fp,
                    sender,
                },
                c.now + self.settings.forwarded_ttl,
                c.now,
            );
        }
        Admitted {
            hash: c.hash,
            sender,
            fingerprint: c.fingerprint.map(|fp| fp.hash),
            suspect: c.suspect,
        }
    }

    fn ban_state(&self, ban: &Ban, now: Millis) -> BanState {
        if ban.suspect_until <= now {
            return BanState::Dead;
        }
        // A ban of an outdated assertion version is lifted (and not even
        // suspect: the assertion changed). A ban under no assertion stays.
        let live = match ban.assertions {
            [None, None] => true,
            named => named.iter().flatten().any(|a| self.assertions.is_live(*a)),
        };
        if !live {
            BanState::Dead
        } else if ban.expires > now {
            BanState::Denied
        } else {
            BanState::Suspect
        }
    }

    fn assertion_ids(&self, ban: &Ban) -> Vec<B256> {
        ban.assertions
            .iter()
            .flatten()
            .filter_map(|a| self.assertions.describe(*a).map(|k| k.id))
            .collect()
    }

    /// Whether call `call` (target, selector) drew an invalidation within
    /// [`ScreenSettings::hot_window`] before `now`: a new fingerprint on it
    /// is worth asking the sidecar about before it is forwarded.
    #[inline]
    pub fn is_hot(&self, call: &CallKey, now: Millis) -> bool {
        self.hot.is_hot(call, now)
    }

    /// When `call` cools down, if it is hot at `now`.
    pub fn hot_until(&self, call: &CallKey, now: Millis) -> Option<Millis> {
        self.hot.hot_until(call, now)
    }

    /// Whether `invalidation` was learned and applied here before, from
    /// any source: its tx hash a recent failure already charged, and its
    /// fingerprint's ban held (a source repeating it need not pass it on
    /// again; the same hash with another fingerprint is new).
    pub fn already_learned(&self, invalidation: &Invalidation, now: Millis) -> bool {
        let charged = invalidation.tx_hash.is_some_and(|hash| {
            self.recent_failures
                .get(&hash, now)
                .is_some_and(|failure| failure.charged)
        });
        charged
            && self
                .denied
                .get(&invalidation.fingerprint)
                .is_some_and(|ban| self.ban_state(&ban, now) != BanState::Dead)
    }

    /// What was forwarded under `tx_hash` (fingerprint and sender), while
    /// it is remembered: how a source that names only the hash is turned
    /// into an [`Invalidation`].
    pub fn forwarded(&self, tx_hash: &B256, now: Millis) -> Option<Forward> {
        self.forwarded.get(tx_hash, now)
    }

    /// A failed tx hash txgate did not forward (or no longer remembers):
    /// refused from now on by hash, before any ECDSA; nobody is charged.
    /// Returns whether it was new.
    pub fn fail_hash(&self, tx_hash: B256, now: Millis) -> bool {
        // One lock for the check and the insert: a failure the batch
        // worker records meanwhile (charged, with its assertion) is never
        // overwritten.
        self.recent_failures.insert_if_absent(
            tx_hash,
            Failure {
                assertion: None,
                charged: false,
            },
            now + self.settings.recent_failure_ttl,
            now,
        )
    }

    /// One step of background upkeep: sweeps `shards` shards of each cache
    /// (round-robin), finished cooldowns and idle assertions.
    pub fn sweep(&self, now: Millis, shards: usize) {
        self.denied
            .sweep(shards, |ban| self.ban_state(ban, now) == BanState::Dead);
        self.recent_failures.sweep(now, shards);
        self.senders.sweep(now, shards);
        self.pending.sweep(now, shards);
        self.forwarded.sweep(now, shards);
        self.hot.sweep(now, shards);
        self.buckets.sweep(now);
        self.assertions.sweep(now);
    }

    /// Assertions evicted from the table so far (idle ones, by the sweep
    /// or to make room for a new one).
    pub fn assertions_evicted(&self) -> usize {
        self.assertions.evicted()
    }

    /// Cache sizes.
    pub fn sizes(&self) -> Sizes {
        Sizes {
            denied: self.denied.len(),
            recent_failures: self.recent_failures.len(),
            senders: self.senders.len(),
            backpressured: self.buckets.len(),
            pending: self.pending.len(),
            forwarded: self.forwarded.len(),
            cooldowns: self.assertions.cooldowns(),
            assertions: self.assertions.len(),
            hot_calls: self.hot.len(),
        }
    }

    /// Every ban still in force or suspect, with its remaining times and
    /// current assertions: what a snapshot keeps.
    pub fn export_bans(&self, now: Millis) -> Vec<BanRecord> {
        let mut out = Vec::with_capacity(self.denied.len());
        for shard in 0..self.ban_shards() {
            out.extend(self.export_bans_in(shard, now));
        }
        out
    }

    /// Restores bans from a snapshot; returns how many were restored. A
    /// ban whose every assertion is now of an older version is dropped.
    pub fn import_bans(&self, records: &[BanRecord], now: Millis) -> usize {
        let mut restored = 0;
        for r in records {
            let refs: Vec<Option<AssertionRef>> = r
                .assertions
                .iter()
                .filter_map(|key| match self.assertions.observe(*key, now) {
                    Observed::Current(a) | Observed::Bumped(a) => Some(Some(a)),
                    Observed::Untracked => Some(None),
                    Observed::Stale => None,
                })
                .collect();
            if refs.is_empty() && !r.assertions.is_empty() {
                continue;
            }
            let (expires, suspect_until) = (now + r.expires_in, now + r.suspect_for);
            // Oldest first: the set keeps the most recent in front.
            for aref in refs.iter().rev() {
                self.denied
                    .insert(r.fingerprint, *aref, expires, suspect_until, now);
            }
            if refs.is_empty() {
                self.denied
                    .insert(r.fingerprint, None, expires, suspect_until, now);
            }
            restored += 1;
        }
        restored
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BanState {
    Denied,
    Suspect,
    Dead,
}
