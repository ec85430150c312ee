//! The set of denied fingerprints: a counting bloom filter in front of
//! sharded maps.
//!
//! Honest traffic pays for one bloom probe (five counters in one array) and
//! never touches a lock; only a bloom hit reaches the maps.
//!
//! The bloom stays exact about absence as entries expire: it counts instead
//! of setting bits, every map insert of a new key increments the key's
//! counters and every removal (expiry sweep, version eviction, bound)
//! decrements them, both under the key's shard lock. A counter that reaches
//! 255 sticks there, which can only add false positives. So it never says
//! "not denied" for a key the maps hold, and it never fills up with the
//! dead: no rotation or rebuild is needed.
//!
//! An entry outlives its ban by the suspect window: while `now` is in
//! `[expires, expires + suspect window)`, the fingerprint is *suspect* (its
//! ban expired recently) and only queue shaping applies.

use std::sync::atomic::{AtomicUsize, Ordering};

use alloy_primitives::B256;
use hashbrown::HashMap;

use crate::assertion::AssertionRef;
use crate::bloom::CountingBloom;
use crate::keyed::KeyState;
use crate::shard::Sharded;
use crate::ttl::Millis;

const SHARDS: usize = 64;
/// Of a full shard, the share (1/n) evicted in one go, soonest to end first.
const EVICT_FRACTION: usize = 8;

/// A ban: until when, and under which assertions (the two most recent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ban {
    /// End of the ban.
    pub expires: Millis,
    /// End of the suspect window after it.
    pub suspect_until: Millis,
    /// Up to two assertions, most recent first. `[None, None]`: the ban
    /// holds until its end whatever the assertions do (a verdict named no
    /// assertion, or the assertion table was full).
    pub assertions: [Option<AssertionRef>; 2],
}

impl Ban {
    /// A held ban learned again: the later end wins, and the assertion
    /// joins the two most recent. Returns whether the end moved later.
    pub fn refresh(
        &mut self,
        assertion: Option<AssertionRef>,
        expires: Millis,
        suspect_until: Millis,
    ) -> bool {
        let extended = expires > self.expires;
        self.expires = self.expires.max(expires);
        self.suspect_until = self.suspect_until.max(suspect_until);
        match assertion {
            // A verdict that names no assertion makes the ban hold until
            // its end whatever happens to the assertions it also named (a
            // bump or an eviction never lifts it).
            None => self.assertions = [None, None],
            // Once unconditional, it stays so.
            Some(_) if self.assertions == [None, None] => {}
            Some(_) if self.assertions[0] != assertion => {
                self.assertions = [assertion, self.assertions[0]];
            }
            Some(_) => {}
        }
        extended
    }
}

// A ban stays 32 bytes: "no assertion" rides in the stamp's niche.
const _: () = assert!(std::mem::size_of::<Ban>() == 32);

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A fingerprint that was not held.
    New,
    /// A held fingerprint whose ban now ends later.
    Refreshed,
    /// A held fingerprint whose ban already ended as late or later (a
    /// repeat, or a replay): its end is kept; it may have learned another
    /// assertion.
    Held,
}

/// One shard's table.
#[derive(Debug)]
struct Shard {
    map: HashMap<B256, Ban, KeyState>,
}

impl Shard {
    fn new(keys: KeyState) -> Shard {
        Shard {
            map: HashMap::with_hasher(keys),
        }
    }

    /// Before a new key goes in. An entry that leaves a hash table often
    /// leaves a tombstone, which takes a free slot until the table is
    /// rebuilt; when no free slot is left, hashbrown rebuilds the table at
    /// its size if at most half of it is held, and doubles it otherwise.
    /// A set that churns above half its table (bans expiring while new
    /// ones arrive, or the bound evicting) would so double its tables a few
    /// cycles after its first expiries, for no more entries. Here a table
    /// with no free slot left is rebuilt for what it holds plus one: at its
    /// size when tombstones took the room, doubled only when the entries
    /// themselves fill it. As rare as hashbrown's own rebuilds (once per
    /// table's worth of free slots turned into tombstones), and the memory
    /// per entry stays what it is when the set is filled.
    fn make_room(&mut self) {
        if self.map.capacity() == self.map.len() {
            let mut fresh =
                HashMap::with_capacity_and_hasher(self.map.len() + 1, *self.map.hasher());
            fresh.extend(self.map.drain());
            self.map = fresh;
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct DeniedSet {
    bloom: CountingBloom,
    shards: Sharded<Shard>,
    shard_cap: usize,
    len: AtomicUsize,
}

impl DeniedSet {
    /// A set of at most `max_entries` fingerprints.
    pub fn new(max_entries: usize) -> DeniedSet {
        DeniedSet {
            bloom: CountingBloom::new(max_entries),
            shards: Sharded::new(SHARDS, Shard::new),
            shard_cap: max_entries.div_ceil(SHARDS).max(1),
            len: AtomicUsize::new(0),
        }
    }

    /// The entry for `key`, if any (banned or suspect; the caller compares
    /// the times). A bloom miss returns without a lock.
    #[inline]
    pub fn get(&self, key: &B256) -> Option<Ban> {
        if !self.bloom.may_contain(key) {
            return None;
        }
        self.shards.lock(key).map.get(key).copied()
    }

    /// Bans `key` until `expires` under `assertion`; a held key keeps the
    /// later expiry (never a restarted one) and remembers the assertion. A full shard drops one
    /// entry first (see `evict`).
    pub fn insert(
        &self,
        key: B256,
        assertion: Option<AssertionRef>,
        expires: Millis,
        suspect_until: Millis,
        now: Millis,
    ) -> Inserted {
        let mut shard = self.shards.lock(&key);
        self.insert_locked(&mut shard, key, assertion, expires, suspect_until, now)
    }

    /// [`DeniedSet::insert`] for a batch, all with the same times, grouped
    /// by shard (each shard locked once). Results in the batch's order; a
    /// key twice in the batch is New, then Held, as one by one.
    pub fn insert_batch(
        &self,
        items: &[(B256, Option<AssertionRef>)],
        expires: Millis,
        suspect_until: Millis,
        now: Millis,
    ) -> Vec<Inserted> {
        self.insert_batch_with(items, |_| (expires, suspect_until), now)
    }

    /// [`DeniedSet::insert_batch`] with each item's own times: `times(i)`,
    /// its end and the end of its suspect window, for `items[i]`.
    pub fn insert_batch_with(
        &self,
        items: &[(B256, Option<AssertionRef>)],
        times: impl Fn(usize) -> (Millis, Millis),
        now: Millis,
    ) -> Vec<Inserted> {
        let mut out = vec![Inserted::Held; items.len()];
        self.shards.for_batch(
            items,
            |(key, _)| key,
            |shard, i| {
                let (key, assertion) = items[i];
                let (expires, suspect_until) = times(i);
                out[i] = self.insert_locked(shard, key, assertion, expires, suspect_until, now);
            },
        );
        out
    }

    fn insert_locked(
        &self,
        shard: &mut Shard,
        key: B256,
        assertion: Option<AssertionRef>,
        expires: Millis,
        suspect_until: Millis,
        now: Millis,
    ) -> Inserted {
        if let Some(ban) = shard.map.get_mut(&key) {
            return if ban.refresh(assertion, expires, suspect_until) {
                Inserted::Refreshed
            } else {
                Inserted::Held
            };
        }
        if shard.map.len() >= self.shard_cap {
            self.evict(shard, now);
        }
        shard.make_room();
        shard.map.insert(
            key,
            Ban {
                expires,
                suspect_until,
                assertions: [assertion, None],
            },
        );
        self.bloom.add(&key);
        self.len.fetch_add(1, Ordering::Relaxed);
        Inserted::New
    }

    /// Makes room in a full shard: the dead go first; if none, the eighth
    /// of the shard nearest the end of its suspect window. One pass selects
    /// them (O(n)), and it runs once per n/8 inserts into a full shard, so
    /// an insert pays O(1) amortized, and the entries that leave are the
    /// ones that would have expired first.
    fn evict(&self, shard: &mut Shard, now: Millis) {
        let before = shard.map.len();
        let mut ends: Vec<Millis> = shard.map.values().map(|ban| ban.suspect_until).collect();
        let cut = (before / EVICT_FRACTION)
            .max(1)
            .min(ends.len().saturating_sub(1));
        let (_, threshold, _) = ends.select_nth_unstable(cut);
        let threshold = (*threshold).max(now + 1);
        let bloom = &self.bloom;
        let mut budget = before / EVICT_FRACTION + 1;
        shard.map.retain(|key, ban| {
            let dead = ban.suspect_until <= now;
            // `<=`: entries of one batch share their times; ties go too,
            // up to the budget.
            let evict = dead || (ban.suspect_until <= threshold && budget > 0);
            if evict {
                budget = budget.saturating_sub(usize::from(!dead));
                bloom.remove(key);
            }
            !evict
        });
        self.len
            .fetch_sub(before - shard.map.len(), Ordering::Relaxed);
    }

    /// Removes entries for which `dead(ban)` holds, in `shards` shards
    /// (round-robin), so that a sweep of a million entries is spread over
    /// many short steps. Returns the number removed.
    pub fn sweep(&self, shards: usize, mut dead: impl FnMut(&Ban) -> bool) -> usize {
        let mut removed = 0;
        let bloom = &self.bloom;
        self.shards.sweep_next(shards, |shard| {
            let before = shard.map.len();
            shard.map.retain(|key, ban| {
                let keep = !dead(ban);
                if !keep {
                    bloom.remove(key);
                }
                keep
            });
            removed += before - shard.map.len();
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// Removes `key`; whether it was held.
    pub fn remove(&self, key: &B256) -> bool {
        if !self.bloom.may_contain(key) {
            return false;
        }
        let removed = self.shards.lock(key).map.remove(key).is_some();
        if removed {
            self.bloom.remove(key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// The number of shards, for [`DeniedSet::for_each_in`].
    pub fn shard_count(&self) -> usize {
        self.shards.count()
    }

    /// Every entry of shard `index` (one lock held for that shard only).
    pub fn for_each_in(&self, index: usize, mut f: impl FnMut(&B256, &Ban)) {
        for (key, ban) in self.shards.lock_index(index).map.iter() {
            f(key, ban);
        }
    }

    /// Every entry (for snapshots), shard by shard.
    pub fn for_each(&self, mut f: impl FnMut(&B256, &Ban)) {
        self.shards.for_each(|shard| {
            for (key, ban) in shard.map.iter() {
                f(key, ban);
            }
        });
    }

    /// Entries held (banned or suspect).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> B256 {
        alloy_primitives::keccak256(i.to_be_bytes())
    }

    fn a() -> Option<AssertionRef> {
        AssertionRef::for_test(0, 1)
    }

    #[test]
    fn bloom_never_forgets_a_held_key_through_churn() {
        let set = DeniedSet::new(4096);
        for round in 0..20u64 {
            // The background sweep removes earlier rounds, which expired.
            let now = round * 10 + 5;
            set.sweep(SHARDS, |ban| ban.suspect_until <= now);
            for i in 0..2000 {
                let end = round * 10 + 10;
                set.insert(key(round * 10_000 + i), a(), end, end, now);
            }
            for i in 0..2000 {
                assert!(set.get(&key(round * 10_000 + i)).is_some());
            }
        }
        assert!(set.len() <= 4096 + SHARDS);
        // After churn the false-positive rate is still low: expired keys
        // left the counters.
        let hits = (0..10_000u64)
            .filter(|i| set.bloom.may_contain(&key(1_000_000_000 + i)))
            .count();
        assert!(hits < 500, "false positives after churn: {hits}/10000");
    }

    #[test]
    fn a_batch_inserts_in_its_own_order() {
        let set = DeniedSet::new(1024);
        let b = AssertionRef::for_test(1, 2);
        let batch = [(key(1), a()), (key(2), a()), (key(1), b)];
        assert_eq!(
            set.insert_batch(&batch, 100, 150, 0),
            vec![Inserted::New, Inserted::New, Inserted::Held]
        );
        assert_eq!(set.get(&key(1)).unwrap().assertions, [b, a()]);
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn refresh_keeps_later_expiry_and_both_assertions() {
        let set = DeniedSet::new(1024);
        let b = AssertionRef::for_test(1, 2);
        assert_eq!(set.insert(key(1), a(), 100, 150, 0), Inserted::New);
        assert_eq!(set.insert(key(1), b, 50, 60, 0), Inserted::Held);
        let ban = set.get(&key(1)).unwrap();
        assert_eq!((ban.expires, ban.suspect_until), (100, 150));
        assert_eq!(ban.assertions, [b, a()]);
        assert_eq!(set.insert(key(1), b, 100, 150, 10), Inserted::Held);
        assert_eq!(set.insert(key(1), b, 120, 170, 10), Inserted::Refreshed);
        let ban = set.get(&key(1)).unwrap();
        assert_eq!((ban.expires, ban.suspect_until), (120, 170));
        assert_eq!(set.len(), 1);
    }

    /// `n` distinct keys that all land in shard `shard`.
    fn keys_in_shard(set: &DeniedSet, shard: usize, n: usize, skip: &mut u64) -> Vec<B256> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            *skip += 1;
            let k = key(*skip);
            if set.shards.index_of(&k) == shard {
                out.push(k);
            }
        }
        out
    }

    #[test]
    fn full_shard_drops_dead_entries_first() {
        // Eight entries per shard: four dead by t=20, four live.
        let set = DeniedSet::new(SHARDS * 8);
        let mut skip = 0;
        let (mut dead, mut live, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
        for shard in 0..SHARDS {
            let keys = keys_in_shard(&set, shard, 9, &mut skip);
            for k in &keys[..4] {
                set.insert(*k, a(), 10, 10, 0);
            }
            for k in &keys[4..8] {
                set.insert(*k, a(), 1000, 1000, 0);
            }
            dead.extend_from_slice(&keys[..4]);
            live.extend_from_slice(&keys[4..8]);
            fresh.push(keys[8]);
        }
        assert_eq!(set.len(), SHARDS * 8);
        // Every shard is full: one more key each makes room, from the dead.
        for k in &fresh {
            set.insert(*k, a(), 2000, 2000, 20);
        }
        for k in live.iter().chain(&fresh) {
            assert!(
                set.get(k).is_some(),
                "a live entry was evicted while dead ones remained"
            );
        }
        for k in &dead {
            assert!(set.get(k).is_none(), "a dead entry survived the eviction");
        }
        assert_eq!(set.len(), SHARDS * 5);
        let mut counted = 0;
        set.for_each(|_, _| counted += 1);
        assert_eq!(counted, set.len());
    }

    #[test]
    fn full_shard_of_live_entries_drops_the_soonest_to_end() {
        let set = DeniedSet::new(SHARDS * 8);
        let mut skip = 0;
        let keys = keys_in_shard(&set, 3, 9, &mut skip);
        for (i, k) in keys[..8].iter().enumerate() {
            let end = 100 * (i as u64 + 1);
            set.insert(*k, a(), end, end, 0);
        }
        set.insert(keys[8], a(), 5000, 5000, 50);
        // The one ending first went; the latest-ending ones stay.
        assert!(set.get(&keys[0]).is_none());
        for k in &keys[2..] {
            assert!(set.get(k).is_some());
        }
        assert!(set.len() <= 8);
    }
}

#[cfg(test)]
mod churn_tests {
    use super::*;

    /// Bytes of the shards' tables.
    fn table_bytes(set: &DeniedSet) -> usize {
        let mut n = 0;
        set.shards
            .for_each(|shard| n += shard.map.allocation_size());
        n
    }

    /// The soak's invalidation storms: 20 000 new bans every 45 s, each
    /// dead 60 s + a suspect window later, so the set cycles between about
    /// 80 000 and 100 000 entries (1 250 to 1 560 a shard) while the
    /// sweep removes the dead. Once the set has been through its first
    /// cycle, its tables hold their size: expiry takes no more memory.
    #[test]
    fn tables_hold_their_size_under_churn() {
        let set = DeniedSet::new(1_000_000);
        let (every, life) = (45_000u64, 200_000u64);
        let mut key = 0u64;
        let mut settled = 0;
        for storm in 0..40u64 {
            let now = storm * every;
            set.sweep(SHARDS, |ban| ban.suspect_until <= now);
            let batch: Vec<(B256, Option<AssertionRef>)> = (0..20_000)
                .map(|_| {
                    key += 1;
                    (
                        B256::from(alloy_primitives::U256::from(
                            key.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                        )),
                        None,
                    )
                })
                .collect();
            set.insert_batch(&batch, now + 60_000, now + life, now);
            let c = table_bytes(&set);
            if storm == 8 {
                settled = c;
            }
            if storm > 8 {
                assert!(
                    c <= settled,
                    "storm {storm}: {c} table bytes, {settled} after the first cycles"
                );
            }
        }
    }
}
