//! Table 3, bulk: a 1 MiB answer over a kept TLS connection, per cipher
//! suite, from txgate and from nginx.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use rustls::ClientConfig;
use rustls::crypto::aws_lc_rs::{cipher_suite, kx_group};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsConnector;
use txgate_benches::stats::median;

use crate::pki::{Pki, client_config};
use crate::wire::{read_answer, request, tcp};

/// A new connection's handshake (µs), then `count` 1 MiB answers over it
/// (MB/s).
async fn bulk(config: &Arc<ClientConfig>, port: u16, path: &str, count: usize) -> (f64, f64) {
    let stream = tcp(IpAddr::from([127, 0, 0, 4]), port).await;
    let name = ServerName::try_from("localhost").unwrap();
    let started = Instant::now();
    let mut tls = TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .unwrap();
    let handshake_us = started.elapsed().as_secs_f64() * 1e6;
    let request = request(path, true);
    let mut buf = Vec::with_capacity(2 << 20);
    let (mut bytes, started) = (0usize, Instant::now());
    for _ in 0..count {
        tls.write_all(&request).await.unwrap();
        bytes += read_answer(&mut tls, &mut buf).await;
    }
    (
        handshake_us,
        bytes as f64 / started.elapsed().as_secs_f64() / 1e6,
    )
}

/// Runs and prints the bulk table: `reps` repetitions of `count` answers
/// from txgate (its port `txgate`, upstream the 1 MiB answer) and from
/// nginx's TLS proxy (`nginx`, on `/big`), per cipher suite.
pub(crate) async fn table(pki: &Pki, txgate: u16, nginx: u16, count: usize, reps: usize) {
    let suites = [
        (
            "TLS13_AES_128_GCM_SHA256",
            cipher_suite::TLS13_AES_128_GCM_SHA256,
        ),
        (
            "TLS13_AES_256_GCM_SHA384",
            cipher_suite::TLS13_AES_256_GCM_SHA384,
        ),
        (
            "TLS13_CHACHA20_POLY1305_SHA256",
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ),
    ];
    println!(
        "\nbulk: a 1 MiB answer x {} over one kept TLS 1.3 connection, X25519, {} reps",
        count, reps
    );
    println!(
        "\n| cipher suite | txgate handshake | txgate MB/s | nginx handshake | nginx MB/s |\n|---|---|---|---|---|"
    );
    for (name, suite) in suites {
        let config = client_config(pki, &[kx_group::X25519], &[suite], false);
        let mut t = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let (h, mbs) = bulk(&config, txgate, "/", count).await;
            t.0.push(h);
            t.1.push(mbs);
            let (h, mbs) = bulk(&config, nginx, "/big", count).await;
            t.2.push(h);
            t.3.push(mbs);
        }
        println!(
            "| {name} | {:.0} µs | {:.0} | {:.0} µs | {:.0} |",
            median(&t.0),
            median(&t.1),
            median(&t.2),
            median(&t.3)
        );
    }
}
