//! [`Sharded`]: a value split into mutex-guarded shards, one picked per key
//! by a keyed hash, so that the workers and the invalidation worker rarely
//! meet on one lock and a sweep holds one shard's lock briefly.
//!
//! The shard is chosen from bits 32 and up of the key's hash. The maps
//! inside a shard use the same hash: hashbrown takes its bucket from the
//! low bits and its one-byte tag from the top seven, so neither may be the
//! shard index (with the top bits, every key of a shard would share most
//! of its tag, and a probe would compare far more keys).

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::keyed::KeyState;

/// Locks `mutex`. A panic elsewhere while holding a lock leaves plain
/// cache data behind, still consistent enough to serve: take it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Sharded<T> {
    shards: Box<[Mutex<T>]>,
    keys: KeyState,
    /// `shards.len() - 1` (the count is a power of two).
    mask: usize,
    sweep_cursor: AtomicUsize,
}

impl<T> Sharded<T> {
    /// `count` shards (rounded up to a power of two), each made by `make`
    /// with the hasher every shard shares.
    pub(crate) fn new(count: usize, mut make: impl FnMut(KeyState) -> T) -> Sharded<T> {
        let count = count.max(1).next_power_of_two();
        let keys = KeyState::new();
        Sharded {
            shards: (0..count).map(|_| Mutex::new(make(keys))).collect(),
            keys,
            mask: count - 1,
            sweep_cursor: AtomicUsize::new(0),
        }
    }

    /// Number of shards.
    pub(crate) fn count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of `key`.
    #[inline]
    pub(crate) fn index_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        (self.keys.hash_one(key) >> 32) as usize & self.mask
    }

    /// Locks the shard of `key`.
    #[inline]
    pub(crate) fn lock<K: Hash + ?Sized>(&self, key: &K) -> MutexGuard<'_, T> {
        lock(&self.shards[self.index_of(key)])
    }

    /// Locks shard `index`.
    pub(crate) fn lock_index(&self, index: usize) -> MutexGuard<'_, T> {
        lock(&self.shards[index & self.mask])
    }

    /// Runs `f` on every item of a batch, grouped by shard: each shard is
    /// locked once per batch, and the map accesses of one shard run back to
    /// back (their cache misses overlap). Items of one shard keep their
    /// batch order, so a key twice in a batch lands as it would one by one.
    pub(crate) fn for_batch<I, K: Hash>(
        &self,
        items: &[I],
        key: impl Fn(&I) -> &K,
        mut f: impl FnMut(&mut T, usize),
    ) {
        let mut order: Vec<(usize, usize)> = items
            .iter()
            .enumerate()
            .map(|(i, item)| (self.index_of(key(item)), i))
            .collect();
        order.sort_unstable();
        for group in order.chunk_by(|a, b| a.0 == b.0) {
            let mut shard = self.lock_index(group[0].0);
            for &(_, i) in group {
                f(&mut shard, i);
            }
        }
    }

    /// Runs `f` on the next `count` shards, round-robin, so that sweeping a
    /// large structure is spread over many short steps.
    pub(crate) fn sweep_next(&self, count: usize, mut f: impl FnMut(&mut T)) {
        for _ in 0..count.min(self.count()) {
            let index = self.sweep_cursor.fetch_add(1, Ordering::Relaxed);
            f(&mut self.lock_index(index));
        }
    }

    /// Runs `f` on every shard in turn.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&mut T)) {
        for shard in self.shards.iter() {
            f(&mut lock(shard));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_their_order_within_a_shard() {
        let sharded = Sharded::new(8, |_| Vec::new());
        let items = [3u64, 9, 3, 27, 9, 1];
        sharded.for_batch(
            &items,
            |k| k,
            |shard: &mut Vec<(u64, usize)>, i| shard.push((items[i], i)),
        );
        let mut seen = Vec::new();
        sharded.for_each(|shard| {
            // Within one shard, items appear in batch order.
            assert!(shard.windows(2).all(|w| w[0].1 < w[1].1));
            seen.extend(shard.iter().map(|&(_, i)| i));
        });
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
        // The same key always lands in the same shard.
        assert_eq!(sharded.index_of(&3u64), sharded.index_of(&3u64));
    }

    #[test]
    fn sweeps_visit_every_shard_round_robin() {
        let sharded = Sharded::new(4, |_| 0u32);
        sharded.sweep_next(3, |n| *n += 1);
        sharded.sweep_next(3, |n| *n += 1);
        // A step never visits a shard twice.
        sharded.sweep_next(100, |n| *n += 10);
        let mut counts = Vec::new();
        sharded.for_each(|n| counts.push(*n));
        counts.sort_unstable();
        assert_eq!(counts, vec![11, 11, 12, 12]);
    }
}
