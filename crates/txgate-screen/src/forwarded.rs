//! What txgate forwarded recently, by tx hash: the fingerprint's parts and
//! the sender, so that a source that names only a tx hash (the Credible
//! Layer sidecar's result stream) can still ban the fingerprint and charge
//! the sender.
//!
//! Every entry lives the same time and arrives in time order, so each
//! shard is a ring in insertion order (the oldest entry is at the head and
//! expires first) with a hash index of ring positions. An entry costs its
//! 105 bytes in the ring plus a 4-byte position in the index (at the
//! index's load factor), with no per-entry allocation; a full shard drops
//! its oldest entry. The fingerprint itself is not stored: it is
//! recomputed from its parts (one keccak) when a failure names the hash.

use std::collections::VecDeque;

use alloy_primitives::{Address, B256};
use hashbrown::HashTable;

use crate::fingerprint::Fingerprint;
use crate::keyed::KeyState;
use crate::shard::Sharded;
use crate::ttl::Millis;

/// Shards (a power of two).
const SHARDS: usize = 64;

/// What was forwarded under a tx hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// The transaction's fingerprint (parts included).
    pub fingerprint: Fingerprint,
    /// Its sender.
    pub sender: Address,
}

/// One ring slot, bytes only (no padding): 105 bytes.
#[derive(Debug, Clone, Copy)]
struct Slot {
    tx_hash: [u8; 32],
    target: [u8; 20],
    selector: [u8; 4],
    arg_hash16: [u8; 16],
    value_bucket: u8,
    gas_bucket: [u8; 4],
    sender: [u8; 20],
    expires: [u8; 8],
}

impl Slot {
    fn new(tx_hash: B256, fwd: &Forward, expires: Millis) -> Slot {
        let fp = &fwd.fingerprint;
        Slot {
            tx_hash: tx_hash.0,
            target: fp.target.0.0,
            selector: fp.selector,
            arg_hash16: fp.arg_hash16,
            // At most 26 (a U256 has 256 bits).
            value_bucket: fp.value_bucket.min(255) as u8,
            gas_bucket: fp.gas_bucket.to_be_bytes(),
            sender: fwd.sender.0.0,
            expires: expires.to_le_bytes(),
        }
    }

    fn expires(&self) -> Millis {
        Millis::from_le_bytes(self.expires)
    }

    fn forward(&self) -> Forward {
        Forward {
            fingerprint: Fingerprint::from_components(
                Address::from(self.target),
                self.selector,
                self.arg_hash16,
                u64::from(self.value_bucket),
                u32::from_be_bytes(self.gas_bucket),
            ),
            sender: Address::from(self.sender),
        }
    }
}

#[derive(Debug)]
struct Shard {
    /// Insertion order, the oldest at the front; at most `cap` slots. The
    /// ring holds what is live, not its share of the bound: it grows when
    /// full (doubling, up to `cap`) and shrinks when a sweep leaves it
    /// mostly empty, so a steady rate far below the bound costs memory for
    /// what it keeps for the time to live, however long it runs.
    ring: VecDeque<Slot>,
    /// Sequence number of the front slot: the slot with sequence `s` is
    /// `ring[s - first]` (wrapping; a ring holds fewer than 2^32 slots).
    first: u32,
    cap: usize,
    /// Sequence numbers, by tx hash: every one names a slot in the ring.
    index: HashTable<u32>,
    keys: KeyState,
}

/// A ring's capacity is not shrunk below this many slots.
const MIN_SHRINK: usize = 64;

impl Shard {
    fn hash(&self, tx_hash: &[u8; 32]) -> u64 {
        self.keys.hash_bytes(tx_hash)
    }

    /// Ring position of a sequence number.
    fn position(&self, seq: u32) -> usize {
        seq.wrapping_sub(self.first) as usize
    }

    fn find(&self, tx_hash: &[u8; 32]) -> Option<usize> {
        self.index
            .find(self.hash(tx_hash), |&s| {
                self.ring[self.position(s)].tx_hash == *tx_hash
            })
            .map(|&s| self.position(s))
    }

    /// Drops the oldest entry.
    fn pop(&mut self) {
        let Some(slot) = self.ring.pop_front() else {
            return;
        };
        let seq = self.first;
        self.first = self.first.wrapping_add(1);
        if let Ok(entry) = self
            .index
            .find_entry(self.hash(&slot.tx_hash), |&s| s == seq)
        {
            entry.remove();
        }
    }

    fn expire(&mut self, now: Millis) {
        while self.ring.front().is_some_and(|s| s.expires() <= now) {
            self.pop();
        }
    }

    /// Expires, then gives back memory a burst left behind: a ring (and
    /// its index) under a quarter full is shrunk to twice what it holds,
    /// so the next growth is a doubling away.
    fn sweep(&mut self, now: Millis) {
        self.expire(now);
        let len = self.ring.len();
        let target = (len * 2).max(MIN_SHRINK);
        if self.ring.capacity() > MIN_SHRINK && len < self.ring.capacity() / 4 {
            self.ring.shrink_to(target);
        }
        if self.index.capacity() > MIN_SHRINK && len < self.index.capacity() / 4 {
            let (ring, first, keys) = (&self.ring, self.first, self.keys);
            self.index.shrink_to(target, |&s| {
                keys.hash_bytes(&ring[s.wrapping_sub(first) as usize].tx_hash)
            });
        }
    }

    fn insert(&mut self, slot: Slot, now: Millis) {
        self.expire(now);
        // A transaction sent again while remembered keeps its first entry
        // (a resend flood must not push others' entries out).
        if let Some(i) = self.find(&slot.tx_hash)
            && self.ring[i].expires() > now
        {
            return;
        }
        if self.ring.len() == self.cap {
            self.pop();
        }
        if self.ring.len() == self.ring.capacity() {
            // Grows to `cap` and no further (doubling, then exactly).
            let want = (self.ring.len() * 2).max(16).min(self.cap);
            self.ring.reserve_exact(want - self.ring.len());
        }
        self.ring.push_back(slot);
        let seq = self.first.wrapping_add(self.ring.len() as u32 - 1);
        let hash = self.hash(&slot.tx_hash);
        let (ring, first, keys) = (&self.ring, self.first, self.keys);
        let at = |s: u32| &ring[s.wrapping_sub(first) as usize];
        // The same hash forwarded again: the index follows the newest slot
        // (the older one leaves the index, and the ring in its turn).
        match self
            .index
            .find_mut(hash, |&s| s != seq && at(s).tx_hash == slot.tx_hash)
        {
            Some(s) => *s = seq,
            None => {
                self.index
                    .insert_unique(hash, seq, |&s| keys.hash_bytes(&at(s).tx_hash));
            }
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct ForwardedMap {
    shards: Sharded<Shard>,
}

impl ForwardedMap {
    /// A map of at most about `max_entries` (spread over the shards).
    pub fn new(max_entries: usize) -> ForwardedMap {
        let cap = max_entries.div_ceil(SHARDS).clamp(1, u32::MAX as usize);
        ForwardedMap {
            shards: Sharded::new(SHARDS, |keys| Shard {
                ring: VecDeque::new(),
                first: 0,
                cap,
                index: HashTable::new(),
                keys,
            }),
        }
    }

    /// Remembers a forward of `tx_hash` until `expires`.
    pub fn insert(&self, tx_hash: B256, forward: &Forward, expires: Millis, now: Millis) {
        self.shards
            .lock(&tx_hash)
            .insert(Slot::new(tx_hash, forward, expires), now);
    }

    /// What was forwarded under `tx_hash`, if it is still remembered.
    pub fn get(&self, tx_hash: &B256, now: Millis) -> Option<Forward> {
        let shard = self.shards.lock(tx_hash);
        let slot = &shard.ring[shard.find(&tx_hash.0)?];
        (slot.expires() > now).then(|| slot.forward())
    }

    /// Drops expired entries of `shards` shards (round-robin), and shrinks
    /// a ring left mostly empty.
    pub fn sweep(&self, now: Millis, shards: usize) {
        self.shards.sweep_next(shards, |s| s.sweep(now));
    }

    /// Entries held (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.shards.for_each(|s| n += s.ring.len());
        n
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held by the rings and indexes (capacity, not just use).
    pub fn heap_bytes(&self) -> usize {
        let mut n = 0;
        self.shards.for_each(|s| {
            n += s.ring.capacity() * size_of::<Slot>() + s.index.allocation_size();
        });
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;

    fn fwd(i: u64) -> (B256, Forward) {
        let fp = Fingerprint::from_parts(
            Address::repeat_byte(1),
            &i.to_be_bytes(),
            U256::from(i),
            21_000 + i,
        );
        let hash = B256::from(U256::from(i).wrapping_mul(U256::from(0x9e37_79b9_u64)));
        (
            hash,
            Forward {
                fingerprint: fp,
                sender: Address::repeat_byte(i as u8),
            },
        )
    }

    #[test]
    fn a_slot_is_105_bytes() {
        assert_eq!(size_of::<Slot>(), 105);
    }

    #[test]
    fn entries_come_back_whole_until_they_expire() {
        // Room for 64 per shard: 500 entries never fill one (the seed, so
        // the spread, is random).
        let map = ForwardedMap::new(SHARDS * 64);
        for i in 0..500 {
            let (h, f) = fwd(i);
            map.insert(h, &f, 1_000 + i, 0);
        }
        for i in 0..500 {
            let (h, f) = fwd(i);
            assert_eq!(map.get(&h, 999), Some(f), "{i}");
        }
        assert_eq!(map.get(&fwd(10).0, 1_010), None);
        assert_eq!(map.get(&fwd(11).0, 1_010), Some(fwd(11).1));
        map.sweep(1_250, SHARDS);
        assert_eq!(map.len(), 249);
        assert_eq!(map.get(&fwd(9_999).0, 0), None);
    }

    #[test]
    fn a_full_map_drops_its_oldest_first() {
        let map = ForwardedMap::new(SHARDS * 4);
        for i in 0..10_000 {
            let (h, f) = fwd(i);
            map.insert(h, &f, u64::MAX, i);
        }
        assert!(map.len() <= SHARDS * 4);
        // The newest of each shard are kept: the last four overall (no more
        // than a shard holds, wherever they land) are all there.
        for i in 9_996..10_000 {
            assert!(map.get(&fwd(i).0, 0).is_some(), "{i}");
        }
        let kept = (0..10_000)
            .filter(|&i| map.get(&fwd(i).0, 0).is_some())
            .count();
        assert_eq!(kept, map.len());
    }

    #[test]
    fn a_hash_forwarded_again_keeps_its_first_entry_until_it_expires() {
        let map = ForwardedMap::new(SHARDS * 2);
        let (h, f) = fwd(1);
        let (_, g) = fwd(2);
        map.insert(h, &f, 100, 0);
        // A resend while remembered takes no second slot.
        for t in 1..50 {
            map.insert(h, &g, 100 + t, t);
        }
        assert_eq!(map.len(), 1);
        assert_eq!(map.get(&h, 99), Some(f));
        // Once it expired, a new forward is remembered.
        map.insert(h, &g, 300, 150);
        assert_eq!(map.get(&h, 299), Some(g));
        assert_eq!(map.get(&h, 300), None);
    }
    #[test]
    fn a_steady_rate_below_the_bound_holds_only_what_is_live() {
        // The bound allows 10 000 per shard; a steady 1 forward per ms
        // that lives 1 s keeps about 16 per shard. After 200 000
        // forwards the rings hold what is live, not a walk through their
        // share of the bound (that was 200 000 slots, 21 MB, and grew for
        // as long as the process ran).
        let map = ForwardedMap::new(SHARDS * 10_000);
        for i in 0..200_000 {
            let (h, f) = fwd(i);
            map.insert(h, &f, i + 1_000, i);
            if i % 100 == 0 {
                map.sweep(i, 1);
            }
        }
        assert!(map.len() <= 1_000 + SHARDS * 100, "{}", map.len());
        let walked = 200_000 * size_of::<Slot>();
        assert!(
            map.heap_bytes() < walked / 20,
            "{} bytes held for about 1 000 live entries",
            map.heap_bytes()
        );
        for i in 199_500..200_000 {
            assert!(map.get(&fwd(i).0, 199_999).is_some(), "{i}");
        }
    }

    #[test]
    fn a_burst_is_given_back_once_it_expires() {
        let map = ForwardedMap::new(SHARDS * 10_000);
        for i in 0..100_000 {
            let (h, f) = fwd(i);
            map.insert(h, &f, 1_000, 0);
        }
        let burst = map.heap_bytes();
        assert!(burst >= 100_000 * size_of::<Slot>(), "{burst}");
        // A trickle after the burst expired: one sweep of every shard
        // gives the rings and indexes back.
        for i in 0..64 {
            let (h, f) = fwd(1_000_000 + i);
            map.insert(h, &f, 5_000, 2_000);
        }
        map.sweep(2_000, SHARDS);
        assert_eq!(map.len(), 64);
        // What is left is the floor a ring is not shrunk below, and its
        // index: about 7 KB a shard, 3% of the burst.
        let floor = SHARDS * (MIN_SHRINK * size_of::<Slot>() + 1_024);
        assert!(map.heap_bytes() <= floor, "{} of {burst}", map.heap_bytes());
        for i in 0..64 {
            assert!(map.get(&fwd(1_000_000 + i).0, 2_001).is_some(), "{i}");
        }
    }

    #[test]
    fn sequence_numbers_wrap() {
        let keys = KeyState::default();
        let mut shard = Shard {
            ring: VecDeque::new(),
            first: u32::MAX - 10,
            cap: 8,
            index: HashTable::new(),
            keys,
        };
        for i in 0..40u64 {
            let (h, f) = fwd(i);
            shard.insert(Slot::new(h, &f, 1_000), i);
            // The newest eight are found, each at its own slot.
            for j in i.saturating_sub(7)..=i {
                let (h, f) = fwd(j);
                let at = shard.find(&h.0).expect("held");
                assert_eq!(shard.ring[at].forward(), f, "{i} {j}");
            }
            assert!(i < 8 || shard.find(&fwd(i - 8).0.0).is_none(), "{i}");
        }
        assert_eq!(shard.ring.len(), 8);
        assert_eq!(shard.index.len(), 8);
        assert!(shard.first < 100, "wrapped: {}", shard.first);
    }
}
