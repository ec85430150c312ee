//! A sharded, bounded map whose entries expire.
//!
//! Time is a number of milliseconds passed in by the caller ([`Millis`]), so
//! the map has no clock of its own: tests drive it with paused time.
//!
//! Bound: each shard keeps two generations; inserts go to the young one,
//! and when it holds half the shard's share of the bound, the old
//! generation is dropped and the young one becomes old. A full map so drops
//! its oldest entries first, in O(1), with no per-entry bookkeeping beyond
//! the expiry.

use std::collections::HashMap;
use std::hash::Hash;

use crate::keyed::KeyState;
use crate::shard::Sharded;

/// Milliseconds since the screening state's epoch.
pub type Millis = u64;

/// A time (from the settings) on the engine's clock; saturates past
/// `u64::MAX` ms.
pub fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// Number of shards: enough that a worker per core and the invalidation
/// worker rarely meet on one lock, and that sweeping one shard holds its
/// lock briefly even at a million entries.
const SHARDS: usize = 64;

#[derive(Debug)]
struct Shard<K, V> {
    young: HashMap<K, (Millis, V), KeyState>,
    old: HashMap<K, (Millis, V), KeyState>,
}

impl<K: Eq + Hash + Copy, V: Copy> Shard<K, V> {
    /// Inserts; returns what the young generation held under `key`.
    fn insert(
        &mut self,
        generation_cap: usize,
        key: K,
        value: V,
        expires: Millis,
    ) -> Option<(Millis, V)> {
        if self.young.len() >= generation_cap && !self.young.contains_key(&key) {
            // The young generation becomes the old one; the old one's
            // table, emptied, is the new young one: no allocation, and no
            // rehash after rehash as it fills again.
            std::mem::swap(&mut self.young, &mut self.old);
            self.young.clear();
        }
        // A stale copy left in `old` is harmless (`get` reads `young`
        // first) and goes with its generation; not probing for it saves a
        // cache miss per insert in a large map.
        self.young.insert(key, (expires, value))
    }
}

impl<K: Eq + Hash + Copy, V: Copy> Shard<K, V> {
    /// Inserts `merge(live value in young, value)`, live until the earlier
    /// of the two expiries (`expires` if nothing was live); returns that
    /// live value.
    fn merge(
        &mut self,
        generation_cap: usize,
        (key, value, expires): (K, V, Millis),
        now: Millis,
        merge: impl Fn(Option<V>, V) -> V,
    ) -> Option<V> {
        if let Some((was, v)) = self.young.get_mut(&key) {
            let live = (*was > now).then_some(*v);
            *v = merge(live, value);
            *was = match live {
                Some(_) => (*was).min(expires),
                None => expires,
            };
            return live;
        }
        self.insert(generation_cap, key, merge(None, value), expires);
        None
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct TtlMap<K, V> {
    shards: Sharded<Shard<K, V>>,
    generation_cap: usize,
}

impl<K: Eq + Hash + Copy, V: Copy> TtlMap<K, V> {
    /// A map of at most about `max_entries` live entries.
    pub fn new(max_entries: usize) -> TtlMap<K, V> {
        TtlMap {
            shards: Sharded::new(SHARDS, |keys| Shard {
                young: HashMap::with_hasher(keys),
                old: HashMap::with_hasher(keys),
            }),
            generation_cap: (max_entries / SHARDS / 2).max(1),
        }
    }

    /// The live value under `key`.
    pub fn get(&self, key: &K, now: Millis) -> Option<V> {
        let shard = self.shards.lock(key);
        let (expires, value) = shard.young.get(key).or_else(|| shard.old.get(key))?;
        (*expires > now).then_some(*value)
    }

    /// The live value under `key` and when it expires.
    pub fn get_entry(&self, key: &K, now: Millis) -> Option<(Millis, V)> {
        let shard = self.shards.lock(key);
        let (expires, value) = shard.young.get(key).or_else(|| shard.old.get(key))?;
        (*expires > now).then_some((*expires, *value))
    }

    /// Inserts or replaces `key`, live until `expires`.
    pub fn insert(&self, key: K, value: V, expires: Millis) {
        self.shards
            .lock(&key)
            .insert(self.generation_cap, key, value, expires);
    }

    /// Inserts a batch, grouped by shard (each shard locked once).
    pub fn insert_batch(&self, items: &[(K, V, Millis)]) {
        self.shards.for_batch(
            items,
            |(key, _, _)| key,
            |shard, i| {
                let (key, value, expires) = items[i];
                shard.insert(self.generation_cap, key, value, expires);
            },
        );
    }

    /// Inserts a batch like [`TtlMap::insert_batch`], each value merged
    /// with the live one it replaces (`merge(live, new)`), and returns, for
    /// each item in order, that live value, as far as the young generation
    /// knows (an item replaces an earlier one of the same batch too). Costs
    /// nothing over the insert: the replaced value comes from the same
    /// probe. A value only in the old generation (older than the last
    /// turnover) is not seen.
    ///
    /// A merged entry keeps the earlier of its expiry and the new one: what
    /// such a map holds is a fact learned again (a failure from a second
    /// source, or replayed), whose window is never extended by a repeat.
    pub fn insert_batch_merging(
        &self,
        items: &[(K, V, Millis)],
        now: Millis,
        merge: impl Fn(Option<V>, V) -> V,
    ) -> Vec<Option<V>> {
        let mut replaced = vec![None; items.len()];
        self.shards.for_batch(
            items,
            |(key, _, _)| key,
            |shard, i| replaced[i] = shard.merge(self.generation_cap, items[i], now, &merge),
        );
        replaced
    }

    /// Inserts `key` unless it holds a live value, under one lock; returns
    /// whether it inserted.
    pub fn insert_if_absent(&self, key: K, value: V, expires: Millis, now: Millis) -> bool {
        let mut shard = self.shards.lock(&key);
        let live = shard
            .young
            .get(&key)
            .or_else(|| shard.old.get(&key))
            .is_some_and(|(e, _)| *e > now);
        if !live {
            shard.insert(self.generation_cap, key, value, expires);
        }
        !live
    }

    /// Removes `key`, returning its live value.
    pub fn remove(&self, key: &K, now: Millis) -> Option<V> {
        let mut shard = self.shards.lock(key);
        let young = shard.young.remove(key);
        let old = shard.old.remove(key);
        young
            .or(old)
            .and_then(|(expires, value)| (expires > now).then_some(value))
    }

    /// Drops expired entries of `shards` shards, round-robin, so that a
    /// large map is swept in short steps.
    pub fn sweep(&self, now: Millis, shards: usize) {
        self.shards.sweep_next(shards, |shard| {
            shard.young.retain(|_, (expires, _)| *expires > now);
            shard.old.retain(|_, (expires, _)| *expires > now);
        });
    }

    /// Entries held (live or not yet swept).
    pub fn len(&self) -> usize {
        let mut len = 0;
        self.shards
            .for_each(|shard| len += shard.young.len() + shard.old.len());
        len
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_insert_reports_what_it_replaced() {
        let map: TtlMap<u64, u8> = TtlMap::new(SHARDS * 2 * 4);
        map.insert(1, 10, 100);
        map.insert(2, 20, 5);
        let replaced = map.insert_batch_merging(
            &[(1, 11, 200), (2, 21, 200), (3, 30, 200), (3, 31, 200)],
            10,
            |_, new| new,
        );
        // 1 was live; 2 had expired; 3 replaces the batch's own earlier 3.
        assert_eq!(replaced, vec![Some(10), None, None, Some(30)]);
        assert_eq!(map.get(&3, 10), Some(31));
        // A live entry merged keeps its earlier expiry; an expired one
        // takes the new.
        assert_eq!(map.get_entry(&1, 10), Some((100, 11)));
        assert_eq!(map.get_entry(&2, 10), Some((200, 21)));
        assert!(map.insert_if_absent(4, 40, 200, 10));
        assert!(!map.insert_if_absent(4, 41, 200, 10));
        assert_eq!(map.get(&4, 10), Some(40));
        assert!(map.insert_if_absent(4, 42, 300, 250), "expired: replaced");
    }

    /// What sits only in the old generation (before the last turnover of
    /// its shard) is not reported: the documented limit of deduplication.
    #[test]
    fn the_old_generation_is_not_seen_by_a_batch_insert() {
        let map: TtlMap<u64, u8> = TtlMap::new(SHARDS * 2);
        // One entry per generation per shard: the second insert into a
        // shard turns the first into the old generation.
        map.insert(7, 1, 1_000);
        let shard = map.shards.index_of(&7u64);
        let other = (8..10_000u64)
            .find(|k| map.shards.index_of(k) == shard)
            .unwrap_or(0);
        map.insert(other, 2, 1_000);
        assert_eq!(map.get(&7, 0), Some(1), "still live, in the old generation");
        assert_eq!(
            map.insert_batch_merging(&[(7, 3, 1_000)], 0, |_, new| new),
            vec![None]
        );
    }

    #[test]
    fn entries_expire_at_their_deadline() {
        let map = TtlMap::<u64, u32>::new(1000);
        map.insert(1, 10, 100);
        assert_eq!(map.get(&1, 0), Some(10));
        assert_eq!(map.get(&1, 99), Some(10));
        assert_eq!(map.get(&1, 100), None);
        map.sweep(100, usize::MAX);
        assert!(map.is_empty());
    }

    #[test]
    fn a_batch_lands_like_one_by_one() {
        let map = TtlMap::<u64, u32>::new(1000);
        map.insert_batch(&[(1, 10, 100), (2, 20, 100), (1, 11, 200)]);
        assert_eq!(map.get(&1, 150), Some(11));
        assert_eq!(map.get(&2, 50), Some(20));
        assert_eq!(map.get(&2, 100), None);
    }

    #[test]
    fn bound_drops_oldest_first() {
        let map = TtlMap::<u64, u64>::new(SHARDS * 2 * 8);
        for key in 0..10_000u64 {
            map.insert(key, key, u64::MAX);
        }
        assert!(map.len() <= SHARDS * 2 * 8 + SHARDS, "{}", map.len());
        // The newest survive.
        for key in 9_990..10_000u64 {
            assert_eq!(map.get(&key, 0), Some(key));
        }
        assert_eq!(map.get(&0, 0), None);
    }

    #[test]
    fn reinsert_refreshes_and_remove_returns_live_only() {
        let map = TtlMap::<u64, u32>::new(1000);
        map.insert(5, 1, 10);
        map.insert(5, 2, 50);
        assert_eq!(map.get(&5, 20), Some(2));
        assert_eq!(map.remove(&5, 60), None);
        map.insert(6, 3, 50);
        assert_eq!(map.remove(&6, 10), Some(3));
        assert_eq!(map.get(&6, 10), None);
    }
}
