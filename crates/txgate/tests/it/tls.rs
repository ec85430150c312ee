//! TLS on both sides, against real parts: a CA made by the test, anvil
//! behind txgate, curl (OpenSSL) and rustls clients that offer chosen
//! groups and versions, cast over https://, a WebSocket over TLS, the
//! certificate swapped under open connections, and nginx with TLS in front
//! of anvil as an https:// upstream.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rustls::crypto::aws_lc_rs::kx_group;
use rustls::{HandshakeKind, NamedGroup, ProtocolVersion};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Anvil, TempFile, Txgate, eventually, foundry_tool, metric, rpc_json};
use crate::tls_pki::{
    CHAIN_ID, Ca, Kept, Nginx, TempDir, client_config, replace_file, tls_connect,
};

const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// txgate with TLS on its client port, from a config file with `extra`
/// `[server.tls]` keys.
fn txgate_tls(upstream: &str, cert: &str, key: &str, extra: &str) -> (Txgate, TempFile) {
    let config = TempFile::new(&format!(
        "[server.tls]\ncert_chain_path = \"{cert}\"\nkey_path = \"{key}\"\n{extra}\n"
    ));
    let txgate = Txgate::start(upstream, &["--config", config.arg()]);
    (txgate, config)
}

fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl (scripts/install-test-tools.sh installs it)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_wss_on_the_client_port_for_every_client() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls");
    let (cert, key) = ca
        .leaf(&["localhost", "127.0.0.1"], 30)
        .write(&dir, "server");
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    let (txgate, _config) = txgate_tls(&anvil.url, &cert, &key, "");
    let addr = txgate.rpc_addr;
    let https = format!("https://localhost:{}", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());

    // curl (OpenSSL): TLS 1.3 and 1.2, HTTP/1.1 and HTTP/2 by ALPN.
    for (version, http) in [
        (["--tlsv1.3", "--tls-max", "1.3"], "--http1.1"),
        (["--tlsv1.3", "--tls-max", "1.3"], "--http2"),
        (["--tlsv1.2", "--tls-max", "1.2"], "--http1.1"),
        (["--tlsv1.2", "--tls-max", "1.2"], "--http2"),
    ] {
        let (ok, out) = curl(&[
            "--cacert",
            &dir.file("ca.pem"),
            "--resolve",
            &resolve,
            version[0],
            version[1],
            version[2],
            http,
            "-H",
            "content-type: application/json",
            "-d",
            CHAIN_ID,
            "-w",
            "\n%{http_version}",
            &https,
        ]);
        assert!(ok, "curl {version:?} {http}: {out}");
        let (body, http_version) = out.rsplit_once('\n').unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(body).unwrap()["result"],
            "0x7a69",
            "{out}"
        );
        let want = if http == "--http2" { "2" } else { "1.1" };
        assert_eq!(http_version, want, "curl {version:?} {http}");
    }

    // A rustls client gets the group it offers: the hybrid alone, X25519
    // alone; offering both, its own first choice (no HelloRetryRequest).
    for (groups, want) in [
        (vec![kx_group::X25519MLKEM768], NamedGroup::X25519MLKEM768),
        (vec![kx_group::X25519], NamedGroup::X25519),
        (
            vec![kx_group::X25519MLKEM768, kx_group::X25519],
            NamedGroup::X25519MLKEM768,
        ),
        (
            vec![kx_group::X25519, kx_group::X25519MLKEM768],
            NamedGroup::X25519,
        ),
        (vec![kx_group::SECP256R1], NamedGroup::secp256r1),
    ] {
        let config = client_config(&ca, &groups, TLS13, &[b"http/1.1"]);
        let mut kept = Kept::open(addr, config).await;
        assert_eq!(kept.group, Some(want));
        assert_eq!(kept.kind, Some(HandshakeKind::Full), "no HelloRetryRequest");
        assert_eq!(kept.version, Some(ProtocolVersion::TLSv1_3));
        let (status, body) = kept.call(CHAIN_ID).await;
        assert_eq!((status.as_u16(), &body["result"]), (200, &json!("0x7a69")));
    }

    // TLS 1.2, HTTP/2 by ALPN, and a resumed session on the next
    // connection of the same client.
    let config = client_config(&ca, &[], TLS12, &[b"h2", b"http/1.1"]);
    let mut kept = Kept::open(addr, config.clone()).await;
    assert_eq!(kept.version, Some(ProtocolVersion::TLSv1_2));
    assert_eq!(kept.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(kept.call(CHAIN_ID).await.1["result"], "0x7a69");
    let config = client_config(&ca, &[], TLS13, &[b"http/1.1"]);
    let mut first = Kept::open(addr, config.clone()).await;
    assert_eq!(first.call(CHAIN_ID).await.1["result"], "0x7a69");
    let mut second = Kept::open(addr, config).await;
    assert_eq!(second.kind, Some(HandshakeKind::Resumed));
    assert_eq!(second.call(CHAIN_ID).await.1["result"], "0x7a69");

    // JSON-RPC over a WebSocket over TLS.
    let tls = tls_connect(
        addr,
        "localhost",
        client_config(&ca, &[], TLS13, &[b"http/1.1"]),
    )
    .await
    .unwrap();
    let (mut socket, _) =
        tokio_tungstenite::client_async(format!("wss://localhost:{}/", addr.port()), tls)
            .await
            .expect("wss upgrade");
    socket.send(Message::text(CHAIN_ID)).await.unwrap();
    let answer = loop {
        match socket.next().await.expect("open").expect("message") {
            Message::Text(text) => break serde_json::from_str::<Value>(&text).unwrap(),
            _ => continue,
        }
    };
    assert_eq!(answer["result"], "0x7a69");

    // cast over https://, trusting the test CA.
    let out = Command::new(foundry_tool("cast"))
        .args(["chain-id", "--rpc-url", &https])
        .env("SSL_CERT_FILE", dir.file("ca.pem"))
        .output()
        .expect("cast");
    assert!(
        out.status.success(),
        "cast over https: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "31337");

    // Plain HTTP on the TLS port: closed, counted, no answer leaks.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut buf)).await;
    assert!(
        !String::from_utf8_lossy(&buf).contains("HTTP/1.1"),
        "{buf:?}"
    );

    let counted = [
        (
            r#"txgate_tls_handshakes_total{group="X25519MLKEM768",outcome="full",version="1.3"}"#,
            3.0,
        ),
        (
            r#"txgate_tls_handshakes_total{group="X25519",outcome="full",version="1.3"}"#,
            1.0,
        ),
        (
            r#"txgate_tls_handshakes_total{group="X25519MLKEM768",outcome="resumed",version="1.3"}"#,
            1.0,
        ),
        (
            r#"txgate_tls_handshakes_total{group="none",outcome="not_tls",version="none"}"#,
            1.0,
        ),
    ];
    // A failed handshake is counted after its alert is written, so the
    // client can see the close first: wait for the counts.
    eventually(Duration::from_secs(5), || async {
        let metrics = txgate.metrics().await;
        counted
            .iter()
            .all(|(series, at_least)| metric(&metrics, series) >= *at_least)
    })
    .await;
    let metrics = txgate.metrics().await;
    for (series, at_least) in counted {
        assert!(metric(&metrics, series) >= at_least, "{series}\n{metrics}");
    }
    assert!(metric(&metrics, "txgate_tls_certificate_expiry_timestamp_seconds") > 1.7e9);
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_and_groups_are_the_operators_choice() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-choice");
    let (cert, key) = ca.leaf(&["localhost"], 30).write(&dir, "server");
    let (txgate, _config) = txgate_tls(
        &anvil.url,
        &cert,
        &key,
        "min_version = \"1.3\"\ngroups = [\"X25519\"]\nsession_tickets = false",
    );
    let addr = txgate.rpc_addr;
    // TLS 1.2 only: refused. The hybrid only: no group in common.
    let tls12 = client_config(&ca, &[], TLS12, &[]);
    assert!(tls_connect(addr, "localhost", tls12).await.is_err());
    let pq = client_config(&ca, &[kx_group::X25519MLKEM768], TLS13, &[]);
    assert!(tls_connect(addr, "localhost", pq).await.is_err());
    // Both offered: X25519, the only one configured. No tickets: the next
    // connection is a full handshake.
    let both = client_config(
        &ca,
        &[kx_group::X25519MLKEM768, kx_group::X25519],
        TLS13,
        &[],
    );
    let mut kept = Kept::open(addr, both.clone()).await;
    assert_eq!(kept.group, Some(NamedGroup::X25519));
    assert_eq!(kept.call(CHAIN_ID).await.1["result"], "0x7a69");
    let again = Kept::open(addr, both).await;
    assert_ne!(again.kind, Some(HandshakeKind::Resumed));
    let refusals = [
        r#"txgate_tls_handshakes_total{group="none",outcome="no_shared_version",version="none"}"#,
        r#"txgate_tls_handshakes_total{group="none",outcome="no_shared_group",version="none"}"#,
    ];
    // Counted after the alert the client saw is written: wait for them.
    eventually(Duration::from_secs(5), || async {
        let metrics = txgate.metrics().await;
        refusals
            .iter()
            .all(|series| metric(&metrics, series) >= 1.0)
    })
    .await;
    let metrics = txgate.metrics().await;
    for series in refusals {
        assert_eq!(metric(&metrics, series), 1.0, "{series}\n{metrics}");
    }
    // Failures are counted, not logged one per attempt.
    let warned = txgate
        .drain_logs()
        .iter()
        .filter(|l| l.contains("handshake") && !l.contains("\"DEBUG\""))
        .count();
    assert_eq!(warned, 0);
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_swapped_under_open_connections_and_a_bad_one_is_refused() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-reload");
    let first = ca.leaf(&["localhost"], 30);
    let (cert, key) = first.write(&dir, "server");
    let (txgate, _config) = txgate_tls(&anvil.url, &cert, &key, "reload_interval_ms = 100");
    let addr = txgate.rpc_addr;
    let config = client_config(&ca, &[], TLS13, &[b"http/1.1"]);
    let mut open = Kept::open(addr, config.clone()).await;
    assert_eq!(open.peer_cert, first.der);

    // A new certificate, swapped in by rename: new handshakes get it, the
    // open connection goes on.
    let second = ca.leaf(&["localhost"], 60);
    replace_file(&key, &second.key_pem);
    replace_file(&cert, &second.cert_pem);
    let fresh = || client_config(&ca, &[], TLS13, &[b"http/1.1"]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            Kept::open(addr, fresh()).await.peer_cert == second.der
        })
        .await,
        "the new certificate was not served"
    );
    assert_eq!(open.call(CHAIN_ID).await.1["result"], "0x7a69");

    // A certificate that does not go with the key, then one that is not
    // PEM: refused (SIGHUP forces the read), the second one stays.
    // Each step waits until its refusal is counted and logged.
    let mut logs = txgate.drain_logs().join("\n");
    let third = ca.leaf(&["localhost"], 90);
    for (contents, logged) in [
        (third.cert_pem.as_str(), "does not go with the certificate"),
        ("not a certificate", "no certificate in the file"),
    ] {
        replace_file(&cert, contents);
        txgate.proc.signal(libc::SIGHUP);
        let seen = eventually(Duration::from_secs(10), || {
            logs.push_str(&txgate.drain_logs().join("\n"));
            let found = logs.contains(logged);
            async move { found }
        })
        .await;
        assert!(seen, "{logged}: {logs}");
    }
    let mut after = Kept::open(addr, fresh()).await;
    assert_eq!(after.peer_cert, second.der);
    assert_eq!(after.call(CHAIN_ID).await.1["result"], "0x7a69");
    assert_eq!(open.call(CHAIN_ID).await.1["result"], "0x7a69");
    assert!(logs.contains("TLS certificate reloaded"), "{logs}");
    let metrics = txgate.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"txgate_tls_certificate_reloads_total{result="refused"}"#
        ) >= 2.0,
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            r#"txgate_tls_certificate_reloads_total{result="loaded"}"#
        ) >= 1.0
    );
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_handshakes_once_per_pooled_connection() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-upstream");
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    let nginx = Nginx::start(&anvil.url, &ca.leaf(&["localhost"], 30)).await;
    // Two workers, each with its own pool, whatever the machine's cores;
    // every call on the pool (not on a lane over nginx's WebSocket).
    let config = TempFile::new("[server]\nworkers = 2\n[websocket]\nhttp_lanes = false\n");
    let txgate = Txgate::start(
        &format!("https://localhost:{}", nginx.port),
        &[
            "--upstream-ca",
            &dir.file("ca.pem"),
            "--config",
            config.arg(),
        ],
    );
    const CALLERS: usize = 4;
    const CALLS: usize = 50;
    let url = Arc::new(txgate.url.clone());
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..CALLS {
                let (status, body) = rpc_json(&url, CHAIN_ID).await;
                assert_eq!((status.as_u16(), &body["result"]), (200, &json!("0x7a69")));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // nginx writes its log line as each request ends, after txgate counted
    // the connection's handshake: wait for the counts to settle as
    // asserted (the assertions below say what did not).
    let counts = std::cell::Cell::new((0, 0, 0));
    eventually(Duration::from_secs(10), || async {
        let metrics = txgate.metrics().await;
        let handshakes = metric(
            &metrics,
            r#"txgate_upstream_tls_handshakes_total{outcome="ok"}"#,
        ) as usize;
        let (requests, connections) = nginx.served();
        counts.set((handshakes, requests, connections));
        requests >= CALLERS * CALLS && handshakes == connections
    })
    .await;
    let (handshakes, requests, connections) = counts.get();
    assert!(requests >= CALLERS * CALLS, "nginx served {requests}");
    assert_eq!(
        handshakes, connections,
        "one handshake per connection nginx saw ({requests} requests)"
    );
    // Each worker's pool holds at most one connection per caller in
    // flight, and the health probe keeps its own.
    assert!(
        handshakes <= 2 * CALLERS + 1,
        "{handshakes} handshakes for {requests} requests"
    );
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_upstream_certificate_answers_502_and_says_why_in_the_log() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-bad-upstream");
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    let expired = Nginx::start(&anvil.url, &ca.leaf(&["localhost"], -1)).await;
    let other_host = Nginx::start(&anvil.url, &ca.leaf(&["other.example"], 30)).await;
    for (nginx, ca_arg, outcome, logged) in [
        (&expired, Some(dir.file("ca.pem")), "expired", "expired"),
        (
            &other_host,
            Some(dir.file("ca.pem")),
            "name_mismatch",
            "not valid for name",
        ),
        // The system's roots do not know the test CA.
        (&other_host, None, "unknown_issuer", "UnknownIssuer"),
    ] {
        let upstream = format!("https://localhost:{}", nginx.port);
        let mut args = Vec::new();
        if let Some(ca) = &ca_arg {
            args = vec!["--upstream-ca", ca.as_str()];
        }
        let txgate = Txgate::start(&upstream, &args);
        let (status, body) = rpc_json(&txgate.url, CHAIN_ID).await;
        assert_eq!(status.as_u16(), 502, "{outcome}: {body}");
        assert_eq!(body["error"]["code"], -32603, "{body}");
        assert_eq!(
            body["error"]["message"],
            "upstream unavailable: the TLS handshake with the node failed",
            "{body}"
        );
        let metrics = txgate.metrics().await;
        let series = format!(r#"txgate_upstream_tls_handshakes_total{{outcome="{outcome}"}}"#);
        assert!(metric(&metrics, &series) >= 1.0, "{series}\n{metrics}");
        assert!(metric(&metrics, r#"txgate_upstream_errors_total{kind="tls"}"#) >= 1.0);
        let mut logs = String::new();
        let seen = eventually(Duration::from_secs(5), || {
            logs.push_str(&txgate.drain_logs().join("\n"));
            let found = logs.contains("upstream TLS handshake failed") && logs.contains(logged);
            async move { found }
        })
        .await;
        assert!(seen, "{outcome}: {logs}");
    }
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_tls_clients_lose_their_slot() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-silent");
    let (cert, key) = ca.leaf(&["localhost"], 30).write(&dir, "server");
    let config = TempFile::new(&format!(
        "[server]\nheader_read_timeout_ms = 1500\n\
         [server.tls]\ncert_chain_path = \"{cert}\"\nkey_path = \"{key}\"\n\
         handshake_timeout_ms = 1000\n"
    ));
    let txgate = Txgate::start(&anvil.url, &["--config", config.arg()]);
    let addr = txgate.rpc_addr;
    // The start of a ClientHello, then nothing: the handshake times out.
    let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
    partial.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), partial.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a half ClientHello kept its connection");
    // A finished handshake, then no request: closed as a silent
    // cleartext connection is.
    let config = client_config(&ca, &[], TLS13, &[b"http/1.1"]);
    let mut silent = tls_connect(addr, "localhost", config.clone())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a silent TLS client kept its connection");
    // Half the HTTP/2 preface inside TLS, then nothing: the same.
    let mut half = tls_connect(addr, "localhost", config.clone())
        .await
        .unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), half.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "half an h2 preface kept its connection");
    // An honest client is served meanwhile.
    let mut kept = Kept::open(addr, config).await;
    assert_eq!(kept.call(CHAIN_ID).await.1["result"], "0x7a69");
    let metrics = txgate.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"txgate_tls_handshakes_total{group="none",outcome="timeout",version="none"}"#
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        metric(&metrics, "txgate_connections_silent_closed_total") >= 2.0,
        "{metrics}"
    );
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_tls_connection_the_node_closed_is_replaced_unseen() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-stale");
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    // nginx closes a kept connection after 1 s idle (close_notify, FIN).
    let nginx = Nginx::start_with(&anvil.url, &ca.leaf(&["localhost"], 30), "1s", None).await;
    let txgate = Txgate::start(
        &format!("https://localhost:{}", nginx.port),
        &["--upstream-ca", &dir.file("ca.pem")],
    );
    for _ in 0..3 {
        let (status, body) = rpc_json(&txgate.url, CHAIN_ID).await;
        assert_eq!(
            (status.as_u16(), &body["result"]),
            (200, &json!("0x7a69")),
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let metrics = txgate.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"txgate_upstream_tls_handshakes_total{outcome="ok"}"#
        ) >= 3.0,
        "{metrics}"
    );
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_reaches_a_wss_node_derived_from_an_https_upstream() {
    let anvil = Anvil::start().await;
    let ca = Ca::new();
    let dir = TempDir::new("tls-wss");
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    let nginx = Nginx::start(&anvil.url, &ca.leaf(&["localhost"], 30)).await;
    // upstream.url https://: the WebSocket node is wss:// on the same
    // authority, trusted by the same CA.
    let txgate = Txgate::start(
        &format!("https://localhost:{}", nginx.port),
        &["--upstream-ca", &dir.file("ca.pem")],
    );
    let ws = txgate.url.replacen("http://", "ws://", 1);
    let (mut socket, _) = tokio_tungstenite::connect_async(ws)
        .await
        .expect("upgrade through txgate to the wss node");
    socket
        .send(Message::text(
            json!({"jsonrpc": "2.0", "id": 7, "method": "eth_subscribe", "params": ["newHeads"]})
                .to_string(),
        ))
        .await
        .unwrap();
    socket.send(Message::text(CHAIN_ID)).await.unwrap();
    let (mut subscription, mut chain_id) = (None, None);
    while subscription.is_none() || chain_id.is_none() {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer within 10 s")
            .expect("open")
            .expect("message");
        let Message::Text(text) = message else {
            continue;
        };
        let answer: Value = serde_json::from_str(&text).unwrap();
        match answer["id"].as_u64() {
            Some(7) => subscription = answer["result"].as_str().map(String::from),
            Some(1) => chain_id = answer["result"].as_str().map(String::from),
            _ => {}
        }
    }
    assert_eq!(chain_id.as_deref(), Some("0x7a69"));
    // A block mined on the node arrives as a notification over wss.
    let (_, body) = rpc_json(
        &anvil.url,
        r#"{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}"#,
    )
    .await;
    assert!(body.get("error").is_none(), "{body}");
    let head = loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a head within 10 s")
            .expect("open")
            .expect("message");
        let Message::Text(text) = message else {
            continue;
        };
        let note: Value = serde_json::from_str(&text).unwrap();
        if note["method"] == "eth_subscription" {
            break note;
        }
    };
    assert_eq!(
        head["params"]["subscription"].as_str(),
        subscription.as_deref()
    );
    let metrics = txgate.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"txgate_upstream_tls_handshakes_total{outcome="ok"}"#
        ) >= 1.0,
        "{metrics}"
    );
    drop(anvil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_asks_for_a_client_certificate_gets_txgates() {
    let anvil = Anvil::start().await;
    let (server_ca, client_ca) = (Ca::new(), Ca::new());
    let dir = TempDir::new("tls-mtls");
    std::fs::write(dir.file("ca.pem"), &server_ca.pem).unwrap();
    let nginx = Nginx::start_with(
        &anvil.url,
        &server_ca.leaf(&["localhost"], 30),
        "60s",
        Some(&client_ca.pem),
    )
    .await;
    let upstream = format!("https://localhost:{}", nginx.port);
    // Without a client certificate: nginx completes the handshake and
    // answers 400 itself, so the caller gets the node's refusal as 502.
    let bare = Txgate::start(&upstream, &["--upstream-ca", &dir.file("ca.pem")]);
    let (status, body) = rpc_json(&bare.url, CHAIN_ID).await;
    assert_eq!(status.as_u16(), 502, "{body}");
    assert_eq!(body["error"]["message"], "upstream unavailable", "{body}");
    let metrics = bare.metrics().await;
    assert!(
        metric(&metrics, r#"txgate_upstream_errors_total{kind="status"}"#) >= 1.0,
        "{metrics}"
    );
    // With one from the CA the node trusts: served.
    let (cert, key) = client_ca
        .leaf(&["txgate.internal"], 30)
        .write(&dir, "client");
    let config = TempFile::new(&format!(
        "[upstream.tls]\nca_path = \"{}\"\nclient_cert_path = \"{cert}\"\n\
         client_key_path = \"{key}\"\n",
        dir.file("ca.pem")
    ));
    let mtls = Txgate::start(&upstream, &["--config", config.arg()]);
    let (status, body) = rpc_json(&mtls.url, CHAIN_ID).await;
    assert_eq!(
        (status.as_u16(), &body["result"]),
        (200, &json!("0x7a69")),
        "{body}"
    );
    drop(anvil);
}

/// A TLS 1.3 node that refuses txgate's missing client certificate does
/// so with an alert after the client's half of the handshake: the caller
/// gets the TLS answer and the failure is counted and logged as TLS, not
/// as a broken connection. (nginx answers such a client with an HTTP
/// 400 instead; a rustls or Go node sends the alert, as here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_refused_after_a_tls13_handshake_is_a_tls_failure() {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;

    let (server_ca, client_ca) = (Ca::new(), Ca::new());
    let dir = TempDir::new("tls-mtls-alert");
    std::fs::write(dir.file("ca.pem"), &server_ca.pem).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(client_ca.roots()),
        provider.clone(),
    )
    .build()
    .unwrap();
    let leaf = server_ca.leaf(&["localhost"], 30);
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let node = tokio::spawn({
        let refused = refused.clone();
        async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, refused) = (acceptor.clone(), refused.clone());
                tokio::spawn(async move {
                    if acceptor.accept(tcp).await.is_err() {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        }
    });

    let upstream = format!("https://localhost:{port}");
    let txgate = Txgate::start(&upstream, &["--upstream-ca", &dir.file("ca.pem")]);
    let (status, body) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status.as_u16(), 502, "{body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(
        body["error"]["message"], "upstream unavailable: the TLS handshake with the node failed",
        "{body}"
    );
    // The same over WebSocket: the node's socket is `wss://` on the same
    // port, and the upgrade's first read meets the alert.
    let ws_url = txgate.url.replacen("http://", "ws://", 1);
    match tokio_tungstenite::connect_async(ws_url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 502);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default());
            assert!(
                body.contains("the TLS handshake with the node failed"),
                "{body}"
            );
        }
        other => panic!("expected a 502, got {other:?}"),
    }
    // The node counts a refused handshake once its side of it ends.
    let both = eventually(Duration::from_secs(5), || async {
        refused.load(std::sync::atomic::Ordering::Relaxed) >= 2
    })
    .await;
    assert!(
        both,
        "{} refused handshakes",
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
    let metrics = txgate.metrics().await;
    assert!(
        metric(&metrics, r#"txgate_upstream_errors_total{kind="tls"}"#) >= 2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, r#"txgate_upstream_errors_total{kind="connect"}"#),
        0.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, r#"txgate_upstream_errors_total{kind="io"}"#),
        0.0,
        "{metrics}"
    );
    let mut logs = String::new();
    let seen = eventually(Duration::from_secs(5), || {
        logs.push_str(&txgate.drain_logs().join("\n"));
        let found = logs.contains("upstream refused txgate right after the TLS handshake")
            && logs.to_ascii_lowercase().contains("certificaterequired");
        async move { found }
    })
    .await;
    assert!(seen, "{logs}");
    node.abort();
}
