//! JSON-RPC framing cost per request: what txgate adds in user space before
//! a call goes upstream. Baseline in the same run: a full `serde_json::Value`
//! parse of the same body, the naive way to do it.
//!
//! `jsonrpc/depth`: the nesting-depth scan `parse` runs over bodies longer
//! than 254 bytes, on its own and inside `parse`, over a raw transaction
//! body (almost all of it one string) and the batch of 100 `eth_call`s.

#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use txgate_jsonrpc::{Entry, Frame, MAX_DEPTH, encode, nested_deeper_than, parse};

const SINGLE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2","data":"0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"},"latest"]}"#;

fn batch(n: usize) -> Vec<u8> {
    let one = std::str::from_utf8(SINGLE).unwrap_or_default();
    let parts: Vec<String> = (0..n)
        .map(|i| one.replacen("\"id\":1", &format!("\"id\":{i}"), 1))
        .collect();
    format!("[{}]", parts.join(",")).into_bytes()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("jsonrpc");
    g.bench_function("baseline_serde_value_single", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(SINGLE)).ok())
    });
    g.bench_function("parse_single", |b| {
        b.iter(|| parse(black_box(SINGLE), 100).is_ok())
    });
    let body = batch(100);
    g.bench_function("baseline_serde_value_batch100", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)).ok())
    });
    g.bench_function("parse_and_rewrite_batch100", |b| {
        b.iter(|| {
            let Ok(Frame::Batch(entries)) = parse(black_box(&body), 100) else {
                return 0;
            };
            let mut out = Vec::with_capacity(body.len() + 1600);
            for (i, e) in entries.iter().enumerate() {
                if let Entry::Call(call) = e {
                    encode::write_upstream_call(&mut out, call, i);
                }
            }
            out.len()
        })
    });
    g.finish();

    // The depth scan's cost: on its own, and beside the parse that runs
    // it, over a 4 KiB raw transaction and the batch of 100.
    let raw_tx = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"eth_sendRawTransaction","params":["0x{}"]}}"#,
        "ab".repeat(2048)
    )
    .into_bytes();
    let mut g = c.benchmark_group("jsonrpc/depth");
    for (label, body) in [("raw_tx_4k", &raw_tx), ("batch100", &body)] {
        g.bench_function(format!("scan_{label}"), |b| {
            b.iter(|| nested_deeper_than(black_box(body), MAX_DEPTH))
        });
        g.bench_function(format!("parse_{label}"), |b| {
            b.iter(|| parse(black_box(body), 100).is_ok())
        });
        g.bench_function(format!("baseline_serde_value_{label}"), |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(body)).ok())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
