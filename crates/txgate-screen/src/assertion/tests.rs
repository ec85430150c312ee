//! The assertion table over made-up times: versions and bumps, cooldowns
//! and their trickle, eviction of idle assertions.

use super::*;

fn settings() -> CooldownSettings {
    CooldownSettings {
        distinct_fingerprints: 3,
        window: 10_000,
        duration: 60_000,
        trickle_interval: 2_000,
        max_assertions: 8,
        idle: 100_000,
    }
}

const ID: B256 = B256::repeat_byte(0xaa);
const CALL: CallKey = (Address::repeat_byte(1), [0xde, 0xad, 0xbe, 0xef]);

fn key(id: B256, version: u64) -> AssertionKey {
    AssertionKey { id, version }
}

/// Three failures of `CALL` under `r` from `from` on, a millisecond
/// apart: the threshold of [`settings`], so a cooldown starts.
fn start_cooldown(a: &Assertions, r: AssertionRef, from: Millis) {
    for t in from..from + 3 {
        a.note_failure(r, CALL, t);
    }
}

fn current(a: &Assertions, id: B256, version: u64, now: Millis) -> AssertionRef {
    match a.observe(key(id, version), now) {
        Observed::Current(r) => r,
        other => panic!("expected Current, got {other:?}"),
    }
}

/// Call keys take at most half the table: a flood of failing calls with
/// fresh selectors cannot crowd the sidecar's assertions out.
#[test]
fn call_keys_take_at_most_half_the_table() {
    let a = Assertions::new(settings());
    for i in 0..20u8 {
        let call = AssertionKey::of_call(Address::repeat_byte(i), [i; 4]);
        let observed = a.observe(call, 0);
        assert_eq!(
            matches!(observed, Observed::Current(_)),
            i < 4,
            "{i}: {observed:?}"
        );
    }
    for i in 0..4u8 {
        current(&a, B256::repeat_byte(i), 1, 0);
    }
    assert_eq!(a.len(), 8);
    // A known call key is still found.
    let known = AssertionKey::of_call(Address::repeat_byte(0), [0; 4]);
    assert!(matches!(a.observe(known, 1), Observed::Current(_)));
}

#[test]
fn versions_current_bumped_stale() {
    let a = Assertions::new(settings());
    let v1 = current(&a, ID, 1, 0);
    assert!(a.is_live(v1));
    assert_eq!(a.observe(key(ID, 1), 0), Observed::Current(v1));
    let Observed::Bumped(v2) = a.observe(key(ID, 2), 0) else {
        panic!()
    };
    assert!(!a.is_live(v1));
    assert!(a.is_live(v2));
    assert_eq!(a.observe(key(ID, 1), 0), Observed::Stale);
    assert_eq!(a.describe(v2), Some(key(ID, 2)));
    assert_eq!(a.describe(v1), None);
}

#[test]
fn cooldown_after_n_distinct_then_trickle_then_ends() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    assert!(!a.note_failure(r, CALL, 0));
    assert!(!a.note_failure(r, CALL, 100));
    assert_eq!(a.check(&CALL, 100), CooldownCheck::Clear);
    assert!(a.note_failure(r, CALL, 200));
    assert_eq!(
        a.check(&CALL, 300),
        CooldownCheck::Refuse {
            assertion: r,
            retry_after: 1_900
        }
    );
    // Other calls are untouched.
    let other = (Address::repeat_byte(2), [0; 4]);
    assert_eq!(a.check(&other, 300), CooldownCheck::Clear);
    // One trickle per interval.
    assert_eq!(a.check(&CALL, 2_200), CooldownCheck::Trickle(r));
    assert!(matches!(
        a.check(&CALL, 2_300),
        CooldownCheck::Refuse { .. }
    ));
    assert_eq!(a.check(&CALL, 4_200), CooldownCheck::Trickle(r));
    // Over after the duration.
    assert_eq!(a.check(&CALL, 60_200), CooldownCheck::Clear);
    assert_eq!(a.cooldowns(), 0);
}

/// Defect: a cooldown that started again after the last one ended,
/// with no check or sweep between them, kept the ended entry, so the
/// call was let through as if the new cooldown did not hold.
#[test]
fn a_cooldown_started_again_holds_without_a_sweep_between() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    start_cooldown(&a, r, 0);
    assert!(matches!(a.check(&CALL, 10), CooldownCheck::Refuse { .. }));
    // The first cooldown ends unseen; three more failures start another.
    start_cooldown(&a, r, 70_000);
    assert!(matches!(
        a.check(&CALL, 70_100),
        CooldownCheck::Refuse { .. }
    ));
}

/// A call first seen failing during a cooldown joins it; the calls
/// already cooled keep their trickle slots.
#[test]
fn a_new_call_joins_a_running_cooldown() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    start_cooldown(&a, r, 0);
    // CALL's trickle is taken.
    assert_eq!(a.check(&CALL, 2_100), CooldownCheck::Trickle(r));
    let other = (Address::repeat_byte(2), [0; 4]);
    assert_eq!(a.check(&other, 2_100), CooldownCheck::Clear);
    assert!(!a.note_failure(r, other, 2_200));
    assert!(matches!(
        a.check(&other, 2_300),
        CooldownCheck::Refuse { .. }
    ));
    assert!(matches!(
        a.check(&CALL, 2_300),
        CooldownCheck::Refuse { .. }
    ));
    assert_eq!(a.cooldowns(), 2);
}

/// A call cooled under two assertions stays cooled until the later
/// of the two ends, under the assertion that holds it.
#[test]
fn a_call_in_two_cooldowns_is_held_until_the_later_end() {
    let a = Assertions::new(settings());
    let first = current(&a, ID, 1, 0);
    start_cooldown(&a, first, 0);
    let second = current(&a, B256::repeat_byte(0xbb), 1, 30_000);
    start_cooldown(&a, second, 30_000);
    assert_eq!(
        a.check(&CALL, 70_000),
        CooldownCheck::Trickle(second),
        "the first cooldown is over, the second holds"
    );
    assert_eq!(a.check(&CALL, 90_003), CooldownCheck::Clear);
}

/// A call held by two cooldowns stays held by the other when the one
/// holding its entry is bumped to a new version.
#[test]
fn a_bump_of_one_holder_leaves_the_other_cooldown_on_the_call() {
    let a = Assertions::new(settings());
    let first = current(&a, ID, 1, 0);
    start_cooldown(&a, first, 0);
    let other = B256::repeat_byte(0xbb);
    let second = current(&a, other, 1, 30_000);
    start_cooldown(&a, second, 30_000);
    // The entry is the second's (it ends later); bump the second.
    assert!(matches!(
        a.observe(key(other, 2), 30_100),
        Observed::Bumped(_)
    ));
    // Held by the first: its open trickle slot, then refusals.
    assert_eq!(a.check(&CALL, 30_200), CooldownCheck::Trickle(first));
    assert!(
        matches!(
            a.check(&CALL, 30_250),
            CooldownCheck::Refuse { assertion, .. } if assertion == first
        ),
        "the first cooldown still holds the call"
    );
    // And the other way round: bumping the first leaves nothing.
    assert!(matches!(a.observe(key(ID, 2), 30_300), Observed::Bumped(_)));
    assert_eq!(a.check(&CALL, 30_400), CooldownCheck::Clear);
}

/// With its list of calls full, an assertion's cooldown takes no more
/// calls, and a failure on yet another call leaves the cooled ones
/// as they are.
#[test]
fn calls_beyond_the_list_are_not_cooled() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    let call = |i: usize| (Address::with_last_byte(i as u8 + 10), [0; 4]);
    for i in 0..MAX_CALLS_PER_ASSERTION {
        a.note_failure(r, call(i), i as u64);
    }
    assert_eq!(a.cooldowns(), MAX_CALLS_PER_ASSERTION);
    let beyond = call(MAX_CALLS_PER_ASSERTION);
    assert!(!a.note_failure(r, beyond, 100));
    assert_eq!(a.check(&beyond, 200), CooldownCheck::Clear);
    assert_eq!(a.cooldowns(), MAX_CALLS_PER_ASSERTION);
}

#[test]
fn failures_outside_the_window_do_not_add_up() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    assert!(!a.note_failure(r, CALL, 0));
    assert!(!a.note_failure(r, CALL, 6_000));
    assert!(!a.note_failure(r, CALL, 12_000));
    assert!(a.note_failure(r, CALL, 13_000));
}

#[test]
fn version_bump_ends_the_cooldown() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    start_cooldown(&a, r, 0);
    assert!(matches!(a.check(&CALL, 10), CooldownCheck::Refuse { .. }));
    assert!(matches!(a.observe(key(ID, 2), 10), Observed::Bumped(_)));
    assert_eq!(a.check(&CALL, 10), CooldownCheck::Clear);
}

/// Defect: once `max_assertions` ids had ever been seen, a new
/// assertion got no cooldown tracking at all, forever.
#[test]
fn assertion_table_evicts_idle_assertions() {
    let a = Assertions::new(CooldownSettings {
        max_assertions: 2,
        ..settings()
    });
    let old = current(&a, B256::repeat_byte(1), 1, 0);
    let busy = current(&a, B256::repeat_byte(2), 1, 0);
    // Full, and nobody idle long enough: untracked, as before.
    assert_eq!(
        a.observe(key(B256::repeat_byte(3), 1), 50_000),
        Observed::Untracked
    );
    // The busy one keeps being named; the old one goes quiet.
    assert!(matches!(
        a.observe(key(B256::repeat_byte(2), 1), 90_000),
        Observed::Current(_)
    ));
    // Past the idle time a new assertion takes the quiet one's slot and
    // is tracked: its failures start a cooldown.
    let new = current(&a, B256::repeat_byte(3), 1, 150_000);
    assert!(!a.is_live(old), "the evicted assertion's bans are retired");
    assert!(a.is_live(busy));
    assert_eq!(a.evicted(), 1);
    assert_eq!(a.len(), 2);
    start_cooldown(&a, new, 150_000);
    assert!(matches!(
        a.check(&CALL, 150_010),
        CooldownCheck::Refuse { .. }
    ));
    // The sweep evicts idle ones too, but never one in cooldown.
    assert_eq!(a.sweep(180_000), 0);
    assert_eq!(a.sweep(200_000), 1, "the busy one, idle since 90 s");
    assert_eq!(a.sweep(240_000), 0, "cooldown over, not idle long enough");
    assert_eq!(a.sweep(260_000), 1, "the new one, idle since 150 s");
    assert!(a.is_empty());
    // A returning assertion starts afresh.
    let back = current(&a, B256::repeat_byte(1), 1, 260_001);
    assert!(a.is_live(back));
    assert!(!a.is_live(old));
}

/// The slots of a unit are taken all together or not at all: a closed
/// slot, or a call listed twice, leaves every other slot open.
#[test]
fn trickle_slots_of_a_unit_are_taken_all_or_none() {
    let a = Assertions::new(settings());
    let r = current(&a, ID, 1, 0);
    start_cooldown(&a, r, 0);
    let other: CallKey = (Address::repeat_byte(2), [1; 4]);
    let r2 = current(&a, B256::repeat_byte(0xbb), 1, 0);
    for t in 0..3 {
        a.note_failure(r2, other, 10 + t);
    }
    let free: CallKey = (Address::repeat_byte(3), [2; 4]);
    // Both cooldowns' slots open at 2_002 and 2_012.
    let at = 2_100;
    assert_eq!(
        a.take_trickles(&[free, CALL, other, CALL], at),
        Err((3, r, 2_000)),
        "the second listing of a call has no slot left"
    );
    // Nothing was taken.
    assert_eq!(a.peek(&CALL, at), CooldownCheck::Trickle(r));
    assert_eq!(a.peek(&other, at), CooldownCheck::Trickle(r2));
    // Taken together, then closed.
    assert_eq!(
        a.take_trickles(&[free, CALL, other], at),
        Ok(vec![1, 2]),
        "the cooled calls' listings took slots"
    );
    assert!(matches!(a.peek(&CALL, at), CooldownCheck::Refuse { .. }));
    assert!(matches!(a.peek(&other, at), CooldownCheck::Refuse { .. }));
    // One closed slot refuses the unit and leaves the open one alone.
    assert_eq!(a.check(&CALL, 4_100), CooldownCheck::Trickle(r));
    let refused = a.take_trickles(&[other, CALL], 4_150);
    assert_eq!(refused, Err((1, r, 1_950)));
    assert_eq!(a.peek(&other, 4_150), CooldownCheck::Trickle(r2));
    // No cooldown, nothing to take.
    assert_eq!(a.take_trickles(&[free], 4_150), Ok(vec![]));
}
