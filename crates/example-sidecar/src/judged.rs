//! What the sidecar judged: fingerprints found invalid, with the assertions
//! they violated, remembered for a TTL and up to a bound.
//!
//! A judgement lives `ttl` from its latest recording (judging the same
//! fingerprint again restarts the clock). Expired entries are swept on
//! every access, and beyond `max` entries the oldest judgement is dropped
//! first, so a long run holds at most `max` fingerprints.
//!
//! Entries are ordered by a sequence number taken at each recording; as the
//! TTL is the same for all, that is also the order in which they expire, so
//! both the sweep and the bound pop from the front of one ordered index.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use txgate_screen::AssertionKey;

#[derive(Debug)]
struct Entry {
    assertions: Vec<AssertionKey>,
    expires: Instant,
    seq: u64,
}

/// Fingerprints judged invalid, bounded in time and in number.
#[derive(Debug)]
pub(crate) struct Judged {
    ttl: Duration,
    max: usize,
    entries: HashMap<B256, Entry>,
    /// Recording sequence → fingerprint, oldest first.
    order: BTreeMap<u64, B256>,
    next_seq: u64,
}

impl Judged {
    /// An empty set whose judgements live `ttl`, holding at most `max`
    /// (at least one).
    pub(crate) fn new(ttl: Duration, max: usize) -> Judged {
        Judged {
            ttl,
            max: max.max(1),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Records that `fp` violates `assertion`, judged at `now`: adds the
    /// assertion to the fingerprint's and restarts its TTL.
    pub(crate) fn record(&mut self, fp: B256, assertion: AssertionKey, now: Instant) {
        self.sweep(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires = now + self.ttl;
        match self.entries.get_mut(&fp) {
            Some(entry) => {
                self.order.remove(&entry.seq);
                entry.seq = seq;
                entry.expires = expires;
                if !entry.assertions.contains(&assertion) {
                    entry.assertions.push(assertion);
                }
            }
            None => {
                self.entries.insert(
                    fp,
                    Entry {
                        assertions: vec![assertion],
                        expires,
                        seq,
                    },
                );
            }
        }
        self.order.insert(seq, fp);
        while self.entries.len() > self.max {
            self.pop_oldest();
        }
    }

    /// The assertions `fp` was judged to violate, unless it never was or
    /// the judgement expired by `now`.
    pub(crate) fn get(&mut self, fp: &B256, now: Instant) -> Option<Vec<AssertionKey>> {
        self.sweep(now);
        self.entries.get(fp).map(|e| e.assertions.clone())
    }

    /// Fingerprints held (expired ones included until the next sweep).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops every judgement expired by `now`.
    fn sweep(&mut self, now: Instant) {
        while let Some((_, fp)) = self.order.first_key_value() {
            match self.entries.get(fp) {
                Some(entry) if entry.expires > now => break,
                _ => self.pop_oldest(),
            }
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, fp)) = self.order.pop_first() {
            self.entries.remove(&fp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u64) -> B256 {
        B256::left_padding_from(&i.to_be_bytes())
    }

    fn key(version: u64) -> AssertionKey {
        AssertionKey {
            id: B256::repeat_byte(0xa1),
            version,
        }
    }

    #[test]
    fn judged_never_shrinks_entries_expire_after_the_ttl() {
        let t0 = Instant::now();
        let mut judged = Judged::new(Duration::from_secs(10), 1_000);
        judged.record(fp(1), key(1), t0);
        assert_eq!(
            judged.get(&fp(1), t0 + Duration::from_secs(9)),
            Some(vec![key(1)])
        );
        assert_eq!(judged.get(&fp(1), t0 + Duration::from_secs(10)), None);
        // Swept, not merely hidden.
        assert_eq!(judged.len(), 0);
    }

    #[test]
    fn judged_never_shrinks_expired_entries_are_swept_on_record() {
        let t0 = Instant::now();
        let mut judged = Judged::new(Duration::from_secs(10), 1_000);
        for i in 0..500 {
            judged.record(fp(i), key(1), t0);
        }
        assert_eq!(judged.len(), 500);
        judged.record(fp(1_000), key(1), t0 + Duration::from_secs(11));
        assert_eq!(judged.len(), 1);
    }

    #[test]
    fn judged_never_shrinks_a_long_run_holds_at_most_max_dropping_the_oldest() {
        let t0 = Instant::now();
        let mut judged = Judged::new(Duration::from_secs(3_600), 100);
        for i in 0..10_000u64 {
            judged.record(fp(i), key(1), t0 + Duration::from_millis(i));
            assert!(judged.len() <= 100);
        }
        let now = t0 + Duration::from_secs(11);
        assert_eq!(judged.len(), 100);
        assert_eq!(
            judged.get(&fp(9_899), now),
            None,
            "older than the newest 100"
        );
        assert_eq!(judged.get(&fp(9_900), now), Some(vec![key(1)]));
        assert_eq!(judged.get(&fp(9_999), now), Some(vec![key(1)]));
        assert_eq!(judged.order.len(), judged.entries.len());
    }

    #[test]
    fn judging_again_restarts_the_ttl_and_keeps_every_assertion() {
        let t0 = Instant::now();
        let mut judged = Judged::new(Duration::from_secs(10), 2);
        judged.record(fp(1), key(1), t0);
        judged.record(fp(2), key(1), t0 + Duration::from_secs(1));
        // fp(1) judged again: now the newest, and it outlives its first TTL.
        judged.record(fp(1), key(2), t0 + Duration::from_secs(5));
        judged.record(fp(1), key(2), t0 + Duration::from_secs(5));
        assert_eq!(
            judged.get(&fp(1), t0 + Duration::from_secs(12)),
            Some(vec![key(1), key(2)])
        );
        // A third fingerprint evicts fp(2), the oldest judgement.
        let mut judged2 = Judged::new(Duration::from_secs(10), 2);
        judged2.record(fp(1), key(1), t0);
        judged2.record(fp(2), key(1), t0);
        judged2.record(fp(1), key(1), t0);
        judged2.record(fp(3), key(1), t0);
        assert_eq!(judged2.get(&fp(2), t0), None);
        assert!(judged2.get(&fp(1), t0).is_some());
        assert!(judged2.get(&fp(3), t0).is_some());
        assert_eq!(judged2.order.len(), 2);
    }
}
