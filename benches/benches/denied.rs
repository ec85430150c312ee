//! txgate's denied set against a moka-backed one, side by side (same
//! workloads, same bloom in front, interleaved in one run):
//!
//! - `denied/{10k,100k,1M}/{txgate,moka}/get_hit`: a held fingerprint
//!   (the bloom passes, the map is read);
//! - `.../get_miss`: a fingerprint never banned (the bloom answers);
//! - `.../insert_1000`: a batch of 1000 new fingerprints into a set at
//!   its bound (each insert makes room), moka's pending maintenance
//!   included.
//!
//! After the timed part each size prints the share of the last batches
//! the set still holds: txgate's set admits every new ban and evicts the
//! bans nearest their end (at 10k, ten batches fill the whole bound, so
//! some of them go too); moka's TinyLFU may refuse a new key.
//! Memory per entry: `cargo bench -p txgate-benches --bench memory`.
//!
//! `cargo bench -p txgate-benches --bench denied`

#![allow(missing_docs)]

// The daemon's allocator (jemalloc), so that the screening state is
// measured on the memory the daemon gives it.
use txgate_alloc as _;

use std::hint::black_box;
use std::time::Duration;

use alloy_primitives::{B256, keccak256};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use txgate_benches::moka_denied::MokaDenied;
use txgate_screen::assertion::AssertionRef;
use txgate_screen::denied::DeniedSet;

/// How long a ban lasts, and its suspect window after it.
const BAN: u64 = 60_000;
const SUSPECT: u64 = 60_000;

fn key(i: u64) -> B256 {
    keccak256(i.to_be_bytes())
}

fn batch(from: u64) -> Vec<(B256, Option<AssertionRef>)> {
    (from..from + 1000).map(|i| (key(i), None)).collect()
}

/// One of the two sets, behind the operations the bench times. Each
/// batch is learned at `now` (one millisecond after the previous), so the
/// newest bans end last, as in a running txgate.
trait Denied {
    fn get(&self, key: &B256) -> bool;
    fn insert_batch(&self, items: &[(B256, Option<AssertionRef>)], now: u64);
    fn holds(&self, key: &B256) -> bool;
}

impl Denied for DeniedSet {
    fn get(&self, key: &B256) -> bool {
        DeniedSet::get(self, key).is_some()
    }
    fn insert_batch(&self, items: &[(B256, Option<AssertionRef>)], now: u64) {
        DeniedSet::insert_batch(self, items, now + BAN, now + BAN + SUSPECT, now);
    }
    fn holds(&self, key: &B256) -> bool {
        DeniedSet::get(self, key).is_some()
    }
}

impl Denied for MokaDenied {
    fn get(&self, key: &B256) -> bool {
        MokaDenied::get(self, key).is_some()
    }
    fn insert_batch(&self, items: &[(B256, Option<AssertionRef>)], now: u64) {
        MokaDenied::insert_batch(self, items, now + BAN, now + BAN + SUSPECT, now);
    }
    fn holds(&self, key: &B256) -> bool {
        MokaDenied::holds(self, key)
    }
}

/// Fills a set to its bound `n`, a batch a millisecond; the next `now`.
fn filled<D: Denied>(set: D, n: u64) -> (D, u64) {
    let mut now = 0;
    while now * 1000 < n {
        set.insert_batch(&batch(now * 1000), now);
        now += 1;
    }
    (set, now)
}

fn side_by_side(c: &mut Criterion) {
    for (label, n) in [("10k", 10_000u64), ("100k", 100_000), ("1M", 1_000_000)] {
        let (txgate, start) = filled(DeniedSet::new(n as usize), n);
        let (moka, _) = filled(MokaDenied::new(n as usize), n);
        let sets: [(&str, Box<dyn Denied>); 2] =
            [("txgate", Box::new(txgate)), ("moka", Box::new(moka))];
        // Keys never banned, hashed before the clock runs.
        let misses: Vec<B256> = (0..4096).map(|i| key((1u64 << 50) + i)).collect();
        let mut g = c.benchmark_group(format!("denied/{label}"));
        g.sample_size(30);
        g.measurement_time(Duration::from_secs(3));
        let mut next = 1u64 << 40;
        let mut now = start;
        for (name, set) in &sets {
            // A key of the last batch of the fill: held by both.
            let held = key(n - 1);
            g.bench_function(format!("{name}/get_hit"), |b| {
                b.iter(|| set.get(black_box(&held)))
            });
            let mut miss = 0;
            g.bench_function(format!("{name}/get_miss"), |b| {
                b.iter(|| {
                    miss = (miss + 1) % misses.len();
                    set.get(black_box(&misses[miss]))
                })
            });
            g.bench_function(format!("{name}/insert_1000"), |b| {
                b.iter_batched(
                    || {
                        next += 1000;
                        now += 1;
                        (batch(next), now)
                    },
                    |(items, now)| set.insert_batch(&items, now),
                    BatchSize::LargeInput,
                )
            });
        }
        g.finish();
        // What the sets still hold of ten new batches, right after them.
        for (name, set) in &sets {
            let from = 1u64 << 45;
            for b in 0..10 {
                now += 1;
                set.insert_batch(&batch(from + b * 1000), now);
            }
            let held = (from..from + 10_000)
                .filter(|i| set.holds(&key(*i)))
                .count();
            println!(
                "denied/{label}/{name}: holds {:.1}% of 10 000 new bans just inserted at the bound",
                held as f64 / 100.0
            );
        }
    }
}

criterion_group!(benches, side_by_side);
criterion_main!(benches);
