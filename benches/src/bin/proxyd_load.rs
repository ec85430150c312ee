//! proxyd's validation hook over loopback, asked as proxyd asks: HTTP/1.1
//! keep-alive, at most 10 connections (proxyd's `MaxConnsPerHost`), one
//! request in flight on each, go-ethereum's JSON of each signed
//! transaction plus `from` (the body written by
//! `txgate_proto::proxyd::encode`, up front: the client's CPU is the
//! connection's). Requests are due at a fixed rate (open loop: latency is
//! counted from when a request was due, so a queue at the client shows).
//!
//! Three workloads, each in interleaved rounds: one transaction a request
//! (a submission) at `--rate` requests/s, and 100 a request (proxyd's
//! largest, a bundle) at `--bundle-rate`, twice: with a tenth of the
//! transactions carrying calldata banned by failure reports posted first
//! (so every request holds one and is refused: nothing is remembered), and
//! with honest transactions only (every one answered `false`, so each is
//! remembered for the sidecar's later word, hash to fingerprint and
//! sender). Per round: p50 and p99
//! latency, txgate's CPU per request and per transaction (utime+stime from
//! /proc), the load client's own CPU per request, errors; and the same-run
//! baseline: one libsecp256k1 sender recovery, timed in this process on the
//! same transactions (the hook recovers none: proxyd sent the sender).
//! Before each round txgate is left idle as long as the round lasts: its
//! CPU then (timers, the background sweep, the metrics) is reported too,
//! and the CPU per transaction is given both whole and above that idle
//! cost, which no transaction causes.
//! Targets (issue 39): ≤ 3 µs of txgate CPU per transaction at 100 a
//! request, ≤ 40 µs per 1-transaction request, p99 ≤ 2 ms at 5 000
//! requests/s.
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/proxyd_load` (or `benches/load/proxyd_load.sh`); flags:
//! `--rate N` (5000), `--bundle-rate N` (200), `--seconds S` (3),
//! `--rounds R` (5).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bytes as TxBytes, Signature, TxKind, U256};
use bytes::Bytes;
use clap::Parser;
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_benches::CargoBench;
use txgate_benches::open_loop::OpenLoop;
use txgate_benches::procs::{client, cpu_ms, free_port, post};
use txgate_benches::start::{Scratch, Txgate, arg, txgate_bin};
use txgate_benches::stats::median;

/// proxyd's hook over loopback: 1 and 100 transactions a request.
#[derive(Parser)]
struct Args {
    /// Requests a second of one transaction.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// Requests a second of 100 transactions.
    #[arg(long, default_value_t = 200)]
    bundle_rate: u64,
    /// Seconds of each measured round.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[command(flatten)]
    _cargo: CargoBench,
}

/// Where honest calls go.
const TARGET: Address = Address::repeat_byte(0x5f);
/// Where banned calldata goes.
const BAD_TARGET: Address = Address::repeat_byte(0x6e);
const GAS: u64 = 90_000;
/// Banned calldata variants (and reports posted).
const BANNED: u64 = 100;
/// Connections, as proxyd's `MaxConnsPerHost`.
const CONNECTIONS: usize = 10;

fn payload(n: u64) -> Vec<u8> {
    let mut p = vec![0xa9, 0x05, 0x9c, 0xbb];
    p.extend_from_slice(&U256::from(n).to_be_bytes::<32>());
    p.extend_from_slice(&[0x11; 64]);
    p
}

/// The `n`-th signed transaction (every tenth with banned calldata), from
/// one of 64 senders.
fn signed(n: u64) -> Vec<u8> {
    let banned = n.is_multiple_of(10);
    let (to, arg) = if banned {
        (BAD_TARGET, n % BANNED)
    } else {
        (TARGET, n + BANNED)
    };
    let tx = TxEip1559 {
        chain_id: 1,
        nonce: n,
        gas_limit: GAS,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1,
        to: TxKind::Call(to),
        value: U256::from(1),
        access_list: Default::default(),
        input: TxBytes::from(payload(arg)),
    };
    let key = SecretKey::from_byte_array([(n % 64) as u8 + 1; 32]).unwrap();
    let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), &key);
    let (id, compact) = sig.serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    let envelope: TxEnvelope = tx.into_signed(signature).into();
    envelope.encoded_2718()
}

/// The failure report the sidecar would post for banned variant `n`.
fn report(n: u64) -> String {
    serde_json::json!([format!("{}", alloy_primitives::keccak256((n + (1 << 40)).to_be_bytes())), {
        "tx_type": 2, "caller": format!("{}", Address::repeat_byte(0x99)),
        "gas_limit": GAS, "gas_price": 2_000_000_000u64, "kind": format!("{BAD_TARGET}"),
        "value": "0x1", "data": format!("0x{}", alloy_primitives::hex::encode(payload(n))),
        "nonce": n, "chain_id": 1, "access_list": [], "gas_priority_fee": 1u64,
        "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
    }])
    .to_string()
}

/// The workloads.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// One transaction a request.
    One,
    /// 100 a request, one or more banned: refused, nothing remembered.
    Refused,
    /// 100 honest ones a request: all allowed, all remembered.
    Honest,
}

/// One round's figures: latency in ms, CPU in µs.
#[derive(Debug, Clone, Copy)]
struct Round {
    p50: f64,
    p99: f64,
    server_per_request: f64,
    server_per_tx: f64,
    /// `server_per_tx` less what txgate spent idle over as long.
    server_per_tx_busy: f64,
    /// txgate's CPU while idle, ms per second.
    idle_ms_per_s: f64,
    client_per_request: f64,
    rate: f64,
    errors: usize,
    refused_share: f64,
}

/// proxyd's answer: `Ok(any true)` for a verdict, `Err` for an
/// errorCode or a body that is not one.
fn verdict(_status: u16, body: &[u8]) -> Result<bool, String> {
    let answer: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if answer["errorCode"] != "" {
        return Err(answer["errorCode"].to_string());
    }
    Ok(answer["unauthorized"]
        .as_object()
        .is_some_and(|m| m.values().any(|v| v == true)))
}

/// `bodies` (each of `txs` transactions) due at `rate` a second over
/// [`CONNECTIONS`] keep-alive connections.
async fn round(port: u16, pid: u32, rate: u64, txs: usize, bodies: Vec<Bytes>) -> Round {
    let count = bodies.len();
    let idle_for = Duration::from_secs_f64(count as f64 / rate as f64);
    let idle0 = (cpu_ms(pid), Instant::now());
    tokio::time::sleep(idle_for).await;
    let idle_ms_per_s = (cpu_ms(pid) - idle0.0) / idle0.1.elapsed().as_secs_f64();
    let load = OpenLoop {
        port,
        path: "/proxyd/validate",
        headers: &[("user-agent", "Go-http-client/1.1")],
        connections: CONNECTIONS,
        rate,
        server_pid: pid,
    };
    let out = load.run(bodies, verdict).await;
    let l = out.latencies_ms();
    let refused = out.answers.iter().filter(|(_, any)| *any).count();
    Round {
        p50: l.median(),
        p99: l.quantile(0.99),
        server_per_request: out.server_cpu_ms * 1000.0 / count as f64,
        server_per_tx: out.server_cpu_ms * 1000.0 / (count * txs) as f64,
        server_per_tx_busy: (out.server_cpu_ms - idle_ms_per_s * out.elapsed) * 1000.0
            / (count * txs) as f64,
        idle_ms_per_s,
        client_per_request: out.client_cpu_ms * 1000.0 / count as f64,
        rate: count as f64 / out.elapsed,
        errors: out.failed(),
        refused_share: refused as f64 / l.len().max(1) as f64,
    }
}

/// One libsecp256k1 sender recovery, in µs: the median of 5 timed passes
/// over `raws` (decoded up front).
fn recovery_us(raws: &[Vec<u8>]) -> f64 {
    let txs: Vec<_> = raws
        .iter()
        .map(|r| txgate_screen::decode(r).unwrap())
        .collect();
    let passes: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for tx in &txs {
                std::hint::black_box(txgate_screen::recover_sender(tx).unwrap());
            }
            t.elapsed().as_secs_f64() * 1e6 / txs.len() as f64
        })
        .collect();
    median(&passes)
}

fn summary(name: &str, rounds: &[Round], recovery: f64) {
    let m = |f: fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let per_tx: Vec<String> = rounds
        .iter()
        .map(|r| format!("{:.2}", r.server_per_tx))
        .collect();
    println!("  {name}: txgate µs/tx per round: {}", per_tx.join(", "));
    let busy: Vec<String> = rounds
        .iter()
        .map(|r| format!("{:.2}", r.server_per_tx_busy))
        .collect();
    println!(
        "  {name}: above idle ({:.1} ms/s idle, median), µs/tx per round: {}; median {:.2}",
        m(|r| r.idle_ms_per_s),
        busy.join(", "),
        m(|r| r.server_per_tx_busy),
    );
    println!(
        "  {name}: {:>7.0} req/s  p50 {:6.3} ms  p99 {:6.3} ms  txgate {:7.2} µs/request \
         {:6.2} µs/tx ({:.2}× one recovery)  client {:6.1} µs/request  refused {:4.1}%  \
         errors {}",
        m(|r| r.rate),
        m(|r| r.p50),
        m(|r| r.p99),
        m(|r| r.server_per_request),
        m(|r| r.server_per_tx),
        m(|r| r.server_per_tx) / recovery,
        m(|r| r.client_per_request),
        m(|r| r.refused_share) * 100.0,
        rounds.iter().map(|r| r.errors).sum::<usize>(),
    );
}

fn main() {
    let a = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(a));
}

async fn run(a: Args) {
    let (aeges_port, dead) = (free_port(), free_port());
    let scratch = Scratch::new("proxyd_load");
    // The rate cap far above the load: the bench measures the verdicts.
    // The bans outlive the longest run (their default life is 128 s):
    // every round judges the same share of banned transactions.
    let config = scratch.write(
        "txgate.toml",
        "[aeges]\nproxyd_txs_per_sec = 100000000\nproxyd_burst = 100000000\n\
         [screen]\ndenied_ttl_secs = 86400\n",
    );
    let txgate = Txgate::spawn(
        &txgate_bin(),
        &format!("http://127.0.0.1:{dead}"),
        &[
            "--config",
            arg(&config),
            "--aeges-listen",
            &format!("127.0.0.1:{aeges_port}"),
        ],
    );
    let pid = txgate.pid();
    let http = client(4);
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(("127.0.0.1", aeges_port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for n in 0..BANNED {
        let url = format!("http://127.0.0.1:{aeges_port}/report");
        let (status, _) = post(&http, &url, report(n)).await.expect("report");
        assert_eq!(status, 200);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Transactions signed up front, reused across rounds (a verdict reads
    // the state: repeating a request costs what the first did).
    let singles_n = (a.rate * a.seconds) as usize;
    let bundles_n = (a.bundle_rate * a.seconds) as usize;
    let pool: Vec<Vec<u8>> = (0..(singles_n.max(bundles_n * 100).clamp(1_000, 200_000)) as u64)
        .map(signed)
        .collect();
    let encode = |txs: &[&Vec<u8>]| {
        let slices: Vec<&[u8]> = txs.iter().map(|t| t.as_slice()).collect();
        Bytes::from(txgate_proto::proxyd::encode::request(&slices).unwrap())
    };
    let all: Vec<&Vec<u8>> = pool.iter().collect();
    // Every tenth transaction is a banned one (`signed`).
    let honest_pool: Vec<&Vec<u8>> = pool
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 10 != 0)
        .map(|(_, tx)| tx)
        .collect();
    let singles: Vec<Bytes> = (0..singles_n)
        .map(|i| encode(&all[i % all.len()..=i % all.len()]))
        .collect();
    let bundles: Vec<Bytes> = (0..bundles_n)
        .map(|i| {
            let start = (i * 100) % (all.len() - 100);
            encode(&all[start..start + 100])
        })
        .collect();
    let honest: Vec<Bytes> = (0..bundles_n)
        .map(|i| {
            let start = (i * 100) % (honest_pool.len() - 100);
            encode(&honest_pool[start..start + 100])
        })
        .collect();
    println!(
        "proxyd hook over loopback, {CONNECTIONS} keep-alive connections, {} s rounds, {} \
         interleaved rounds; 1 tx at {} req/s, 100 tx at {} req/s (medians; targets: \
         ≤ 40 µs/request at 1 tx, ≤ 3 µs/tx at 100, p99 ≤ 2 ms at 5 000 req/s)",
        a.seconds, a.rounds, a.rate, a.bundle_rate
    );
    // Warm-up.
    let _ = round(
        aeges_port,
        pid,
        a.rate,
        1,
        singles[..singles.len() / 10].to_vec(),
    )
    .await;
    let (mut one, mut hundred, mut clean, mut recoveries) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..a.rounds {
        // Rotated: no workload always first or last.
        let mut order = [Work::One, Work::Refused, Work::Honest];
        order.rotate_left(r % 3);
        for work in order {
            match work {
                Work::One => one.push(round(aeges_port, pid, a.rate, 1, singles.clone()).await),
                Work::Refused => {
                    hundred.push(round(aeges_port, pid, a.bundle_rate, 100, bundles.clone()).await);
                }
                Work::Honest => {
                    clean.push(round(aeges_port, pid, a.bundle_rate, 100, honest.clone()).await);
                }
            }
        }
        recoveries.push(recovery_us(&pool[..pool.len().min(2000)]));
    }
    let recovery = median(&recoveries);
    println!("  baseline: one libsecp256k1 recovery {recovery:.2} µs (same run, this process)");
    summary("1 tx", &one, recovery);
    summary("100 tx", &hundred, recovery);
    summary("100 tx, all honest (remembered)", &clean, recovery);
    drop(txgate);
}
