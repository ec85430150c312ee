//! The pool's question: may this transaction enter the sequencer's pool?
//!
//! The Credible Layer's pool plugin asks about every transaction entering
//! the sequencer's pool (Aeges `VerifyTransaction`), however it arrived:
//! through the RPC, peer-to-peer gossip, a private endpoint. The pool has
//! decoded it and recovered its sender already, so the answer needs no
//! ECDSA: [`Screen::judge`] runs the checks of the request path that
//! remain, cheapest first, reading the state and never changing it:
//!
//! 1. the tx hash in the recent-failure set;
//! 2. the sender's backoff (charged by invalidations);
//! 3. the fingerprint (from `to`, the payload, value and gas limit) in the
//!    denied set: a live ban refuses; a suspect one does not (shaping of
//!    suspects holds a call back, and the pool cannot wait);
//! 4. the call's assertion cooldown, **peeked**: refused only when the
//!    trickle slot is closed, and a pool question never uses the slot up
//!    (otherwise the one call the RPC trickle let through would be refused
//!    by the pool a moment later). A transaction this instance forwarded
//!    itself is never refused for a cooldown: its trickle decision was
//!    already made.
//!
//! A transaction let in is then remembered by [`Screen::remember_pooled`]
//! like a forwarded one (tx hash → fingerprint and sender), so that a
//! failure result naming only its hash bans its fingerprint and charges
//! its sender, also when it never passed the RPC.

use alloy_primitives::{Address, B256, U256};

use super::{BanState, Reason, Screen};
use crate::assertion::{CallKey, CooldownCheck};
use crate::fingerprint::Fingerprint;
use crate::forwarded::Forward;
use crate::ttl::Millis;

/// A transaction as the pool hands it over: decoded, its sender known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTx<'a> {
    /// Its hash.
    pub hash: B256,
    /// Its sender, as the pool recovered it.
    pub sender: Address,
    /// The call target; `None` for a contract creation.
    pub to: Option<Address>,
    /// The value.
    pub value: U256,
    /// The gas limit.
    pub gas_limit: u64,
    /// Calldata (a call) or init code (a creation).
    pub payload: &'a [u8],
}

/// What [`Screen::judge`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolVerdict {
    /// Let in; the fingerprint, `None` for a contract creation.
    Allow(Option<Fingerprint>),
    /// Refused, as the request path would refuse it now.
    Deny {
        /// Why.
        reason: Reason,
        /// The fingerprint, when one was computed.
        fingerprint: Option<Fingerprint>,
    },
}

impl PoolVerdict {
    /// Whether the transaction is refused.
    pub fn denied(&self) -> bool {
        matches!(self, PoolVerdict::Deny { .. })
    }

    /// The fingerprint, when one was computed.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        match *self {
            PoolVerdict::Allow(fp) => fp,
            PoolVerdict::Deny { fingerprint, .. } => fingerprint,
        }
    }
}

impl Screen {
    /// The pool's verdict on `tx` at `now`; reads the state, changes
    /// nothing (see the [module docs](self)).
    pub fn judge(&self, tx: &PoolTx<'_>, now: Millis) -> PoolVerdict {
        let deny = |reason, fingerprint| PoolVerdict::Deny {
            reason,
            fingerprint,
        };
        if self.recent_failures.get(&tx.hash, now).is_some() {
            return deny(Reason::RecentFailure, None);
        }
        // The request path's order: the fingerprint's checks, then the
        // sender's. A creation has no fingerprint.
        let fp = tx
            .to
            .map(|to| Fingerprint::from_parts(to, tx.payload, tx.value, tx.gas_limit));
        if let Some(fp) = fp {
            if let Some(ban) = self.denied.get(&fp.hash)
                && self.ban_state(&ban, now) == BanState::Denied
            {
                return deny(Reason::DeniedFingerprint, Some(fp));
            }
            let call: CallKey = (fp.target, fp.selector);
            if let CooldownCheck::Refuse { .. } = self.assertions.peek(&call, now)
                && self.forwarded.get(&tx.hash, now).is_none()
            {
                return deny(Reason::AssertionCooldown, Some(fp));
            }
        }
        if self.buckets.backoff(&tx.sender, now).is_some() {
            return deny(Reason::SenderBackoff, None);
        }
        PoolVerdict::Allow(fp)
    }

    /// Whether some call is cooling down (otherwise there is no trickle
    /// slot to take): one atomic load.
    pub fn cooling(&self) -> bool {
        self.assertions.cooldowns() > 0
    }

    /// Takes the cooldown trickle slots of transactions [`Screen::judge`]
    /// let in and another proxy is about to forward (proxyd, through its
    /// validation hook: for it, the judge is the request path's check).
    /// Without this a cooldown's slot, once open, would stay open: the
    /// judge only peeks, and nothing else would take it. `txs` are the
    /// hash and fingerprint of each; all slots are taken at once or none,
    /// as a bundle's commit takes them, and a call listed twice needs two
    /// (one call per trickle interval). A transaction this instance
    /// already forwarded needs none. `Ok` lists the positions in `txs` of
    /// those that took a slot; `Err` is the position of the first one
    /// refused and its cooldown's retry-after, and nothing is taken then.
    pub fn take_trickles(
        &self,
        txs: &[(B256, Fingerprint)],
        now: Millis,
    ) -> Result<Vec<usize>, (usize, Millis)> {
        if txs.is_empty() || !self.cooling() {
            return Ok(Vec::new());
        }
        let (at, calls): (Vec<usize>, Vec<CallKey>) = txs
            .iter()
            .enumerate()
            .filter(|(_, (hash, _))| self.forwarded.get(hash, now).is_none())
            .map(|(i, (_, fp))| (i, (fp.target, fp.selector)))
            .unzip();
        match self.assertions.take_trickles(&calls, now) {
            Ok(taken) => Ok(taken.into_iter().map(|i| at[i]).collect()),
            Err((i, _, retry_after)) => Err((at[i], retry_after)),
        }
    }

    /// Remembers a transaction let into the pool like a forwarded one:
    /// its hash names its fingerprint and sender for the failure results
    /// that name only the hash. A creation (no fingerprint) is not kept.
    /// A hash already remembered (the RPC forwarded it) keeps its entry.
    pub fn remember_pooled(&self, tx: &PoolTx<'_>, fingerprint: &Fingerprint, now: Millis) {
        self.forwarded.insert(
            tx.hash,
            &Forward {
                fingerprint: *fingerprint,
                sender: tx.sender,
            },
            now + self.settings.forwarded_ttl,
            now,
        );
    }
}

#[cfg(test)]
mod tests;
