//! The pool's questions over loopback, as the pool plugin sends them: one
//! HTTP/2 connection, one unary `VerifyTransaction` call per transaction,
//! many in flight, at a fixed rate (open loop: a call is sent when due,
//! whether or not earlier ones were answered).
//!
//! Each round measures two servers answering the same verdicts from the
//! same bans, one after the other (the order alternates): txgate's Aeges
//! listener (release build, bans posted to its `/report` first), and a
//! plain tonic server around the same screening engine (this binary with
//! `--serve-tonic`, on a single-threaded runtime as txgate's listener is),
//! the baseline of what a stock gRPC server costs. For
//! each: latency from send to answer (p50, p99, p99.9), the load client's
//! own CPU per call (hyper's HTTP/2 client, requests encoded up front),
//! the server's CPU per call (utime+stime from /proc),
//! errors. A tenth of the calls carry banned calldata. Calls are sent one
//! by one when due (to within 50 µs), as transactions reach a pool;
//! `--bursts` sends those due each millisecond together (20 at 20 000/s).
//! `--pin` puts the client on CPU 0 and the servers on CPU 1 (`taskset`). Target: txgate's
//! p99 ≤ 1 ms at 20 000 calls/s.
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/aeges_load` (or `benches/load/aeges_load.sh`); flags:
//! `--rate N` (20000), `--seconds S` (3), `--rounds R` (5), `--bursts`,
//! `--pin`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod baseline;
mod load;
mod workload;

use std::time::Duration;

use clap::Parser;
use txgate_benches::CargoBench;
use txgate_benches::procs::{client, free_port, post, spawn};
use txgate_benches::start::{Txgate, release};
use txgate_benches::stats::median;

use crate::load::Round;
use crate::workload::{BANNED, report};

/// VerifyTransaction over loopback: txgate's Aeges listener against a
/// plain tonic server on the same engine.
#[derive(Parser)]
struct Args {
    /// Calls a second.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Seconds of each measured round.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Serve the tonic baseline on this port (the run starts this mode).
    #[arg(long, hide = true, value_name = "PORT")]
    serve_tonic: Option<u16>,
    /// The client on CPU 0 and the servers on CPU 1 (`taskset`).
    #[arg(long)]
    pin: bool,
    /// The calls due each millisecond together, not one by one.
    #[arg(long)]
    bursts: bool,
    #[command(flatten)]
    _cargo: CargoBench,
}

impl Args {
    fn pacing(&self) -> Pacing {
        if self.bursts {
            Pacing::Millisecond
        } else {
            Pacing::Smooth
        }
    }
}

/// How calls are spread over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pacing {
    /// Each call when due, to within 50 µs (default).
    Smooth,
    /// The calls due each millisecond together (`--bursts`).
    Millisecond,
}

/// Whether the machine has CPUs enough to keep client and servers apart.
fn pinning() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// Pins process `pid` (all its threads) to `cpus`, with `taskset`.
fn pin(cpus: &str, pid: u32) {
    if !pinning() {
        return;
    }
    let status = std::process::Command::new("taskset")
        .args(["-a", "-c", "-p", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "taskset failed (util-linux)"
    );
}

/// Prints `name`'s rounds and their medians; the medians.
fn summary(name: &str, rounds: &[Round]) -> Round {
    let m = |f: fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let p99s: Vec<String> = rounds.iter().map(|r| format!("{:.3}", r.p99)).collect();
    println!("  {name:<8} p99 per round (ms): {}", p99s.join(", "));
    let r = Round {
        p50: m(|r| r.p50),
        p99: m(|r| r.p99),
        p999: m(|r| r.p999),
        client_us: m(|r| r.client_us),
        server_us: m(|r| r.server_us),
        rate: m(|r| r.rate),
        errors: rounds.iter().map(|r| r.errors).sum(),
        denied_share: m(|r| r.denied_share),
    };
    println!(
        "  {name:<8} {:>8.0}/s  p50 {:6.3} ms  p99 {:6.3} ms  p99.9 {:6.3} ms  \
         server {:6.1} µs/call  client {:6.1} µs/call  denied {:4.1}%  errors {}",
        r.rate,
        r.p50,
        r.p99,
        r.p999,
        r.server_us,
        r.client_us,
        r.denied_share * 100.0,
        r.errors
    );
    r
}

fn main() {
    let a = Args::parse();
    if let Some(port) = a.serve_tonic {
        baseline::serve_tonic(port);
        return;
    }
    // `--pin`: the pool plugin runs on the sequencer's host, not txgate's;
    // the load client is pinned to CPU 0 and the servers to CPU 1, so that
    // the client's CPU does not queue theirs.
    if a.pin {
        pin("0", std::process::id());
    }
    // The load client: one runtime thread for the connection and the
    // answers (and, with smooth pacing, one thread that paces the calls).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(a));
}

async fn run(a: Args) {
    let (aeges_port, tonic_port, dead) = (free_port(), free_port(), free_port());
    let txgate = Txgate::spawn(
        &release("txgate"),
        // Nothing is forwarded: the upstream is never asked.
        &format!("http://127.0.0.1:{dead}"),
        &["--aeges-listen", &format!("127.0.0.1:{aeges_port}")],
    );
    let tonic = spawn(
        &release("aeges_load"),
        &["--serve-tonic", &tonic_port.to_string()],
    );
    if a.pin {
        pin("1", txgate.pid());
        pin("1", tonic.pid());
    }
    let (txgate_pid, tonic_pid) = (txgate.pid(), tonic.pid());
    // txgate learns the bans from reports, as from the sidecar.
    let http = client(4);
    let _ = load::connect(aeges_port).await;
    for n in 0..BANNED {
        let (status, _) = post(
            &http,
            &format!("http://127.0.0.1:{aeges_port}/report"),
            report(n),
        )
        .await
        .expect("report");
        assert_eq!(status, 200);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count = a.rate * a.seconds;
    let pacing = a.pacing();
    println!(
        "VerifyTransaction over loopback, one HTTP/2 connection, {} calls/s for {} s, \
         {} interleaved rounds, {:?} pacing{} (medians; target: txgate p99 <= 1 ms)",
        a.rate,
        a.seconds,
        a.rounds,
        pacing,
        if a.pin { ", pinned" } else { "" }
    );
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let mut first = 1u64 << 20;
    for round in 0..a.rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_txgate in order {
            let (port, pid) = if is_txgate {
                (aeges_port, txgate_pid)
            } else {
                (tonic_port, tonic_pid)
            };
            // Warm-up: the connection, the caches.
            let _ = load::load(pacing, port, pid, a.rate, a.rate / 10, first).await;
            first += a.rate;
            let r = load::load(pacing, port, pid, a.rate, count, first).await;
            first += count;
            if is_txgate {
                ours.push(r)
            } else {
                base.push(r)
            }
        }
    }
    let t = summary("txgate", &ours);
    let b = summary("tonic", &base);
    println!(
        "  txgate/tonic: p99 {:.2}×, server CPU per call {:.2}×",
        t.p99 / b.p99,
        t.server_us / b.server_us
    );
    drop((txgate, tonic));
}
