//! The attack benchmark: real anvil, the example sidecar and txgate on
//! loopback, an honest client at a steady rate, and 1000 attacker EOAs as
//! fast as the machine allows. Bounded in time; stops what it starts.
//!
//! Phases, in one run:
//! 1. **baseline**: the honest client alone, `--rate` distinct valid
//!    transactions per second for `--seconds`;
//! 2. **attack**: the same honest load, plus `--attackers` EOAs sending
//!    banned calldata (replays of a reverting call, fresh EOAs, high tips)
//!    and fresh-but-invalidating calls (a forbidden selector with new
//!    arguments, so a new fingerprint each time), over `--connections`;
//! 3. **propagation**: an invalidation injected at the sidecar while a
//!    prober sends the same calldata from another EOA every millisecond:
//!    the time from injection to the first refusal, `--probes` times.
//!
//! The honest client connects from 127.0.0.2 and the attackers from
//! 127.0.0.3: two clients to txgate, as on a real network.
//!
//! Honest latency is the `eth_sendRawTransaction` round trip through
//! txgate, sent open-loop (a request every 1/rate s, whatever the previous
//! did). Anvil mines a block per second (`--block-time 1`), so a submission
//! returns once the node has pooled it, as on a sequencer.
//!
//! Settings of the stack it starts:
//! - `--upstream anvil|sink` (anvil): what txgate forwards to. `sink` puts
//!   the sink (`src/bin/sink.rs`) in front of anvil: every raw transaction
//!   is taken at once and never mined, as at a sequencer's ingress, so the
//!   honest latency shows what txgate adds, not anvil's block building;
//!   set-up transactions then go to anvil directly to be mined and judged.
//! - `--should-forward off|hot|all` (off, txgate's default): txgate's
//!   `sidecar.should_forward_scope`, or no ShouldForward.
//! - `--cold-start`: the attacker's first sweep is not judged before the
//!   attack (by default it is, so the sweep call is hot when the fresh
//!   sweeps start, as when an attacker resubmits a call that failed).
//! - `--honest-call poke|transfer` (poke): the honest client pokes the
//!   protected contract (a call the replayed poke(13) makes hot: the cost
//!   to an honest user of a hot call), or sends zero-value transfers to
//!   fresh addresses (cold calls).
//!
//! `TXGATE_BIN=path` runs another build of txgate (for a same-run
//! comparison of two builds; a build older than `should_forward_scope`
//! refuses that key, so compare it with `--should-forward off`, or with
//! ShouldForward settings it knows).
//!
//! `cargo build --release -p txgate -p example-sidecar -p txgate-benches &&
//!  target/release/attack` (or `benches/load/attack.sh`, or interleaved
//! rounds of several settings with `benches/load/attack_rounds.sh`).
//!
//! The summary goes to stdout as JSON; `--json FILE` writes it too, with
//! the time series the plots read (`benches/report/attack_plots.py`) under
//! `series`: every honest call (sent at, latency), txgate's
//! `txgate_screen_decisions_total{decision,reason}` sampled every
//! `--sample-ms` (250) over the whole run, the phases' bounds, and each
//! probe's injection-to-refusal time.
//!
//! With `--node URL --txgate URL --txgate-admin URL --sidecar-admin URL`
//! the tool starts nothing and plays its story against a stack already
//! running (a fresh anvil with `--block-time 1`, as above: the contract's
//! address is the deployer's first), e.g. one a Prometheus scrapes
//! (`benches/load/dashboard.sh`).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod args;
mod attackers;
mod honest;
mod metrics;
mod probes;
mod stack;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, client_from, cpu_ms, get_text, post, root, wait_up};
use txgate_benches::start::{fund, tool};
use txgate_benches::stats::percentile;
use txgate_benches::{Eoa, call, raw_hex, send_raw};

use crate::args::{Args, HonestCall, name};
use crate::honest::HonestLoad;
use crate::stack::Stack;

/// The honest client's loopback address (and the set-up's, and the
/// prober's): a client of its own to txgate's per-client state (pacing,
/// limits).
const HONEST_ADDR: &str = "127.0.0.2";
/// The attackers' loopback address: one client, as a script on one host.
const ATTACKER_ADDR: &str = "127.0.0.3";
const GUARDED: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const DEPLOYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// An account of the run (keys apart from the other benches').
fn eoa(seed: u64) -> Eoa {
    Eoa::new(0x77, seed)
}

/// A signed call to the protected contract.
fn sign(eoa: &Eoa, nonce: u64, input: &[u8], tip: u128) -> String {
    raw_hex(&eoa.sign(
        nonce,
        GUARDED.parse().unwrap_or_default(),
        input,
        100_000,
        tip,
    ))
}

const POKE: [u8; 4] = [0x32, 0x14, 0x5f, 0x90];
const SWEEP: [u8; 4] = [0xaa, 0x60, 0xe7, 0x33];

#[tokio::main]
async fn main() {
    let a = Args::parse();
    if let Some(url) = &a.attack_only {
        let outcomes = attackers::attack(url, a.attackers, a.connections, a.seconds).await;
        let path = a.json.expect("--json for the outcomes");
        std::fs::write(path, serde_json::to_string(&outcomes).unwrap()).unwrap();
        return;
    }
    let client: HttpClient = client_from(1024, HONEST_ADDR.parse().expect("address"));

    let (_stack, stack) = match Stack::external(&a.external) {
        Some(stack) => (None, stack),
        None => {
            let (started, stack) = Stack::start(&client, &a).await;
            (Some(started), stack)
        }
    };
    wait_up(&client, &stack.node).await;
    wait_up(&client, &stack.txgate).await;
    let (node, txgate_url) = (stack.node.clone(), stack.txgate.clone());
    let metrics_url = format!("{}/metrics", stack.txgate_admin);
    let sidecar_admin = stack.sidecar_admin.clone();

    // Deploy the protected contract (nonce 0 of anvil's first account).
    let bytecode = std::fs::read_to_string(root().join("contracts/Guarded.bin")).unwrap();
    let out = Command::new(tool("cast"))
        .args([
            "send",
            "--json",
            "--rpc-url",
            &stack.setup,
            "--private-key",
            DEPLOYER,
            "--create",
            bytecode.trim(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deploy: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Fund everyone in one batch.
    let honest_eoas: Arc<Vec<Eoa>> = Arc::new((0..50).map(|i| eoa(10 + i)).collect());
    let attackers: Arc<Vec<Eoa>> = Arc::new((0..a.attackers).map(|i| eoa(100_000 + i)).collect());
    let probers: Vec<Eoa> = (0..a.probes as u64 * 2).map(|i| eoa(900_000 + i)).collect();
    let first_sweeper = eoa(99_999);
    let everyone = honest_eoas
        .iter()
        .chain(attackers.iter())
        .chain(probers.iter())
        .chain(std::iter::once(&first_sweeper));
    fund(&client, &node, everyone.map(|e| e.address)).await;

    // The first invalidations, from the chain: one reverting poke(13), and
    // (unless --cold-start) the attacker's first sweep, which makes the
    // sweep call hot before the attack's fresh sweeps arrive.
    let first = sign(&attackers[0], 0, &call(POKE, 13), 1_000_000_000);
    let first_sweep = sign(&first_sweeper, 0, &call(SWEEP, 1), 1_000_000_000);
    let mut firsts = vec![first];
    if !a.cold_start {
        firsts.push(first_sweep);
    }
    for raw in &firsts {
        post(&client, &stack.setup, send_raw(raw)).await.unwrap();
    }
    for raw in &firsts {
        let banned_ready = async {
            for _ in 0..500 {
                if let Ok((_, v)) = post(&client, &txgate_url, send_raw(raw)).await
                    && v["error"]["data"]["reason"] == "recent_failure"
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        };
        assert!(banned_ready.await, "a first invalidation never arrived");
    }

    // The run's clock, and txgate's decision counters sampled on it until
    // the probes are done.
    let origin = Instant::now();
    let origin_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let since = |at: Instant| at.saturating_duration_since(origin).as_secs_f64();
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(metrics::sample_decisions(
        client.clone(),
        metrics_url.clone(),
        origin,
        Duration::from_millis(a.sample_ms.max(10)),
        stop_sampling.clone(),
    ));

    let load = HonestLoad {
        rate: a.rate,
        seconds: a.seconds,
        transfers: a.honest_call == HonestCall::Transfer,
    };
    // 1. Baseline: honest alone.
    eprintln!("baseline: {} tx/s honest for {} s", a.rate, a.seconds);
    let baseline_started = Instant::now();
    let baseline = honest::honest(
        client.clone(),
        txgate_url.clone(),
        honest_eoas.clone(),
        0,
        load,
        origin,
    )
    .await;
    let baseline_ended = Instant::now();
    let (base, base_failed) = (&baseline.latencies, baseline.failed);

    // 2. Attack: honest plus attackers.
    eprintln!(
        "attack: {} attacker EOAs over {} connections",
        a.attackers, a.connections
    );
    // The attackers run in a child process at the lowest CPU priority: on a
    // small machine they would otherwise take the cores the node, the
    // sidecar and txgate need, and measure the machine, not txgate. They
    // still send as fast as what is left allows.
    let outcomes_file =
        std::env::temp_dir().join(format!("txgate-attack-{}.json", std::process::id()));
    let mut attacker_proc = Command::new("nice")
        .args(["-n", "19"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--attack-only",
            &txgate_url,
            "--attackers",
            &a.attackers.to_string(),
            "--connections",
            &a.connections.to_string(),
            "--seconds",
            &(a.seconds + 1).to_string(),
            "--json",
            outcomes_file.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the attackers");
    let attackers_started = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attack_started = Instant::now();
    let cpu_at_attack = stack.txgate_pid.map(cpu_ms);
    let under_attack = honest::honest(
        client.clone(),
        txgate_url.clone(),
        honest_eoas.clone(),
        a.seconds * a.rate / 50 + 1,
        load,
        origin,
    )
    .await;
    let honest_under_attack_ended = Instant::now();
    let txgate_cpu_ms = stack
        .txgate_pid
        .zip(cpu_at_attack)
        .map(|(pid, at)| cpu_ms(pid) - at);
    let (under, under_failed) = (&under_attack.latencies, under_attack.failed);
    let _ = attacker_proc.wait();
    let attackers_ended = Instant::now();
    let attack_secs = attack_started.elapsed().as_secs_f64() + 0.5;
    let outcomes: BTreeMap<String, u64> =
        serde_json::from_str(&std::fs::read_to_string(&outcomes_file).expect("attack outcomes"))
            .expect("outcomes json");
    let _ = std::fs::remove_file(&outcomes_file);

    // 3. Propagation: injection at the sidecar → first refusal at txgate.
    let propagation_started = Instant::now();
    let (propagation, probe_series) =
        probes::propagation(&client, &txgate_url, &sidecar_admin, &probers, since).await;
    let propagation_ended = Instant::now();
    stop_sampling.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();

    let metrics = get_text(&client, &metrics_url)
        .await
        .expect("txgate's /metrics");
    let stat = |series: &str| metrics::stat(&metrics, series);
    let histogram_p99 = |name: &str| metrics::histogram_p99(&metrics, name);
    let total_attack: u64 = outcomes.values().sum();
    let refused: u64 = outcomes
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "forwarded" | "node_error" | "transport_error"))
        .map(|(_, v)| v)
        .sum();
    let honest_total = |l: &Vec<f64>, f: u64| l.len() as u64 + f;
    let forwarded = outcomes.get("forwarded").copied().unwrap_or(0);
    // txgate's CPU over the honest-under-attack phase, per call it served
    // then (the attack's calls of that phase, estimated at the attack's
    // mean rate, and the honest ones).
    let attack_phase_s = honest_under_attack_ended
        .saturating_duration_since(attack_started)
        .as_secs_f64();
    let calls_in_phase = total_attack as f64 / attack_secs * attack_phase_s
        + (under.len() as u64 + under_failed) as f64;
    let probes = |result: &str| {
        stat(&format!(
            "txgate_should_forward_total{{result=\"{result}\"}}"
        ))
    };
    let summary = json!({
        "rate": a.rate, "seconds": a.seconds, "attackers": a.attackers, "connections": a.connections,
        "upstream": name(a.upstream),
        "should_forward": name(a.should_forward), "cold_start": a.cold_start,
        "honest_call": name(a.honest_call),
        "baseline": {"ok": base.len(), "failed": base_failed,
            "success": base.len() as f64 / honest_total(base, base_failed) as f64,
            "p50_ms": percentile(base, 0.5), "p99_ms": percentile(base, 0.99)},
        "under_attack": {"ok": under.len(), "failed": under_failed,
            "success": under.len() as f64 / honest_total(under, under_failed) as f64,
            "p50_ms": percentile(under, 0.5), "p99_ms": percentile(under, 0.99)},
        "p99_ratio": percentile(under, 0.99) / percentile(base, 0.99),
        "attack": {"sent": total_attack, "per_second": total_attack as f64 / attack_secs,
            "refused_share": refused as f64 / total_attack.max(1) as f64,
            "reached_upstream_share": forwarded as f64 / total_attack.max(1) as f64,
            "outcomes": outcomes},
        "txgate_cpu_under_attack": {"ms": txgate_cpu_ms,
            "us_per_call": txgate_cpu_ms.map(|ms| ms * 1000.0 / calls_in_phase.max(1.0)),
            "cores": txgate_cpu_ms.map(|ms| ms / 1000.0 / attack_phase_s.max(0.001))},
        "should_forward_probes": {"forward": probes("forward"), "deny": probes("deny"),
            "timeout": probes("timeout"), "error": probes("error"), "saturated": probes("saturated"),
            "cold": stat("txgate_should_forward_cold_total")},
        "propagation_ms": {"n": propagation.len(), "p50": propagation.median(),
            "max": propagation.max()},
        "txgate": {"invalidations_received": stat("txgate_sidecar_invalidations_received_total"),
            "screening_p99_ms_at_most": histogram_p99("txgate_screen_duration_seconds"),
            "upstream_p99_ms_at_most": histogram_p99("txgate_upstream_duration_seconds"),
            "request_p99_ms_at_most": histogram_p99("txgate_request_duration_seconds"),
            "denied_entries": stat("txgate_screen_entries{cache=\"denied\"}")},
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    if let Some(path) = a.json {
        // The counters as columns: one array per `decision:reason`, a
        // value per sample (0 where a sample lacks it).
        let keys: std::collections::BTreeSet<&String> =
            samples.iter().flat_map(|(_, c)| c.keys()).collect();
        let counters: serde_json::Map<String, Value> = keys
            .into_iter()
            .map(|k| {
                let column: Vec<f64> = samples
                    .iter()
                    .map(|(_, c)| c.get(k).copied().unwrap_or(0.0))
                    .collect();
                (k.clone(), json!(column))
            })
            .collect();
        let series = json!({
            "origin_unix_s": origin_unix,
            "phases": {
                "baseline": [since(baseline_started), since(baseline_ended)],
                "attackers": [since(attackers_started), since(attackers_ended)],
                "honest_under_attack": [since(attack_started), since(honest_under_attack_ended)],
                "propagation": [since(propagation_started), since(propagation_ended)],
            },
            "honest": {
                "baseline": honest::honest_series(&baseline),
                "under_attack": honest::honest_series(&under_attack),
            },
            "decisions": {
                "sample_ms": a.sample_ms,
                "t_s": samples.iter().map(|s| s.0).collect::<Vec<_>>(),
                "counters": counters,
            },
            "probes": probe_series,
        });
        let mut full = summary.clone();
        full["series"] = series;
        std::fs::write(path, full.to_string()).unwrap();
    }
}
