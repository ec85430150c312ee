//! TLS benchmarks, txgate against nginx (Debian, OpenSSL) in the same run,
//! with the same ECDSA P-256 certificate and the same upstream (an nginx
//! static responder, so the node is never what is measured).
//!
//! Four tables, each the median of `--reps` interleaved repetitions:
//!
//! 1. **handshakes**: `--warmup` (1000) connections, then `--connections`
//!    (10,000) sequential new connections, each a full handshake (no
//!    resumption), one `eth_chainId` with `Connection: close`, read to the
//!    end: per-connection time (median and p99) and connections/s, for
//!    txgate with X25519, txgate with X25519MLKEM768 and nginx with X25519.
//!    The client is rustls (h2load's OpenSSL cannot offer ML-KEM).
//! 2. **small records**: `--calls` (20,000) `eth_chainId` in sequence over
//!    one kept TLS 1.3 connection and as many over one kept cleartext
//!    connection, both to txgate, alternating call by call: p50 and p99,
//!    and what TLS adds (the client's own encryption included).
//! 3. **bulk**: a 1 MiB JSON-RPC answer over a kept TLS connection,
//!    `--bulk` (200) times, per cipher suite (AES-128-GCM, AES-256-GCM,
//!    ChaCha20-Poly1305): handshake µs and MB/s, txgate and nginx.
//! 4. **HTTPS upstream**: `--clients` (32) kept cleartext connections
//!    calling txgate for `--duration` (5) s, with an https:// upstream and
//!    with an http:// one: calls/s, the ratio, and txgate's and nginx's CPU
//!    per call.
//!
//! The handshake table also gives each server's CPU per connection (user
//! and system time from /proc, workers included): the client's half of
//! the key exchange runs on the same two cores and is in the wall time.
//! After each repetition it times the key exchange's own crypto, each
//! group's three steps (the client's key share, the server's
//! `start_and_complete`, the client's completion) in this process: what
//! the hybrid adds there is the floor under what it can add to a
//! handshake, measured in the same run (`--handshakes-of x25519,hybrid`
//! runs only some of the three targets, in that order, e.g. to profile
//! one; the key exchange is timed only when both groups run).
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/tls_load` (`--only handshakes|records|bulk|upstream`).
//! Needs nginx (scripts/install-bench-tools.sh). Loopback only (the
//! clients bind 127.0.0.2..5); bounded in count and time; stops what it
//! starts.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod bulk;
mod handshakes;
mod pki;
mod records;
mod servers;
mod upstream;
mod wire;

use std::time::Duration;

use clap::Parser;
use txgate_benches::CargoBench;
use txgate_benches::procs::{client, free_port};
use txgate_benches::start::{Scratch, txgate_bin};

/// TLS benchmarks, txgate against nginx: handshakes, small records, bulk,
/// an HTTPS upstream.
#[derive(Parser)]
struct Args {
    /// Connections before the handshakes measured.
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Handshakes measured, per target and repetition.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Interleaved repetitions of each table.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Calls over one kept connection, per repetition (small records).
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// 1 MiB answers per cipher suite and repetition.
    #[arg(long, default_value_t = 200)]
    bulk: usize,
    /// Kept connections calling txgate (HTTPS upstream).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds of each HTTPS-upstream repetition.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Only this table.
    #[arg(long, value_parser = ["handshakes", "records", "bulk", "upstream"])]
    only: Option<String>,
    /// The handshake targets to run, in this order (a profile of one of
    /// them).
    #[arg(long, value_delimiter = ',', value_parser = ["x25519", "hybrid", "nginx"])]
    handshakes_of: Option<Vec<String>>,
    #[command(flatten)]
    _cargo: CargoBench,
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let bin = txgate_bin();
    let http = client(1);
    let scratch = Scratch::new("tls-load");
    let pki = pki::pki(scratch.path());
    let ports = (free_port(), free_port(), free_port());
    let nginx = servers::nginx_tls(&http, &scratch, &pki, ports).await;
    let (static_port, static_tls_port, nginx_tls) = ports;
    let responder = format!("http://127.0.0.1:{static_port}");

    let tls_keys = format!(
        "[server.tls]\ncert_chain_path = \"{}\"\nkey_path = \"{}\"\n",
        pki.cert.display(),
        pki.key.display()
    );
    let txgate = |name: &'static str, upstream: String, toml: String| {
        let (http, bin, scratch) = (&http, &bin, &scratch);
        async move { servers::txgate(http, bin, scratch, name, &upstream, &toml).await }
    };
    let tx_tls = txgate("tls", responder.clone(), tls_keys.clone()).await;
    let tx_bulk = txgate("bulk", format!("{responder}/big"), tls_keys).await;
    let tx_plain = txgate("plain", responder, String::new()).await;
    let upstream_tls = format!(
        "[upstream.tls]\nca_path = \"{}\"\n",
        scratch.path().join("ca.pem").display()
    );
    let tx_https = txgate(
        "https",
        format!("https://localhost:{static_tls_port}"),
        upstream_tls,
    )
    .await;
    let run = |name: &str| a.only.as_deref().is_none_or(|only| only == name);

    if run("handshakes") {
        let settings = handshakes::Settings {
            warmup: a.warmup,
            connections: a.connections,
            reps: a.reps,
            of: a.handshakes_of.as_deref(),
        };
        let txgate = (tx_tls.port, tx_tls.pid());
        handshakes::table(&settings, &pki, txgate, (nginx_tls, nginx.0.pid())).await;
    }
    if run("records") {
        records::table(&pki, tx_tls.port, tx_plain.port, a.calls, a.reps).await;
    }
    if run("bulk") {
        bulk::table(&pki, tx_bulk.port, nginx_tls, a.bulk, a.reps).await;
    }
    if run("upstream") {
        upstream::table(
            (tx_https.port, tx_https.pid()),
            (tx_plain.port, tx_plain.pid()),
            nginx.0.pid(),
            a.clients,
            Duration::from_secs(a.duration),
            a.reps,
        )
        .await;
    }
}
