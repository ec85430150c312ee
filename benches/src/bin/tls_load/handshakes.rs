//! Table 1, handshakes: sequential new connections, each a full handshake
//! and one call, to txgate with X25519, with X25519MLKEM768 and to nginx;
//! and the key exchange's own crypto, the floor under what the hybrid
//! adds.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use rustls::ClientConfig;
use rustls::crypto::SupportedKxGroup;
use rustls::crypto::aws_lc_rs::kx_group;
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsConnector;
use txgate_benches::procs::tree_cpu_ms;
use txgate_benches::stats::{Sample, median};

use crate::pki::{Pki, client_config};
use crate::wire::{read_answer, request, tcp};

/// One new connection: handshake, one call, close. Its time, µs.
async fn one_connection(config: &Arc<ClientConfig>, source: IpAddr, port: u16) -> f64 {
    let started = Instant::now();
    let stream = tcp(source, port).await;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .expect("handshake");
    tls.write_all(&request("/", false)).await.unwrap();
    let mut buf = Vec::with_capacity(1024);
    read_answer(&mut tls, &mut buf).await;
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    drop(tls);
    elapsed
}

struct Handshakes {
    p50_us: f64,
    p99_us: f64,
    per_sec: f64,
    /// The server's CPU (user + system, its workers included) per
    /// connection, µs: what the server itself spends, without the
    /// client's half of the key exchange.
    cpu_us: f64,
}

async fn handshakes(
    config: &Arc<ClientConfig>,
    source: IpAddr,
    port: u16,
    server: u32,
    warmup: usize,
    count: usize,
) -> Handshakes {
    for _ in 0..warmup {
        one_connection(config, source, port).await;
    }
    let mut times = Vec::with_capacity(count);
    let cpu = tree_cpu_ms(server);
    let started = Instant::now();
    for _ in 0..count {
        times.push(one_connection(config, source, port).await);
    }
    let per_sec = count as f64 / started.elapsed().as_secs_f64();
    let cpu_us = (tree_cpu_ms(server) - cpu) * 1000.0 / count as f64;
    let times = Sample::new(times);
    Handshakes {
        p50_us: times.median(),
        p99_us: times.quantile(0.99),
        per_sec,
        cpu_us,
    }
}

/// The key exchange's own crypto for one handshake with `group`, both
/// sides, µs: the client's key share, the server's share and secret, the
/// client's secret (median of 5 batches of 400).
fn kx_crypto_us(group: &'static dyn SupportedKxGroup) -> f64 {
    let mut batches = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        for _ in 0..400 {
            let client = group.start().expect("key share");
            let server = group
                .start_and_complete(client.pub_key())
                .expect("server share");
            let secret = client.complete(&server.pub_key).expect("client secret");
            std::hint::black_box(secret);
        }
        batches.push(started.elapsed().as_secs_f64() * 1e6 / 400.0);
    }
    median(&batches)
}

/// A server to shake hands with: its name in the table, the client's
/// settings, its port and its process (for its CPU).
pub(crate) type Target<'a> = (&'a str, &'a Arc<ClientConfig>, u16, u32);

/// The handshakes of the run.
pub(crate) struct Settings<'a> {
    pub(crate) warmup: usize,
    pub(crate) connections: usize,
    pub(crate) reps: usize,
    /// The targets to run, in this order, by name (`x25519`, `hybrid`,
    /// `nginx`); all of them when `None`.
    pub(crate) of: Option<&'a [String]>,
}

/// Runs and prints the handshakes table against txgate with TLS (`txgate`:
/// port and process) and nginx's TLS proxy (`nginx`).
pub(crate) async fn table(s: &Settings<'_>, pki: &Pki, txgate: (u16, u32), nginx: (u16, u32)) {
    let x25519 = client_config(pki, &[kx_group::X25519], &[], false);
    let hybrid = client_config(pki, &[kx_group::X25519MLKEM768], &[], false);
    let all: [(&str, Target<'_>); 3] = [
        ("x25519", ("txgate X25519", &x25519, txgate.0, txgate.1)),
        (
            "hybrid",
            ("txgate X25519MLKEM768", &hybrid, txgate.0, txgate.1),
        ),
        ("nginx", ("nginx X25519", &x25519, nginx.0, nginx.1)),
    ];
    // In the flag's order (which sets each one's source address).
    let keys: Vec<&str> = match s.of {
        None => all.iter().map(|(key, _)| *key).collect(),
        Some(of) => of.iter().map(String::as_str).collect(),
    };
    let targets: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            assert!(
                !keys[..i].contains(key),
                "--handshakes-of names {key} twice"
            );
            all.iter()
                .find(|(k, _)| k == key)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("--handshakes-of: no target {key}"))
        })
        .collect();
    let at = |key: &str| keys.iter().position(|k| *k == key);
    // The floor is timed only when both groups' handshakes run (not
    // while one of them is profiled alone).
    let floor_timed = at("x25519").is_some() && at("hybrid").is_some();
    let mut results: Vec<Vec<Handshakes>> = (0..targets.len()).map(|_| Vec::new()).collect();
    // Per repetition: the key exchange's crypto, (X25519, hybrid), µs.
    let mut crypto = Vec::new();
    println!(
        "handshakes: {} warm-up then {} sequential new connections, one eth_chainId each, {} reps",
        s.warmup, s.connections, s.reps
    );
    for rep in 0..s.reps {
        for k in 0..targets.len() {
            let i = (k + rep) % targets.len();
            let (name, config, port, pid) = targets[i];
            let source = IpAddr::from([127, 0, 0, 2 + (i as u8)]);
            let h = handshakes(config, source, port, pid, s.warmup, s.connections).await;
            println!(
                "  rep {} {name:<22} p50 {:>7.0} us  p99 {:>7.0} us  {:>7.0} conn/s  server CPU {:>5.0} us/conn",
                rep + 1,
                h.p50_us,
                h.p99_us,
                h.per_sec,
                h.cpu_us
            );
            results[i].push(h);
        }
        if floor_timed {
            let kx = (
                kx_crypto_us(kx_group::X25519),
                kx_crypto_us(kx_group::X25519MLKEM768),
            );
            println!(
                "  rep {} key exchange crypto, both sides: X25519 {:.1} us, X25519MLKEM768 {:.1} us",
                rep + 1,
                kx.0,
                kx.1
            );
            crypto.push(kx);
        }
    }
    println!(
        "\n| target | per connection p50 | p99 | connections/s | server CPU per connection |\n|---|---|---|---|---|"
    );
    for (i, (name, _, _, _)) in targets.iter().enumerate() {
        let r = &results[i];
        let m = |f: &dyn Fn(&Handshakes) -> f64| median(&r.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {name} | {:.0} µs | {:.0} µs | {:.0} | {:.0} µs |",
            m(&|h| h.p50_us),
            m(&|h| h.p99_us),
            m(&|h| h.per_sec),
            m(&|h| h.cpu_us)
        );
    }
    let per_rep = |num: usize, den: usize, f: &dyn Fn(&Handshakes) -> f64| {
        median(
            &(0..s.reps)
                .map(|r| f(&results[num][r]) / f(&results[den][r]))
                .collect::<Vec<_>>(),
        )
    };
    if let (Some(classic), Some(nginx)) = (at("x25519"), at("nginx")) {
        println!(
            "txgate X25519 / nginx X25519 connections/s (median of per-rep ratios): {:.2}x (target >= 1.0x)",
            per_rep(classic, nginx, &|h| h.per_sec)
        );
    }
    if let (Some(classic), Some(hybrid)) = (at("x25519"), at("hybrid")) {
        println!(
            "hybrid / X25519 per-connection time p50 (median of per-rep ratios): {:.3}x (target <= 1.10x)",
            per_rep(hybrid, classic, &|h| h.p50_us)
        );
        println!(
            "hybrid / X25519 txgate CPU per connection (median of per-rep ratios): {:.3}x",
            per_rep(hybrid, classic, &|h| h.cpu_us)
        );
        // What the hybrid adds, against the floor of its own crypto.
        let added: Vec<f64> = (0..s.reps)
            .map(|r| results[hybrid][r].p50_us - results[classic][r].p50_us)
            .collect();
        let floor: Vec<f64> = crypto
            .iter()
            .map(|(x25519, hybrid)| hybrid - x25519)
            .collect();
        let floor_share: Vec<f64> = (0..s.reps)
            .map(|r| 1.0 + floor[r] / results[classic][r].p50_us)
            .collect();
        println!(
            "hybrid adds {:.0} us at p50 (median of per-rep differences); its key exchange's own crypto, both sides, adds {:.1} us: alone {:.3}x the X25519 p50",
            median(&added),
            median(&floor),
            median(&floor_share)
        );
    }
}
