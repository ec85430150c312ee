//! [`CountingBloom`]: the counting bloom filter in front of the denied
//! set, exact about absence as entries come and go.
//!
//! It counts instead of setting bits: the owner adds a key when it starts
//! holding it and removes it when it stops, so the filter never says "not
//! held" for a held key and never fills up with the dead. A counter that
//! reaches 255 sticks there, which can only add false positives. Blocked:
//! the five counters of a key are in one 64-counter block (one cache
//! line), so a probe or an update touches one line.
//!
//! In front of the counters, one bit per block: whether any held key falls
//! in it. A probe reads it first and stops at zero. The counters span
//! 8 MiB at the default bound: a probe there is a cache and TLB miss, and
//! on a filter holding little (the usual case) nearly every probe was one
//! (10% of the proxyd hook's CPU, PERFORMANCE.md). The bits are 16 KiB at
//! that bound: a clean probe stays in the nearest cache; on a full filter
//! it costs one more near read. Each block's count of held keys, behind a
//! lock taken only by adds and removes (bans, not probes), keeps its bit
//! exact: set from the first key, cleared with the last.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use alloy_primitives::B256;

use crate::keyed::KeyState;

/// Counters probed per key.
const PROBES: u64 = 5;
/// Counters per entry of the configured bound (a power of two is taken).
const COUNTERS_PER_ENTRY: usize = 8;

/// See the module docs.
pub struct CountingBloom {
    counters: Box<[AtomicU8]>,
    /// Bit `b`: block `b` holds a key.
    occupied: Box<[AtomicU64]>,
    /// Held keys per 64-counter block; its lock orders the bits' changes.
    held: Mutex<Vec<u32>>,
    mask: u64,
    keys: KeyState,
}

impl std::fmt::Debug for CountingBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingBloom")
            .field("counters", &self.counters.len())
            .finish()
    }
}

impl CountingBloom {
    /// A filter sized for `max_entries` keys held at once: eight one-byte
    /// counters per entry, rounded up to a power of two.
    pub fn new(max_entries: usize) -> CountingBloom {
        let len = (max_entries.max(1024) * COUNTERS_PER_ENTRY).next_power_of_two();
        // Zeroed pages are mapped lazily: until a key first writes to a
        // page, a probe there reads the kernel's one shared zero page,
        // always in cache. So a filter holding few bans costs no RSS and
        // its probes no cache miss. (This counts on the collect becoming
        // a zeroed allocation, which optimised builds do; a debug build
        // writes every page.) Writing every page at start
        // (tried, to keep RSS flat from the first minute) made each probe
        // a miss into 8 MiB: about +0.6 µs per transaction on the proxyd
        // hook's load (PERFORMANCE.md, issue 40). RSS grows instead as
        // bans touch pages, up to the filter's size.
        let counters = (0..len).map(|_| AtomicU8::new(0)).collect();
        let blocks = len / 64;
        CountingBloom {
            counters,
            occupied: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            held: Mutex::new(vec![0; blocks]),
            mask: len as u64 - 1,
            keys: KeyState::new(),
        }
    }

    /// One keyed hash of `key`: its 64-counter block from the high bits
    /// (the block's index), five counters within it from the low bits.
    #[inline]
    fn locate(&self, key: &B256) -> (usize, impl Iterator<Item = usize> + use<>) {
        let h = self.keys.hash_bytes(key.as_slice());
        let block = (h >> 32) & (self.mask >> 6);
        let base = block << 6;
        let positions = (0..PROBES).map(move |i| (base | ((h >> (6 * i)) & 63)) as usize);
        (block as usize, positions)
    }

    /// False only if `key` is not held.
    #[inline]
    pub fn may_contain(&self, key: &B256) -> bool {
        let (block, mut positions) = self.locate(key);
        self.occupied(block) && positions.all(|p| self.counters[p].load(Ordering::Relaxed) != 0)
    }

    #[inline]
    fn occupied(&self, block: usize) -> bool {
        self.occupied[block / 64].load(Ordering::Relaxed) & (1 << (block % 64)) != 0
    }

    /// Counts a key in or out of `block`, its bit following.
    fn count(&self, block: usize, delta: i32) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some(n) = held.get_mut(block) else {
            return;
        };
        let before = *n;
        *n = n.saturating_add_signed(delta);
        let bit = 1u64 << (block % 64);
        match (before, *n) {
            (0, 1..) => {
                self.occupied[block / 64].fetch_or(bit, Ordering::Relaxed);
            }
            (1.., 0) => {
                self.occupied[block / 64].fetch_and(!bit, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// `key` is now held (call once per key that starts being held).
    pub fn add(&self, key: &B256) {
        let (block, positions) = self.locate(key);
        // The block's bit first: a probe that finds the counters set finds
        // the bit set.
        self.count(block, 1);
        for p in positions {
            increment(&self.counters[p]);
        }
    }

    /// `key` is no longer held (call once per key that stops being held).
    pub fn remove(&self, key: &B256) {
        let (block, positions) = self.locate(key);
        for p in positions {
            decrement(&self.counters[p]);
        }
        self.count(block, -1);
    }

    /// Bytes of counters, the blocks' bits and counts included.
    pub fn bytes(&self) -> usize {
        self.counters.len() + self.occupied.len() * 8 + self.counters.len() / 64 * 4
    }
}

/// One more, unless saturated.
fn increment(counter: &AtomicU8) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        (c != u8::MAX).then(|| c + 1)
    });
}

/// One fewer, unless zero or saturated: a saturated counter has lost count
/// and stays (false positives only, never a false negative).
fn decrement(counter: &AtomicU8) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        (c != u8::MAX && c != 0).then(|| c - 1)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_keys_are_always_seen_and_removed_ones_leave() {
        let bloom = CountingBloom::new(1024);
        let key = |i: u64| alloy_primitives::keccak256(i.to_be_bytes());
        for i in 0..1000 {
            bloom.add(&key(i));
        }
        assert!((0..1000).all(|i| bloom.may_contain(&key(i))));
        for i in 0..1000 {
            bloom.remove(&key(i));
        }
        let hits = (0..1000).filter(|&i| bloom.may_contain(&key(i))).count();
        assert_eq!(hits, 0, "every counter went back to zero");
    }

    #[test]
    fn block_counts_follow_the_held_keys_and_stop_clean_probes() {
        let bloom = CountingBloom::new(1024);
        let held = |b: &CountingBloom| {
            b.held
                .lock()
                .unwrap()
                .iter()
                .map(|&n| u64::from(n))
                .sum::<u64>()
        };
        let bits = |b: &CountingBloom| {
            b.occupied
                .iter()
                .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
                .sum::<usize>()
        };
        let key = |i: u64| alloy_primitives::keccak256(i.to_be_bytes());
        for i in 0..50 {
            bloom.add(&key(i));
        }
        assert_eq!(held(&bloom), 50, "one count per held key");
        // Few keys in 128 blocks: a bit for each block with a key, no more.
        let occupied = bloom
            .held
            .lock()
            .unwrap()
            .iter()
            .filter(|&&n| n > 0)
            .count();
        assert_eq!(bits(&bloom), occupied);
        assert!(occupied < 64, "{occupied} of 128 blocks hold a key");
        // A key whose block holds none is absent whatever its counters say.
        let (block, positions) = bloom.locate(&key(1));
        bloom.remove(&key(1));
        if bloom.held.lock().unwrap()[block] == 0 {
            for p in positions {
                bloom.counters[p].store(1, Ordering::Relaxed);
            }
            assert!(!bloom.may_contain(&key(1)));
        }
        bloom.add(&key(1));
        for i in 0..50 {
            bloom.remove(&key(i));
        }
        assert_eq!(held(&bloom), 0);
        assert_eq!(bits(&bloom), 0, "the last key out clears its block's bit");
        assert!((0..50).all(|i| !bloom.may_contain(&key(i))));
    }
}
