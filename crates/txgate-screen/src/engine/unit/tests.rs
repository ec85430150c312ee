//! A unit is refused as a whole and leaves no trace: over made-up times,
//! every way one call can refuse it, and what the screen remembers after.

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256, address};
use secp256k1::{Message, SECP256K1, SecretKey};

use super::*;
use crate::{
    DecodeError, Invalidation, Millis, Reason, ScreenSettings, decode, decode_hex, recover_sender,
};

const TARGET: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");

fn key(seed: u32) -> SecretKey {
    let mut bytes = [0x44u8; 32];
    bytes[28..].copy_from_slice(&seed.to_be_bytes());
    SecretKey::from_byte_array(bytes).unwrap()
}

/// A signed EIP-1559 call to [`TARGET`] with `input`.
fn raw_tx(key: &SecretKey, nonce: u64, input: &[u8]) -> String {
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce,
        gas_limit: 90_000,
        max_fee_per_gas: 100_000_000_000,
        max_priority_fee_per_gas: 1,
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

/// A call on the attacked function with argument `n`.
fn attack(n: u8) -> Vec<u8> {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&[n; 32]);
    input
}

/// A call on another function with argument `n`.
fn honest(n: u8) -> Vec<u8> {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[n; 64]);
    input
}

fn hash_of(raw: &str) -> B256 {
    crate::tx_hash(&decode_hex(raw).unwrap())
}

/// `raw` failed: its fingerprint banned (no assertion), its hash failed,
/// its sender charged.
fn invalidation(raw: &str) -> Invalidation {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    Invalidation::of(&tx, Some(recover_sender(&tx).unwrap()), None, 0).unwrap()
}

/// Nothing of `raws` is remembered at `now`, and no forward at all.
fn remembers_nothing(s: &Screen, raws: &[&str], now: Millis) {
    for raw in raws {
        assert!(s.forwarded(&hash_of(raw), now).is_none(), "{raw}");
    }
    let sizes = s.sizes();
    assert_eq!((sizes.pending, sizes.forwarded), (0, 0), "{sizes:?}");
}

fn reason(result: &Result<Vec<Admitted>, Box<UnitRejection>>) -> Option<(usize, Reason)> {
    result
        .as_ref()
        .err()
        .map(|r| (r.index, r.rejection.reason()))
}

#[test]
fn a_banned_call_refuses_the_unit_and_its_honest_calls_are_not_remembered() {
    let s = Screen::new(ScreenSettings::default(), Instant::now());
    s.apply(&[invalidation(&raw_tx(&key(1), 0, &attack(1)))], 0, 0);
    let (a, b) = (
        raw_tx(&key(2), 0, &honest(1)),
        raw_tx(&key(3), 0, &honest(2)),
    );
    let copy = raw_tx(&key(4), 0, &attack(1));
    let refused = s.screen_unit([a.as_str(), b.as_str(), copy.as_str()], 10);
    let refusal = refused.clone().unwrap_err();
    assert_eq!(refusal.index, 2);
    assert_eq!(refusal.tx_hash, Some(hash_of(&copy)));
    assert!(matches!(refusal.rejection, Rejection::Denied { .. }));
    remembers_nothing(&s, &[&a, &b], 10);
    // The ban is found by the first sweep: no sender was recovered.
    assert_eq!(s.sizes().senders, 0, "no ECDSA before the cheap stages");

    // The same honest calls alone pass, and are remembered.
    let admitted = s.screen_unit([a.as_str(), b.as_str()], 20).unwrap();
    assert_eq!(admitted.len(), 2);
    assert_eq!(admitted[1].hash, hash_of(&b));
    assert!(s.forwarded(&hash_of(&a), 20).is_some());
    assert_eq!(s.sizes().forwarded, 2);
}

#[test]
fn a_recent_failure_an_invalid_call_or_a_backed_off_sender_refuses_the_unit() {
    let mut settings = ScreenSettings::default();
    settings.backpressure.capacity = 1.0;
    let s = Screen::new(settings, Instant::now());
    let a = raw_tx(&key(2), 0, &honest(1));
    // A hash that failed (the sidecar named only the hash).
    let failed = raw_tx(&key(3), 0, &honest(2));
    assert!(s.fail_hash(hash_of(&failed), 0));
    let refused = s.screen_unit([a.as_str(), failed.as_str()], 10);
    assert_eq!(reason(&refused), Some((1, Reason::RecentFailure)));
    remembers_nothing(&s, &[&a], 10);

    // Bad hex: no hash to name.
    let refused = s.screen_unit([a.as_str(), "0xzz"], 10).unwrap_err();
    assert_eq!(
        *refused,
        UnitRejection {
            index: 1,
            tx_hash: None,
            rejection: Rejection::Invalid(DecodeError::BadHex)
        }
    );
    remembers_nothing(&s, &[&a], 10);

    // A sender charged once is backed off (capacity 1): found in the
    // second sweep, after every call passed the first.
    let attacker = key(9);
    s.apply(&[invalidation(&raw_tx(&attacker, 0, &attack(7)))], 20, 0);
    let next = raw_tx(&attacker, 1, &honest(3));
    let refused = s.screen_unit([a.as_str(), next.as_str()], 30);
    assert_eq!(reason(&refused), Some((1, Reason::SenderBackoff)));
    remembers_nothing(&s, &[&a, &next], 30);
}

#[test]
fn a_refused_unit_takes_no_trickle_slot_and_a_unit_gets_one() {
    let settings = ScreenSettings::default();
    let n = settings.cooldown.distinct_fingerprints;
    let trickle = settings.cooldown.trickle_interval;
    let s = Screen::new(settings, Instant::now());
    // n distinct fingerprints on the attacked call fail: a cooldown.
    let batch: Vec<Invalidation> = (0..n)
        .map(|i| invalidation(&raw_tx(&key(100 + i as u32), 0, &attack(i as u8))))
        .collect();
    assert_eq!(s.apply(&batch, 0, 0).cooldowns, 1);
    let fresh = |i: u32| raw_tx(&key(200 + i), 0, &attack(0xe0 + i as u8));
    let a = raw_tx(&key(2), 0, &honest(1));

    // The slot is open, but the unit holds a banned call after it.
    let banned = raw_tx(&key(3), 0, &attack(0));
    let (t0, t1, t2) = (fresh(0), fresh(1), fresh(2));
    let refused = s.screen_unit([t0.as_str(), banned.as_str()], trickle);
    assert_eq!(reason(&refused), Some((1, Reason::DeniedFingerprint)));
    // Two calls on the slot: the second has none, the first keeps it.
    let refused = s.screen_unit([a.as_str(), t0.as_str(), t1.as_str()], trickle);
    let refusal = refused.unwrap_err();
    assert_eq!(refusal.index, 2);
    assert!(
        matches!(refusal.rejection, Rejection::Cooldown { retry_after, .. } if retry_after == trickle),
        "{refusal:?}"
    );
    remembers_nothing(&s, &[&a, &t0, &t1], trickle);

    // The slot is still open: a unit with one call on it takes it.
    let admitted = s
        .screen_unit([a.as_str(), t2.as_str()], trickle + 1)
        .unwrap();
    assert!(admitted[1].suspect, "the trickle is shaped");
    assert_eq!(
        s.screen(&fresh(3), trickle + 2).unwrap_err().reason(),
        Reason::AssertionCooldown,
        "taken"
    );
}

#[test]
fn a_suspect_fingerprint_gets_one_forward_in_a_unit() {
    let settings = ScreenSettings::default();
    let ttl = settings.denied_ttl;
    let s = Screen::new(settings, Instant::now());
    s.apply(&[invalidation(&raw_tx(&key(1), 0, &attack(1)))], 0, 0);
    // The ban is over: suspect, one forward per hold.
    let (x, y) = (
        raw_tx(&key(2), 0, &attack(1)),
        raw_tx(&key(3), 0, &attack(1)),
    );
    let refused = s.screen_unit([x.as_str(), y.as_str()], ttl);
    assert_eq!(reason(&refused), Some((1, Reason::SuspectPending)));
    remembers_nothing(&s, &[&x, &y], ttl);
    // The same transaction twice is no second forward.
    let admitted = s.screen_unit([x.as_str(), x.as_str()], ttl).unwrap();
    assert!(admitted.iter().all(|a| a.suspect));
    // And now the one forward is pending: another waits.
    assert_eq!(
        s.screen(&y, ttl + 1).unwrap_err().reason(),
        Reason::SuspectPending
    );
}
