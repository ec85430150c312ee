//! The soak: real anvil, the example sidecar and txgate (release) on
//! loopback for `--minutes` (30), under three loads at once:
//!
//! - **honest**, open loop at `--rate` calls/s (100): one in four a signed
//!   transaction from 50 funded accounts (each must come back with its
//!   hash), the rest reads (`eth_blockNumber`, `eth_getBalance`,
//!   `eth_chainId`, each must come back with a result);
//! - **attack** at `--attack-rate` calls/s (400) over 8 connections, each
//!   from a fresh unfunded EOA: half a banned payload replayed (refused by
//!   txgate by fingerprint while its ban, re-learned every storm, is
//!   live), half fresh fingerprints (new calldata each time) of the same
//!   call that no invalidation names, so txgate forwards them and the node
//!   refuses them (unfunded): they fill the sender cache and every map
//!   keyed by what was forwarded. The two are counted apart (txgate's
//!   refusals carry a reason in `error.data`);
//! - **invalidation storms** every `--storm-every` seconds (45): the banned
//!   payload and `--storm-size` (20 000) synthetic fingerprints injected at
//!   the sidecar. txgate runs with `screen.denied_ttl_secs = 60`, so bans
//!   expire between storms and are learned again: the denied set and every
//!   map keyed by what was forwarded keep filling and emptying.
//!
//! Every `--sample-secs` (10) it samples txgate's resident memory and open
//! file descriptors from /proc, its open client connections, the sizes of
//! the denied set, the sender cache and the forwarded map, and the honest
//! and attack counters. At the end it prints a JSON summary (and writes it,
//! with the series, to `--json FILE`): RSS at 5 minutes and its largest
//! growth after, descriptors other than client connections after 5
//! minutes (min, max), honest calls and errors. The targets (RSS growth ≤
//! 5% after the first 5 minutes: the median of the last 5 minutes against
//! the median of minutes 5 to 10, with the peak over the sample at 5
//! minutes reported beside it; descriptors flat; no honest error) are
//! checked and reported; the exit code is 1 when one is missed.
//! `benches/report/soak_plot.py` plots it.
//!
//! `--attack-rate 0` or `--storm-size 0` leaves that load out (to find
//! which load drives a growth).
//!
//! `cargo build --release -p txgate -p example-sidecar -p txgate-benches &&
//!  target/release/soak --minutes 30 --json target/bench-report/soak.json`
//! (or `benches/load/soak.sh`). Loopback only; stops what it starts.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod loads;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use txgate_benches::procs::{client, get_text, metric};
use txgate_benches::start::{
    SEQUENCER, Scratch, Txgate, anvil, arg, fund_with, release, sidecar, sidecar_config,
};
use txgate_benches::stats::median;
use txgate_benches::{CargoBench, Eoa};

use crate::loads::{Counters, attack, honest, storms};

/// The soak: honest load, attack and ban storms at once; txgate's memory
/// and descriptors over time.
#[derive(Parser)]
struct Args {
    /// How long it runs, minutes.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Honest calls a second (1 at least).
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// Attack calls a second; 0 leaves the attack out.
    #[arg(long, default_value_t = 400)]
    attack_rate: u64,
    /// Seconds between invalidation storms.
    #[arg(long, default_value_t = 45)]
    storm_every: u64,
    /// Synthetic fingerprints a storm injects; 0 leaves the storms out.
    #[arg(long, default_value_t = 20_000)]
    storm_size: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Also write the summary and the samples here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    _cargo: CargoBench,
}

fn rss_and_fds(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (rss_kib * 1024, fds)
}

/// `series` in txgate's /metrics text; NaN when it is not there.
fn gauge(metrics: &str, series: &str) -> f64 {
    metric(metrics, series).unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() {
    // Every process is stopped before the exit code is set.
    if !run(Args::parse()).await {
        std::process::exit(1);
    }
}

/// The soak; whether its targets were met.
async fn run(a: Args) -> bool {
    let client = client(16);
    let (_anvil, node) = anvil(&client, SEQUENCER).await;
    let sidecar = sidecar(&client, &node, &sidecar_config()).await;
    let scratch = Scratch::new("soak");
    let config = scratch.write("txgate.toml", "[screen]\ndenied_ttl_secs = 60\n");
    let txgate = Txgate::start(
        &client,
        &release("txgate"),
        &node,
        &[
            "--sidecar",
            &sidecar.grpc,
            "--max-in-flight",
            "4096",
            "--config",
            arg(&config),
        ],
    )
    .await;
    let txgate_url = txgate.url();
    let metrics_url = format!("{}/metrics", txgate.admin());
    let pid = txgate.pid();

    let eoas: Arc<Vec<Eoa>> = Arc::new((0..50).map(|i| Eoa::new(0x55, i)).collect());
    fund_with(
        &client,
        &node,
        eoas.iter().map(|e| e.address),
        "0x56bc75e2d63100000000",
    )
    .await;

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let honest_task = tokio::spawn(honest(
        txgate_url.clone(),
        a.rate.max(1),
        eoas,
        counters.clone(),
        stop.clone(),
    ));
    // `--attack-rate 0` or `--storm-size 0` leaves that load out, to find
    // which load drives a growth.
    let attack_task = (a.attack_rate > 0).then(|| {
        tokio::spawn(attack(
            txgate_url.clone(),
            a.attack_rate.max(8),
            counters.clone(),
            stop.clone(),
        ))
    });
    let storm_task = (a.storm_size > 0).then(|| {
        tokio::spawn(storms(
            sidecar.admin.clone(),
            a.storm_every,
            a.storm_size,
            counters.clone(),
            stop.clone(),
        ))
    });

    let origin = Instant::now();
    let total = Duration::from_secs_f64(a.minutes * 60.0);
    let mut samples: Vec<Value> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(a.sample_secs));
    eprintln!(
        "t_s rss_mib fds connections denied senders honest_ok honest_failed attack_refused storms"
    );
    loop {
        tick.tick().await;
        let t = origin.elapsed().as_secs_f64();
        let (rss, fds) = rss_and_fds(pid);
        let metrics = get_text(&client, &metrics_url).await.unwrap_or_default();
        let denied = gauge(&metrics, "txgate_screen_entries{cache=\"denied\"}");
        let senders = gauge(&metrics, "txgate_screen_entries{cache=\"senders\"}");
        let forwarded = gauge(&metrics, "txgate_screen_entries{cache=\"forwarded\"}");
        let connections = gauge(&metrics, "txgate_open_connections");
        // What txgate holds against what the allocator keeps resident.
        let allocated = gauge(&metrics, "txgate_allocator_bytes{kind=\"allocated\"}");
        let allocator_resident = gauge(&metrics, "txgate_allocator_bytes{kind=\"resident\"}");
        // Descriptors that are not client connections: the leak signal
        // (client connections come and go with the load's latency).
        let other_fds = fds.saturating_sub(connections.max(0.0) as u64);
        let c = &counters;
        let sample = json!({
            "t_s": t, "rss_bytes": rss, "fds": fds, "other_fds": other_fds,
            "connections": connections, "denied": denied, "senders": senders,
            "forwarded": forwarded, "allocated_bytes": allocated,
            "allocator_resident_bytes": allocator_resident,
            "honest_ok": c.honest_ok.load(Ordering::Relaxed),
            "honest_failed": c.honest_failed.load(Ordering::Relaxed),
            "attack_refused": c.attack_refused.load(Ordering::Relaxed),
            "attack_node_refused": c.attack_node_refused.load(Ordering::Relaxed),
            "attack_forwarded": c.attack_forwarded.load(Ordering::Relaxed),
            "attack_other": c.attack_other.load(Ordering::Relaxed),
            "storms": c.storms.load(Ordering::Relaxed),
        });
        eprintln!(
            "{t:.0} {:.1} {fds} {connections} {denied} {senders} {} {} {} {}",
            rss as f64 / 1048576.0,
            sample["honest_ok"],
            sample["honest_failed"],
            sample["attack_refused"],
            sample["storms"]
        );
        samples.push(sample);
        if origin.elapsed() >= total {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let errors = honest_task.await.unwrap();
    if let Some(task) = attack_task {
        task.await.unwrap();
    }
    if let Some(task) = storm_task {
        task.abort();
    }

    // After the first 5 minutes (or the first third of a shorter run).
    let settle = (a.minutes * 60.0 / 3.0).min(300.0);
    let after: Vec<&Value> = samples
        .iter()
        .filter(|s| s["t_s"].as_f64().unwrap() >= settle)
        .collect();
    let rss_at = after
        .first()
        .map_or(0, |s| s["rss_bytes"].as_u64().unwrap());
    let rss_max = after
        .iter()
        .map(|s| s["rss_bytes"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    let rss_end = after.last().map_or(0, |s| s["rss_bytes"].as_u64().unwrap());
    let fds_min = after
        .iter()
        .map(|s| s["other_fds"].as_u64().unwrap())
        .min()
        .unwrap_or(0);
    let fds_max = after
        .iter()
        .map(|s| s["other_fds"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    let growth = if rss_at > 0 {
        rss_max as f64 / rss_at as f64 - 1.0
    } else {
        f64::NAN
    };
    // The trend: the median RSS of the last window against the median of
    // the first window after the settle (5 minutes each, or a third of
    // what is left of a shorter run). A storm's short-lived buffers lift
    // the RSS for a few samples (jemalloc gives them back after its
    // decay); a median over many storm cycles sees through that sawtooth,
    // a growth it does not.
    let window = ((a.minutes * 60.0 - settle) / 3.0).min(300.0);
    let median_rss = |from: f64, to: f64| -> u64 {
        let v: Vec<f64> = after
            .iter()
            .filter(|s| (from..to).contains(&s["t_s"].as_f64().unwrap()))
            .map(|s| s["rss_bytes"].as_u64().unwrap() as f64)
            .collect();
        // None in the window: 0 (no trend).
        if v.is_empty() { 0 } else { median(&v) as u64 }
    };
    let end_t = after.last().map_or(settle, |s| s["t_s"].as_f64().unwrap());
    let first_median = median_rss(settle, settle + window);
    let last_median = median_rss(end_t - window, end_t + 1.0);
    let trend = if first_median > 0 {
        last_median as f64 / first_median as f64 - 1.0
    } else {
        f64::NAN
    };
    let c = &counters;
    let honest_failed = c.honest_failed.load(Ordering::Relaxed);
    // Flat: a few descriptors of slack for connections in flight.
    // Flat: descriptors other than client connections (listeners, the
    // upstream pool, the sidecar links, the runtime's), with a few of
    // slack for upstream connections opened under a burst.
    // Growth is the trend (window medians); the peak over the one sample
    // at the settle is reported beside it.
    let met = trend <= 0.05 && fds_max.saturating_sub(fds_min) <= 16 && honest_failed == 0;
    let summary = json!({
        "minutes": a.minutes,
        "settle_s": settle,
        "rss_at_settle_mib": rss_at as f64 / 1048576.0,
        "rss_max_after_settle_mib": rss_max as f64 / 1048576.0,
        "rss_end_mib": rss_end as f64 / 1048576.0,
        "rss_growth_after_settle": growth,
        "rss_window_s": window,
        "rss_median_first_window_mib": first_median as f64 / 1048576.0,
        "rss_median_last_window_mib": last_median as f64 / 1048576.0,
        "rss_trend_growth": trend,
        "other_fds_after_settle": [fds_min, fds_max],
        "honest_sent": c.honest_sent.load(Ordering::Relaxed),
        "honest_ok": c.honest_ok.load(Ordering::Relaxed),
        "honest_failed": honest_failed,
        "first_honest_errors": errors,
        "attack_refused": c.attack_refused.load(Ordering::Relaxed),
        "attack_node_refused": c.attack_node_refused.load(Ordering::Relaxed),
        "attack_forwarded": c.attack_forwarded.load(Ordering::Relaxed),
        "attack_other": c.attack_other.load(Ordering::Relaxed),
        "storms": c.storms.load(Ordering::Relaxed),
        "targets_met": met,
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    if let Some(path) = &a.json {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let out = json!({"summary": summary, "samples": samples});
        std::fs::write(path, serde_json::to_string_pretty(&out).unwrap()).unwrap();
    }
    met
}
