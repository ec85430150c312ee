//! Parsing proxyd's validation-hook request
//! ([`txgate_proto::proxyd::parse`]): the JSON read, every transaction
//! re-encoded and hashed and its key checked, the payloads decoded.
//!
//! Bodies exactly as proxyd sends them, of 1 and of 100 typical EIP-1559
//! calls (100-byte calldata, distinct senders), built by
//! `proxyd::encode` from signed raw transactions. Throughput is per
//! transaction, so criterion's time per element is the cost per judged
//! transaction. The hook's whole budget is 3 µs of CPU per transaction in
//! a 100-transaction request; parsing should take well under half.
//!
//! - `parse/1`, `parse/100`: the parse, per transaction;
//! - `skim/100`: serde_json checking the same body as a borrowed
//!   `RawValue`, keeping nothing: the floor of any JSON reader;
//! - `answer/100`: writing the 100 verdicts;
//! - `hook/100`: the hook's whole answer once HTTP has the body
//!   ([`ProxydHook::answer`]): the parse, each transaction judged against
//!   a screen holding 100 000 bans, the verdicts written. One of the 100
//!   is banned, as in the load bench, so nothing is remembered: what is
//!   left of the load bench's CPU per transaction beside it is HTTP, the
//!   kernel and the runtime;
//! - `keccak/tx`: one keccak256 of a raw transaction of the body, which
//!   is the preimage the parse hashes (the unit: this VM's speed varies
//!   with its neighbours, the ratio much less).
//!
//! `cargo bench -p txgate-benches --bench proxyd`

#![allow(missing_docs)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, U256, keccak256};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::value::RawValue;
use txgate_benches::{Eoa, ban, random_invalidations};
use txgate_proto::proxyd::{MAX_TXS, encode, parse, write_verdicts};
use txgate_proxy::aeges::{HookSettings, ProxydHook};
use txgate_proxy::metrics::Metrics;
use txgate_screen::{Screen, ScreenSettings};

const TARGET: Address = Address::repeat_byte(0x5f);
const GAS: u64 = 90_000;
/// Bans the screen holds besides the one that matters.
const BANS: u64 = 100_000;

/// A 100-byte payload: a selector and three 32-byte words, `n` in the
/// first.
fn payload(n: u64) -> Vec<u8> {
    let mut p = vec![0xa9, 0x05, 0x9c, 0xbb];
    p.extend_from_slice(&U256::from(n).to_be_bytes::<32>());
    p.extend_from_slice(&[0x11; 64]);
    p
}

/// `n` signed transactions from `n` senders.
fn raws(n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let tx =
                Eoa::new(0x42, i + 1).sign(i, TARGET, &payload(i), GAS, 1_000_000_000 + i as u128);
            tx.encoded_2718()
        })
        .collect()
}

/// proxyd's body for `n` transactions from `n` senders.
fn body(n: u64) -> Vec<u8> {
    let raws = raws(n);
    let refs: Vec<&[u8]> = raws.iter().map(Vec::as_slice).collect();
    encode::request(&refs).unwrap_or_else(|e| panic!("{e}"))
}

/// A hook over a screen holding [`BANS`] random bans and one on the
/// first transaction's calldata.
fn hook() -> (ProxydHook, Arc<Metrics>) {
    let screen = Screen::new(ScreenSettings::default(), Instant::now());
    for next in (0..BANS).step_by(10_000) {
        screen.apply(&random_invalidations(next, 10_000, true, false), 0, 0);
    }
    screen.apply(&[ban(TARGET, &payload(0), U256::ZERO, GAS)], 0, 0);
    let metrics = Arc::new(Metrics::new());
    let hook = ProxydHook::new(
        HookSettings {
            allow: vec!["127.0.0.0/8".parse().unwrap_or_else(|e| panic!("{e}"))],
            token: None,
            max_bytes: 1 << 20,
            // Never reached: the bench times verdicts, not refusals.
            txs_per_sec: u32::MAX,
            burst: u32::MAX,
            max_in_flight: 8,
            monitor_only: false,
        },
        Arc::new(screen),
        metrics.clone(),
    );
    (hook, metrics)
}

fn proxyd(c: &mut Criterion) {
    let mut g = c.benchmark_group("proxyd");
    g.measurement_time(Duration::from_secs(3));
    for n in [1u64, 100] {
        let body = body(n);
        let parsed = parse(&body, MAX_TXS).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(parsed.txs.len() as u64, n);
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("parse/{n}"), |b| {
            b.iter(|| parse(black_box(&body), MAX_TXS))
        });
        if n == 100 {
            g.bench_function("skim/100", |b| {
                b.iter(|| {
                    serde_json::from_slice::<&RawValue>(black_box(&body)).map(|raw| raw.get().len())
                })
            });
            let keys: Vec<&str> = parsed.txs.iter().map(|tx| tx.key).collect();
            let mut out = Vec::with_capacity(8 << 10);
            g.bench_function("answer/100", |b| {
                b.iter(|| {
                    out.clear();
                    write_verdicts(&mut out, keys.iter().map(|k| (*k, false)));
                    black_box(out.len())
                })
            });
            let (hook, metrics) = hook();
            let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
            let first = hook.answer(peer, &body, Instant::now());
            assert_eq!(first.status(), 200);
            assert_eq!(metrics.proxyd.refused.get(), 1, "the banned one is refused");
            g.bench_function("hook/100", |b| {
                b.iter(|| hook.answer(peer, black_box(&body), Instant::now()))
            });
        }
    }
    let raw = raws(1).remove(0);
    g.throughput(Throughput::Elements(1));
    g.bench_function("keccak/tx", |b| b.iter(|| keccak256(black_box(&raw))));
    g.finish();
}

criterion_group!(benches, proxyd);
criterion_main!(benches);
