//! Checking the condition of `eth_sendRawTransactionConditional`, against
//! two baselines measured in the same run: one libsecp256k1 sender
//! recovery (a typical condition of 10 accounts must cost at most a
//! quarter of it) and serde_json parsing the same JSON into a `Value`
//! (a 1000-lookup condition at most twice that). Also the whole stack of
//! conditional gates (switch, condition, target, caller, charge) on a
//! typical call, unsigned and signed (`X-Optimism-Signature`: one more
//! ECDSA recovery, over the EIP-191 hash of the body).

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
    gates(c, &typical);
}

/// The gates on one typical call to the EntryPoint: the rate set so high
/// it never refuses (the charge is still made).
fn gates(c: &mut Criterion, typical: &str) {
    use std::time::Instant;
    use txgate_proxy::metrics::Metrics;
    use txgate_proxy::rpc::conditional::{Conditions, Rates, Signed};

    let config = txgate_config::ConditionalConfig {
        rate_per_sec: 1_000_000_000,
        burst: 1_000_000_000,
        ..txgate_config::ConditionalConfig::default()
    };
    let metrics = Metrics::new();
    let rates = Rates::new(
        &config,
        &txgate_config::RedisConfig::default(),
        None,
        &metrics,
    )
    .map(std::sync::Arc::new);
    let (targets, callers) = (
        config.target_addresses().unwrap_or_else(|e| panic!("{e}")),
        config.caller_addresses().unwrap_or_else(|e| panic!("{e}")),
    );
    let conditions = Conditions::new(&config, &targets, &callers, rates, &metrics);
    let entry_point: alloy_primitives::Address = txgate_config::conditional::DEFAULT_TARGETS[1]
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let raw = raw_hex(&Eoa::new(0x43, 3).sign(0, entry_point, &[1, 2, 3, 4], 100_000, 1));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransactionConditional","params":["{raw}",{typical}]}}"#
    );
    let params_text = format!(r#"["{raw}",{typical}]"#);
    let params =
        serde_json::value::RawValue::from_string(params_text).unwrap_or_else(|e| panic!("{e}"));
    let header = sign_body(body.as_bytes());
    let check =
        |signed: &Signed<'_>| conditions.check(Some(&params), signed, Instant::now(), false);
    assert_eq!(check(&Signed::new(None, body.as_bytes())), Ok(()));
    assert_eq!(check(&Signed::new(Some(&header), body.as_bytes())), Ok(()));

    let mut g = c.benchmark_group("conditional");
    g.bench_function("gates_typical_unsigned", |b| {
        b.iter(|| check(black_box(&Signed::new(None, body.as_bytes()))))
    });
    g.bench_function("gates_typical_signed", |b| {
        b.iter(|| check(black_box(&Signed::new(Some(&header), body.as_bytes()))))
    });
    g.finish();
}

/// `X-Optimism-Signature` over `body` by a fixed key.
fn sign_body(body: &[u8]) -> Vec<u8> {
    let key = secp256k1::SecretKey::from_byte_array([0x11; 32]).unwrap_or_else(|e| panic!("{e}"));
    txgate_conditional::caller::sign(&key, body).1.into_bytes()
}

criterion_group!(benches, conditional);
criterion_main!(benches);
