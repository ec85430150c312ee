//! The denied set as the design first named it and the reference built
//! it: a [moka](https://docs.rs/moka) cache, with txgate's counting bloom
//! in front kept exact by moka's eviction listener. Only for the side by
//! side benches (`benches/denied.rs`, `benches/memory.rs --moka`); txgate
//! uses `txgate_screen::denied::DeniedSet`.
//!
//! The same operations as `DeniedSet`: `get` (a bloom miss returns
//! without touching the cache), and `insert_batch` with the same merge of
//! a held ban (later expiry, the two most recent assertions). Each entry
//! lives until the end of its suspect window (moka's per-entry expiry);
//! beyond `max_entries` moka evicts by its own policy (TinyLFU: a new key
//! may be refused admission). `insert_batch` ends with moka's pending
//! maintenance, so its cost is in the batch, as txgate's is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use moka::Expiry;
use moka::notification::RemovalCause;
use moka::sync::Cache;
use txgate_screen::Millis;
use txgate_screen::assertion::AssertionRef;
use txgate_screen::bloom::CountingBloom;
use txgate_screen::denied::{Ban, Inserted};

/// A ban and how long it lives from its last write.
#[derive(Debug, Clone, Copy)]
struct Held {
    ban: Ban,
    ttl: Duration,
}

struct ByBan;

impl Expiry<B256, Held> for ByBan {
    fn expire_after_create(&self, _: &B256, held: &Held, _: Instant) -> Option<Duration> {
        Some(held.ttl)
    }

    fn expire_after_update(
        &self,
        _: &B256,
        held: &Held,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(held.ttl)
    }
}

/// See the module docs.
pub struct MokaDenied {
    cache: Cache<B256, Held>,
    bloom: Arc<CountingBloom>,
}

impl MokaDenied {
    /// A set of at most `max_entries` fingerprints.
    pub fn new(max_entries: usize) -> MokaDenied {
        let bloom = Arc::new(CountingBloom::new(max_entries));
        let listener = {
            let bloom = bloom.clone();
            move |key: Arc<B256>, _: Held, cause: RemovalCause| {
                // A replaced value keeps its key: the bloom still holds it.
                if cause != RemovalCause::Replaced {
                    bloom.remove(&key);
                }
            }
        };
        MokaDenied {
            cache: Cache::builder()
                .max_capacity(max_entries as u64)
                .expire_after(ByBan)
                .eviction_listener(listener)
                .build(),
            bloom,
        }
    }

    /// The entry for `key`, if any.
    #[inline]
    pub fn get(&self, key: &B256) -> Option<Ban> {
        if !self.bloom.may_contain(key) {
            return None;
        }
        self.cache.get(key).map(|held| held.ban)
    }

    /// Bans each key until `expires` (suspect until `suspect_until`) under
    /// its assertion, merging with a held ban as `DeniedSet` does.
    pub fn insert_batch(
        &self,
        items: &[(B256, Option<AssertionRef>)],
        expires: Millis,
        suspect_until: Millis,
        now: Millis,
    ) -> Vec<Inserted> {
        let ttl = Duration::from_millis(suspect_until.saturating_sub(now));
        let out = items
            .iter()
            .map(|&(key, assertion)| {
                let extended = std::cell::Cell::new(false);
                let entry = self.cache.entry(key).and_upsert_with(|held| {
                    let ban = match held.map(|e| e.into_value().ban) {
                        None => Ban {
                            expires,
                            suspect_until,
                            assertions: [assertion, None],
                        },
                        Some(mut ban) => {
                            extended.set(ban.refresh(assertion, expires, suspect_until));
                            ban
                        }
                    };
                    Held { ban, ttl }
                });
                if entry.is_old_value_replaced() {
                    if extended.get() {
                        Inserted::Refreshed
                    } else {
                        Inserted::Held
                    }
                } else {
                    self.bloom.add(&key);
                    Inserted::New
                }
            })
            .collect();
        self.cache.run_pending_tasks();
        out
    }

    /// Entries held (after moka's pending maintenance).
    pub fn len(&self) -> usize {
        self.cache.run_pending_tasks();
        self.cache.entry_count() as usize
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is held, without the bloom (for tests).
    pub fn holds(&self, key: &B256) -> bool {
        self.cache.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> B256 {
        alloy_primitives::keccak256(i.to_be_bytes())
    }

    /// The eviction listener keeps the bloom exact: every key moka holds
    /// passes the bloom, and a key moka dropped (refused or evicted at the
    /// bound) leaves the bloom, as in `DeniedSet`.
    #[test]
    fn the_bloom_follows_what_moka_holds() {
        let set = MokaDenied::new(2_000);
        for round in 0..5u64 {
            let items: Vec<(B256, Option<AssertionRef>)> =
                (0..1_000).map(|i| (key(round * 1_000 + i), None)).collect();
            set.insert_batch(&items, 1_000, 2_000, 0);
        }
        let held = set.len();
        assert!(held <= 2_000, "{held}");
        for i in 0..5_000 {
            if set.holds(&key(i)) {
                assert!(set.get(&key(i)).is_some(), "held key {i} missed");
            }
        }
        let false_hits = (0..5_000)
            .filter(|&i| !set.holds(&key(i)) && set.bloom.may_contain(&key(i)))
            .count();
        assert!(
            false_hits < 250,
            "dropped keys left in the bloom: {false_hits}"
        );
    }

    /// Two assertion references, from a table of txgate's.
    fn two_refs() -> (Option<AssertionRef>, Option<AssertionRef>) {
        use txgate_screen::assertion::{Assertions, Observed};
        let table = Assertions::new(txgate_screen::ScreenSettings::default().cooldown);
        let observe = |byte: u8| {
            let key = txgate_screen::AssertionKey {
                id: B256::repeat_byte(byte),
                version: 1,
            };
            match table.observe(key, 0) {
                Observed::Current(aref) => Some(aref),
                other => panic!("{other:?}"),
            }
        };
        (observe(1), observe(2))
    }

    #[test]
    fn a_held_ban_is_merged_like_the_denied_set() {
        let set = MokaDenied::new(1_000);
        let (a, b) = two_refs();
        assert_eq!(
            set.insert_batch(&[(key(1), a), (key(1), b)], 100, 150, 0),
            vec![Inserted::New, Inserted::Held]
        );
        let ban = set.get(&key(1)).unwrap_or_else(|| panic!("held"));
        assert_eq!(ban.assertions, [b, a]);
        assert_eq!(set.len(), 1);
    }
}
