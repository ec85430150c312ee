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

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::crypto::aws_lc_rs::{cipher_suite, kx_group};
use rustls::crypto::{SupportedKxGroup, aws_lc_rs};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore, SupportedCipherSuite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use txgate_benches::procs::{
    Nginx, Proc, client, free_port, post, root, spawn, tree_cpu_ms, wait_up,
};
use txgate_benches::stats::{median, percentile};

struct Args {
    warmup: usize,
    connections: usize,
    reps: usize,
    calls: usize,
    bulk: usize,
    clients: usize,
    duration: u64,
    only: Option<String>,
    /// `--handshakes-of`: the handshake targets to run (a profile of one
    /// of them), by name: `x25519`, `hybrid`, `nginx`.
    handshakes_of: Option<Vec<String>>,
}

fn args() -> Args {
    let mut a = Args {
        warmup: 1000,
        connections: 10_000,
        reps: 5,
        calls: 20_000,
        bulk: 200,
        clients: 32,
        duration: 5,
        only: None,
        handshakes_of: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("flag value");
        match flag.as_str() {
            "--warmup" => a.warmup = value().parse().expect("warmup"),
            "--connections" => a.connections = value().parse().expect("connections"),
            "--reps" => a.reps = value().parse().expect("reps"),
            "--calls" => a.calls = value().parse().expect("calls"),
            "--bulk" => a.bulk = value().parse().expect("bulk"),
            "--clients" => a.clients = value().parse().expect("clients"),
            "--duration" => a.duration = value().parse().expect("duration"),
            "--only" => a.only = Some(value()),
            "--handshakes-of" => {
                a.handshakes_of = Some(value().split(',').map(str::to_owned).collect());
            }
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// The CA and the server certificate (ECDSA P-256) both servers use.
struct Pki {
    roots: RootCertStore,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_path, leaf.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    Pki {
        roots,
        cert: cert_path,
        key: key_path,
    }
}

/// A client config: `groups` and `suites` (empty: rustls' defaults), no
/// session resumption when `resume` is off.
fn client_config(
    pki: &Pki,
    groups: &[&'static dyn SupportedKxGroup],
    suites: &[SupportedCipherSuite],
    resume: bool,
) -> Arc<ClientConfig> {
    let mut provider = aws_lc_rs::default_provider();
    if !groups.is_empty() {
        provider.kx_groups = groups.to_vec();
    }
    if !suites.is_empty() {
        provider.cipher_suites = suites.to_vec();
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(pki.roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(config)
}

/// A TCP connection from `source` (a loopback address of its own).
async fn tcp(source: IpAddr, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let stream = socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

fn request(path: &str, keep: bool) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: {}\r\n\r\n{CHAIN_ID}",
        CHAIN_ID.len(),
        if keep { "keep-alive" } else { "close" }
    )
    .into_bytes()
}

/// Reads one HTTP/1.1 answer with a content-length (the servers here
/// always send one); returns its body length.
async fn read_answer<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "answer: {head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("content-length");
            while buf.len() < end + 4 + len {
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed mid-answer");
                buf.extend_from_slice(&chunk[..n]);
            }
            return len;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

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
    times.sort_by(f64::total_cmp);
    Handshakes {
        p50_us: percentile(&times, 0.5),
        p99_us: percentile(&times, 0.99),
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
    over_tls.sort_by(f64::total_cmp);
    over_plain.sort_by(f64::total_cmp);
    (
        (percentile(&over_tls, 0.5), percentile(&over_tls, 0.99)),
        (percentile(&over_plain, 0.5), percentile(&over_plain, 0.99)),
    )
}

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

/// `clients` kept cleartext connections calling `port` for `duration`:
/// calls/s, and the CPU of txgate and of nginx per call, µs.
async fn throughput(
    port: u16,
    clients: usize,
    duration: Duration,
    (txgate, nginx): (u32, u32),
) -> Rate {
    let url = format!("http://127.0.0.1:{port}");
    let http = client(clients);
    let deadline = Instant::now() + duration;
    let cpu_before = (tree_cpu_ms(txgate), tree_cpu_ms(nginx));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let (status, _) = post(&http, &url, CHAIN_ID.to_string()).await.unwrap();
                assert_eq!(status, 200);
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let per_call = |now: f64, before: f64| (now - before) * 1000.0 / total as f64;
    Rate {
        per_sec: total as f64 / duration.as_secs_f64(),
        txgate_us: per_call(tree_cpu_ms(txgate), cpu_before.0),
        nginx_us: per_call(tree_cpu_ms(nginx), cpu_before.1),
    }
}

/// Calls/s and CPU per call.
#[derive(Clone, Copy)]
struct Rate {
    per_sec: f64,
    txgate_us: f64,
    nginx_us: f64,
}

/// nginx: a static responder (cleartext `static_port`: `eth_chainId`'s
/// answer on `/`, 1 MiB on `/big`), the same with TLS on
/// `static_tls_port` (the https:// upstream), and a TLS proxy on
/// `proxy_port` in front of the cleartext one (the baseline).
fn nginx(dir: &Path, pki: &Pki, ports: (u16, u16, u16)) -> Nginx {
    let (static_port, static_tls_port, proxy_port) = ports;
    let d = dir.display();
    let big = big_answer();
    std::fs::write(dir.join("big.json"), &big).unwrap();
    let (cert, key) = (pki.cert.display(), pki.key.display());
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":"0x7a69"}"#;
    let responder = format!(
        "default_type application/json;\n\
         location = /big {{ error_page 405 =200 /big.json; return 405; }}\n\
         location = /big.json {{ root {d}; }}\n\
         location / {{ return 200 '{answer}'; }}\n"
    );
    let conf = format!(
        "worker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         worker_rlimit_nofile 16384;\nevents {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         keepalive_requests 1000000;\n\
         ssl_certificate {cert};\n  ssl_certificate_key {key};\n\
         ssl_protocols TLSv1.2 TLSv1.3;\n  ssl_ecdh_curve X25519:prime256v1;\n\
         ssl_session_tickets off;\n  ssl_session_cache off;\n\
         upstream responder {{ server 127.0.0.1:{static_port}; keepalive 64; }}\n\
         server {{ listen 127.0.0.1:{static_port}; {responder} }}\n\
         server {{ listen 127.0.0.1:{static_tls_port} ssl; {responder} }}\n\
         server {{ listen 127.0.0.1:{proxy_port} ssl; location / {{ proxy_pass http://responder;\n\
           proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n}}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    Nginx(spawn(
        &PathBuf::from("/usr/sbin/nginx"),
        &["-c", path.to_str().unwrap(), "-p", dir.to_str().unwrap()],
    ))
}

/// A JSON-RPC answer of 1 MiB: a result string of hex.
fn big_answer() -> String {
    let prefix = r#"{"jsonrpc":"2.0","id":1,"result":"0x"#;
    let fill = (1 << 20) - prefix.len() - 2;
    format!("{prefix}{}\"}}", "ab".repeat(fill / 2))
}

/// txgate in front of `upstream`, with TLS on its client port when `tls`
/// holds `[server.tls]` keys.
async fn txgate(bin: &Path, dir: &Path, name: &str, upstream: &str, toml: &str) -> (Proc, u16) {
    let (port, admin) = (free_port(), free_port());
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let proc = spawn(
        bin,
        &[
            "-c",
            config.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--upstream",
            upstream,
            "--log-level",
            "warn",
        ],
    );
    // Up once its admin port answers.
    let http = client(1);
    for _ in 0..400 {
        if post(
            &http,
            &format!("http://127.0.0.1:{admin}/healthz"),
            String::new(),
        )
        .await
        .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    (proc, port)
}

#[tokio::main]
async fn main() {
    let a = args();
    let bin = std::env::var_os("TXGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/release/txgate"));
    let dir = std::env::temp_dir().join(format!("txgate-tls-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = pki(&dir);
    let ports = (free_port(), free_port(), free_port());
    let nginx_proc = nginx(&dir, &pki, ports);
    let (static_port, static_tls_port, nginx_tls) = ports;
    let responder = format!("http://127.0.0.1:{static_port}");
    wait_up(&client(1), &responder).await;

    let tls_keys = format!(
        "[server.tls]\ncert_chain_path = \"{}\"\nkey_path = \"{}\"\n",
        pki.cert.display(),
        pki.key.display()
    );
    let (tx_tls_proc, tx_tls) = txgate(&bin, &dir, "tls", &responder, &tls_keys).await;
    let (_tx_bulk, tx_bulk) =
        txgate(&bin, &dir, "bulk", &format!("{responder}/big"), &tls_keys).await;
    let (tx_plain_proc, tx_plain) = txgate(&bin, &dir, "plain", &responder, "").await;
    let upstream_tls = format!(
        "[upstream.tls]\nca_path = \"{}\"\n",
        dir.join("ca.pem").display()
    );
    let (tx_https_proc, tx_https) = txgate(
        &bin,
        &dir,
        "https",
        &format!("https://localhost:{static_tls_port}"),
        &upstream_tls,
    )
    .await;
    let run = |name: &str| a.only.as_deref().is_none_or(|only| only == name);

    if run("handshakes") {
        let x25519 = client_config(&pki, &[kx_group::X25519], &[], false);
        let hybrid = client_config(&pki, &[kx_group::X25519MLKEM768], &[], false);
        let all = [
            (
                "x25519",
                ("txgate X25519", &x25519, tx_tls, tx_tls_proc.pid()),
            ),
            (
                "hybrid",
                ("txgate X25519MLKEM768", &hybrid, tx_tls, tx_tls_proc.pid()),
            ),
            (
                "nginx",
                ("nginx X25519", &x25519, nginx_tls, nginx_proc.0.pid()),
            ),
        ];
        // In the flag's order (which sets each one's source address).
        let keys: Vec<&str> = match &a.handshakes_of {
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
            a.warmup, a.connections, a.reps
        );
        for rep in 0..a.reps {
            for k in 0..targets.len() {
                let i = (k + rep) % targets.len();
                let (name, config, port, pid) = targets[i];
                let source = IpAddr::from([127, 0, 0, 2 + (i as u8)]);
                let h = handshakes(config, source, port, pid, a.warmup, a.connections).await;
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
                &(0..a.reps)
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
            let added: Vec<f64> = (0..a.reps)
                .map(|r| results[hybrid][r].p50_us - results[classic][r].p50_us)
                .collect();
            let floor: Vec<f64> = crypto
                .iter()
                .map(|(x25519, hybrid)| hybrid - x25519)
                .collect();
            let floor_share: Vec<f64> = (0..a.reps)
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

    if run("records") {
        let config = client_config(&pki, &[], &[], true);
        let mut rows = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.reps {
            let ((tls50, tls99), (plain50, plain99)) =
                records(&config, tx_tls, tx_plain, a.calls).await;
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

    if run("bulk") {
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
            a.bulk, a.reps
        );
        println!(
            "\n| cipher suite | txgate handshake | txgate MB/s | nginx handshake | nginx MB/s |\n|---|---|---|---|---|"
        );
        for (name, suite) in suites {
            let config = client_config(&pki, &[kx_group::X25519], &[suite], false);
            let mut t = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..a.reps {
                let (h, mbs) = bulk(&config, tx_bulk, "/", a.bulk).await;
                t.0.push(h);
                t.1.push(mbs);
                let (h, mbs) = bulk(&config, nginx_tls, "/big", a.bulk).await;
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

    if run("upstream") {
        let duration = Duration::from_secs(a.duration);
        let (mut https, mut http) = (Vec::new(), Vec::new());
        let nginx_pid = nginx_proc.0.pid();
        for rep in 0..a.reps {
            // Alternate which goes first.
            let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                if which == 0 {
                    let pids = (tx_https_proc.pid(), nginx_pid);
                    https.push(throughput(tx_https, a.clients, duration, pids).await);
                } else {
                    let pids = (tx_plain_proc.pid(), nginx_pid);
                    http.push(throughput(tx_plain, a.clients, duration, pids).await);
                }
            }
            let (s, p) = (https[rep], http[rep]);
            println!(
                "  upstream rep {}: https {:.0} calls/s (CPU/call txgate {:.1} us, nginx {:.1} us), \
                 http {:.0} calls/s (txgate {:.1} us, nginx {:.1} us)",
                rep + 1,
                s.per_sec,
                s.txgate_us,
                s.nginx_us,
                p.per_sec,
                p.txgate_us,
                p.nginx_us
            );
        }
        let ratio = |f: fn(&Rate) -> f64| {
            median(
                &https
                    .iter()
                    .zip(&http)
                    .map(|(s, p)| f(s) / f(p))
                    .collect::<Vec<_>>(),
            )
        };
        let col = |v: &[Rate], f: fn(&Rate) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
        println!(
            "\n| upstream | calls/s | txgate CPU per call | nginx CPU per call |\n|---|---|---|---|\n\
             | https:// | {:.0} | {:.1} µs | {:.1} µs |\n| http:// | {:.0} | {:.1} µs | {:.1} µs |\n\
             https/http calls/s (median of per-rep ratios): {:.2}x (target >= 0.9x); \
             txgate CPU per call https/http: {:.2}x",
            col(&https, |r| r.per_sec),
            col(&https, |r| r.txgate_us),
            col(&https, |r| r.nginx_us),
            col(&http, |r| r.per_sec),
            col(&http, |r| r.txgate_us),
            col(&http, |r| r.nginx_us),
            ratio(|r| r.per_sec),
            ratio(|r| r.txgate_us)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
