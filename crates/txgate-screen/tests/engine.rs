//! The screening stages and invalidations together, with time driven by
//! hand (milliseconds passed in, like paused time).
//!
//! Invalidations here start at wall-clock 0 and are applied with the wall
//! clock at 0: each is fresh when applied, its life counted from the
//! engine's `now` (the replay tests, in the crate's own tests, drive the
//! wall clock).

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Instant;

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256, address};
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_screen::{
    AssertionKey, Invalidation, Millis, Reason, Rejection, Screen, ScreenSettings, decode,
    decode_hex, recover_sender,
};

const TARGET: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const ASSERTION: B256 = B256::repeat_byte(0xa5);

fn key(seed: u32) -> SecretKey {
    let mut bytes = [0x22u8; 32];
    bytes[28..].copy_from_slice(&seed.to_be_bytes());
    SecretKey::from_byte_array(bytes).unwrap()
}

fn raw_tx(key: &SecretKey, nonce: u64, input: &[u8], tip: u128) -> String {
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce,
        gas_limit: 90_000,
        max_fee_per_gas: 100_000_000_000 + tip,
        max_priority_fee_per_gas: tip,
        to: TxKind::Call(TARGET),
        value: U256::ZERO,
        access_list: Default::default(),
        input: Bytes::copy_from_slice(input),
    };
    let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), key);
    let (id, compact) = sig.serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    let envelope: alloy_consensus::TxEnvelope = tx.into_signed(signature).into();
    format!(
        "0x{}",
        alloy_primitives::hex::encode(envelope.encoded_2718())
    )
}

/// The same transfer as [`raw_tx`], with its signature's `s` replaced by
/// `n - s` (and the parity flipped): still a valid ECDSA signature, but
/// high-s, which txgate refuses when it recovers the sender.
fn high_s_tx(key: &SecretKey, nonce: u64, input: &[u8], tip: u128) -> String {
    let raw = decode_hex(&raw_tx(key, nonce, input, tip)).unwrap();
    let envelope =
        <alloy_consensus::TxEnvelope as alloy_eips::eip2718::Decodable2718>::decode_2718(
            &mut raw.as_slice(),
        )
        .unwrap();
    let alloy_consensus::TxEnvelope::Eip1559(signed) = envelope else {
        panic!("a 1559 transfer")
    };
    let n: U256 = "0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
        .parse()
        .unwrap();
    let sig = signed.signature();
    let high = Signature::new(sig.r(), n - sig.s(), !sig.v());
    let envelope: alloy_consensus::TxEnvelope = signed.tx().clone().into_signed(high).into();
    format!(
        "0x{}",
        alloy_primitives::hex::encode(envelope.encoded_2718())
    )
}

fn attack_input() -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[7u8; 32]);
    input
}

fn honest_input(n: u8) -> Vec<u8> {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[n; 64]);
    input
}

fn invalidation_of(raw: &str, version: u64) -> Invalidation {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    let sender = recover_sender(&tx).unwrap();
    Invalidation::of(
        &tx,
        Some(sender),
        Some(AssertionKey {
            id: ASSERTION,
            version,
        }),
        0,
    )
    .unwrap()
}

fn screen(settings: ScreenSettings) -> Screen {
    Screen::new(settings, Instant::now())
}

fn reason(result: Result<txgate_screen::Admitted, Rejection>) -> Option<Reason> {
    result.err().map(|r| r.reason())
}

#[test]
fn hundred_senders_with_identical_calldata_and_no_verdict_all_pass() {
    let s = screen(ScreenSettings::default());
    for i in 0..100 {
        let raw = raw_tx(&key(i), 0, &honest_input(1), 1);
        assert_eq!(
            reason(s.screen(&raw, 1000 + Millis::from(i))),
            None,
            "sender {i}"
        );
    }
    // And again, all 100 within the same millisecond.
    for i in 0..100 {
        let raw = raw_tx(&key(i), 1, &honest_input(1), 1);
        assert_eq!(reason(s.screen(&raw, 5000)), None, "sender {i}");
    }
}

#[test]
fn invalidation_refuses_replays_fresh_eoas_and_higher_tips_but_not_other_calldata() {
    let s = screen(ScreenSettings::default());
    let attacker = key(1);
    let first = raw_tx(&attacker, 0, &attack_input(), 1);
    assert_eq!(reason(s.screen(&first, 0)), None);
    let applied = s.apply(&[invalidation_of(&first, 1)], 100, 0);
    assert_eq!(
        (applied.banned, applied.recent_failures, applied.charged),
        (1, 1, 1)
    );

    // The same raw tx: refused before decoding, by hash.
    assert_eq!(reason(s.screen(&first, 200)), Some(Reason::RecentFailure));
    // The same calldata from 20 fresh EOAs.
    for i in 100..120 {
        let raw = raw_tx(&key(i), 0, &attack_input(), 1);
        match s.screen(&raw, 300) {
            Err(Rejection::Denied { assertions, .. }) => assert_eq!(assertions, vec![ASSERTION]),
            other => panic!("fresh EOA {i}: {other:?}"),
        }
    }
    // A resubmission at an extreme tip, next nonce.
    let bumped = raw_tx(&attacker, 1, &attack_input(), 1_000_000_000_000);
    assert_eq!(
        reason(s.screen(&bumped, 400)),
        Some(Reason::DeniedFingerprint)
    );
    // Different calldata from the same EOAs goes through.
    for i in 100..120 {
        let raw = raw_tx(&key(i), 0, &honest_input(9), 1);
        assert_eq!(reason(s.screen(&raw, 500)), None);
    }
}

#[test]
fn ban_expires_then_suspect_is_shaped_to_one_forward_at_a_time() {
    let settings = ScreenSettings::default();
    let (ttl, hold) = (settings.denied_ttl, settings.shaping_hold);
    let s = screen(settings.clone());
    let first = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&first, 1)], 0, 0);
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    assert_eq!(
        reason(s.screen(&other, ttl - 1)),
        Some(Reason::DeniedFingerprint)
    );
    // Ban over: suspect. One forward passes, a duplicate waits.
    assert_eq!(reason(s.screen(&other, ttl)), None);
    let third = raw_tx(&key(3), 0, &attack_input(), 1);
    match s.screen(&third, ttl + 10) {
        Err(Rejection::Shaped { retry_after, .. }) => assert_eq!(retry_after, hold - 10),
        other => panic!("{other:?}"),
    }
    // The same tx again is no duplicate (and holds the slot anew).
    assert_eq!(reason(s.screen(&other, ttl + 20)), None);
    assert_eq!(
        reason(s.screen(&third, ttl + 19 + hold)),
        Some(Reason::SuspectPending)
    );
    // After the hold, the next one passes.
    assert_eq!(reason(s.screen(&third, ttl + 20 + hold)), None);
    // After the suspect window, nothing is shaped any more.
    let late = ttl + settings.suspect_window;
    for i in 10..15 {
        let raw = raw_tx(&key(i), 0, &attack_input(), 1);
        assert_eq!(reason(s.screen(&raw, late)), None);
    }
}

#[test]
fn unknown_fingerprints_are_never_shaped() {
    let s = screen(ScreenSettings::default());
    // Something else is banned; this calldata has no history.
    s.apply(
        &[invalidation_of(&raw_tx(&key(1), 0, &attack_input(), 1), 1)],
        0,
        0,
    );
    for i in 0..50 {
        let raw = raw_tx(&key(100 + i), 0, &honest_input(3), 1);
        assert_eq!(reason(s.screen(&raw, 10)), None);
    }
}

#[test]
fn cooldown_after_distinct_fingerprints_with_a_trickle() {
    let settings = ScreenSettings::default();
    let n = settings.cooldown.distinct_fingerprints;
    let trickle = settings.cooldown.trickle_interval;
    let s = screen(settings.clone());
    // n distinct fingerprints on one target and selector fail.
    let batch: Vec<Invalidation> = (0..n)
        .map(|i| {
            let mut input = attack_input();
            input[4] = i as u8;
            invalidation_of(&raw_tx(&key(i as u32), 0, &input, 1), 1)
        })
        .collect();
    let applied = s.apply(&batch, 0, 0);
    assert_eq!((applied.banned, applied.cooldowns), (n, 1));
    // A new argument on the same call is refused, but for the trickle.
    let mut input = attack_input();
    input[4] = 0xee;
    let fresh = |i: u32| raw_tx(&key(1000 + i), 0, &input, 1);
    assert_eq!(
        reason(s.screen(&fresh(0), 10)),
        Some(Reason::AssertionCooldown)
    );
    // A badly signed call finds the slot open but is refused for its
    // signature after the fingerprint stage: the slot stays for the next.
    let high_s = high_s_tx(&key(999), 0, &input, 1);
    assert_eq!(
        reason(s.screen(&high_s, trickle)),
        Some(Reason::InvalidSignature)
    );
    assert_eq!(reason(s.screen(&fresh(1), trickle)), None, "the trickle");
    assert_eq!(
        reason(s.screen(&fresh(2), trickle + 1)),
        Some(Reason::AssertionCooldown)
    );
    // Another selector on the same contract is not affected.
    assert_eq!(
        reason(s.screen(&raw_tx(&key(7), 0, &honest_input(1), 1), 20)),
        None
    );
    // The cooldown ends.
    let end = settings.cooldown.duration;
    assert_eq!(reason(s.screen(&fresh(3), end + 1)), None);
}

#[test]
fn newer_assertion_version_lifts_older_bans_and_stale_ones_are_ignored() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&raw, 1)], 0, 0);
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    assert_eq!(
        reason(s.screen(&other, 10)),
        Some(Reason::DeniedFingerprint)
    );
    // Version 2 of the assertion, for some other fingerprint.
    let unrelated = raw_tx(&key(3), 0, &honest_input(4), 1);
    let applied = s.apply(&[invalidation_of(&unrelated, 2)], 20, 0);
    assert_eq!(applied.bumped, 1);
    assert_eq!(reason(s.screen(&other, 30)), None);
    // A late invalidation of version 1 changes nothing.
    let applied = s.apply(
        &[invalidation_of(&raw_tx(&key(4), 0, &attack_input(), 1), 1)],
        40,
        0,
    );
    assert_eq!(applied.stale, 1);
    let third = raw_tx(&key(5), 0, &attack_input(), 1);
    assert_eq!(reason(s.screen(&third, 50)), None);
}

#[test]
fn sender_backoff_from_pending_attribution_then_lifts() {
    let mut settings = ScreenSettings::default();
    settings.backpressure.capacity = 3.0;
    settings.backpressure.refill_per_sec = 1.0;
    let s = screen(settings);
    let attacker = key(1);
    // Three forwarded txs with distinct calldata, each invalidated by a
    // verdict that names neither sender nor tx: pending attribution
    // charges the right sender.
    for nonce in 0..3u64 {
        let mut input = attack_input();
        input[5] = nonce as u8;
        let raw = raw_tx(&attacker, nonce, &input, 1);
        assert_eq!(reason(s.screen(&raw, nonce * 10)), None);
        let mut inv = invalidation_of(&raw, 1);
        inv.sender = None;
        inv.tx_hash = None;
        let applied = s.apply(&[inv], nonce * 10 + 5, 0);
        assert_eq!((applied.charged, applied.recent_failures), (1, 1));
    }
    // Backed off: even honest calldata from that sender waits.
    let next = raw_tx(&attacker, 3, &honest_input(1), 1);
    match s.screen(&next, 100) {
        Err(Rejection::SenderBackoff { retry_after }) => assert_eq!(retry_after, 925),
        other => panic!("{other:?}"),
    }
    // Others are untouched.
    assert_eq!(
        reason(s.screen(&raw_tx(&key(2), 0, &honest_input(1), 1), 100)),
        None
    );
    // Lifted after the window.
    assert_eq!(reason(s.screen(&next, 1025)), None);
}

#[test]
fn bad_input_is_refused_with_its_reason() {
    let s = screen(ScreenSettings {
        chain_ids: vec![1],
        ..ScreenSettings::default()
    });
    assert_eq!(
        reason(s.screen("0xzz", 0)),
        Some(Reason::InvalidTransaction)
    );
    assert_eq!(
        reason(s.screen("0x02c0", 0)),
        Some(Reason::InvalidTransaction)
    );
    let raw = raw_tx(&key(1), 0, &honest_input(1), 1);
    assert_eq!(reason(s.screen(&raw, 0)), Some(Reason::WrongChainId));
}

#[test]
fn sender_cache_skips_recovery_and_contract_creation_bypasses_fingerprints() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &honest_input(1), 1);
    let mut c = s.candidate(&raw, 0).unwrap();
    s.stage_decode(&mut c).unwrap();
    s.stage_recover(&mut c).unwrap();
    assert!(!c.sender_cached);
    let mut again = s.candidate(&raw, 10).unwrap();
    s.stage_decode(&mut again).unwrap();
    s.stage_recover(&mut again).unwrap();
    assert!(again.sender_cached);
    assert_eq!(again.sender, c.sender);
    // Expires with its TTL.
    let ttl = s.settings().sender_cache_ttl;
    let mut late = s.candidate(&raw, ttl).unwrap();
    s.stage_decode(&mut late).unwrap();
    s.stage_recover(&mut late).unwrap();
    assert!(!late.sender_cached);
}

#[test]
fn bans_survive_a_snapshot_round_trip_with_remaining_times() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&raw, 1)], 1_000, 0);
    let bytes = txgate_screen::snapshot::encode(&s.export_bans(31_000));
    let records = txgate_screen::snapshot::decode(&bytes).unwrap().records;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].expires_in, 128_000 - 30_000);
    assert_eq!(
        records[0].assertions,
        vec![AssertionKey {
            id: ASSERTION,
            version: 1
        }]
    );

    // A new process: its clock starts anew.
    let restarted = screen(ScreenSettings::default());
    assert_eq!(restarted.import_bans(&records, 5), 1);
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    match restarted.screen(&other, 10) {
        Err(Rejection::Denied { assertions, .. }) => assert_eq!(assertions, vec![ASSERTION]),
        r => panic!("{r:?}"),
    }
    // Exactly the remaining time: then suspect.
    assert_eq!(
        reason(restarted.screen(&other, 5 + 98_000 - 1)),
        Some(Reason::DeniedFingerprint)
    );
    assert_eq!(reason(restarted.screen(&other, 5 + 98_000)), None);
}

#[test]
fn reasons_are_indexed_by_discriminant() {
    for (i, r) in Reason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i, "{}", r.as_str());
    }
}

/// Defect: a verdict that names no assertion was registered as assertion
/// 0x00…00, which then showed in refusals and metrics as an assertion.
#[test]
fn a_deny_with_no_assertion_names_none() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    let mut inv = invalidation_of(&raw, 1);
    inv.assertion = None;
    let applied = s.apply(&[inv], 0, 0);
    assert_eq!(applied.banned, 1);
    // Only the call's cooldown key entered the table (never named in a
    // refusal), not an assertion 0x00…00.
    assert_eq!(s.sizes().assertions, 1, "the call key only");
    match s.screen(&raw, 10) {
        Err(Rejection::RecentFailure { assertion, .. }) => assert_eq!(assertion, None),
        r => panic!("{r:?}"),
    }
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    match s.screen(&other, 10) {
        Err(Rejection::Denied { assertions, .. }) => assert!(assertions.is_empty()),
        r => panic!("{r:?}"),
    }
    // An assertion's version bump never lifts a ban that named none.
    let mut named = invalidation_of(&raw_tx(&key(3), 0, &honest_input(9), 1), 2);
    named.assertion = Some(AssertionKey {
        id: ASSERTION,
        version: 2,
    });
    s.apply(&[named], 20, 0);
    assert_eq!(
        reason(s.screen(&other, 30)),
        Some(Reason::DeniedFingerprint)
    );
    // The snapshot keeps it with no assertion.
    let records = s.export_bans(40);
    let record = records
        .iter()
        .find(|r| r.assertions.is_empty())
        .expect("the ban without an assertion is exported");
    let restarted = screen(ScreenSettings::default());
    assert_eq!(restarted.import_bans(std::slice::from_ref(record), 0), 1);
    assert_eq!(restarted.sizes().assertions, 0);
    assert_eq!(
        reason(restarted.screen(&other, 1)),
        Some(Reason::DeniedFingerprint)
    );
}

/// A ban named by an assertion and by a verdict with none holds until its
/// end: the assertion's version bump does not lift it.
#[test]
fn a_verdict_with_no_assertion_makes_a_ban_unconditional() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&raw, 1)], 0, 0);
    let mut none = invalidation_of(&raw, 1);
    none.assertion = None;
    s.apply(&[none], 10, 0);
    // ASSERTION moves to version 2 (through another fingerprint).
    let bump = invalidation_of(&raw_tx(&key(3), 0, &honest_input(9), 1), 2);
    assert_eq!(s.apply(&[bump], 20, 0).bumped, 1);
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    match s.screen(&other, 30) {
        Err(Rejection::Denied { assertions, .. }) => assert!(assertions.is_empty()),
        r => panic!("{r:?}"),
    }
    // Without the verdict that named none, the bump lifts it.
    let s = screen(ScreenSettings::default());
    s.apply(&[invalidation_of(&raw, 1)], 0, 0);
    let bump = invalidation_of(&raw_tx(&key(3), 0, &honest_input(9), 1), 2);
    s.apply(&[bump], 20, 0);
    assert_eq!(reason(s.screen(&other, 30)), None);
}

/// The same failure arrives by a report (hash, fingerprint, sender), a
/// result (hash only: resolved through what was forwarded) and a
/// reference invalidation (fingerprint only): one charge, one count.
#[test]
fn one_failure_from_three_sources_is_charged_and_counted_once() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    let admitted = s.screen(&raw, 0).unwrap();
    let fp = admitted.fingerprint.unwrap();
    // The result stream names only the hash: what was forwarded says the rest.
    let fwd = s.forwarded(&admitted.hash, 10).unwrap();
    assert_eq!((fwd.fingerprint.hash, fwd.sender), (fp, admitted.sender));
    let from_result = Invalidation {
        fingerprint: fwd.fingerprint.hash,
        target: fwd.fingerprint.target,
        selector: fwd.fingerprint.selector,
        assertion: None,
        tx_hash: Some(admitted.hash),
        sender: Some(fwd.sender),
        started: 0,
    };
    let mut from_report = invalidation_of(&raw, 1);
    from_report.assertion = None;
    let from_reference = Invalidation {
        tx_hash: None,
        sender: None,
        ..from_report
    };
    let first = s.apply(&[from_report, from_result], 20, 0);
    assert_eq!((first.banned, first.charged, first.duplicates), (1, 1, 1));
    // A source naming the assertion first, then one naming none: the
    // refusal of the hash still names the assertion.
    let named_first = invalidation_of(&raw, 1);
    let again = s.apply(&[named_first, from_result], 25, 0);
    assert_eq!((again.charged, again.duplicates), (0, 2));
    match s.screen(&raw, 26) {
        Err(Rejection::RecentFailure { assertion, .. }) => assert_eq!(assertion, Some(ASSERTION)),
        r => panic!("{r:?}"),
    }
    let later = s.apply(&[from_reference], 30, 0);
    assert_eq!((later.banned, later.charged, later.duplicates), (0, 0, 1));
    assert_eq!(later.refreshed, 1, "the ban is still refreshed");
    assert_eq!(reason(s.screen(&raw, 40)), Some(Reason::RecentFailure));
}

/// A failure nobody could be charged for (the source named no sender and
/// this instance did not forward it) is not "charged": a later report of
/// the same transaction, which names the sender, charges it.
#[test]
fn a_failure_with_no_sender_known_does_not_swallow_a_later_charge() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    let mut bare = invalidation_of(&raw, 1);
    bare.sender = None;
    let first = s.apply(&[bare], 0, 0);
    assert_eq!((first.banned, first.charged), (1, 0));
    let mut report = invalidation_of(&raw, 1);
    report.assertion = None;
    let later = s.apply(&[report], 10, 0);
    assert_eq!((later.charged, later.duplicates), (1, 0));
    let again = s.apply(&[report], 20, 0);
    assert_eq!((again.charged, again.duplicates), (0, 1));
    // A copy without a sender after the charge does not make it chargeable
    // again.
    let mut bare_again = invalidation_of(&raw, 1);
    bare_again.sender = None;
    let late = s.apply(&[bare_again, report], 30, 0);
    assert_eq!((late.charged, late.duplicates), (0, 2));
}

/// A failed hash txgate never forwarded is refused by hash at once; a
/// later report of the same transaction still bans and charges.
#[test]
fn a_failed_unknown_hash_is_refused_and_a_later_report_still_charges() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), 0, &attack_input(), 1);
    let hash = txgate_screen::tx_hash(&decode_hex(&raw).unwrap());
    assert_eq!(s.forwarded(&hash, 0), None);
    assert!(s.fail_hash(hash, 0));
    assert!(!s.fail_hash(hash, 1), "once");
    assert_eq!(reason(s.screen(&raw, 2)), Some(Reason::RecentFailure));
    let mut report = invalidation_of(&raw, 1);
    report.assertion = None;
    let applied = s.apply(&[report], 3, 0);
    assert_eq!(
        (applied.banned, applied.charged, applied.duplicates),
        (1, 1, 0)
    );
    let other = raw_tx(&key(2), 0, &attack_input(), 1);
    assert_eq!(reason(s.screen(&other, 4)), Some(Reason::DeniedFingerprint));
}

/// Reports and results name no assertion: their failures count towards a
/// cooldown of the call (target and selector), and the refusal names no
/// assertion.
#[test]
fn failures_without_an_assertion_start_a_cooldown_of_the_call() {
    let settings = ScreenSettings::default();
    let n = settings.cooldown.distinct_fingerprints;
    let s = screen(settings);
    let batch: Vec<Invalidation> = (0..n)
        .map(|i| {
            let mut input = attack_input();
            input[4] = i as u8;
            let mut inv = invalidation_of(&raw_tx(&key(i as u32), 0, &input, 1), 1);
            inv.assertion = None;
            inv
        })
        .collect();
    let applied = s.apply(&batch, 0, 0);
    assert_eq!((applied.banned, applied.cooldowns), (n, 1));
    let mut input = attack_input();
    input[4] = 0xee;
    match s.screen(&raw_tx(&key(999), 0, &input, 1), 10) {
        Err(Rejection::Cooldown { assertion, .. }) => assert_eq!(assertion, None),
        r => panic!("{r:?}"),
    }
    // Another selector on the same contract is not affected.
    assert_eq!(
        reason(s.screen(&raw_tx(&key(7), 0, &honest_input(1), 1), 20)),
        None
    );
}

#[test]
fn an_applied_invalidation_heats_its_call_a_stale_one_does_not() {
    let s = screen(ScreenSettings {
        hot_window: 10_000,
        ..ScreenSettings::default()
    });
    let attack = (TARGET, [0xde, 0xad, 0xbe, 0xef]);
    let honest = (TARGET, [0xa9, 0x05, 0x9c, 0xbb]);
    let first = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&first, 2)], 100, 0);
    assert!(s.is_hot(&attack, 100));
    assert!(s.is_hot(&attack, 10_099));
    assert!(!s.is_hot(&attack, 10_100));
    // Another function of the same contract stays cold.
    assert!(!s.is_hot(&honest, 200));
    // An invalidation of an outdated version is ignored: it heats nothing.
    let other = raw_tx(&key(2), 0, &honest_input(3), 1);
    let applied = s.apply(&[invalidation_of(&other, 1)], 300, 0);
    assert_eq!(applied.stale, 1);
    assert!(!s.is_hot(&honest, 300));
    assert_eq!(s.sizes().hot_calls, 1);
}

#[test]
fn calls_are_not_tracked_by_default() {
    let s = screen(ScreenSettings::default());
    let first = raw_tx(&key(1), 0, &attack_input(), 1);
    s.apply(&[invalidation_of(&first, 1)], 100, 0);
    assert!(!s.is_hot(&(TARGET, [0xde, 0xad, 0xbe, 0xef]), 100));
    assert_eq!(s.sizes().hot_calls, 0);
}
