//! Sender backpressure: a token bucket per sender, charged only by
//! invalidations.
//!
//! A sender starts with `capacity` tokens; every invalidation charged to it
//! takes one, and tokens come back at `refill_per_sec`. A sender whose
//! bucket runs dry is backed off: refused for `backoff_initial`, doubled at
//! each further dry run, capped at `backoff_max`. The level drops back to
//! zero once the bucket has refilled completely, and so does the entry.
//!
//! Honest senders never enter the table: only an invalidation creates an
//! entry, and while the table is empty the request path checks one atomic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy_primitives::Address;

use crate::keyed::KeyState;
use crate::shard::Sharded;
use crate::ttl::Millis;

const SHARDS: usize = 16;

/// Backpressure settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackpressureSettings {
    /// Tokens in a full bucket.
    pub capacity: f64,
    /// Tokens returned per second.
    pub refill_per_sec: f64,
    /// First backoff, in ms.
    pub backoff_initial: Millis,
    /// Longest backoff, in ms.
    pub backoff_max: Millis,
    /// Senders tracked at most.
    pub max_senders: usize,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Millis,
    backoff_until: Millis,
    level: u8,
}

impl Bucket {
    fn refill(&mut self, now: Millis, settings: &BackpressureSettings) {
        let elapsed = now.saturating_sub(self.updated) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * settings.refill_per_sec).min(settings.capacity);
        self.updated = self.updated.max(now);
        if self.tokens >= settings.capacity && now >= self.backoff_until {
            self.level = 0;
        }
    }

    fn idle(&self, now: Millis, settings: &BackpressureSettings) -> bool {
        let mut probe = *self;
        probe.refill(now, settings);
        // Only a full bucket carries no information: a partly charged one
        // must survive the sweep, or a slow attacker would never run dry.
        probe.tokens >= settings.capacity && probe.level == 0 && now >= probe.backoff_until
    }
}

/// What a charge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charged {
    /// Took a token; tokens remain.
    Taken,
    /// The bucket ran dry: backed off for this many ms.
    BackedOff(Millis),
    /// The table is full of backed-off senders; this one is not tracked.
    Untracked,
}

/// See the module docs.
#[derive(Debug)]
pub struct SenderBuckets {
    settings: BackpressureSettings,
    shards: Sharded<HashMap<Address, Bucket, KeyState>>,
    shard_cap: usize,
    len: AtomicUsize,
}

impl SenderBuckets {
    /// An empty table.
    pub fn new(settings: BackpressureSettings) -> SenderBuckets {
        SenderBuckets {
            settings,
            shards: Sharded::new(SHARDS, HashMap::with_hasher),
            shard_cap: settings.max_senders.div_ceil(SHARDS).max(1),
            len: AtomicUsize::new(0),
        }
    }

    /// If `sender` is backed off, for how many more ms.
    #[inline]
    pub fn backoff(&self, sender: &Address, now: Millis) -> Option<Millis> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let shard = self.shards.lock(sender);
        let bucket = shard.get(sender)?;
        (bucket.backoff_until > now).then(|| bucket.backoff_until - now)
    }

    /// Charges one invalidation to `sender`.
    pub fn charge(&self, sender: Address, now: Millis) -> Charged {
        let s = &self.settings;
        let mut shard = self.shards.lock(&sender);
        if !shard.contains_key(&sender) && shard.len() >= self.shard_cap {
            // Full: make room for an eighth of the shard in one pass, so an
            // insert pays O(1) amortized under a flood of fresh senders.
            // Idle senders go first, then those with the most tokens left
            // (the least charged). A sender in backoff is never evicted.
            let before = shard.len();
            shard.retain(|_, bucket| !bucket.idle(now, s));
            let want = (self.shard_cap / 8).max(1);
            if before - shard.len() < want {
                let mut candidates: Vec<(f64, Address)> = shard
                    .iter()
                    .filter(|(_, b)| now >= b.backoff_until)
                    .map(|(key, b)| (b.tokens, *key))
                    .collect();
                let take = (want - (before - shard.len())).min(candidates.len());
                if take > 0 && take < candidates.len() {
                    candidates.select_nth_unstable_by(take, |a, b| b.0.total_cmp(&a.0));
                }
                for (_, key) in candidates.into_iter().take(take) {
                    shard.remove(&key);
                }
            }
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
            if shard.len() >= self.shard_cap {
                return Charged::Untracked;
            }
        }
        let bucket = shard.entry(sender).or_insert_with(|| {
            self.len.fetch_add(1, Ordering::Relaxed);
            Bucket {
                tokens: s.capacity,
                updated: now,
                backoff_until: 0,
                level: 0,
            }
        });
        bucket.refill(now, s);
        bucket.tokens -= 1.0;
        if bucket.tokens >= 1.0 {
            return Charged::Taken;
        }
        // Dry: back off; each further dry run doubles the wait.
        let doubling = u32::from(bucket.level.min(20));
        let wait = s
            .backoff_initial
            .saturating_mul(1u64 << doubling)
            .min(s.backoff_max);
        bucket.level = bucket.level.saturating_add(1);
        bucket.backoff_until = bucket.backoff_until.max(now + wait);
        bucket.tokens = bucket.tokens.max(0.0);
        Charged::BackedOff(wait)
    }

    /// Forgets `sender` (its tokens, level and backoff): whether it was
    /// tracked.
    pub fn remove(&self, sender: &Address) -> bool {
        let removed = self.shards.lock(sender).remove(sender).is_some();
        if removed {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// `sender`'s tokens left, backoff remaining (ms) and backoff level,
    /// when tracked.
    pub fn inspect(&self, sender: &Address, now: Millis) -> Option<(f64, Millis, u8)> {
        let shard = self.shards.lock(sender);
        let bucket = shard.get(sender)?;
        let mut probe = *bucket;
        probe.refill(now, &self.settings);
        Some((
            probe.tokens,
            bucket.backoff_until.saturating_sub(now),
            bucket.level,
        ))
    }

    /// Drops senders that are back to a full bucket and no backoff.
    pub fn sweep(&self, now: Millis) {
        self.shards.for_each(|shard| {
            let before = shard.len();
            shard.retain(|_, bucket| !bucket.idle(now, &self.settings));
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
        });
    }

    /// Senders tracked.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no sender is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BackpressureSettings {
        BackpressureSettings {
            capacity: 3.0,
            refill_per_sec: 1.0,
            backoff_initial: 1000,
            backoff_max: 4000,
            max_senders: 64,
        }
    }

    const S: Address = Address::repeat_byte(0x42);

    #[test]
    fn dry_bucket_backs_off_then_doubles_then_caps() {
        let b = SenderBuckets::new(settings());
        assert_eq!(b.backoff(&S, 0), None);
        assert_eq!(b.charge(S, 0), Charged::Taken);
        assert_eq!(b.charge(S, 0), Charged::Taken);
        assert_eq!(b.charge(S, 0), Charged::BackedOff(1000));
        assert_eq!(b.backoff(&S, 500), Some(500));
        assert_eq!(b.backoff(&S, 1000), None);
        // Still short of tokens: the next charge doubles.
        assert_eq!(b.charge(S, 1000), Charged::BackedOff(2000));
        // Two tokens back by then: one charge passes, the next doubles again
        // and hits the cap.
        assert_eq!(b.charge(S, 3000), Charged::Taken);
        assert_eq!(b.charge(S, 3000), Charged::BackedOff(4000));
        // Refilled completely after the backoff: the level starts over.
        assert_eq!(b.charge(S, 7000), Charged::Taken);
        assert_eq!(b.charge(S, 7000), Charged::Taken);
        assert_eq!(b.charge(S, 7000), Charged::BackedOff(1000));
    }

    #[test]
    fn full_refill_forgets_the_sender() {
        let b = SenderBuckets::new(settings());
        for _ in 0..3 {
            b.charge(S, 0);
        }
        assert!(b.backoff(&S, 10).is_some());
        b.sweep(2000);
        assert_eq!(b.len(), 1, "not yet refilled");
        b.sweep(10_000);
        assert!(b.is_empty());
        // A fresh start: level 0 again.
        for _ in 0..2 {
            assert_eq!(b.charge(S, 10_000), Charged::Taken);
        }
        assert_eq!(b.charge(S, 10_000), Charged::BackedOff(1000));
    }

    #[test]
    fn a_partly_charged_sender_survives_the_sweep() {
        let b = SenderBuckets::new(settings());
        assert_eq!(b.charge(S, 0), Charged::Taken);
        b.sweep(100);
        assert_eq!(b.len(), 1);
        assert_eq!(b.charge(S, 200), Charged::Taken);
        b.sweep(300);
        assert_eq!(b.charge(S, 400), Charged::BackedOff(1000));
    }

    #[test]
    fn bounded_table_never_evicts_a_backed_off_sender() {
        let b = SenderBuckets::new(BackpressureSettings {
            max_senders: 16,
            capacity: 1.0,
            ..settings()
        });
        let mut untracked = 0;
        for i in 0..200u8 {
            match b.charge(Address::repeat_byte(i), 0) {
                Charged::Untracked => untracked += 1,
                Charged::BackedOff(_) => {}
                Charged::Taken => panic!("capacity 1 backs off at once"),
            }
        }
        assert!(untracked > 0);
        assert!(b.len() <= 16);
    }
}
