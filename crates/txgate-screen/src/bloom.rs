//! [`CountingBloom`]: the counting bloom filter in front of the denied
//! set, exact about absence as entries come and go.
//!
//! It counts instead of setting bits: the owner adds a key when it starts
//! holding it and removes it when it stops, so the filter never says "not
//! held" for a held key and never fills up with the dead. A counter that
//! reaches 255 sticks there, which can only add false positives. Blocked:
//! the five counters of a key are in one 64-counter block (one cache
//! line), so a probe or an update touches one line.

use std::sync::atomic::{AtomicU8, Ordering};

use alloy_primitives::B256;

use crate::keyed::KeyState;

/// Counters probed per key.
const PROBES: u64 = 5;
/// Counters per entry of the configured bound (a power of two is taken).
const COUNTERS_PER_ENTRY: usize = 8;

/// See the module docs.
pub struct CountingBloom {
    counters: Box<[AtomicU8]>,
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
        CountingBloom {
            counters,
            mask: len as u64 - 1,
            keys: KeyState::new(),
        }
    }

    /// One 64-counter block chosen by the high bits of one keyed hash,
    /// and five counters within it by the low bits.
    #[inline]
    fn positions(&self, key: &B256) -> impl Iterator<Item = usize> + use<'_> {
        let h = self.keys.hash_bytes(key.as_slice());
        let block = ((h >> 32) & (self.mask >> 6)) << 6;
        (0..PROBES).map(move |i| (block | ((h >> (6 * i)) & 63)) as usize)
    }

    /// False only if `key` is not held.
    #[inline]
    pub fn may_contain(&self, key: &B256) -> bool {
        self.positions(key)
            .all(|p| self.counters[p].load(Ordering::Relaxed) != 0)
    }

    /// `key` is now held (call once per key that starts being held).
    pub fn add(&self, key: &B256) {
        for p in self.positions(key) {
            let _ = self.counters[p].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c != u8::MAX).then(|| c + 1)
            });
        }
    }

    /// `key` is no longer held (call once per key that stops being held).
    pub fn remove(&self, key: &B256) {
        for p in self.positions(key) {
            // A saturated counter has lost count: it stays (false positives
            // only, never a false negative).
            let _ = self.counters[p].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c != u8::MAX && c != 0).then(|| c - 1)
            });
        }
    }

    /// Bytes of counters.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }
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
}
