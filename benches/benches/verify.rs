//! One pool verdict (Aeges `VerifyTransaction`) without the network, as a
//! ratio to one libsecp256k1 recovery measured in the same run: what the
//! RPC path must spend on every new transaction and the pool path never
//! does.
//!
//! Against a screen holding 1M denied fingerprints and 1M recent failures
//! (the defaults' bounds), over 4096 distinct transactions with a 100-byte
//! payload (a selector and three words), so caches see a realistic spread:
//!
//! - `fingerprint`: the fingerprint of the payload alone (two keccak256),
//!   the floor of any verdict on a call;
//! - `judge_clean` / `judge_banned`: [`Screen::judge`] on an already
//!   decoded transaction (fingerprint not banned / banned);
//! - `verdict_clean` / `verdict_banned`: the whole verdict as the server
//!   runs it once HTTP/2 has delivered the message (`Verifier::answer`):
//!   the serialized request decoded and checked, judged, counted, a
//!   transaction let in remembered by its hash, the answer serialized and
//!   framed with its trailers. Target: median ≤ 2 µs for both.
//!
//! `cargo bench -p txgate-benches --bench verify`

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, U256, keccak256};
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message;
use txgate_benches::{Eoa, ban, random_invalidations};
use txgate_proto::aeges_v1::{Transaction, VerifyTransactionRequest};
use txgate_proxy::aeges::{Verifier, VerifySettings};
use txgate_proxy::metrics::Metrics;
use txgate_screen::{Fingerprint, Invalidation, Screen, ScreenSettings, decode, recover_sender};

const TARGET: Address = Address::repeat_byte(0x5f);
const DISTINCT: u64 = 4096;
const SIZE: usize = 1_000_000;

/// A 100-byte payload: a selector and three 32-byte words, `n` in the
/// first. Banned calldata has a selector of its own: the bans put its
/// call in cooldown (4096 failures under no assertion), as an attack
/// would.
fn payload(n: u64, banned: bool) -> Vec<u8> {
    let mut p = if banned {
        vec![0xde, 0xad, 0xbe, 0xef]
    } else {
        vec![0xa9, 0x05, 0x9c, 0xbb]
    };
    p.extend_from_slice(&U256::from(n).to_be_bytes::<32>());
    p.extend_from_slice(&[0x11; 64]);
    assert_eq!(p.len(), 100);
    p
}

/// The request the plugin would send for transaction `n` (`banned`:
/// calldata whose fingerprint the screen bans).
fn request(n: u64, banned: bool) -> Bytes {
    let mut value = [0u8; 32];
    value[31] = 1;
    let seed = if banned { n + (1 << 32) } else { n };
    VerifyTransactionRequest {
        event_id: n,
        transaction: Some(Transaction {
            hash: keccak256(seed.to_be_bytes()).to_vec().into(),
            sender: Address::from_slice(&keccak256(seed.to_le_bytes())[..20])
                .to_vec()
                .into(),
            to: Some(TARGET.to_vec().into()),
            value: value.to_vec().into(),
            nonce: 0,
            r#type: 2,
            chain_id: Some(1),
            payload: payload(n, banned).into(),
            gas_limit: 90_000,
            max_fee_per_gas: Some(2_000_000_000),
            max_priority_fee_per_gas: Some(1),
            ..Transaction::default()
        }),
    }
    .encode_to_vec()
    .into()
}

fn screen() -> Screen {
    let screen = Screen::new(
        ScreenSettings {
            max_denied: SIZE,
            max_recent_failures: SIZE,
            ..ScreenSettings::default()
        },
        Instant::now(),
    );
    let start = 1u64 << 40;
    for next in (start..start + SIZE as u64).step_by(10_000) {
        screen.apply(&random_invalidations(next, 10_000, true, false), 0, 0);
    }
    // The banned calldata: DISTINCT fingerprints of the same shape.
    let bans: Vec<Invalidation> = (0..DISTINCT)
        .map(|n| ban(TARGET, &payload(n, true), U256::from(1), 90_000))
        .collect();
    screen.apply(&bans, 0, 0);
    screen
}

fn verify(c: &mut Criterion) {
    let screen = Arc::new(screen());
    let verifier = Verifier::new(
        VerifySettings {
            allow: Vec::new(),
            max_bytes: 1 << 20,
            max_in_flight: 1024,
            monitor_only: false,
        },
        screen.clone(),
        Arc::new(Metrics::new()),
    );
    let at = Instant::now();
    let clean: Vec<Bytes> = (0..DISTINCT).map(|n| request(n, false)).collect();
    let banned: Vec<Bytes> = (0..DISTINCT).map(|n| request(n, true)).collect();
    let decoded =
        |m: &Bytes| txgate_proto::aeges::decode(m.clone()).unwrap_or_else(|e| panic!("{e}"));
    let clean_tx: Vec<_> = clean.iter().map(decoded).collect();
    let banned_tx: Vec<_> = banned.iter().map(decoded).collect();
    assert!(clean_tx.iter().all(|r| !screen.judge(&r.tx(), 1).denied()));
    assert!(banned_tx.iter().all(|r| screen.judge(&r.tx(), 1).denied()));
    let envelope = Eoa::new(0x42, 1).sign(0, TARGET, &payload(7, false), 90_000, 1_000_000_000);
    let raw = alloy_eips::eip2718::Encodable2718::encoded_2718(&envelope);
    let tx = decode(&raw).unwrap_or_else(|e| panic!("{e}"));

    let mut g = c.benchmark_group("verify");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("libsecp256k1_recover", |b| {
        b.iter(|| recover_sender(black_box(&tx)))
    });
    // The floor of any verdict on a call: its fingerprint (two keccak256,
    // the arguments' and the preimage's).
    let p = payload(7, false);
    g.bench_function("fingerprint", |b| {
        b.iter(|| Fingerprint::from_parts(TARGET, black_box(&p), U256::from(1), 90_000))
    });
    let mut i = 0usize;
    let mut next = || {
        i = (i + 1) % DISTINCT as usize;
        i
    };
    g.bench_function("judge_clean", |b| {
        b.iter(|| screen.judge(black_box(&clean_tx[next()].tx()), 1))
    });
    g.bench_function("judge_banned", |b| {
        b.iter(|| screen.judge(black_box(&banned_tx[next()].tx()), 1))
    });
    g.bench_function("verdict_clean", |b| {
        b.iter(|| verifier.answer(black_box(clean[next()].clone()), at))
    });
    g.bench_function("verdict_banned", |b| {
        b.iter(|| verifier.answer(black_box(banned[next()].clone()), at))
    });
    g.finish();
    black_box(B256::ZERO);
}

criterion_group!(benches, verify);
criterion_main!(benches);
