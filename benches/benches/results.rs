//! Reading the Credible Layer sidecar's result stream: decode one
//! `TransactionResult` (protobuf, as gRPC delivers it) and sort it
//! (assertion failure or not, counted by status). The stream carries a
//! result for every transaction the sequencer executes, in every
//! block-building iteration: txgate must read it far faster than any rollup
//! executes (target: at least 1M results/s on one core).
//!
//! The mix: 99% successes and reverts, 1% assertion failures, each with a
//! 32-byte block number and tx hash, as the sidecar sends them. The
//! baseline in the same run is prost's decode alone. `through_forward`
//! adds what txgate does per message after tonic hands it over: the
//! stream adapter, `sidecar::stream::forward` (its stop check, the
//! per-status counters, the forwarded-map lookup and the hash refusal for
//! each failure). Not included: tonic's HTTP/2 framing and buffering.
//!
//! `cargo bench -p txgate-benches --bench results`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use txgate_proto::results::{Outcome, Status, classify};
use txgate_proto::transport_v1::{TransactionResult, TxExecutionId};
use txgate_proxy::metrics::Metrics;
use txgate_proxy::sidecar::protocol::Message as Learned;
use txgate_proxy::sidecar::stream::{Sink, forward};
use txgate_screen::{Screen, ScreenSettings};

const N: usize = 100_000;

fn encoded() -> Vec<Vec<u8>> {
    (0..N as u64)
        .map(|i| {
            let mut block = [0u8; 32];
            block[24..].copy_from_slice(&(1_000_000 + i / 500).to_be_bytes());
            let hash = alloy_primitives::keccak256(i.to_be_bytes());
            let status = match i % 100 {
                0 => 5,
                1..=9 => 2,
                _ => 1,
            };
            TransactionResult {
                tx_execution_id: Some(TxExecutionId {
                    block_number: block.to_vec(),
                    iteration_id: i % 4,
                    tx_hash: hash.to_vec(),
                    index: i % 500,
                }),
                status,
                gas_used: 21_000 + i % 100_000,
                error: if status == 2 {
                    "execution reverted".into()
                } else {
                    String::new()
                },
            }
            .encode_to_vec()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let messages = encoded();
    let mut group = c.benchmark_group("result_stream");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("decode", |b| {
        b.iter(|| {
            for m in &messages {
                black_box(TransactionResult::decode(m.as_slice()).ok());
            }
        })
    });
    group.bench_function("decode_and_filter", |b| {
        let mut counts = [0u64; Status::ALL.len()];
        let mut failed = 0u64;
        b.iter(|| {
            for m in &messages {
                let Ok(result) = TransactionResult::decode(m.as_slice()) else {
                    continue;
                };
                match classify(&result) {
                    Outcome::Ignored(status) => counts[status.index()] += 1,
                    Outcome::AssertionFailed(hash) => {
                        failed += 1;
                        black_box(hash);
                    }
                    Outcome::Malformed => {}
                }
            }
        });
        black_box((counts, failed));
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let (queue, _rx) = tokio::sync::mpsc::channel(1024);
    let sink = Sink {
        queue,
        screen: Arc::new(Screen::new(
            ScreenSettings::default(),
            std::time::Instant::now(),
        )),
        metrics: Arc::new(Metrics::new()),
        share: None,
    };
    let stop = CancellationToken::new();
    group.bench_function("through_forward", |b| {
        b.iter(|| {
            let stream = futures_util::stream::iter(messages.iter().map(|m| {
                TransactionResult::decode(m.as_slice())
                    .map(|r| Learned::Result(classify(&r)))
                    .map_err(|e| tonic::Status::internal(e.to_string()))
            }));
            runtime.block_on(forward(stream, &sink, &stop))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
