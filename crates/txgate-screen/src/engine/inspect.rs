//! Inspection and control, for operators: why a tx hash, a fingerprint,
//! a sender or a call is refused, and lifting any of them by hand. Reads
//! take one shard lock each, like the request path; nothing here runs on
//! it.

use alloy_primitives::{Address, B256};

use super::{BanState, Screen};
use crate::assertion::{AssertionKey, CooldownCheck};
use crate::snapshot::BanRecord;
use crate::ttl::Millis;

/// What is held against a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanView {
    /// Refused (`true`), or past its ban and suspect (one forward at a
    /// time).
    pub denied: bool,
    /// Until the ban ends (0 once suspect).
    pub expires_in: Millis,
    /// Until the suspect window ends.
    pub suspect_for: Millis,
    /// The assertions it failed, still current; empty with
    /// `unconditional`.
    pub assertions: Vec<AssertionKey>,
    /// Banned under no assertion: holds to its end whatever the
    /// assertions do.
    pub unconditional: bool,
}

/// A tx hash in the recent-failure set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureView {
    /// Until it leaves the set.
    pub expires_in: Millis,
    /// The assertion it failed, when named and still known.
    pub assertion: Option<AssertionKey>,
    /// Whether its failure was charged to a sender.
    pub charged: bool,
}

/// A sender under backpressure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SenderView {
    /// Tokens left (each invalidation charged takes one).
    pub tokens: f64,
    /// Backoff remaining (0: not backed off).
    pub backoff_for: Millis,
    /// Backoffs in a row (each doubles the wait).
    pub level: u8,
}

/// The cooldown of a call (target and selector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CooldownView {
    /// None.
    Clear,
    /// In cooldown under this assertion; the trickle slot is open.
    Open(Option<AssertionKey>),
    /// In cooldown under this assertion; the next slot opens in this many
    /// ms.
    Closed(Option<AssertionKey>, Millis),
}

impl Screen {
    /// The ban of `fingerprint`, if one is in force or suspect.
    pub fn ban_of(&self, fingerprint: &B256, now: Millis) -> Option<BanView> {
        let ban = self.denied.get(fingerprint)?;
        let denied = match self.ban_state(&ban, now) {
            BanState::Dead => return None,
            state => state == BanState::Denied,
        };
        Some(BanView {
            denied,
            expires_in: ban.expires.saturating_sub(now),
            suspect_for: ban.suspect_until.saturating_sub(now),
            assertions: ban
                .assertions
                .iter()
                .flatten()
                .filter(|a| self.assertions.is_live(**a))
                .filter_map(|a| self.assertions.describe(*a))
                .collect(),
            unconditional: ban.assertions == [None, None],
        })
    }

    /// `tx_hash` in the recent-failure set, if there.
    pub fn failure_of(&self, tx_hash: &B256, now: Millis) -> Option<FailureView> {
        let (expires, failure) = self.recent_failures.get_entry(tx_hash, now)?;
        Some(FailureView {
            expires_in: expires.saturating_sub(now),
            assertion: failure.assertion.and_then(|a| self.assertions.describe(a)),
            charged: failure.charged,
        })
    }

    /// `sender`'s bucket, if tracked.
    pub fn sender_of(&self, sender: &Address, now: Millis) -> Option<SenderView> {
        let (tokens, backoff_for, level) = self.buckets.inspect(sender, now)?;
        Some(SenderView {
            tokens,
            backoff_for,
            level,
        })
    }

    /// The cooldown of calls to `target` with `selector`, read without
    /// using up a trickle slot.
    pub fn cooldown_of(&self, target: Address, selector: [u8; 4], now: Millis) -> CooldownView {
        match self.assertions.peek(&(target, selector), now) {
            CooldownCheck::Clear => CooldownView::Clear,
            CooldownCheck::Trickle(a) => CooldownView::Open(self.named(a)),
            CooldownCheck::Refuse {
                assertion,
                retry_after,
            } => CooldownView::Closed(self.named(assertion), retry_after),
        }
    }

    /// The assertion behind `a`, unless it is a call key (a cooldown
    /// counted without an assertion id, never shown as one).
    fn named(&self, a: crate::assertion::AssertionRef) -> Option<AssertionKey> {
        self.assertions.describe(a).filter(|k| !k.is_call())
    }

    /// Lifts the ban of `fingerprint` (and its suspect window): whether one
    /// was held.
    pub fn lift_ban(&self, fingerprint: &B256) -> bool {
        self.denied.remove(fingerprint)
    }

    /// Forgets `sender`'s charges and backoff: whether it was tracked.
    pub fn lift_backoff(&self, sender: &Address) -> bool {
        self.buckets.remove(sender)
    }

    /// Takes `tx_hash` out of the recent-failure set: whether it was there.
    pub fn lift_failure(&self, tx_hash: &B256, now: Millis) -> bool {
        self.recent_failures.remove(tx_hash, now).is_some()
    }

    /// Imports bans given by an operator (another instance's export):
    /// unlike a snapshot restore, an import never moves the assertion
    /// table. An assertion this instance holds at another version is left
    /// out of the record (a typo or an older export must not lift every
    /// ban under the current version); a record left with none of the
    /// assertions it named is skipped. Times are capped at what a verdict
    /// here would give (`denied_ttl`, and the suspect window after it), so
    /// no imported ban outlives the assertions it names. Returns how many
    /// were imported.
    pub fn import_bans_by_hand(&self, records: &[BanRecord], now: Millis) -> usize {
        let settings = self.settings();
        let (ban_cap, suspect_cap) = (
            settings.denied_ttl,
            settings.denied_ttl.saturating_add(settings.suspect_window),
        );
        let kept: Vec<BanRecord> = records
            .iter()
            .filter_map(|r| {
                let assertions: Vec<AssertionKey> = r
                    .assertions
                    .iter()
                    .filter(|k| {
                        self.assertions
                            .version_of(&k.id)
                            .is_none_or(|held| held == k.version)
                    })
                    .copied()
                    .collect();
                if assertions.is_empty() && !r.assertions.is_empty() {
                    return None;
                }
                let suspect_for = r.suspect_for.min(suspect_cap);
                (suspect_for > 0).then(|| BanRecord {
                    fingerprint: r.fingerprint,
                    expires_in: r.expires_in.min(ban_cap),
                    suspect_for,
                    assertions,
                })
            })
            .collect();
        self.import_bans(&kept, now)
    }

    /// The shards of the denied set, for [`Screen::export_bans_in`].
    pub fn ban_shards(&self) -> usize {
        self.denied.shard_count()
    }

    /// The bans of one shard of the denied set still in force or suspect
    /// (see [`Screen::export_bans`]): an export a shard at a time holds
    /// one shard's records in memory, not the whole set's.
    pub fn export_bans_in(&self, shard: usize, now: Millis) -> Vec<BanRecord> {
        let mut out = Vec::new();
        self.denied.for_each_in(shard, |fingerprint, ban| {
            if self.ban_state(ban, now) == BanState::Dead {
                return;
            }
            out.push(BanRecord {
                fingerprint: *fingerprint,
                expires_in: ban.expires.saturating_sub(now),
                suspect_for: ban.suspect_until.saturating_sub(now),
                assertions: ban
                    .assertions
                    .iter()
                    .flatten()
                    .filter_map(|a| self.assertions.describe(*a))
                    .collect(),
            });
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Invalidation, ScreenSettings};

    fn screen() -> Screen {
        Screen::new(ScreenSettings::default(), std::time::Instant::now())
    }

    fn key(byte: u8) -> AssertionKey {
        AssertionKey {
            id: B256::repeat_byte(byte),
            version: 1,
        }
    }

    fn invalidation(fp: u8, assertion: Option<AssertionKey>) -> Invalidation {
        Invalidation {
            fingerprint: B256::repeat_byte(fp),
            target: Address::repeat_byte(0x70),
            selector: [1, 2, 3, 4],
            assertion,
            tx_hash: Some(B256::repeat_byte(fp ^ 0xff)),
            sender: Some(Address::repeat_byte(fp)),
            started: 0,
        }
    }

    #[test]
    fn a_ban_is_seen_then_lifted() {
        let s = screen();
        s.apply(&[invalidation(1, Some(key(0xa1)))], 1_000, 0);
        let fp = B256::repeat_byte(1);
        let view = s.ban_of(&fp, 2_000).unwrap();
        assert!(view.denied);
        assert_eq!(view.expires_in, 128_000 - 1_000);
        assert_eq!(view.assertions, vec![key(0xa1)]);
        assert!(!view.unconditional);
        // Past its ban: suspect, then gone.
        let later = s.ban_of(&fp, 1_000 + 128_000).unwrap();
        assert!(!later.denied);
        assert!(s.ban_of(&fp, 1_000 + 256_000).is_none());
        // The failed tx hash and the charged sender.
        let failure = s.failure_of(&B256::repeat_byte(0xfe), 2_000).unwrap();
        assert_eq!(failure.assertion, Some(key(0xa1)));
        assert!(failure.charged);
        // One token taken at the failure, refilled a second later.
        let sender = s.sender_of(&Address::repeat_byte(1), 1_000).unwrap();
        assert_eq!((sender.tokens, sender.backoff_for), (19.0, 0));
        let sender = s.sender_of(&Address::repeat_byte(1), 2_000).unwrap();
        assert_eq!(sender.tokens, 20.0);
        // Lifted: the request path no longer refuses it.
        assert!(s.lift_ban(&fp));
        assert!(!s.lift_ban(&fp));
        assert!(s.ban_of(&fp, 2_000).is_none());
        assert!(s.lift_failure(&B256::repeat_byte(0xfe), 2_000));
        assert!(s.failure_of(&B256::repeat_byte(0xfe), 2_000).is_none());
        assert!(s.lift_backoff(&Address::repeat_byte(1)));
        assert!(s.sender_of(&Address::repeat_byte(1), 2_000).is_none());
        assert_eq!(s.sizes().denied, 0);
    }

    #[test]
    fn a_ban_under_no_assertion_is_unconditional() {
        let s = screen();
        s.apply(&[invalidation(2, None)], 0, 0);
        let view = s.ban_of(&B256::repeat_byte(2), 1).unwrap();
        assert!(view.unconditional && view.assertions.is_empty());
    }

    #[test]
    fn the_export_by_shard_is_the_whole_export() {
        let s = screen();
        let batch: Vec<_> = (0..200u8)
            .map(|i| invalidation(i, Some(key(0xa0))))
            .collect();
        s.apply(&batch, 0, 0);
        let mut by_shard: Vec<B256> = (0..s.ban_shards())
            .flat_map(|i| s.export_bans_in(i, 1))
            .map(|r| r.fingerprint)
            .collect();
        let mut whole: Vec<B256> = s.export_bans(1).iter().map(|r| r.fingerprint).collect();
        by_shard.sort_unstable();
        whole.sort_unstable();
        assert_eq!(by_shard.len(), 200);
        assert_eq!(by_shard, whole);
    }

    #[test]
    fn an_import_by_hand_never_moves_the_assertion_table() {
        let s = screen();
        s.apply(&[invalidation(1, Some(key(0xa1)))], 0, 0);
        let record = |fp: u8, assertion: AssertionKey, expires_in: Millis| BanRecord {
            fingerprint: B256::repeat_byte(fp),
            expires_in,
            suspect_for: expires_in * 2,
            assertions: vec![assertion],
        };
        let bumped = AssertionKey {
            version: u64::MAX - 1,
            ..key(0xa1)
        };
        let imported = s.import_bans_by_hand(
            &[
                // The held assertion at another version: skipped, and the
                // ban under the current version stays.
                record(2, bumped, 10_000),
                // An unknown assertion: learned, the ban imported.
                record(3, key(0xb2), 10_000),
                // A week asked for: capped at this instance's ban time.
                record(4, key(0xa1), 7 * 24 * 3_600_000),
                // Dead on arrival.
                BanRecord {
                    suspect_for: 0,
                    ..record(5, key(0xa1), 0)
                },
            ],
            1,
        );
        assert_eq!(imported, 2);
        assert!(s.ban_of(&B256::repeat_byte(1), 2).unwrap().denied);
        assert!(s.ban_of(&B256::repeat_byte(2), 2).is_none());
        assert!(s.ban_of(&B256::repeat_byte(3), 2).is_some());
        let capped = s.ban_of(&B256::repeat_byte(4), 1).unwrap();
        assert_eq!(capped.expires_in, 128_000);
        assert_eq!(capped.suspect_for, 256_000);
        assert!(s.ban_of(&B256::repeat_byte(5), 2).is_none());
    }

    #[test]
    fn a_cooldown_is_peeked() {
        let s = screen();
        let target = Address::repeat_byte(0x70);
        assert_eq!(s.cooldown_of(target, [1, 2, 3, 4], 0), CooldownView::Clear);
        // Ten distinct fingerprints failing one assertion start its
        // cooldown.
        let batch: Vec<_> = (10..20u8)
            .map(|i| invalidation(i, Some(key(0xc0))))
            .collect();
        s.apply(&batch, 0, 0);
        let seen = s.cooldown_of(target, [1, 2, 3, 4], 1);
        assert!(
            matches!(
                seen,
                CooldownView::Open(Some(k)) | CooldownView::Closed(Some(k), _) if k == key(0xc0)
            ),
            "{seen:?}"
        );
    }
}
