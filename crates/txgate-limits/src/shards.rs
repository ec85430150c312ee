//! [`Shards`]: a table of clients split into mutex-guarded shards by a
//! keyed hash of the client's key, so that workers rarely share a lock.
//! The client table ([`crate::table`]) and the pacing streaks
//! ([`crate::pacing`]) are both built on it.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

/// Shards of a table: enough that workers rarely share a lock.
const SHARDS: usize = 64;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Shards<T> {
    shards: Box<[Mutex<T>]>,
    hasher: RandomState,
}

impl<T: Default> Shards<T> {
    /// Shards for at most `max_clients` clients, and how many each holds:
    /// 64 shards (one per client below 64), each a whole share, at least
    /// one.
    pub(crate) fn for_clients(max_clients: usize) -> (Shards<T>, usize) {
        let count = SHARDS.min(max_clients.max(1));
        let shards = Shards {
            shards: (0..count).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        };
        (shards, max_clients.div_ceil(count).max(1))
    }
}

impl<T> Shards<T> {
    /// The shard of client `key`.
    pub(crate) fn index(&self, key: u128) -> usize {
        (self.hasher.hash_one(key) as usize) % self.shards.len()
    }

    /// Locks the shard of client `key`.
    pub(crate) fn lock(&self, key: u128) -> MutexGuard<'_, T> {
        self.lock_at(self.index(key))
    }

    /// Locks shard `index` (below [`Shards::len`]).
    pub(crate) fn lock_at(&self, index: usize) -> MutexGuard<'_, T> {
        // A poisoned shard still holds valid numbers: use it.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many shards.
    pub(crate) fn len(&self) -> usize {
        self.shards.len()
    }

    /// Every shard, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Mutex<T>> {
        self.shards.iter()
    }
}
