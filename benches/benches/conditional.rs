//! Checking the condition of `eth_sendRawTransactionConditional`, against
//! two baselines measured in the same run: one libsecp256k1 sender
//! recovery (a typical condition of 10 accounts must cost at most a
//! quarter of it) and serde_json parsing the same JSON into a `Value`
//! (a 1000-lookup condition at most twice that).

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use txgate_benches::{Eoa, raw_hex};
use txgate_screen::{decode, decode_hex, recover_sender};

fn hash(i: usize) -> String {
    format!("0x{i:064x}")
}

fn address(i: usize) -> String {
    format!("0x{i:040x}")
}

/// 10 accounts as a bundler sends them: 5 with a storage root (2 lookups
/// each), 5 with two slots (3 each), and a block-number window (1): 26
/// lookups.
fn typical() -> String {
    let mut accounts = Vec::new();
    for i in 0..5 {
        accounts.push(format!(r#""{}": "{}""#, address(i + 1), hash(i + 100)));
    }
    for i in 5..10 {
        accounts.push(format!(
            r#""{}": {{"{}": "{}", "{}": "{}"}}"#,
            address(i + 1),
            hash(2 * i),
            hash(7),
            hash(2 * i + 1),
            hash(9)
        ));
    }
    format!(
        r#"{{"knownAccounts": {{{}}}, "blockNumberMin": "0x100", "blockNumberMax": "0x110"}}"#,
        accounts.join(", ")
    )
}

/// 1000 lookups: 10 accounts of 99 slots each (100 lookups each).
fn thousand() -> String {
    let accounts: Vec<String> = (0..10)
        .map(|a| {
            let slots: Vec<String> = (0..99)
                .map(|s| format!(r#""{}": "{}""#, hash(a * 1000 + s), hash(s)))
                .collect();
            format!(r#""{}": {{{}}}"#, address(a + 1), slots.join(", "))
        })
        .collect();
    format!(r#"{{"knownAccounts": {{{}}}}}"#, accounts.join(", "))
}

fn conditional(c: &mut Criterion) {
    let typical = typical();
    let thousand = thousand();
    assert_eq!(
        txgate_conditional::check(&typical, 1000).map(|c| c.cost),
        Ok(26)
    );
    assert_eq!(
        txgate_conditional::check(&thousand, 1000).map(|c| c.cost),
        Ok(1000)
    );
    let envelope =
        Eoa::new(0x42, 3).sign(0, alloy_primitives::Address::ZERO, &[1, 2, 3], 21_000, 1);
    let tx = decode(&decode_hex(&raw_hex(&envelope)).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));

    let mut g = c.benchmark_group("conditional");
    g.bench_function("libsecp256k1_recover", |b| {
        b.iter(|| recover_sender(black_box(&tx)))
    });
    g.bench_function("check_typical_10_accounts", |b| {
        b.iter(|| txgate_conditional::check(black_box(&typical), 1000))
    });
    g.bench_function("serde_json_value_1000_lookups", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&thousand)))
    });
    g.bench_function("check_1000_lookups", |b| {
        b.iter(|| txgate_conditional::check(black_box(&thousand), 1000))
    });
    g.finish();
}

criterion_group!(benches, conditional);
criterion_main!(benches);
