//! Read-your-writes: the clients that submitted lately.
//!
//! A replica learns of a transaction only once the sequencer has put it in
//! a block and the block has reached the replica. A client that submits
//! and then asks for its nonce (`eth_getTransactionCount`), its receipt or
//! an `eth_call` on the new state would get an answer from before its own
//! write if a replica answered. So for `window` after a client's
//! submission ([`RecentWrites::wrote`]), those reads go to the sequencer
//! ([`crate::needs_sequencer`]).
//!
//! Bound: at most `capacity` clients are kept. A new client on a full
//! table first drops the entries whose window has passed, then the oldest
//! ones (with one window for all, the oldest is also the first to expire).
//! A full table never blocks and never refuses a write: a client it could
//! not keep, or dropped, reads as not recent, and that is safe, because
//! this table changes only which node answers a read, never whether the
//! call is served: the client may see its write a block late, as with no
//! table at all.
//!
//! Memory: the map of at most `capacity` clients, and a queue of entries
//! in submission order, compacted when it grows past twice the capacity
//! (a client that writes again leaves its older entry behind), so at most
//! `2 × capacity + 16` entries; each call costs O(1) amortized. Time is the
//! caller's monotonic clock; if it went backwards, nothing breaks, only the
//! eviction order is less exact.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use crate::Millis;

/// Queue slack before compaction, so a tiny table does not compact on
/// every write.
const SLACK: usize = 16;

/// The bounded table of clients that submitted within a window.
#[derive(Debug, Clone)]
pub struct RecentWrites<K> {
    window: Millis,
    capacity: usize,
    /// Client → end of its window.
    until: HashMap<K, Millis>,
    /// (end of window, client), in order of writes; an entry whose end
    /// differs from the map's is left behind by a later write.
    order: VecDeque<(Millis, K)>,
}

impl<K: Hash + Eq + Clone> RecentWrites<K> {
    /// A table keeping at most `capacity` clients, each for `window` after
    /// its last submission.
    pub fn new(window: Millis, capacity: usize) -> RecentWrites<K> {
        RecentWrites {
            window,
            capacity,
            until: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The window.
    pub fn window(&self) -> Millis {
        self.window
    }

    /// The bound on clients kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Clients kept, expired or not.
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether no client is kept.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }

    /// `client` submitted at `now`: its reads go to the sequencer until
    /// `now + window`.
    pub fn wrote(&mut self, client: K, now: Millis) {
        if self.capacity == 0 || self.window == 0 {
            return;
        }
        let until = now.saturating_add(self.window);
        self.expire(now);
        match self.until.get_mut(&client) {
            Some(kept) if *kept >= until => return,
            Some(kept) => *kept = until,
            None => {
                while self.until.len() >= self.capacity {
                    self.evict_oldest();
                }
                self.until.insert(client.clone(), until);
            }
        }
        self.order.push_back((until, client));
        if self.order.len() > 2 * self.capacity + SLACK {
            let until = &self.until;
            self.order.retain(|(u, k)| until.get(k) == Some(u));
        }
    }

    /// Whether `client` submitted within the window before `now` (false
    /// for a client the table could not keep).
    pub fn recent(&self, client: &K, now: Millis) -> bool {
        self.until.get(client).is_some_and(|&until| now < until)
    }

    /// Drops the entries whose window ended at or before `now`, from the
    /// front of the queue.
    fn expire(&mut self, now: Millis) {
        while let Some(&(until, _)) = self.order.front() {
            if until > now {
                break;
            }
            self.pop_front();
        }
    }

    /// Drops the oldest client still kept.
    fn evict_oldest(&mut self) {
        while !self.order.is_empty() {
            if self.pop_front() {
                return;
            }
        }
        // The queue holds an entry for every client kept; unreachable, but
        // a table that lost track must still make room.
        self.until.clear();
    }

    /// Pops the queue's front; true when it removed a client (the entry
    /// was the client's latest).
    fn pop_front(&mut self) -> bool {
        let Some((until, client)) = self.order.pop_front() else {
            return false;
        };
        if self.until.get(&client) == Some(&until) {
            self.until.remove(&client);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_within_the_window_only() {
        let mut w = RecentWrites::new(5_000, 10);
        assert!(!w.recent(&1u128, 0));
        w.wrote(1u128, 1_000);
        assert!(w.recent(&1, 1_000));
        assert!(w.recent(&1, 5_999));
        assert!(!w.recent(&1, 6_000));
        assert!(!w.recent(&2, 1_000));
    }

    #[test]
    fn a_new_write_extends_the_window() {
        let mut w = RecentWrites::new(5_000, 10);
        w.wrote(1u128, 0);
        w.wrote(1, 4_000);
        assert!(w.recent(&1, 8_999));
        assert!(!w.recent(&1, 9_000));
        // The entry left behind by the first write does not drop the
        // client when it reaches the front.
        w.wrote(2, 6_000);
        assert!(w.recent(&1, 6_000));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn expired_entries_go_before_the_oldest_live_one() {
        let mut w = RecentWrites::new(1_000, 3);
        w.wrote(1u128, 0); // expires at 1_000
        w.wrote(2, 500);
        w.wrote(3, 600);
        // At 1_200, 1 has expired: it goes, 2 and 3 stay.
        w.wrote(4, 1_200);
        assert!(!w.recent(&1, 1_200));
        assert!(w.recent(&2, 1_200) && w.recent(&3, 1_200) && w.recent(&4, 1_200));
        // Full of live clients: the oldest (2) goes.
        w.wrote(5, 1_300);
        assert!(!w.recent(&2, 1_300));
        assert!(w.recent(&3, 1_300) && w.recent(&4, 1_300) && w.recent(&5, 1_300));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn the_bound_holds_and_the_newest_are_kept() {
        let cap = 100;
        let mut w = RecentWrites::new(1_000_000, cap);
        for k in 0..10_000u128 {
            w.wrote(k, k as u64);
            // A few clients write again and again.
            w.wrote(k % 7, k as u64);
            assert!(w.len() <= cap);
            assert!(w.order.len() <= 2 * cap + SLACK);
        }
        for k in 9_950..10_000u128 {
            assert!(w.recent(&k, 10_000));
        }
        assert!(!w.recent(&0x10, 10_000));
    }

    #[test]
    fn property_matches_a_model_while_not_full() {
        // With capacity never reached, `recent` is exactly "wrote within
        // the window", whatever the sequence.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut w = RecentWrites::new(300, 1_000);
        let mut last: HashMap<u8, Millis> = HashMap::new();
        let mut now = 0;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            now += seed % 50;
            let client = (seed >> 20) as u8 % 32;
            if seed & 1 == 0 {
                w.wrote(client, now);
                last.insert(client, now);
            }
            let model = last.get(&client).is_some_and(|&t| now < t + 300);
            assert_eq!(w.recent(&client, now), model);
        }
    }

    #[test]
    fn zero_capacity_or_window_keeps_nothing() {
        let mut w = RecentWrites::new(1_000, 0);
        w.wrote(1u128, 0);
        assert!(!w.recent(&1, 0));
        let mut w = RecentWrites::new(0, 10);
        w.wrote(1u128, 0);
        assert!(!w.recent(&1, 0) && w.is_empty());
    }

    #[test]
    fn a_clock_going_back_breaks_nothing() {
        let mut w = RecentWrites::new(1_000, 2);
        w.wrote(1u128, 5_000);
        w.wrote(1, 4_000); // earlier end: kept as it was
        assert!(w.recent(&1, 5_500));
        w.wrote(2, 3_000); // behind 1 in the queue, expired first
        w.wrote(3, 5_500);
        // Full: the queue's front (1) goes, though 2 expired earlier.
        assert_eq!(w.len(), 2);
        assert!(w.recent(&3, 5_500) && !w.recent(&1, 5_500) && !w.recent(&2, 5_500));
        w.wrote(4, 9_000);
        assert!(w.recent(&4, 9_000) && w.len() <= 2);
    }
}
