//! Replaying is harmless: over made-up times on both clocks (the engine's
//! and the wall clock), a ban applied again runs only what is left of its
//! life, and its sender is charged once.

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use alloy_primitives::{Address, B256};

use super::*;
use crate::wall::MAX_CLOCK_SKEW;
use crate::{ScreenSettings, UnixMillis};

/// The wall clock when the engine's clock reads 0.
const WALL: UnixMillis = 1_700_000_000_000;

fn settings() -> ScreenSettings {
    ScreenSettings::default()
}

fn screen() -> Screen {
    Screen::new(settings(), Instant::now())
}

/// The ban of fingerprint `fp` for tx `tx` of `sender`, started `at` ms
/// after [`WALL`].
fn ban(fp: u8, tx: u8, sender: u8, at: Millis) -> Invalidation {
    Invalidation {
        fingerprint: B256::repeat_byte(fp),
        target: Address::repeat_byte(0x70),
        selector: [0xde, 0xad, 0xbe, 0xef],
        assertion: None,
        tx_hash: Some(B256::repeat_byte(tx)),
        sender: Some(Address::repeat_byte(sender)),
        started: WALL + at,
    }
}

/// Applies `batch` when both clocks read `t` (the wall clock from
/// [`WALL`]).
fn apply(s: &Screen, batch: &[Invalidation], t: Millis) -> Applied {
    s.apply(batch, t, WALL + t)
}

#[test]
fn a_ban_applied_twice_keeps_its_first_expiry() {
    let (ttl, recent) = (settings().denied_ttl, settings().recent_failure_ttl);
    let s = screen();
    let first = apply(&s, &[ban(1, 1, 9, 0)], 0);
    assert_eq!((first.banned, first.charged), (1, 1));
    assert_eq!(s.ban_of(&B256::repeat_byte(1), 0).unwrap().expires_in, ttl);
    // The same ban, 50 s later: it runs on to its first end.
    let again = apply(&s, &[ban(1, 1, 9, 0)], 50_000);
    assert_eq!(
        (
            again.banned,
            again.refreshed,
            again.charged,
            again.duplicates
        ),
        (0, 1, 0, 1)
    );
    let held = s.ban_of(&B256::repeat_byte(1), 50_000).unwrap();
    assert_eq!(held.expires_in, ttl - 50_000);
    // So does the refusal of its hash.
    let failure = s.failure_of(&B256::repeat_byte(1), 50_000).unwrap();
    assert_eq!(failure.expires_in, recent - 50_000);
    assert!(!s.ban_of(&B256::repeat_byte(1), ttl).unwrap().denied);
}

#[test]
fn a_replay_after_its_life_applies_nothing() {
    let ttl = settings().denied_ttl;
    // Read back by an instance that never held it (or restarted).
    let s = screen();
    let late = apply(&s, &[ban(1, 1, 9, 0)], ttl);
    assert_eq!(late.expired, 1);
    assert_eq!(
        (
            late.banned,
            late.refreshed,
            late.recent_failures,
            late.charged
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(s.ban_of(&B256::repeat_byte(1), ttl), None);
    assert_eq!(s.failure_of(&B256::repeat_byte(1), ttl), None);
    assert_eq!(s.sender_of(&Address::repeat_byte(9), ttl), None);
    // Replayed to one that held it: its ban is not brought back.
    let held = screen();
    apply(&held, &[ban(1, 1, 9, 0)], 0);
    let replayed = apply(&held, &[ban(1, 1, 9, 0)], ttl + 1);
    assert_eq!((replayed.expired, replayed.refreshed), (1, 0));
    assert!(!held.ban_of(&B256::repeat_byte(1), ttl + 1).unwrap().denied);
}

#[test]
fn a_ban_learned_late_runs_only_what_is_left_and_charges_nobody() {
    let (ttl, recent) = (settings().denied_ttl, settings().recent_failure_ttl);
    let s = screen();
    // Started 70 s ago: past its failure's window, within its ban's life.
    let applied = apply(&s, &[ban(1, 1, 9, 0)], 70_000);
    assert_eq!(
        (applied.banned, applied.recent_failures, applied.charged),
        (1, 0, 0)
    );
    assert_eq!(
        s.ban_of(&B256::repeat_byte(1), 70_000).unwrap().expires_in,
        ttl - 70_000
    );
    assert_eq!(s.failure_of(&B256::repeat_byte(1), 70_000), None);
    // Started 20 s ago: its hash is refused for the 40 s left, and it
    // charges.
    let applied = apply(&s, &[ban(2, 2, 9, 50_000)], 70_000);
    assert_eq!((applied.banned, applied.charged), (1, 1));
    let failure = s.failure_of(&B256::repeat_byte(2), 70_000).unwrap();
    assert_eq!(failure.expires_in, recent - 20_000);
}

#[test]
fn a_replay_after_the_dedup_window_does_not_charge_the_sender_again() {
    let recent = settings().recent_failure_ttl;
    let s = screen();
    assert_eq!(apply(&s, &[ban(1, 1, 9, 0)], 0).charged, 1);
    assert_eq!(apply(&s, &[ban(1, 1, 9, 0)], 10_000).charged, 0);
    // The recent failure is gone; the ban still runs.
    let after = recent + 1_000;
    assert_eq!(s.failure_of(&B256::repeat_byte(1), after), None);
    let replayed = apply(&s, &[ban(1, 1, 9, 0)], after);
    assert_eq!((replayed.charged, replayed.refreshed), (0, 1));
    // Nor without a tx hash: its ban remembers it.
    let mut hashless = ban(2, 0, 8, 0);
    hashless.tx_hash = None;
    let first = apply(&s, &[hashless, hashless], 0);
    assert_eq!((first.banned, first.charged, first.duplicates), (1, 1, 1));
    for t in [10_000, after] {
        let again = apply(&s, &[hashless], t);
        assert_eq!((again.charged, again.duplicates), (0, 1), "at {t}");
    }
}

#[test]
fn a_distinct_ban_from_the_same_sender_does_charge() {
    let ttl = settings().denied_ttl;
    let s = screen();
    assert_eq!(apply(&s, &[ban(1, 1, 9, 0)], 0).charged, 1);
    // Another fingerprint, 70 s later.
    let other = apply(&s, &[ban(2, 2, 9, 70_000)], 70_000);
    assert_eq!((other.banned, other.charged), (1, 1));
    // Another transaction of the first fingerprint: charged, and the ban
    // runs from its later start.
    let same_call = apply(&s, &[ban(1, 3, 9, 80_000)], 80_000);
    assert_eq!(
        (same_call.refreshed, same_call.charged, same_call.duplicates),
        (1, 1, 0)
    );
    assert_eq!(
        s.ban_of(&B256::repeat_byte(1), 80_000).unwrap().expires_in,
        ttl
    );
    // Without tx hashes, a later failure extends the ban, and charges.
    let mut first = ban(3, 0, 7, 0);
    first.tx_hash = None;
    let later = Invalidation {
        started: WALL + 5_000,
        ..first
    };
    assert_eq!(apply(&s, &[first], 90_000).charged, 0, "past its window");
    assert_eq!(apply(&s, &[later], 90_000).charged, 0, "past its window");
    let (a, b) = (
        Invalidation {
            started: WALL + 85_000,
            ..first
        },
        Invalidation {
            started: WALL + 88_000,
            ..first
        },
    );
    assert_eq!(apply(&s, &[a], 90_000).charged, 1);
    let extended = apply(&s, &[b], 90_000);
    assert_eq!((extended.refreshed, extended.charged), (1, 1));
    assert_eq!(apply(&s, &[a, b], 90_000).charged, 0);
}

#[test]
fn a_start_in_the_future_is_clamped_to_now() {
    let (ttl, recent) = (settings().denied_ttl, settings().recent_failure_ttl);
    let s = screen();
    // A host whose clock runs an hour ahead.
    let ahead = ban(1, 1, 9, 3_600_000);
    let applied = apply(&s, &[ahead], 0);
    assert_eq!((applied.banned, applied.charged), (1, 1));
    assert_eq!(s.ban_of(&B256::repeat_byte(1), 0).unwrap().expires_in, ttl);
    let failure = s.failure_of(&B256::repeat_byte(1), 0).unwrap();
    assert_eq!(failure.expires_in, recent);
    // Within the skew, its start counts as given.
    apply(&s, &[ban(2, 2, 9, MAX_CLOCK_SKEW)], 0);
    assert_eq!(
        s.ban_of(&B256::repeat_byte(2), 0).unwrap().expires_in,
        ttl + MAX_CLOCK_SKEW
    );
    // A replay of the clamped one still charges nobody again.
    assert_eq!(apply(&s, &[ahead], 1_000).charged, 0);
}

/// Two appliers of the same failure at once (the sidecar worker's batch
/// and the fleet log's copy of it, say): the one whose insert made the ban
/// counts it towards the cooldown, even when the other recorded and
/// charged the failure first. The failure used to count for neither: the
/// first saw the ban already held, the second the failure already charged.
#[test]
fn a_failure_applied_twice_at_once_counts_towards_its_cooldown_once() {
    let mut settings = settings();
    settings.cooldown.distinct_fingerprints = 1;
    let s = Screen::new(settings, Instant::now());
    let inv = ban(1, 1, 9, 0);
    let batch = [inv];
    // The first applier, up to its ban: it inserts it.
    let mut first = Applied::default();
    let mut live = s.observe_assertions(&batch, 0, WALL, &mut first);
    s.heat_calls(&live, 0);
    let inserted = s.ban(&live, 0);
    assert_eq!(inserted, vec![Inserted::New]);
    // The second, whole, in between.
    let second = apply(&s, &batch, 0);
    assert_eq!((second.charged, second.cooldowns), (1, 0));
    // The first goes on: the failure is charged already, but the ban is
    // its own.
    s.attribute(&mut live, 0);
    let replaced = s.record_failures(&live, 0);
    s.charge(&live, inserted, replaced, 0, &mut first);
    assert_eq!((first.charged, first.duplicates), (0, 1));
    assert_eq!(first.cooldowns + second.cooldowns, 1);
}
