//! The load client: one HTTP/2 connection, calls sent when due (one by
//! one, or those of each millisecond together), the figures of a round.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use txgate_benches::procs::cpu_ms;
use txgate_benches::stats::Sample;
use txgate_proto::aeges::VERIFY_PATH;
use txgate_proto::aeges_v1::VerifyTransactionResponse;

use crate::Pacing;
use crate::workload::framed;

/// The figures of one round: latency in ms, CPU per call in µs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Round {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) client_us: f64,
    pub(crate) server_us: f64,
    pub(crate) rate: f64,
    pub(crate) errors: usize,
    pub(crate) denied_share: f64,
}

/// The client side of one HTTP/2 connection.
type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// One HTTP/2 connection to `port` (retried while it does not listen).
pub(crate) async fn connect(port: u16) -> Sender {
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
pub(crate) async fn load(
    pacing: Pacing,
    port: u16,
    server_pid: u32,
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
async fn load_smooth(port: u16, server_pid: u32, rate: u64, count: u64, first: u64) -> Round {
    let send = connect(port).await;
    // Encoded up front: the client's CPU is the connection's, not protobuf's.
    let bodies: Vec<Bytes> = (first..first + count).map(framed).collect();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let (client_cpu, server_cpu) = (cpu_seconds(std::process::id()), cpu_seconds(server_pid));
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
        cpu_seconds(std::process::id()) - client_cpu,
        cpu_seconds(server_pid) - server_cpu,
    );
    round(latencies, errors, denied, cpu, count, elapsed)
}

/// Millisecond pacing: one task sends, every millisecond (the timer's
/// grain), the calls then due (20 at 20 000/s), and takes the answers.
async fn load_bursts(port: u16, server_pid: u32, rate: u64, count: u64, first: u64) -> Round {
    let send = connect(port).await;
    // Encoded up front: the client's CPU is the connection's, not protobuf's.
    let bodies: Vec<Bytes> = (first..first + count).map(framed).collect();
    let (client_cpu, server_cpu) = (cpu_seconds(std::process::id()), cpu_seconds(server_pid));
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
        cpu_seconds(std::process::id()) - client_cpu,
        cpu_seconds(server_pid) - server_cpu,
    );
    round(latencies, errors, denied, cpu, count, elapsed)
}

/// A round's figures: `cpu` is (client, server) seconds over the round.
fn round(
    latencies: Vec<u32>,
    errors: usize,
    denied: usize,
    cpu: (f64, f64),
    count: u64,
    elapsed: f64,
) -> Round {
    let l: Sample = latencies.into_iter().map(f64::from).collect();
    Round {
        p50: l.median() / 1000.0,
        p99: l.quantile(0.99) / 1000.0,
        p999: l.quantile(0.999) / 1000.0,
        client_us: cpu.0 * 1e6 / count as f64,
        server_us: cpu.1 * 1e6 / count as f64,
        rate: count as f64 / elapsed,
        errors,
        denied_share: denied as f64 / l.len().max(1) as f64,
    }
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    cpu_ms(pid) / 1000.0
}
