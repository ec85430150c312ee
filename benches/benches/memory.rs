//! Resident memory per denied fingerprint.
//!
//! Measures the process's RSS (`/proc/self/status`, VmRSS) before the
//! screening state exists and after it holds N denied fingerprints, for
//! N = 10k, 100k and 1M, and prints bytes per entry with what the
//! structures account for: the map's buckets (entry plus control byte, at
//! hashbrown's load factor) and the counting bloom (bytes per entry at the
//! configured bound). Each N runs in a fresh child process so that freed
//! memory from a previous N does not hide growth.
//!
//! Then the bare denied set, txgate's against a moka-backed one
//! (`txgate_benches::moka_denied`) with the same keys, and the forwarded
//! map.
//!
//! The children run on the daemon's allocator (jemalloc) with
//! its decay at zero: jemalloc returns freed pages (a table's buffer left
//! behind when it grew) to the kernel at once instead of over the next ten
//! seconds, so the RSS read is what the daemon settles at, not a moment of
//! its growth.
//!
//! `cargo bench -p txgate-benches --bench memory`

#![allow(missing_docs)]

// The daemon's allocator (jemalloc), so that the screening state is
// measured on the memory the daemon gives it.
use txgate_alloc as _;

use std::process::Command;
use std::time::Instant;

use txgate_benches::random_invalidations;
use txgate_screen::{Screen, ScreenSettings};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn measure(n: usize) {
    let before = rss_bytes();
    let screen = Screen::new(
        ScreenSettings {
            max_denied: n,
            ..ScreenSettings::default()
        },
        Instant::now(),
    );
    let mut next = 0u64;
    // n inserts: a full shard sheds an eighth of itself at a time, so the
    // set ends between 7/8 n and n.
    while next < n as u64 {
        let batch = random_invalidations(next, 10_000, false, false);
        next += 10_000;
        screen.apply(&batch, 0, 0);
    }
    let after = rss_bytes();
    let held = screen.sizes().denied;
    let per_entry = (after.saturating_sub(before)) as f64 / held as f64;
    // Accounting: key (32) + ban (8 + 8 + 2×8) = 64 bytes per bucket plus
    // one control byte; hashbrown keeps 7/8 load at most and doubles, so a
    // table is between 7/16 and 7/8 full.
    let bloom = (n.max(1024) * 8).next_power_of_two() as f64 / held as f64;
    println!(
        "{n:>9} denied: held {held:>9}, RSS +{:>7.1} MiB, {per_entry:>6.1} B/entry \
         (bloom {bloom:.1} B/entry; map buckets 65 B at 44-88% load = 74-148 B/entry)",
        (after - before) as f64 / (1024.0 * 1024.0)
    );
    drop(screen);
}

/// Resident memory per entry of the bare denied set, txgate's or the
/// moka-backed one (`txgate_benches::moka_denied`), filled to its bound
/// `n` with the same keys: the side-by-side of issue 10.
fn measure_set(which: &str, n: usize) {
    use alloy_primitives::{B256, keccak256};
    use txgate_screen::assertion::AssertionRef;
    let before = rss_bytes();
    let items = |from: u64| -> Vec<(B256, Option<AssertionRef>)> {
        (from..from + 10_000)
            .map(|i| (keccak256(i.to_be_bytes()), None))
            .collect()
    };
    type Batch = [(B256, Option<AssertionRef>)];
    // Fills with `insert`, then reads what is held; the set is leaked so
    // that the RSS is read while it still holds everything.
    let fill = |insert: &dyn Fn(&Batch), len: &dyn Fn() -> usize| {
        for from in (0..n as u64).step_by(10_000) {
            insert(&items(from));
        }
        (len(), rss_bytes())
    };
    let (held, after) = if which == "moka" {
        let set = Box::leak(Box::new(txgate_benches::moka_denied::MokaDenied::new(n)));
        fill(&|b| drop(set.insert_batch(b, 60_000, 120_000, 0)), &|| {
            set.len()
        })
    } else {
        let set = Box::leak(Box::new(txgate_screen::denied::DeniedSet::new(n)));
        fill(&|b| drop(set.insert_batch(b, 60_000, 120_000, 0)), &|| {
            set.len()
        })
    };
    println!(
        "{n:>9} into {which:>6}'s denied set: held {held:>9}, RSS +{:>7.1} MiB, {:>6.1} B/entry",
        after.saturating_sub(before) as f64 / (1024.0 * 1024.0),
        after.saturating_sub(before) as f64 / held.max(1) as f64,
    );
}

/// The forward `i`: its tx hash and what is remembered under it.
fn forward(i: u64) -> (alloy_primitives::B256, txgate_screen::forwarded::Forward) {
    use txgate_screen::Fingerprint;
    let hash = alloy_primitives::keccak256(i.to_be_bytes());
    let forward = txgate_screen::forwarded::Forward {
        fingerprint: Fingerprint::from_parts(
            alloy_primitives::Address::from_word(hash),
            &hash[..8],
            alloy_primitives::U256::from(i),
            21_000 + i,
        ),
        sender: alloy_primitives::Address::from_word(alloy_primitives::keccak256(hash)),
    };
    (hash, forward)
}

/// Resident memory of a map bounded at `max` after `n` forwards, each
/// living `live` forwards (a steady rate: `live` = rate × time to live),
/// swept one shard per 100 forwards as the background upkeep does (`live`
/// 0: none expires).
fn measure_forwarded(n: usize, max: usize, live: u64) {
    use txgate_screen::forwarded::ForwardedMap;
    let before = rss_bytes();
    let map = ForwardedMap::new(max);
    for i in 0..n as u64 {
        let (hash, forward) = forward(i);
        let expires = if live == 0 { u64::MAX } else { i + live };
        map.insert(hash, &forward, expires, i);
        if live > 0 && i % 100 == 0 {
            map.sweep(i, 1);
        }
    }
    let after = rss_bytes();
    let held = map.len();
    println!(
        "{n:>9} forwarded into a map of {max:>9}{}: held {held:>9}, RSS +{:>6.1} MiB, \
         {:>6.1} B/entry (rings and indexes allocated: {:.1} B/entry)",
        if live == 0 {
            String::new()
        } else {
            format!(", each living {live:>6}")
        },
        (after - before) as f64 / (1024.0 * 1024.0),
        after.saturating_sub(before) as f64 / held as f64,
        map.heap_bytes() as f64 / held as f64,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--child") => {
            if let Some(n) = args.next().and_then(|v| v.parse().ok()) {
                measure(n);
            }
            return;
        }
        Some("--set") => {
            let which = args.next().unwrap_or_default();
            let n = args.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            measure_set(&which, n);
            return;
        }
        Some("--forwarded") => {
            let n = args.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            let max = args.next().and_then(|v| v.parse().ok()).unwrap_or(n);
            let live = args.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            measure_forwarded(n, max, live);
            return;
        }
        _ => {}
    }
    // Criterion-style flags (`--bench`) are ignored; every size runs.
    let exe = std::env::current_exe().unwrap_or_default();
    // jemalloc's options from the environment are read after its built-in
    // ones and add to them; any the caller set are kept (for example
    // `thp:always`, to measure on huge pages).
    let conf = match std::env::var("_RJEM_MALLOC_CONF") {
        Ok(caller) if !caller.is_empty() => format!("{caller},dirty_decay_ms:0,muzzy_decay_ms:0"),
        _ => "dirty_decay_ms:0,muzzy_decay_ms:0".to_string(),
    };
    let child = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .env("_RJEM_MALLOC_CONF", &conf)
            .status()
    };
    println!("resident memory per denied fingerprint (target <= 256 B at 1M)");
    for n in [10_000usize, 100_000, 1_000_000] {
        let status = child(&["--child", &n.to_string()]);
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("measurement for {n} failed");
            std::process::exit(1);
        }
    }
    // The bare sets side by side: txgate's and a moka cache with the same
    // bloom in front (benches/denied.rs times them).
    println!("resident memory per entry of the bare denied set, txgate's and moka-backed");
    for n in [10_000usize, 100_000, 1_000_000] {
        for which in ["txgate", "moka"] {
            let status = child(&["--set", which, &n.to_string()]);
            if !status.is_ok_and(|s| s.success()) {
                eprintln!("measurement of {which} at {n} failed");
                std::process::exit(1);
            }
        }
    }
    // The default bound (screen.max_forwarded, 10,000 tx/s over 60 s),
    // full; a tenth of it in use; a map sized to what it holds; and a
    // steady 25 tx/s for 60 s (1 500 live) through the default bound after
    // 600 000 forwards (the soak's rate for 6.7 hours): the memory must
    // follow what is live, not the forwards so far.
    println!("resident memory per forwarded tx hash (target <= 128 B)");
    for (n, max, live) in [
        (600_000usize, 600_000usize, 0u64),
        (60_000, 600_000, 0),
        (100_000, 100_000, 0),
        (600_000, 600_000, 1_500),
    ] {
        let status = child(&[
            "--forwarded",
            &n.to_string(),
            &max.to_string(),
            &live.to_string(),
        ]);
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("forwarded measurement for {n} failed");
            std::process::exit(1);
        }
    }
}
