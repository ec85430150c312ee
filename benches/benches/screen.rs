//! Screening cost per transaction, as ratios to one libsecp256k1 recovery
//! measured in the same run (the machines are noisy; absolute times are
//! not comparable across runs).
//!
//! - `screen/baseline`: raw libsecp256k1 recovery (the unit), alloy's
//!   default k256 recovery, one keccak, decoding, one fingerprint.
//! - `screen/<N>` for N = 10k, 100k, 1M denied fingerprints (and as many
//!   recent failures), the unit measured again first (`libsecp256k1_recover`
//!   over the same 4096 distinct transactions the full path sees, and
//!   `_same_tx` on one repeated transaction, whose learned branches make it
//!   about 10% faster), so that each ratio compares neighbours in time;
//!   then every decision from the raw `0x…` param:
//!   - `full_new_tx_uncached_sender`: everything, one ECDSA recovery;
//!   - `refuse_recent_failure`: hex, tx hash, cache hit;
//!   - `refuse_denied_fingerprint_cached_sender`: hex, hash, envelope,
//!     sender cache, fingerprint, bloom hit, map hit;
//!   - `observe_new_fingerprint`: fingerprint, bloom miss, cooldown check,
//!     pending attribution (what a clean call costs past the sender);
//!   - `apply_1000_invalidations`: one batch, at the set's bound (each
//!     insert evicts one entry).
//!   - `timed_*`: the first three decisions again through the proxy's
//!     tower stack with its per-stage histograms on (what a running
//!     txgate does), against the same targets.
//! - `screen/tower`: a clean call through the proxy's tower stack against
//!   the same stages called in a row, with and without the per-stage
//!   histograms.

#![allow(missing_docs)]

// The daemon's allocator (jemalloc), so that the screening state is
// measured on the memory the daemon gives it.
use txgate_alloc as _;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_consensus::TxEnvelope;
use alloy_consensus::transaction::SignerRecoverable;
use alloy_primitives::{Address, B256, U256, keccak256};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use txgate_benches::{Eoa, random_invalidations, raw_hex};
use txgate_proxy::metrics::Metrics;
use txgate_proxy::screening;
use txgate_screen::{
    Candidate, Fingerprint, Invalidation, Screen, ScreenSettings, decode, decode_hex,
    recover_sender,
};

const TARGET: Address = Address::repeat_byte(0x5f);

/// A signed 1559 `transfer(to, amount)`; `seed` varies the key, `arg` the
/// amount (and so the fingerprint).
fn signed(seed: u64, nonce: u64, arg: u64) -> (TxEnvelope, String) {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(&[0x11; 20]);
    input.extend_from_slice(&U256::from(arg).to_be_bytes::<32>());
    let envelope = Eoa::new(0x42, seed).sign(nonce, TARGET, &input, 65_000, 1_000_000_000);
    let hex = raw_hex(&envelope);
    (envelope, hex)
}

fn populated(n: usize, settings: ScreenSettings, epoch: Instant) -> Screen {
    let screen = Screen::new(
        ScreenSettings {
            max_denied: n,
            max_recent_failures: n,
            ..settings
        },
        epoch,
    );
    // n inserts: a full shard sheds an eighth of itself at a time, so the
    // set holds between 7/8 n and n.
    let start = 1u64 << 40;
    for next in (start..start + n as u64).step_by(10_000) {
        screen.apply(&random_invalidations(next, 10_000, true, false), 0, 0);
    }
    screen
}

/// One decision through the proxy's stack: every stage is synchronous (no
/// probe), so the future is ready at the first poll.
fn through_stack(
    stack: &screening::Stack,
    screen: &Screen,
    hex: &str,
    now: u64,
    timed: &[prometheus::Histogram],
) -> Result<txgate_screen::Admitted, txgate_screen::Rejection> {
    let laps = screening::Laps::new(timed, Instant::now());
    let mut run = std::pin::pin!(screening::screen(stack, screen, hex, now, laps));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match run.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(result) => result.map(|cleared| cleared.admitted),
        std::task::Poll::Pending => unreachable!("every stage is synchronous"),
    }
}

fn baseline(c: &mut Criterion) {
    let (envelope, hex) = signed(1, 7, 1000);
    let raw = decode_hex(&hex).unwrap_or_default();
    let tx = decode(&raw).unwrap_or_else(|e| panic!("{e}"));
    let mut g = c.benchmark_group("screen/baseline");
    g.bench_function("libsecp256k1_recover", |b| {
        b.iter(|| recover_sender(black_box(&tx)))
    });
    g.bench_function("alloy_k256_recover", |b| {
        b.iter(|| black_box(&envelope).recover_signer())
    });
    g.bench_function("keccak256_32_bytes", |b| {
        b.iter(|| keccak256(black_box([7u8; 32])))
    });
    g.bench_function("decode_hex_and_envelope", |b| {
        b.iter(|| decode(&decode_hex(black_box(&hex)).unwrap_or_default()))
    });
    g.bench_function("fingerprint", |b| {
        b.iter(|| Fingerprint::of(black_box(&tx)))
    });
    g.finish();
}

fn at_scale(c: &mut Criterion) {
    let epoch = Instant::now();
    for (label, n) in [("10k", 10_000), ("100k", 100_000), ("1M", 1_000_000)] {
        let screen = populated(n, ScreenSettings::default(), epoch);
        // A second state whose sender cache keeps nothing: every decision
        // pays its recovery.
        let uncached = populated(
            n,
            ScreenSettings {
                sender_cache_ttl: 0,
                ..ScreenSettings::default()
            },
            epoch,
        );
        let now = 1;

        // A recently failed tx.
        let (_, failed) = signed(2, 0, 1);
        let tx = decode(&decode_hex(&failed).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        let inv =
            Invalidation::of(&tx, None, Some(assertion(0xaa)), 0).unwrap_or_else(|| unreachable!());
        screen.apply(&[inv], now, 0);

        // A denied fingerprint, met again from a fresh EOA whose sender is
        // cached (its first attempt cached it).
        let (_, banned) = signed(3, 0, 2);
        let banned_tx =
            decode(&decode_hex(&banned).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        let mut inv = Invalidation::of(&banned_tx, None, Some(assertion(0xbb)), 0)
            .unwrap_or_else(|| unreachable!());
        inv.tx_hash = Some(B256::repeat_byte(1));
        screen.apply(&[inv], now, 0);
        let (_, copy) = signed(4, 0, 2);
        assert!(screen.screen(&copy, now).is_err());

        // Distinct clean transactions, decoded and their senders known.
        let clean: Vec<String> = (0..4096)
            .map(|i| signed(10 + i, i, 1_000_000 + i).1)
            .collect();
        let mut candidates: Vec<Candidate> = clean
            .iter()
            .map(|hex| {
                let mut c = screen
                    .candidate(hex, now)
                    .unwrap_or_else(|e| panic!("{e:?}"));
                screen
                    .stage_decode(&mut c)
                    .unwrap_or_else(|e| panic!("{e:?}"));
                screen
                    .stage_recover(&mut c)
                    .unwrap_or_else(|e| panic!("{e:?}"));
                c
            })
            .collect();

        let mut g = c.benchmark_group(format!("screen/{label}"));
        g.sample_size(30);
        g.measurement_time(Duration::from_secs(3));
        g.warm_up_time(Duration::from_secs(1));
        // The unit, measured again next to the decisions it scales: over
        // the same distinct transactions as the full path (the fair unit:
        // libsecp256k1's variable-time code runs faster on one input
        // repeated, its branches learned), and on one repeated transaction.
        let mut i = 0usize;
        g.bench_function("libsecp256k1_recover", |b| {
            b.iter(|| {
                i = (i + 1) % candidates.len();
                candidates[i].tx.as_ref().map(recover_sender)
            })
        });
        g.bench_function("libsecp256k1_recover_same_tx", |b| {
            b.iter(|| recover_sender(black_box(&banned_tx)))
        });
        g.bench_function("full_new_tx_uncached_sender", |b| {
            b.iter(|| {
                i = (i + 1) % clean.len();
                uncached.screen(black_box(&clean[i]), now)
            })
        });
        g.bench_function("refuse_recent_failure", |b| {
            b.iter(|| screen.screen(black_box(&failed), now))
        });
        g.bench_function("refuse_denied_fingerprint_cached_sender", |b| {
            b.iter(|| screen.screen(black_box(&copy), now))
        });
        // The same decisions as a running txgate makes them: the tower
        // stack, every step timed into its histogram.
        let (stack, metrics) = (screening::stack(None), Metrics::new());
        let timed = &metrics.screen.stages;
        g.bench_function("timed_full_new_tx_uncached_sender", |b| {
            b.iter(|| {
                i = (i + 1) % clean.len();
                through_stack(&stack, &uncached, black_box(&clean[i]), now, timed)
            })
        });
        g.bench_function("timed_refuse_recent_failure", |b| {
            b.iter(|| through_stack(&stack, &screen, black_box(&failed), now, timed))
        });
        g.bench_function("timed_refuse_denied_fingerprint_cached_sender", |b| {
            b.iter(|| through_stack(&stack, &screen, black_box(&copy), now, timed))
        });
        g.bench_function("observe_new_fingerprint", |b| {
            b.iter(|| {
                i = (i + 1) % candidates.len();
                let c = &mut candidates[i];
                let passed = screen.stage_fingerprint(c);
                (passed, screen.commit(c))
            })
        });
        let mut next = 1u64 << 50;
        g.bench_function("apply_1000_invalidations", |b| {
            b.iter_batched(
                || {
                    next += 1000;
                    random_invalidations(next, 1000, true, true)
                },
                |batch| screen.apply(&batch, now, 0),
                BatchSize::LargeInput,
            )
        });
        g.finish();
    }
}

fn assertion(byte: u8) -> txgate_screen::AssertionKey {
    txgate_screen::AssertionKey {
        id: B256::repeat_byte(byte),
        version: 1,
    }
}

fn tower(c: &mut Criterion) {
    let epoch = Instant::now();
    let screen = Arc::new(populated(10_000, ScreenSettings::default(), epoch));
    let stack = screening::stack(None);
    let (_, hex) = signed(5, 0, 5);
    assert!(screen.screen(&hex, 1).is_ok());
    let metrics = Metrics::new();
    let mut g = c.benchmark_group("screen/tower");
    g.bench_function("pure_cached_sender_clean", |b| {
        b.iter(|| screen.screen(black_box(&hex), 1))
    });
    g.bench_function("stack_cached_sender_clean", |b| {
        b.iter(|| through_stack(&stack, &screen, black_box(&hex), 1, &[]))
    });
    g.bench_function("stack_cached_sender_clean_timed", |b| {
        b.iter(|| through_stack(&stack, &screen, black_box(&hex), 1, &metrics.screen.stages))
    });
    g.finish();
    // Every step observed once per decision.
    let observed: u64 = metrics
        .screen
        .stages
        .iter()
        .map(|h| h.get_sample_count())
        .sum();
    assert!(observed > 0 && observed.is_multiple_of(metrics.screen.stages.len() as u64));
}

/// The uncached full path, stage by stage, over the same distinct txs.
fn stages(c: &mut Criterion) {
    let epoch = Instant::now();
    let screen = populated(
        10_000,
        ScreenSettings {
            sender_cache_ttl: 0,
            ..ScreenSettings::default()
        },
        epoch,
    );
    let clean: Vec<String> = (0..4096)
        .map(|i| signed(10 + i, i, 1_000_000 + i).1)
        .collect();
    let decoded: Vec<Candidate> = clean
        .iter()
        .map(|hex| {
            let mut c = screen.candidate(hex, 1).unwrap_or_else(|e| panic!("{e:?}"));
            screen
                .stage_decode(&mut c)
                .unwrap_or_else(|e| panic!("{e:?}"));
            c
        })
        .collect();
    let mut g = c.benchmark_group("screen/stages");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    let mut i = 0usize;
    g.bench_function("libsecp256k1_recover_distinct_txs", |b| {
        b.iter(|| {
            i = (i + 1) % decoded.len();
            decoded[i].tx.as_ref().map(recover_sender)
        })
    });
    g.bench_function("hex_and_tx_hash", |b| {
        b.iter(|| {
            i = (i + 1) % clean.len();
            screen.candidate(black_box(&clean[i]), 1)
        })
    });
    g.bench_function("envelope_decode", |b| {
        b.iter_batched(
            || {
                i = (i + 1) % decoded.len();
                let mut c = decoded[i].clone();
                c.tx = None;
                c
            },
            |mut c| screen.stage_decode(&mut c).map(|()| c),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("sender_stage_uncached", |b| {
        b.iter_batched(
            || {
                i = (i + 1) % decoded.len();
                decoded[i].clone()
            },
            |mut c| screen.stage_recover(&mut c).map(|()| c),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

use std::future::Future;

criterion_group!(benches, baseline, at_scale, tower, stages);
criterion_main!(benches);
