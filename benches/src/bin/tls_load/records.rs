//! Table 2, small records: one call at a time over one kept TLS 1.3
//! connection and over one kept cleartext connection, both to txgate,
//! alternating call by call.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsConnector;
use txgate_benches::stats::{Sample, median};

use crate::pki::{Pki, client_config};
use crate::wire::{read_answer, request, tcp};

/// `calls` sequential calls over one kept TLS connection to `tls_port`
/// and as many over one kept cleartext connection to `plain_port`,
/// alternating call by call so both see the same machine: p50 and p99 of
/// each, µs, as (TLS, cleartext).
async fn records(
    config: &Arc<ClientConfig>,
    tls_port: u16,
    plain_port: u16,
    calls: usize,
) -> ((f64, f64), (f64, f64)) {
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(config.clone())
        .connect(name, tcp(IpAddr::from([127, 0, 0, 3]), tls_port).await)
        .await
        .unwrap();
    let mut plain = tcp(IpAddr::from([127, 0, 0, 3]), plain_port).await;
    let (mut over_tls, mut over_plain) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let mut buf = Vec::with_capacity(4096);
    let request = request("/", true);
    for i in 0..calls + 500 {
        let started = Instant::now();
        tls.write_all(&request).await.unwrap();
        read_answer(&mut tls, &mut buf).await;
        let t = started.elapsed().as_secs_f64() * 1e6;
        let started = Instant::now();
        plain.write_all(&request).await.unwrap();
        read_answer(&mut plain, &mut buf).await;
        let p = started.elapsed().as_secs_f64() * 1e6;
        if i >= 500 {
            over_tls.push(t);
            over_plain.push(p);
        }
    }
    let (over_tls, over_plain) = (Sample::new(over_tls), Sample::new(over_plain));
    (
        (over_tls.median(), over_tls.quantile(0.99)),
        (over_plain.median(), over_plain.quantile(0.99)),
    )
}

/// Runs and prints the small-records table: `reps` repetitions of `calls`
/// calls to txgate's TLS port and to its cleartext one.
pub(crate) async fn table(pki: &Pki, tls_port: u16, plain_port: u16, calls: usize, reps: usize) {
    let config = client_config(pki, &[], &[], true);
    let mut rows = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let ((tls50, tls99), (plain50, plain99)) =
            records(&config, tls_port, plain_port, calls).await;
        println!(
            "  records: TLS p50 {tls50:.1} p99 {tls99:.1} us; cleartext p50 {plain50:.1} p99 {plain99:.1} us"
        );
        rows.0.push(tls50);
        rows.1.push(tls99);
        rows.2.push(plain50);
        rows.3.push(plain99);
    }
    let diffs: Vec<f64> = rows.0.iter().zip(&rows.2).map(|(t, p)| t - p).collect();
    println!(
        "\n| eth_chainId over one kept connection | p50 | p99 |\n|---|---|---|\n\
         | txgate TLS 1.3 | {:.1} µs | {:.1} µs |\n| txgate cleartext | {:.1} µs | {:.1} µs |\n\
         TLS adds (median of per-rep p50 differences): {:.1} µs (target <= 5 µs)",
        median(&rows.0),
        median(&rows.1),
        median(&rows.2),
        median(&rows.3),
        median(&diffs)
    );
}
