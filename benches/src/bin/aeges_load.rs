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

use std::time::{Duration, Instant};

use alloy_primitives::{Address, U256, hex, keccak256};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use serde_json::json;
use txgate_benches::procs::{client, free_port, post, root, spawn};
use txgate_proto::aeges::VERIFY_PATH;
use txgate_proto::aeges_v1::aeges_service_server::{AegesService, AegesServiceServer};
use txgate_proto::aeges_v1::{Transaction, VerifyTransactionRequest, VerifyTransactionResponse};
use txgate_screen::{Fingerprint, Invalidation, PoolTx, PoolVerdict, Screen, ScreenSettings};

const TARGET: Address = Address::repeat_byte(0x5f);
const BAD_TARGET: Address = Address::repeat_byte(0x6e);
const GAS: u64 = 90_000;
/// Banned calldata variants (and reports posted).
const BANNED: u64 = 1000;

struct Args {
    rate: u64,
    seconds: u64,
    rounds: usize,
    serve_tonic: Option<u16>,
    pin: bool,
    pacing: Pacing,
}

/// How calls are spread over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pacing {
    /// Each call when due, to within 50 µs (default).
    Smooth,
    /// The calls due each millisecond together (`--bursts`).
    Millisecond,
}

fn args() -> Args {
    let mut a = Args {
        rate: 20_000,
        seconds: 3,
        rounds: 5,
        serve_tonic: None,
        pin: false,
        pacing: Pacing::Smooth,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("value").parse::<u64>().expect("number");
        match flag.as_str() {
            "--rate" => a.rate = value(),
            "--seconds" => a.seconds = value(),
            "--rounds" => a.rounds = value() as usize,
            "--serve-tonic" => a.serve_tonic = Some(value() as u16),
            "--pin" => a.pin = true,
            "--bursts" => a.pacing = Pacing::Millisecond,
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A 100-byte payload; banned calldata goes to its own target.
fn payload(n: u64) -> Vec<u8> {
    let mut p = vec![0xa9, 0x05, 0x9c, 0xbb];
    p.extend_from_slice(&U256::from(n).to_be_bytes::<32>());
    p.extend_from_slice(&[0x11; 64]);
    p
}

fn transaction(n: u64, banned: bool) -> Transaction {
    let mut value = vec![0u8; 32];
    value[31] = 1;
    let (to, arg) = if banned {
        (BAD_TARGET, n % BANNED)
    } else {
        (TARGET, n)
    };
    Transaction {
        hash: keccak256(n.to_be_bytes()).to_vec().into(),
        sender: Address::from_slice(&keccak256(n.to_le_bytes())[..20])
            .to_vec()
            .into(),
        to: Some(to.to_vec().into()),
        value: value.into(),
        nonce: 0,
        r#type: 2,
        chain_id: Some(1),
        payload: payload(arg).into(),
        gas_limit: GAS,
        max_fee_per_gas: Some(2_000_000_000),
        max_priority_fee_per_gas: Some(1),
        ..Transaction::default()
    }
}

/// The failure report the sidecar would post for banned variant `n`.
fn report(n: u64) -> String {
    json!([format!("{}", keccak256((n + (1 << 40)).to_be_bytes())), {
        "tx_type": 2, "caller": format!("{}", Address::repeat_byte(0x99)),
        "gas_limit": GAS, "gas_price": 2_000_000_000u64, "kind": format!("{BAD_TARGET}"),
        "value": "0x1", "data": format!("0x{}", hex::encode(payload(n))), "nonce": n,
        "chain_id": 1, "access_list": [], "gas_priority_fee": 1u64,
        "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
    }])
    .to_string()
}

/// The baseline server: tonic, the same engine and bans.
struct Tonic {
    screen: Screen,
}

#[tonic::async_trait]
impl AegesService for Tonic {
    async fn verify_transaction(
        &self,
        request: tonic::Request<VerifyTransactionRequest>,
    ) -> Result<tonic::Response<VerifyTransactionResponse>, tonic::Status> {
        // The same checks and verdict as txgate's, on the message tonic
        // decoded.
        let message = request.into_inner();
        let event_id = message.event_id;
        let tx = message
            .transaction
            .as_ref()
            .ok_or_else(|| tonic::Status::invalid_argument("transaction missing"))?;
        if tx.hash.len() != 32
            || tx.sender.len() != 20
            || tx.to.as_ref().is_some_and(|to| to.len() != 20)
            || tx.value.len() > 32
        {
            return Err(tonic::Status::invalid_argument("bad field"));
        }
        let tx = PoolTx {
            hash: alloy_primitives::B256::from_slice(&tx.hash),
            sender: Address::from_slice(&tx.sender),
            to: tx.to.as_deref().map(Address::from_slice),
            value: U256::from_be_slice(&tx.value),
            gas_limit: tx.gas_limit,
            payload: &tx.payload,
        };
        let now = self.screen.millis(Instant::now());
        let verdict = self.screen.judge(&tx, now);
        if let PoolVerdict::Allow(Some(fp)) = verdict {
            self.screen.remember_pooled(&tx, &fp, now);
        }
        Ok(tonic::Response::new(VerifyTransactionResponse {
            event_id,
            denied: verdict.denied(),
        }))
    }
}

fn serve_tonic(port: u16) {
    let screen = Screen::new(ScreenSettings::default(), Instant::now());
    let bans: Vec<Invalidation> = (0..BANNED)
        .map(|n| {
            let fp = Fingerprint::from_parts(BAD_TARGET, &payload(n), U256::from(1), GAS);
            Invalidation {
                fingerprint: fp.hash,
                target: BAD_TARGET,
                selector: fp.selector,
                assertion: None,
                tx_hash: None,
                sender: None,
            }
        })
        .collect();
    screen.apply(&bans, 0);
    // One thread, as txgate's Aeges listener runs: the same footing.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        tonic::transport::Server::builder()
            .add_service(AegesServiceServer::new(Tonic { screen }))
            .serve(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
    });
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

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // Clock ticks: 100 per second on Linux.
    ticks / 100.0
}

#[derive(Debug, Clone, Copy, Default)]
struct Round {
    p50: f64,
    p99: f64,
    p999: f64,
    client_us: f64,
    server_us: f64,
    rate: f64,
    errors: usize,
    denied_share: f64,
}

/// The client side of one HTTP/2 connection.
type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn connect(port: u16) -> Sender {
    for _ in 0..400 {
        if let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let _ = stream.set_nodelay(true);
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .handshake(TokioIo::new(stream))
                .await
                .expect("HTTP/2 handshake");
            tokio::spawn(conn);
            return send;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("127.0.0.1:{port} did not come up");
}

/// One call framed as gRPC sends it: flag, length, message.
fn framed(n: u64) -> Bytes {
    let message = VerifyTransactionRequest {
        event_id: n,
        transaction: Some(transaction(n, n.is_multiple_of(10))),
    }
    .encode_to_vec();
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(&message);
    out.into()
}

/// One call: `Ok(denied)` once answered with status 0 and the event id.
async fn call(mut send: Sender, n: u64, body: Bytes) -> Result<bool, String> {
    let request = hyper::Request::post(format!("http://aeges{VERIFY_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    send.ready().await.map_err(|e| e.to_string())?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let collected = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let ok = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .is_some_and(|s| s == "0");
    let bytes = collected.to_bytes();
    if !ok || bytes.len() < 5 {
        return Err("not answered".into());
    }
    let answer = VerifyTransactionResponse::decode(&bytes[5..]).map_err(|e| e.to_string())?;
    if answer.event_id != n {
        return Err("wrong event id".into());
    }
    Ok(answer.denied)
}

/// `count` calls at `rate` on one connection, paced as `pacing` says.
async fn load(
    pacing: Pacing,
    port: u16,
    server_pid: &str,
    rate: u64,
    count: u64,
    first: u64,
) -> Round {
    match pacing {
        Pacing::Smooth => load_smooth(port, server_pid, rate, count, first).await,
        Pacing::Millisecond => load_bursts(port, server_pid, rate, count, first).await,
    }
}

/// Smooth pacing: a pacing thread hands each call to the client runtime
/// when it is due (checked every 50 µs), as transactions reach a pool one
/// by one.
async fn load_smooth(port: u16, server_pid: &str, rate: u64, count: u64, first: u64) -> Round {
    let send = connect(port).await;
    // Encoded up front: the client's CPU is the connection's, not protobuf's.
    let bodies: Vec<Bytes> = (first..first + count).map(framed).collect();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let (client_cpu, server_cpu) = (cpu_seconds("self"), cpu_seconds(server_pid));
    let handle = tokio::runtime::Handle::current();
    let started = Instant::now();
    let pacer = std::thread::spawn(move || {
        let mut sent = 0u64;
        let mut bodies = bodies.into_iter();
        while sent < count {
            let due = ((started.elapsed().as_secs_f64() * rate as f64) as u64).min(count);
            while sent < due {
                let (n, body) = (first + sent, bodies.next().expect("body"));
                let (send, done) = (send.clone(), done_tx.clone());
                let at = Instant::now();
                handle.spawn(async move {
                    let answer = call(send, n, body).await;
                    let _ = done.send((at.elapsed().as_micros() as u32, answer));
                });
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    });
    let (mut latencies, mut errors, mut denied) = (Vec::with_capacity(count as usize), 0, 0);
    while let Some((us, answer)) = done_rx.recv().await {
        match answer {
            Ok(d) => {
                latencies.push(us);
                denied += usize::from(d);
            }
            Err(_) => errors += 1,
        }
        if latencies.len() + errors == count as usize {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = pacer.join();
    let cpu = (
        cpu_seconds("self") - client_cpu,
        cpu_seconds(server_pid) - server_cpu,
    );
    round(latencies, errors, denied, cpu, count, elapsed)
}

/// Millisecond pacing: one task sends, every millisecond (the timer's
/// grain), the calls then due (20 at 20 000/s), and takes the answers.
async fn load_bursts(port: u16, server_pid: &str, rate: u64, count: u64, first: u64) -> Round {
    let send = connect(port).await;
    // Encoded up front: the client's CPU is the connection's, not protobuf's.
    let bodies: Vec<Bytes> = (first..first + count).map(framed).collect();
    let (client_cpu, server_cpu) = (cpu_seconds("self"), cpu_seconds(server_pid));
    let mut in_flight = futures_util::stream::FuturesUnordered::new();
    let mut bodies = bodies.into_iter();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut latencies, mut errors, mut denied) =
        (0u64, Vec::with_capacity(count as usize), 0usize, 0usize);
    let started = Instant::now();
    while latencies.len() + errors < count as usize {
        tokio::select! {
            _ = tick.tick(), if sent < count => {
                let due = ((started.elapsed().as_secs_f64() * rate as f64) as u64).min(count);
                while sent < due {
                    let (n, body, send) = (first + sent, bodies.next().expect("body"), send.clone());
                    let at = Instant::now();
                    in_flight.push(async move {
                        let answer = call(send, n, body).await;
                        (at.elapsed().as_micros() as u32, answer)
                    });
                    sent += 1;
                }
            }
            Some((us, answer)) = futures_util::StreamExt::next(&mut in_flight) => match answer {
                Ok(d) => {
                    latencies.push(us);
                    denied += usize::from(d);
                }
                Err(_) => errors += 1,
            },
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (
        cpu_seconds("self") - client_cpu,
        cpu_seconds(server_pid) - server_cpu,
    );
    round(latencies, errors, denied, cpu, count, elapsed)
}

/// A round's figures: `cpu` is (client, server) seconds over the round.
fn round(
    mut latencies: Vec<u32>,
    errors: usize,
    denied: usize,
    cpu: (f64, f64),
    count: u64,
    elapsed: f64,
) -> Round {
    let l = &mut latencies;
    l.sort_unstable();
    let at = |p: f64| l[((l.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    Round {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        client_us: cpu.0 * 1e6 / count as f64,
        server_us: cpu.1 * 1e6 / count as f64,
        rate: count as f64 / elapsed,
        errors,
        denied_share: denied as f64 / l.len().max(1) as f64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(name: &str, rounds: &[Round]) -> Round {
    let m = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
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
    let a = args();
    if let Some(port) = a.serve_tonic {
        serve_tonic(port);
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
    let release = root().join("target/release");
    let (rpc_port, admin_port, aeges_port, tonic_port, dead) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let txgate = spawn(
        &release.join("txgate"),
        &[
            "--listen",
            &format!("127.0.0.1:{rpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--aeges-listen",
            &format!("127.0.0.1:{aeges_port}"),
            // Nothing is forwarded: the upstream is never asked.
            "--upstream",
            &format!("http://127.0.0.1:{dead}"),
        ],
    );
    let tonic = spawn(
        &release.join("aeges_load"),
        &["--serve-tonic", &tonic_port.to_string()],
    );
    if a.pin {
        pin("1", txgate.pid());
        pin("1", tonic.pid());
    }
    let (txgate_pid, tonic_pid) = (txgate.pid().to_string(), tonic.pid().to_string());
    // txgate learns the bans from reports, as from the sidecar.
    let http = client(4);
    let _ = connect(aeges_port).await;
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
    println!(
        "VerifyTransaction over loopback, one HTTP/2 connection, {} calls/s for {} s, \
         {} interleaved rounds, {:?} pacing{} (medians; target: txgate p99 <= 1 ms)",
        a.rate,
        a.seconds,
        a.rounds,
        a.pacing,
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
                (aeges_port, &txgate_pid)
            } else {
                (tonic_port, &tonic_pid)
            };
            // Warm-up: the connection, the caches.
            let _ = load(a.pacing, port, pid, a.rate, a.rate / 10, first).await;
            first += a.rate;
            let r = load(a.pacing, port, pid, a.rate, count, first).await;
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
