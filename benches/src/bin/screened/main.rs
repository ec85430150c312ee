//! Screened end to end: distinct signed EIP-1559 transfers from many
//! funded senders, sent through txgate and straight to the node in the
//! same run, in interleaved rounds.
//!
//! Each round signs `--txs` (20 000) transfers from `--senders` (200)
//! fresh accounts (each sender's nonces in order, a distinct recipient per
//! transfer, so a distinct fingerprint each), funds the senders on anvil,
//! and sends them over `--connections` (50) kept-alive connections as
//! fast as they are answered; straight to anvil, and with accounts of its
//! own through txgate, which first alternating by round (no sidecar: every stage runs, the
//! sender is recovered once per transaction, nothing is refused). It
//! reports per target: throughput, p50 and p99 of the round trip, and for
//! txgate its CPU (utime + stime from /proc) per forwarded transaction.
//!
//! Each row also says where the machine's CPU went in that phase: the
//! cores busy (all of them, from /proc/stat), the node's and this loader's
//! CPU per transaction, and txgate's. The summary turns the direct phase's
//! figures into a bound: when the direct phase already keeps every core
//! busy, txgate's CPU per transaction comes out of the node's and the
//! loader's share, and the throughput ratio cannot exceed
//! `machine CPU per tx direct / (that + txgate's CPU per tx)`; the same
//! with only txgate's CPU in libsecp256k1 is the ceiling for any proxy
//! that recovers every sender once. /proc/stat counts every CPU the kernel
//! has, so these figures hold for a run unbound on a machine (or VM) of its
//! own, not in a container with a share of a larger host.
//!
//! With `--reference-bin <path>`, the reference rpc-proxy (built from its
//! source, outside this repository) runs as a third target in every
//! round, with accounts of its own, on the same node; the summary gives
//! its throughput and CPU per transaction and txgate's ratios to it.
//!
//! After those rounds, `--paced-rounds` (3) pairs of open-loop phases send
//! submissions at half the direct rounds' median rate for `--paced-secs`
//! (8) each, straight to the node and through txgate, alternating which
//! goes first, each with accounts of its own: the p50 and p99 a user feels
//! at a rate the node keeps up with, and txgate's addition to them (issue
//! 41's "≤ 0.3 ms to the p50 and ≤ 1 ms to the p99"). anvil's interval
//! mining is paused for them and each phase's transfers mined out before
//! the next (see `paced.rs` for why). With `--hop-bin <uring_hop>`, a
//! proxy with no work of its own (`uring_hop --io epoll`) is a third paced
//! target: the floor of two TCP hops, in latency and in CPU per submission.
//!
//! With `--perf`, the last txgate round runs under `perf record` and the
//! share of txgate's samples in libsecp256k1 gives its CPU in the ECDSA
//! for that round, so the target "CPU per screened transaction ≤ 1.6× its
//! own CPU in libsecp256k1" is read from the same run.
//!
//! Anvil runs with `--block-time 1`: a submission returns once the node
//! has pooled it, as on a sequencer.
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/screened --rounds 3 --perf` (`TXGATE_BIN` names another
//!  build of txgate). Loopback only; bounded in
//! count; stops what it starts.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use clap::Parser;
use serde_json::json;
use txgate_benches::procs::{
    HttpClient, client, cpu_ms, free_port, get_text, post, spawn, wait_up,
};
use txgate_benches::start::{Txgate, anvil, fund, txgate_bin};
use txgate_benches::stats::{median, percentile};
use txgate_benches::{CargoBench, Eoa, raw_hex, send_raw};

mod paced;

/// Distinct signed transfers through txgate and straight to the node.
#[derive(Parser)]
struct Args {
    /// Transfers a round, per target.
    #[arg(long, default_value_t = 20_000)]
    txs: u64,
    /// Senders a round, per target.
    #[arg(long, default_value_t = 200)]
    senders: u64,
    /// Kept-alive connections.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Profile the last txgate round with `perf record`.
    #[arg(long)]
    perf: bool,
    /// With `--perf`: record call graphs (`-g`) and keep the profile here.
    #[arg(long = "perf-out", value_name = "FILE")]
    perf_out: Option<PathBuf>,
    /// Pairs of paced phases (direct, txgate) at half the direct rate.
    #[arg(long, default_value_t = 3)]
    paced_rounds: u64,
    /// The paced phases' rate a second, in place of half the direct rate.
    #[arg(long)]
    paced_rate: Option<f64>,
    /// A txgate config file (`-c`), for a same-build comparison of settings.
    #[arg(long = "txgate-config", value_name = "FILE")]
    txgate_config: Option<PathBuf>,
    /// A proxy with no work of its own (`uring_hop`, run `--io epoll`), in
    /// front of the same node as a third paced target: the floor of two
    /// TCP hops, in latency and in CPU per submission.
    #[arg(long = "hop-bin", value_name = "PATH")]
    hop: Option<PathBuf>,
    /// Seconds of each paced phase.
    #[arg(long, default_value_t = 8)]
    paced_secs: u64,
    /// Write each paced phase's submissions (when sent, ms from the phase's
    /// start, and the round trip, ms) to `<DIR>/<round>-<target>.csv`: where
    /// in a phase its slow submissions fall.
    #[arg(long = "paced-trace", value_name = "DIR")]
    paced_trace: Option<PathBuf>,
    /// Also write the summary here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The reference rpc-proxy, run as a third target.
    #[arg(long = "reference-bin", value_name = "PATH")]
    reference: Option<PathBuf>,
    #[command(flatten)]
    _cargo: CargoBench,
}

/// The round's transfers: sender `s` of the round sends its transfers
/// with nonces 0, 1, …; transfer `i` goes to its own recipient.
fn sign_round(round: u64, a: &Args) -> (Vec<Eoa>, Vec<Vec<String>>) {
    let senders: Vec<Eoa> = (0..a.senders)
        .map(|s| Eoa::new(0x5c, round * 1_000_000 + s))
        .collect();
    let per_sender = a.txs / a.senders;
    let raws = senders
        .iter()
        .enumerate()
        .map(|(s, eoa)| {
            (0..per_sender)
                .map(|nonce| {
                    let n = round * 10_000_000 + s as u64 * 100_000 + nonce;
                    let to = Address::left_padding_from(&(0xabc0_0000_0000 + n).to_be_bytes());
                    raw_hex(&eoa.sign(nonce, to, &[], 30_000, 1_000_000_000))
                })
                .collect()
        })
        .collect();
    (senders, raws)
}

struct Sent {
    secs: f64,
    latencies_ms: Vec<f64>,
    failed: u64,
}

/// Sends every sender's transfers in nonce order, `connections` senders'
/// queues at a time, each answered before its next is sent.
async fn send(url: &str, raws: Vec<Vec<String>>, connections: usize) -> Sent {
    let client: HttpClient = client(connections);
    let queues = Arc::new(raws);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (client, url, queues, next) = (
            client.clone(),
            url.to_string(),
            queues.clone(),
            next.clone(),
        );
        workers.push(tokio::spawn(async move {
            let (mut latencies, mut failed) = (Vec::new(), 0u64);
            loop {
                let q = next.fetch_add(1, Ordering::Relaxed);
                let Some(queue) = queues.get(q) else {
                    break;
                };
                for raw in queue {
                    let body = send_raw(raw);
                    let t = Instant::now();
                    match post(&client, &url, body).await {
                        Ok((200, v)) if v["result"].is_string() => {
                            latencies.push(t.elapsed().as_secs_f64() * 1000.0)
                        }
                        _ => failed += 1,
                    }
                }
            }
            (latencies, failed)
        }));
    }
    let (mut latencies_ms, mut failed) = (Vec::new(), 0);
    for w in workers {
        let (l, f) = w.await.unwrap();
        latencies_ms.extend(l);
        failed += f;
    }
    latencies_ms.sort_by(f64::total_cmp);
    Sent {
        secs: started.elapsed().as_secs_f64(),
        latencies_ms,
        failed,
    }
}

/// Starts `perf record` on `pid` (with `graphs`, its call graphs too);
/// stopped by [`perf_stop`].
fn perf_start(pid: u32, out: &std::path::Path, graphs: bool) -> Option<std::process::Child> {
    Command::new("perf")
        .args(["record", "-F", "999", "-p", &pid.to_string()])
        .args(graphs.then_some("-g"))
        .arg("-o")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Stops `perf record` (SIGINT, so it writes its file) and returns the
/// share of samples in libsecp256k1; the profile is removed unless `keep`.
fn perf_stop(mut child: std::process::Child, out: &std::path::Path, keep: bool) -> Option<f64> {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let report = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "sym", "-i"])
        .arg(out)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&report.stdout);
    let shares: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("secp256k1"))
        .filter_map(|l| l.trim().split('%').next()?.trim().parse::<f64>().ok())
        .collect();
    if !keep {
        let _ = std::fs::remove_file(out);
    }
    // No sample in libsecp256k1: perf recorded nothing usable.
    (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / 100.0)
}

/// CPU time the whole machine spent busy so far (every core, from
/// /proc/stat), in milliseconds.
fn machine_busy_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user, nice, system, irq, softirq: not idle, iowait or steal (time
    // the hypervisor ran something else), nor guest (counted in user).
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    // USER_HZ is 100 on Linux.
    busy * 10.0
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    assert!(
        a.senders > 0 && a.txs >= a.senders,
        "--txs >= --senders > 0"
    );
    assert!(
        a.rounds > 0 || a.paced_rate.is_some() || a.paced_rounds == 0,
        "paced phases need --rounds > 0 (their rate is half the direct one) or --paced-rate"
    );
    let control: HttpClient = client(4);
    let (node_proc, node) = anvil(
        &control,
        &["--block-time", "1", "--gas-limit", "3000000000"],
    )
    .await;
    // `TXGATE_BIN` runs another build (the `profiling` one, for a
    // profile with symbols and line tables).
    let config = a.txgate_config.as_ref().map(|p| p.display().to_string());
    let mut txgate_args = vec!["--max-in-flight", "4096"];
    if let Some(config) = &config {
        txgate_args.extend(["-c", config.as_str()]);
    }
    let txgate = Txgate::start(&control, &txgate_bin(), &node, &txgate_args).await;
    let txgate_url = txgate.url();
    let pid = txgate.pid();
    // The reference, when asked for: its own listener, the same node, its
    // JSON-RPC on `/` like txgate's, no sidecar (as txgate runs here).
    let reference = a.reference.as_ref().map(|bin| {
        let port = free_port();
        let proc = spawn(
            bin,
            &[
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--upstream",
                &node,
                "--rpc-path",
                "/",
            ],
        );
        (proc, format!("http://127.0.0.1:{port}"))
    });
    if let Some((_, url)) = &reference {
        wait_up(&control, url).await;
    }
    let reference_pid = reference.as_ref().map(|(proc, _)| proc.pid());
    let node_pid = node_proc.pid();
    let me = std::process::id();

    let mut rows = Vec::new();
    let mut perf_share = None;
    for round in 0..a.rounds {
        for (target, slot) in rotation(round, reference.is_some().then_some("reference")) {
            // Each target of each round has accounts of its own.
            let (senders, raws) = sign_round(round * 3 + slot, &a);
            fund(&control, &node, senders.iter().map(|e| e.address)).await;
            let url = match (target, &reference) {
                ("direct", _) => &node,
                ("reference", Some((_, url))) => url,
                _ => &txgate_url,
            };
            // The proxy this phase measures, if any.
            let proxy_pid = match target {
                "txgate" => Some(pid),
                "reference" => reference_pid,
                _ => None,
            };
            let profiled = target == "txgate" && a.perf && round + 1 == a.rounds;
            let perf_file = a.perf_out.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("txgate-screened-{}.perf", std::process::id()))
            });
            let keep = a.perf_out.is_some();
            let perf = profiled
                .then(|| perf_start(pid, &perf_file, keep))
                .flatten();
            if perf.is_some() {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let proxy_cpu = || proxy_pid.map_or(0.0, cpu_ms);
            let (cpu_before, node_before, me_before) = (proxy_cpu(), cpu_ms(node_pid), cpu_ms(me));
            let busy_before = machine_busy_ms();
            let sent = send(url, raws, a.connections).await;
            let cpu = proxy_cpu() - cpu_before;
            let node_cpu = cpu_ms(node_pid) - node_before;
            let me_cpu = cpu_ms(me) - me_before;
            let busy = machine_busy_ms() - busy_before;
            if let Some(child) = perf {
                perf_share = perf_stop(child, &perf_file, keep);
            }
            let ok = sent.latencies_ms.len() as f64;
            let row = json!({
                "round": round + 1, "target": target,
                "ok": sent.latencies_ms.len(), "failed": sent.failed,
                "tx_per_s": ok / sent.secs,
                "p50_ms": percentile(&sent.latencies_ms, 0.5),
                "p99_ms": percentile(&sent.latencies_ms, 0.99),
                "txgate_cpu_us_per_tx": (target == "txgate").then(|| cpu * 1000.0 / ok.max(1.0)),
                "reference_cpu_us_per_tx": (target == "reference").then(|| cpu * 1000.0 / ok.max(1.0)),
                "node_cpu_us_per_tx": node_cpu * 1000.0 / ok.max(1.0),
                "loader_cpu_us_per_tx": me_cpu * 1000.0 / ok.max(1.0),
                "machine_cpu_us_per_tx": busy * 1000.0 / ok.max(1.0),
                "cores_busy": busy / 1000.0 / sent.secs,
            });
            eprintln!("{row}");
            rows.push(row);
            // Let the node mine what it pooled before the next target.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let of = |target: &str, key: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r["target"] == target)
            .filter_map(|r| r[key].as_f64())
            .collect()
    };
    // Half the node's maximum, as the direct rounds measured it.
    let half_rate = a
        .paced_rate
        .unwrap_or_else(|| median(&of("direct", "tx_per_s")) / 2.0);
    let hop = a.hop.as_ref().map(|bin| {
        let port = free_port();
        let upstream = node.trim_start_matches("http://").to_string();
        let listen = format!("127.0.0.1:{port}");
        let proc = spawn(
            bin,
            &[
                "--io",
                "epoll",
                "--listen",
                &listen,
                "--upstream",
                &upstream,
            ],
        );
        (proc, format!("http://127.0.0.1:{port}"))
    });
    if let Some((_, url)) = &hop {
        wait_up(&control, url).await;
    }
    let mut paced_rows = Vec::new();
    if a.paced_rounds > 0 {
        paced::pause_mining(&control, &node).await;
        paced::mine_out(&control, &node).await;
    }
    for round in 0..a.paced_rounds {
        for (target, slot) in rotation(round, hop.is_some().then_some("hop")) {
            let seed = 1000 + round * 3 + slot;
            let count = (half_rate * a.paced_secs as f64) as u64;
            let (senders, raws) = paced::sign_paced(seed, a.senders, count.max(a.senders));
            fund(&control, &node, senders.iter().map(|e| e.address)).await;
            let (url, proxy_pid) = match (target, &hop) {
                ("direct", _) => (&node, None),
                ("hop", Some((proc, url))) => (url, Some(proc.pid())),
                _ => (&txgate_url, Some(pid)),
            };
            let cpu_before = proxy_pid.map_or(0.0, cpu_ms);
            let (node_before, busy_before, wall) =
                (cpu_ms(node_pid), machine_busy_ms(), Instant::now());
            let sent = paced::send_paced(url, raws, half_rate).await;
            let cpu = proxy_pid.map_or(0.0, cpu_ms) - cpu_before;
            let node_cpu = cpu_ms(node_pid) - node_before;
            let cores_busy =
                (machine_busy_ms() - busy_before) / (wall.elapsed().as_secs_f64() * 1000.0);
            let ok = sent.latencies_ms.len() as f64;
            let row = json!({
                "round": round + 1, "target": target, "rate": half_rate,
                "offered_per_s": sent.offered_per_s,
                "ok": sent.latencies_ms.len(), "failed": sent.failed,
                "p50_ms": sent.p(0.5), "p99_ms": sent.p(0.99),
                "proxy_cpu_us_per_tx": proxy_pid.map(|_| cpu * 1000.0 / ok.max(1.0)),
                "node_cpu_us_per_tx": node_cpu * 1000.0 / ok.max(1.0),
                "cores_busy": cores_busy,
            });
            eprintln!("paced {row}");
            if let Some(dir) = &a.paced_trace {
                let lines: String = sent
                    .timeline
                    .iter()
                    .map(|(at, ms)| format!("{at:.3},{ms:.3}\n"))
                    .collect();
                let file = dir.join(format!("{}-{target}.csv", round + 1));
                std::fs::write(&file, format!("sent_ms,round_trip_ms\n{lines}"))
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                if target == "txgate" {
                    let metrics = get_text(&control, &format!("{}/metrics", txgate.admin()))
                        .await
                        .unwrap_or_default();
                    let file = dir.join(format!("{}-txgate.metrics", round + 1));
                    std::fs::write(&file, metrics)
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                }
            }
            paced_rows.push(row);
            paced::mine_out(&control, &node).await;
        }
    }
    let paced_of = |target: &str, key: &str| -> Vec<f64> {
        paced_rows
            .iter()
            .filter(|r| r["target"] == target)
            .filter_map(|r| r[key].as_f64())
            .collect()
    };
    let added_by = |target: &str, key: &str| -> Vec<f64> {
        paced_of(target, key)
            .iter()
            .zip(paced_of("direct", key))
            .map(|(t, d)| t - d)
            .collect()
    };
    let added = |key: &str| added_by("txgate", key);
    let half_rate_summary = (a.paced_rounds > 0).then(|| {
        json!({
            "rate_per_s": half_rate,
            "direct": {"p50_ms": median(&paced_of("direct", "p50_ms")), "p99_ms": median(&paced_of("direct", "p99_ms"))},
            "txgate": {"p50_ms": median(&paced_of("txgate", "p50_ms")), "p99_ms": median(&paced_of("txgate", "p99_ms"))},
            "added_p50_ms": {"median": median(&added("p50_ms")), "rounds": added("p50_ms")},
            "added_p99_ms": {"median": median(&added("p99_ms")), "rounds": added("p99_ms")},
            "txgate_cpu_us_per_tx": median(&paced_of("txgate", "proxy_cpu_us_per_tx")),
            "hop": hop.is_some().then(|| json!({
                "p50_ms": median(&paced_of("hop", "p50_ms")), "p99_ms": median(&paced_of("hop", "p99_ms")),
                "added_p50_ms": {"median": median(&added_by("hop", "p50_ms")), "rounds": added_by("hop", "p50_ms")},
                "added_p99_ms": {"median": median(&added_by("hop", "p99_ms")), "rounds": added_by("hop", "p99_ms")},
                "cpu_us_per_tx": median(&paced_of("hop", "proxy_cpu_us_per_tx")),
            })),
            "rows": paced_rows.clone(),
        })
    });
    let ratios: Vec<f64> = of("txgate", "tx_per_s")
        .iter()
        .zip(of("direct", "tx_per_s"))
        .map(|(t, d)| t / d)
        .collect();
    let cpu_median = median(&of("txgate", "txgate_cpu_us_per_tx"));
    // The reference against txgate, per round: throughput and CPU per
    // transaction (rounds without it give nothing).
    let per_round = |key_t: &str, key_r: &str| -> Vec<f64> {
        of("txgate", key_t)
            .iter()
            .zip(of("reference", key_r))
            .map(|(t, r)| t / r)
            .collect()
    };
    let reference_summary = reference.is_some().then(|| {
        let cpu_ratios = per_round("txgate_cpu_us_per_tx", "reference_cpu_us_per_tx");
        let rate_ratios = per_round("tx_per_s", "tx_per_s");
        json!({
            "tx_per_s": median(&of("reference", "tx_per_s")),
            "p50_ms": median(&of("reference", "p50_ms")),
            "p99_ms": median(&of("reference", "p99_ms")),
            "cpu_us_per_tx": median(&of("reference", "reference_cpu_us_per_tx")),
            "throughput_over_direct": of("reference", "tx_per_s")
                .iter()
                .zip(of("direct", "tx_per_s"))
                .map(|(r, d)| r / d)
                .collect::<Vec<_>>(),
            "txgate_cpu_over_reference": {"median": median(&cpu_ratios), "rounds": cpu_ratios},
            "txgate_throughput_over_reference": {"median": median(&rate_ratios), "rounds": rate_ratios},
        })
    });
    let last_cpu = of("txgate", "txgate_cpu_us_per_tx").last().copied();
    let machine_direct = median(&of("direct", "machine_cpu_us_per_tx"));
    let cores_direct = median(&of("direct", "cores_busy"));
    // The bound holds only when the direct phase keeps the cores busy
    // (90% of them: the ramp and the tail of a phase leave some idle).
    let saturated =
        cores_direct >= 0.9 * std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    let ceiling = |txgate_us: f64| machine_direct / (machine_direct + txgate_us);
    let summary = json!({
        "txs": a.txs, "senders": a.senders, "connections": a.connections, "rounds": a.rounds,
        "direct": {"tx_per_s": median(&of("direct", "tx_per_s")),
            "p50_ms": median(&of("direct", "p50_ms")), "p99_ms": median(&of("direct", "p99_ms"))},
        "txgate": {"tx_per_s": median(&of("txgate", "tx_per_s")),
            "p50_ms": median(&of("txgate", "p50_ms")), "p99_ms": median(&of("txgate", "p99_ms")),
            "cpu_us_per_tx": cpu_median},
        "throughput_ratio": {"median": median(&ratios), "rounds": ratios},
        "reference": reference_summary,
        "half_rate": half_rate_summary,
        "machine": {
            "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "cores_busy_direct": cores_direct,
            "cores_busy_txgate": median(&of("txgate", "cores_busy")),
            "cpu_us_per_tx_direct": machine_direct,
            "cpu_us_per_tx_txgate": median(&of("txgate", "machine_cpu_us_per_tx")),
            "node_cpu_us_per_tx_direct": median(&of("direct", "node_cpu_us_per_tx")),
            "node_cpu_us_per_tx_txgate": median(&of("txgate", "node_cpu_us_per_tx")),
            "loader_cpu_us_per_tx_direct": median(&of("direct", "loader_cpu_us_per_tx")),
            "loader_cpu_us_per_tx_txgate": median(&of("txgate", "loader_cpu_us_per_tx")),
            "saturated_direct": saturated,
            "ratio_ceiling_at_txgate_cpu": saturated.then(|| ceiling(cpu_median)),
            "ratio_ceiling_at_libsecp256k1_only": saturated
                .then_some(())
                .and(perf_share.zip(last_cpu))
                .map(|(share, cpu)| ceiling(cpu * share)),
        },
        "failed": rows.iter().filter_map(|r| r["failed"].as_u64()).sum::<u64>()
            + paced_rows.iter().filter_map(|r| r["failed"].as_u64()).sum::<u64>(),
        "libsecp256k1": perf_share.zip(last_cpu).map(|(share, cpu)| json!({
            "share_of_txgate_samples": share,
            "cpu_us_per_tx": cpu * share,
            "txgate_cpu_over_libsecp256k1": 1.0 / share,
        })),
        "rows": rows,
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    if let Some(path) = a.json {
        std::fs::write(path, summary.to_string()).unwrap();
    }
}

/// A round's targets with their account slots (direct 0, txgate 1, the
/// `third` 2), in an order that rotates with the round, so none always
/// meets a node still busy with another's transactions.
fn rotation(round: u64, third: Option<&'static str>) -> Vec<(&'static str, u64)> {
    let mut order = vec![("direct", 0), ("txgate", 1)];
    order.extend(third.map(|name| (name, 2)));
    let first = round as usize % order.len();
    order.rotate_left(first);
    order
}
