#![allow(clippy::unwrap_used)]

use std::time::Instant;

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256, address};
use secp256k1::{Message, SECP256K1, SecretKey};

use super::*;
use crate::{AssertionKey, Invalidation, ScreenSettings, decode, decode_hex, recover_sender};

const TARGET: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");

fn key(seed: u32) -> SecretKey {
    let mut bytes = [0x33u8; 32];
    bytes[28..].copy_from_slice(&seed.to_be_bytes());
    SecretKey::from_byte_array(bytes).unwrap()
}

/// A signed EIP-1559 call to [`TARGET`], as the RPC receives it.
fn raw_tx(key: &SecretKey, input: &[u8], value: u64) -> String {
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce: 0,
        gas_limit: 90_000,
        max_fee_per_gas: 100_000_000_000,
        max_priority_fee_per_gas: 1,
        to: TxKind::Call(TARGET),
        value: U256::from(value),
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

/// What the pool would hand over for `raw`: decoded, sender recovered.
struct Pooled {
    tx: crate::Tx,
    sender: Address,
}

impl Pooled {
    fn of(raw: &str) -> Pooled {
        let tx = decode(&decode_hex(raw).unwrap()).unwrap();
        let sender = recover_sender(&tx).unwrap();
        Pooled { tx, sender }
    }

    fn pool_tx(&self) -> PoolTx<'_> {
        PoolTx {
            hash: self.tx.hash,
            sender: self.sender,
            to: self.tx.to,
            value: self.tx.value,
            gas_limit: self.tx.gas_limit,
            payload: &self.tx.input,
        }
    }

    fn invalidation(&self, assertion: Option<AssertionKey>) -> Invalidation {
        Invalidation::of(&self.tx, Some(self.sender), assertion, 0).unwrap()
    }
}

fn attack_input(n: u8) -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[n; 96]);
    input
}

fn screen(settings: ScreenSettings) -> Screen {
    Screen::new(settings, Instant::now())
}

fn reason(v: PoolVerdict) -> Option<Reason> {
    match v {
        PoolVerdict::Allow(_) => None,
        PoolVerdict::Deny { reason, .. } => Some(reason),
    }
}

#[test]
fn the_pool_fingerprint_is_the_rpc_fingerprint() {
    let s = screen(ScreenSettings::default());
    let raw = raw_tx(&key(1), &attack_input(1), 5_000);
    let pooled = Pooled::of(&raw);
    let verdict = s.judge(&pooled.pool_tx(), 0);
    assert_eq!(verdict, PoolVerdict::Allow(Fingerprint::of(&pooled.tx)));
    let admitted = s.screen(&raw, 0).unwrap();
    assert_eq!(
        verdict.fingerprint().map(|fp| fp.hash),
        admitted.fingerprint
    );
}

#[test]
fn a_banned_fingerprint_is_denied_for_every_sender() {
    let s = screen(ScreenSettings::default());
    let bad = Pooled::of(&raw_tx(&key(1), &attack_input(1), 5_000));
    let applied = s.apply(&[bad.invalidation(None)], 0, 0);
    assert_eq!(applied.banned, 1);
    // The failed transaction itself (its hash first), the same calldata
    // from a fresh sender, and with another value in the same bucket.
    for (raw, want) in [
        (
            raw_tx(&key(1), &attack_input(1), 5_000),
            Reason::RecentFailure,
        ),
        (
            raw_tx(&key(2), &attack_input(1), 5_000),
            Reason::DeniedFingerprint,
        ),
        (
            raw_tx(&key(3), &attack_input(1), 6_000),
            Reason::DeniedFingerprint,
        ),
    ] {
        let p = Pooled::of(&raw);
        assert_eq!(reason(s.judge(&p.pool_tx(), 10)), Some(want));
    }
    // Other calldata, other fingerprint: let in.
    let honest = Pooled::of(&raw_tx(&key(6), &attack_input(2), 0));
    assert_eq!(reason(s.judge(&honest.pool_tx(), 10)), None);
    // A ban past its life is suspect only: let in (no shaping here).
    let settings = ScreenSettings::default();
    let suspect_at = settings.denied_ttl + 1;
    let p = Pooled::of(&raw_tx(&key(4), &attack_input(1), 5_000));
    assert_eq!(reason(s.judge(&p.pool_tx(), suspect_at)), None);
    // The RPC path holds a suspect back; the pool question did not take
    // its slot.
    let rpc = s.screen(&raw_tx(&key(5), &attack_input(1), 5_000), suspect_at);
    assert!(rpc.is_ok_and(|a| a.suspect), "the RPC shapes the suspect");
}

#[test]
fn a_failed_hash_and_a_backed_off_sender_are_denied() {
    let mut settings = ScreenSettings::default();
    settings.backpressure.capacity = 1.0;
    let s = screen(settings);
    let failed = Pooled::of(&raw_tx(&key(1), &attack_input(7), 0));
    assert!(s.fail_hash(failed.tx.hash, 0));
    assert_eq!(
        reason(s.judge(&failed.pool_tx(), 1)),
        Some(Reason::RecentFailure)
    );
    // A creation is checked by hash and sender too.
    let creation = PoolTx {
        to: None,
        ..failed.pool_tx()
    };
    assert_eq!(reason(s.judge(&creation, 1)), Some(Reason::RecentFailure));
    // Two charged failures put the sender in backoff: its next
    // transaction, on another call, is denied; another sender's is not.
    let attacker = key(9);
    let batch = [
        Pooled::of(&raw_tx(&attacker, &attack_input(1), 0)).invalidation(None),
        Pooled::of(&raw_tx(&attacker, &attack_input(2), 0)).invalidation(None),
    ];
    assert!(s.apply(&batch, 0, 0).backoffs >= 1);
    let next = Pooled::of(&raw_tx(&attacker, &[0xa9, 0x05, 0x9c, 0xbb], 0));
    assert_eq!(
        reason(s.judge(&next.pool_tx(), 1)),
        Some(Reason::SenderBackoff)
    );
    let other = Pooled::of(&raw_tx(&key(10), &[0xa9, 0x05, 0x9c, 0xbb], 0));
    assert_eq!(reason(s.judge(&other.pool_tx(), 1)), None);
}

/// A screen with default settings whose call on [`TARGET`] (`attack_input`'s
/// selector) went into cooldown at 0, and the cooldown's trickle interval.
fn cooling() -> (Screen, Millis) {
    let settings = ScreenSettings::default();
    let n = settings.cooldown.distinct_fingerprints;
    let trickle = settings.cooldown.trickle_interval;
    let s = screen(settings);
    let assertion = Some(AssertionKey {
        id: B256::repeat_byte(0xa5),
        version: 1,
    });
    let batch: Vec<Invalidation> = (0..n)
        .map(|i| {
            Pooled::of(&raw_tx(&key(i as u32), &attack_input(i as u8), 0)).invalidation(assertion)
        })
        .collect();
    assert_eq!(s.apply(&batch, 0, 0).cooldowns, 1);
    (s, trickle)
}

/// A pool question never uses up the trickle slot of a cooldown: the RPC
/// still gets its trickle, and the transaction it let through is not
/// refused by the pool afterwards; a fresh one, while the slot is taken,
/// is.
#[test]
fn a_cooldown_is_peeked_and_its_trickle_slot_is_never_used_up() {
    let (s, trickle) = cooling();
    let fresh = |i: u32| raw_tx(&key(1000 + i), &attack_input(0xee), 0);
    // Slot closed: the RPC refuses, and so does the pool.
    let p = Pooled::of(&fresh(0));
    assert_eq!(
        reason(s.judge(&p.pool_tx(), 10)),
        Some(Reason::AssertionCooldown)
    );
    // Slot open: the pool lets in, as many times as it asks, and the slot
    // stays open for the RPC's trickle.
    for i in 1..5 {
        let p = Pooled::of(&fresh(i));
        assert_eq!(reason(s.judge(&p.pool_tx(), trickle)), None);
    }
    let trickled = fresh(9);
    assert!(s.screen(&trickled, trickle).is_ok(), "the RPC's trickle");
    // The slot is taken now: the trickled transaction reaches the pool and
    // is let in (this instance forwarded it); a fresh one is refused.
    let p = Pooled::of(&trickled);
    assert_eq!(reason(s.judge(&p.pool_tx(), trickle + 5)), None);
    let p = Pooled::of(&fresh(10));
    assert_eq!(
        reason(s.judge(&p.pool_tx(), trickle + 5)),
        Some(Reason::AssertionCooldown)
    );
}

/// Transactions another proxy forwards on the judge's word (proxyd's
/// hook) take the trickle slot the judge found open, all at once or
/// none: the next one on the call is refused until the next interval, two
/// on one call in one request are one too many, and one this instance
/// forwarded needs no slot.
#[test]
fn judged_transactions_forwarded_elsewhere_take_their_trickle_slots() {
    let (s, trickle) = cooling();
    let fresh = |i: u32| Pooled::of(&raw_tx(&key(2000 + i), &attack_input(0xee), 0));
    let let_in = |p: &Pooled, now| match s.judge(&p.pool_tx(), now) {
        PoolVerdict::Allow(Some(fp)) => (p.tx.hash, fp),
        other => panic!("refused: {other:?}"),
    };
    // The slot is open: the judge lets in, the forward takes the slot.
    let first = fresh(1);
    let taken = let_in(&first, trickle);
    assert_eq!(s.take_trickles(&[taken], trickle), Ok(vec![0]));
    // Closed now for the next one, until the next interval.
    let second = fresh(2);
    assert_eq!(
        reason(s.judge(&second.pool_tx(), trickle + 5)),
        Some(Reason::AssertionCooldown)
    );
    // Two on the call in one request at the next interval: the second is
    // refused and nothing is taken, so one alone still goes.
    let (a, b) = (fresh(3), fresh(4));
    let pair = [let_in(&a, 2 * trickle), let_in(&b, 2 * trickle)];
    assert_eq!(
        s.take_trickles(&pair, 2 * trickle),
        Err((1, trickle)),
        "the second on one call"
    );
    assert_eq!(s.take_trickles(&pair[..1], 2 * trickle), Ok(vec![0]));
    // One this instance forwarded needs no slot, taken or not; a fresh one
    // does, and the slot is taken.
    let kept = fresh(5);
    let fp = Fingerprint::of(&kept.tx).unwrap();
    s.remember_pooled(&kept.pool_tx(), &fp, 2 * trickle);
    assert_eq!(
        s.take_trickles(&[(kept.tx.hash, fp)], 2 * trickle + 1),
        Ok(vec![]),
        "nothing taken for it"
    );
    let late = fresh(6);
    let late_fp = Fingerprint::of(&late.tx).unwrap();
    assert_eq!(
        s.take_trickles(
            &[(kept.tx.hash, fp), (late.tx.hash, late_fp)],
            2 * trickle + 1
        ),
        Err((1, trickle - 1))
    );
    // With no cooldown at all, nothing is needed.
    let calm = screen(ScreenSettings::default());
    assert_eq!(calm.take_trickles(&pair, 0), Ok(vec![]));
}

#[test]
fn judging_changes_nothing_and_remembering_attributes_a_hash() {
    let s = screen(ScreenSettings::default());
    let bad = Pooled::of(&raw_tx(&key(1), &attack_input(1), 0));
    s.apply(&[bad.invalidation(None)], 0, 0);
    let before = s.sizes();
    for i in 0..100u32 {
        let p = Pooled::of(&raw_tx(&key(i), &attack_input(i as u8), 0));
        let _ = s.judge(&p.pool_tx(), 5);
    }
    assert_eq!(s.sizes(), before, "a verdict is read, not written");
    // Let in, then remembered: the hash names fingerprint and sender.
    let pooled = Pooled::of(&raw_tx(&key(7), &attack_input(42), 0));
    let PoolVerdict::Allow(Some(fp)) = s.judge(&pooled.pool_tx(), 5) else {
        panic!("let in")
    };
    assert!(s.forwarded(&pooled.tx.hash, 5).is_none());
    s.remember_pooled(&pooled.pool_tx(), &fp, 5);
    let forward = s.forwarded(&pooled.tx.hash, 6).unwrap();
    assert_eq!((forward.fingerprint, forward.sender), (fp, pooled.sender));
    assert_eq!(s.sizes().forwarded, before.forwarded + 1);
}

#[test]
fn a_newer_assertion_version_lifts_the_pool_ban_too() {
    let s = screen(ScreenSettings::default());
    let v = |version| {
        Some(AssertionKey {
            id: B256::repeat_byte(0xa5),
            version,
        })
    };
    let bad = Pooled::of(&raw_tx(&key(1), &attack_input(1), 0));
    s.apply(&[bad.invalidation(v(1))], 0, 0);
    let again = Pooled::of(&raw_tx(&key(2), &attack_input(1), 0));
    assert!(s.judge(&again.pool_tx(), 1).denied());
    let unrelated = Pooled::of(&raw_tx(&key(3), &attack_input(3), 0));
    assert_eq!(s.apply(&[unrelated.invalidation(v(2))], 2, 0).bumped, 1);
    assert!(!s.judge(&again.pool_tx(), 3).denied());
}
