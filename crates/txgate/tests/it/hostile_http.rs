//! Hostile HTTP, each shape its own test: request smuggling shapes,
//! pipelining, header floods, deeply nested JSON, thousands of idle
//! connections, and on h2c the rapid-reset and CONTINUATION-flood
//! patterns. Each ends in a clear answer or a closed connection, nothing
//! smuggled reaches the node, memory stays bounded, and a well-behaved
//! client is served meanwhile. (Slow headers and slow bodies: bad_input.)

use std::time::{Duration, Instant};

use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{RecordingUpstream, TempFile, Txgate, eventually, metric, rpc_json};

const HONEST: &str = r#"{"jsonrpc":"2.0","id":"honest","method":"eth_chainId","params":[]}"#;

async fn setup(config: &str) -> (RecordingUpstream, Txgate, TempFile) {
    let upstream = RecordingUpstream::start().await;
    let config = TempFile::new(config);
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    (upstream, txgate, config)
}

/// Writes `bytes` on a new connection and reads until the server closes
/// it or `wait` passes; returns what was read and whether it closed.
async fn exchange(txgate: &Txgate, bytes: &[u8], wait: Duration) -> (String, bool) {
    exchange_until(txgate, bytes, wait, |_| false).await
}

/// [`exchange`], that also stops reading once what was read satisfies
/// `done`.
async fn exchange_until(
    txgate: &Txgate,
    bytes: &[u8],
    wait: Duration,
    done: impl Fn(&str) -> bool,
) -> (String, bool) {
    let mut stream = TcpStream::connect(txgate.rpc_addr).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into(), true),
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&out);
                if done(&text) {
                    return (text.into(), false);
                }
            }
            Err(_) => return (String::from_utf8_lossy(&out).into(), false),
        }
    }
}

fn request(headers: &str, body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nHost: txgate\r\nContent-Type: application/json\r\n{headers}\r\n{body}"
    )
}

fn smuggled() -> String {
    let body = r#"{"jsonrpc":"2.0","id":"smuggled","method":"eth_chainId"}"#;
    request(&format!("Content-Length: {}\r\n", body.len()), body)
}

/// What reached the node besides txgate's health probe and the honest
/// client's calls.
fn foreign(upstream: &RecordingUpstream) -> Vec<String> {
    const PROBE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    upstream
        .received()
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .filter(|b| b != PROBE && b != HONEST)
        .collect()
}

fn answers(text: &str) -> usize {
    text.matches("HTTP/1.1 ").count()
}

/// Content-Length with Transfer-Encoding: the classic desync. The request
/// is refused and the connection closed, or read by its chunked framing
/// alone and the connection closed after it (RFC 9112 §6.3): either way
/// nothing after the chunked body is served as a request.
#[tokio::test(flavor = "multi_thread")]
async fn content_length_with_transfer_encoding_smuggles_nothing() {
    let (upstream, txgate, _c) = setup("").await;
    let inner = smuggled();
    let chunked_body = format!("0\r\n\r\n{inner}");
    let wire = request(
        &format!(
            "Content-Length: {}\r\nTransfer-Encoding: chunked\r\n",
            chunked_body.len()
        ),
        &chunked_body,
    );
    let (text, closed) = exchange(&txgate, wire.as_bytes(), Duration::from_secs(3)).await;
    assert!(closed, "connection left open: {text}");
    assert!(answers(&text) <= 1, "{text}");
    assert!(!text.contains("smuggled"), "{text}");
    let reached = foreign(&upstream);
    assert!(
        reached.iter().all(|b| !b.contains("smuggled")),
        "the smuggled request reached the node: {reached:?}"
    );
    assert_eq!(rpc_json(&txgate.url, HONEST).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_content_lengths_are_refused_and_closed() {
    let (upstream, txgate, _c) = setup("").await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let wire = request(
        &format!(
            "Content-Length: {}\r\nContent-Length: {}\r\n",
            body.len(),
            body.len() + 10
        ),
        &format!("{body}{}", smuggled()),
    );
    let (text, closed) = exchange(&txgate, wire.as_bytes(), Duration::from_secs(3)).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(closed);
    assert_eq!(answers(&text), 1, "{text}");
    assert_eq!(foreign(&upstream), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn obsolete_line_folding_is_refused_and_closed() {
    let (upstream, txgate, _c) = setup("").await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let wire = request(
        &format!(
            "X-Folded: first\r\n second\r\nContent-Length: {}\r\n",
            body.len()
        ),
        body,
    );
    let (text, closed) = exchange(&txgate, wire.as_bytes(), Duration::from_secs(3)).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(closed);
    assert_eq!(foreign(&upstream), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn pipelined_requests_are_answered_in_order() {
    let (_upstream, txgate, _c) = setup("").await;
    let mut wire = String::new();
    for id in 1..=5 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_chainId"}}"#);
        wire.push_str(&request(
            &format!("Content-Length: {}\r\n", body.len()),
            &body,
        ));
    }
    // Read until all five answers are in (or the connection closes): the
    // order and the count are checked on what came.
    let all_in = |text: &str| {
        answers(text) >= 5 && (1..=5).all(|id| text.contains(&format!(r#""id":{id}"#)))
    };
    let (text, _) = exchange_until(&txgate, wire.as_bytes(), Duration::from_secs(10), all_in).await;
    assert_eq!(answers(&text), 5, "{text}");
    let ids: Vec<usize> = (1..=5)
        .map(|id| {
            text.find(&format!(r#""id":{id}"#))
                .unwrap_or_else(|| panic!("no answer for {id}: {text}"))
        })
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "out of order: {text}");
}

/// Too many headers, and one huge header: 431, connection closed, memory
/// where it was.
#[tokio::test(flavor = "multi_thread")]
async fn header_floods_are_431_and_closed() {
    let (upstream, txgate, _c) = setup("").await;
    let before = txgate.proc.rss_bytes();
    let many: String = (0..500).map(|i| format!("X-Flood-{i}: 1\r\n")).collect();
    let huge = format!("X-Huge: {}\r\n", "a".repeat(1 << 20));
    for flood in [many, huge] {
        let wire = request(&format!("{flood}Content-Length: 2\r\n"), "{}");
        let (text, closed) = exchange(&txgate, wire.as_bytes(), Duration::from_secs(3)).await;
        assert!(
            text.starts_with("HTTP/1.1 431"),
            "{}",
            &text[..text.len().min(200)]
        );
        assert!(closed);
    }
    // Many at once.
    let huge = request(&format!("X-Huge: {}\r\n", "a".repeat(1 << 20)), "");
    let floods: Vec<_> = (0..50)
        .map(|_| {
            let (addr, huge) = (txgate.rpc_addr, huge.clone());
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                let _ = s.write_all(huge.as_bytes()).await;
                let mut buf = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
            })
        })
        .collect();
    for f in floods {
        f.await.unwrap();
    }
    let after = txgate.proc.rss_bytes();
    assert!(after < before + 64 * 1024 * 1024, "RSS {before} → {after}");
    assert_eq!(foreign(&upstream), Vec::<String>::new());
    assert_eq!(rpc_json(&txgate.url, HONEST).await.0, StatusCode::OK);
}

/// JSON nested far deeper than any call (a million levels, in a batch, in
/// params, in an object): refused before any parsing, never a stack
/// overflow, never forwarded to a node that might choke on it.
#[tokio::test(flavor = "multi_thread")]
async fn deeply_nested_json_is_refused_without_a_crash() {
    let (upstream, txgate, _c) = setup("").await;
    let deep = 1_000_000;
    let nested = format!("{}{}", "[".repeat(deep), "]".repeat(deep));
    let in_params = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"eth_call","params":{nested}}}"#);
    let in_object = format!("{}1{}", r#"{"a":"#.repeat(deep / 10), "}".repeat(deep / 10));
    for body in [nested, in_params, in_object] {
        let (status, v) = rpc_json(&txgate.url, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["code"], -32600, "{v}");
        assert_eq!(
            v["error"]["message"], "invalid request: JSON nested deeper than 127 levels",
            "{v}"
        );
    }
    assert_eq!(foreign(&upstream), Vec::<String>::new());
    assert_eq!(rpc_json(&txgate.url, HONEST).await.0, StatusCode::OK);
}

/// The honest client's p50 on `loaded` and on `control`, `n` calls each,
/// taken in turns: both see the same machine at the same moments, so a
/// stall of the machine (a build beside the tests) lands on both.
async fn honest_p50s(loaded: &Txgate, control: &Txgate, n: usize) -> (Duration, Duration) {
    let (mut on_loaded, mut on_control) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        for (txgate, times) in [(loaded, &mut on_loaded), (control, &mut on_control)] {
            let started = Instant::now();
            let (status, v) = rpc_json(&txgate.url, HONEST).await;
            assert_eq!(status, StatusCode::OK, "{v}");
            times.push(started.elapsed());
        }
    }
    on_loaded.sort();
    on_control.sort();
    (on_loaded[n / 2], on_control[n / 2])
}

/// Raises this process's descriptor limit to its hard limit (txgate, a
/// child, inherits it); the idle-connection test holds 3 300 sockets.
fn raise_descriptor_limit(need: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    assert!(
        limit.rlim_cur >= need,
        "the descriptor limit ({}) is under the {need} this test needs",
        limit.rlim_cur
    );
}

/// Reads until the server closes (or sends 408); false if `deadline`
/// passes first.
async fn closed_by_server(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408") => {
                return true;
            }
            // h2 frames (SETTINGS, PING) before the close.
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// 3000 connections that never send a byte, 100 that send the start of
/// the h2c preface and 100 the start of a request line, then nothing, and
/// 50 that send the whole h2c preface and never answer a ping: they cost a
/// slot each and nothing else (a well-behaved client's latency stays near
/// its baseline on the same machine), and each is closed by txgate, giving
/// its slot back: the first three kinds at the header timeout, the last
/// when its ping goes unanswered (within twice the timeout).
#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_idle_connections_are_cheap_and_reaped() {
    raise_descriptor_limit(8_000);
    // The header timeout is the test's setting: long enough that opening
    // 3250 connections and sampling the honest client fit before the first
    // is reaped, even on a loaded machine. The deadlines below scale with it.
    let timeout = Duration::from_secs(8);
    let config = format!(
        "[server]\nheader_read_timeout_ms = {}\n",
        timeout.as_millis()
    );
    let (_upstream, txgate, _c) = setup(&config).await;
    // The same txgate without idle connections: the honest client's
    // baseline, sampled in turns with the loaded one.
    let (_control_upstream, control, _cc) = setup(&config).await;
    let opened = Instant::now();
    let mut idle = Vec::new();
    for i in 0..3250 {
        let mut s = TcpStream::connect(txgate.rpc_addr).await.unwrap();
        match i {
            3000..3100 => s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap(),
            3100..3200 => s.write_all(b"POST / HT").await.unwrap(),
            3200.. => s
                .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .unwrap(),
            _ => {}
        }
        idle.push(s);
    }
    // No connection is reaped before its header timeout, counted from its
    // accept, which comes after `opened`: everything up to here must be
    // measured before then.
    let reaping = opened + timeout;
    assert!(
        Instant::now() < reaping,
        "opening took {:?}: the checks below would race the timeout",
        opened.elapsed()
    );
    // The kernel completes a connection before txgate accepts it: wait for
    // txgate to hold them all, which it can only do before the first is
    // reaped.
    let open = std::cell::Cell::new(0.0);
    let all_held = eventually(
        reaping.saturating_duration_since(Instant::now()),
        || async {
            open.set(metric(&txgate.metrics().await, "txgate_open_connections"));
            open.get() >= 3250.0
        },
    )
    .await;
    let accepted = Instant::now();
    assert!(
        all_held,
        "txgate held {} of the 3250 connections {:?} after opening began",
        open.get(),
        opened.elapsed()
    );
    let (during, baseline) = honest_p50s(&txgate, &control, 41).await;
    assert!(
        Instant::now() < reaping,
        "sampling ended {:?} after opening began: it raced the timeout",
        opened.elapsed()
    );
    assert!(
        during <= baseline * 3 + Duration::from_millis(20),
        "p50 {baseline:?} → {during:?} with 3250 idle connections"
    );
    // Each idle socket sees the close: the silent and half-sent ones at
    // the header timeout, the h2c ones once their ping goes unanswered,
    // both counted from an accept no later than `accepted`.
    let deadline = accepted + timeout * 2 + Duration::from_secs(4);
    let mut held = Vec::new();
    for (i, s) in idle.iter_mut().enumerate() {
        if !closed_by_server(s, deadline).await {
            held.push(i);
        }
    }
    assert!(
        held.is_empty(),
        "{} connections still held: {:?}…",
        held.len(),
        &held[..held.len().min(5)]
    );
    // txgate gives a slot back just after closing its socket.
    let (open, silent) = (std::cell::Cell::new(0.0), std::cell::Cell::new(0.0));
    let given_back = eventually(Duration::from_secs(10), || async {
        let m = txgate.metrics().await;
        open.set(metric(&m, "txgate_open_connections"));
        silent.set(metric(&m, "txgate_connections_silent_closed_total"));
        open.get() < 10.0 && silent.get() >= 3100.0
    })
    .await;
    assert!(
        given_back,
        "{} connections open, {} closed silent",
        open.get(),
        silent.get()
    );
}

/// h2c rapid reset (CVE-2023-44487): 20 000 streams opened and cancelled
/// at once on one connection. Nothing reaches the node, memory stays
/// bounded, txgate answers GOAWAY or keeps up, and a well-behaved client
/// is served throughout.
#[tokio::test(flavor = "multi_thread")]
async fn h2c_rapid_reset_is_bounded() {
    let (upstream, txgate, _c) = setup("").await;
    // The same txgate under no attack: the honest client calls both in
    // turns, so a stall of the machine itself lands on both and only what
    // the attack costs sets the flooded one apart.
    let (_control_upstream, control, _cc) = setup("").await;
    let before = txgate.proc.rss_bytes();
    let tcp = TcpStream::connect(txgate.rpc_addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(connection);
    let honest = {
        let urls = [txgate.url.clone(), control.url.clone()];
        tokio::spawn(async move {
            let mut worst = [Duration::ZERO; 2];
            for _ in 0..50 {
                for (url, worst) in urls.iter().zip(&mut worst) {
                    let started = Instant::now();
                    let (status, _) = rpc_json(url, HONEST).await;
                    assert_eq!(status, StatusCode::OK);
                    *worst = (*worst).max(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            worst
        })
    };
    let mut sent = 0;
    let mut refused = false;
    for _ in 0..20_000 {
        let request = http::Request::post("http://txgate/")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let ready = match tokio::time::timeout(Duration::from_secs(5), client.clone().ready()).await
        {
            Ok(Ok(ready)) => ready,
            _ => {
                refused = true;
                break;
            }
        };
        client = ready;
        match client.send_request(request, false) {
            // Dropping both halves resets the stream (RST_STREAM CANCEL).
            Ok((response, send)) => {
                drop((response, send));
                sent += 1;
            }
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    let [worst, worst_control] = honest.await.unwrap();
    driver.abort();
    let after = txgate.proc.rss_bytes();
    assert!(sent > 0);
    assert!(after < before + 64 * 1024 * 1024, "RSS {before} → {after}");
    assert_eq!(
        foreign(&upstream),
        Vec::<String>::new(),
        "a reset call reached the node"
    );
    assert!(
        worst < worst_control + Duration::from_secs(1),
        "honest call waited {worst:?}, {worst_control:?} without the attack \
         (sent {sent}, refused {refused})"
    );
    assert_eq!(rpc_json(&txgate.url, HONEST).await.0, StatusCode::OK);
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The types of the whole frames in `bytes`.
fn frame_kinds(mut bytes: &[u8]) -> Vec<u8> {
    let mut kinds = Vec::new();
    while bytes.len() >= 9 {
        let len =
            (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        kinds.push(bytes[3]);
        bytes = &bytes[(9 + len).min(bytes.len())..];
    }
    kinds
}

/// h2c CONTINUATION flood: a header block that never ends, one
/// CONTINUATION frame after another. txgate stops reading it (GOAWAY or
/// close) long before the 32 MiB the attacker offers, with bounded memory.
#[tokio::test(flavor = "multi_thread")]
async fn h2c_continuation_flood_is_cut_off() {
    let (upstream, txgate, _c) = setup("").await;
    let before = txgate.proc.rss_bytes();
    let mut s = TcpStream::connect(txgate.rpc_addr).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0, 0, &[]));
    // :method POST, :scheme http, :path /, :authority txgate; no END_HEADERS.
    let mut block = vec![0x83, 0x86, 0x84, 0x41, 6];
    block.extend_from_slice(b"txgate");
    hello.extend(frame(0x1, 0, 1, &block));
    s.write_all(&hello).await.unwrap();
    // Literal headers, 16 KiB per frame.
    let mut entry = vec![0x00, 7];
    entry.extend_from_slice(b"x-flood");
    entry.push(100);
    entry.extend(std::iter::repeat_n(b'a', 100));
    let payload: Vec<u8> = entry.iter().copied().cycle().take(16_000).collect();
    let continuation = frame(0x9, 0, 1, &payload);
    let offered = 32usize << 20;
    let mut written = 0;
    let cut = tokio::time::timeout(Duration::from_secs(20), async {
        while written < offered {
            if s.write_all(&continuation).await.is_err() {
                return true;
            }
            written += continuation.len();
        }
        false
    })
    .await
    .unwrap_or(false);
    // Whether or not the writes failed, the server must have said GOAWAY
    // (frame type 7) or closed.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    let goaway = frame_kinds(&got).contains(&0x7);
    assert!(
        cut || closed || goaway,
        "txgate read {written} bytes of one header block without closing"
    );
    assert!(written < offered, "all {offered} bytes were taken in");
    let after = txgate.proc.rss_bytes();
    assert!(after < before + 64 * 1024 * 1024, "RSS {before} → {after}");
    assert_eq!(foreign(&upstream), Vec::<String>::new());
    assert_eq!(rpc_json(&txgate.url, HONEST).await.0, StatusCode::OK);
}

/// An h2c client that answers every keep-alive ping but starts no request
/// held its connection slot for ever (HTTP/2 has no request-head timeout).
/// With `server.idle_timeout_ms` it is shut down gracefully (GOAWAY) once
/// a whole check interval passes without a request, while a connection
/// that keeps calling stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2c_connection_that_answers_pings_is_closed() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let idle = Duration::from_millis(2000);
    // Pings every second: the idle client answers each, so only the idle
    // rule can close it.
    let (_upstream, txgate, _c) = setup(&format!(
        "[server]\nheader_read_timeout_ms = 1000\nidle_timeout_ms = {}\n",
        idle.as_millis()
    ))
    .await;
    let open = |_: ()| async {
        let io = TokioIo::new(TcpStream::connect(txgate.rpc_addr).await.unwrap());
        let (sender, conn) = http2::handshake::<_, _, Full<Bytes>>(TokioExecutor::new(), io)
            .await
            .unwrap();
        (sender, tokio::spawn(conn))
    };
    let call = |sender: &mut http2::SendRequest<Full<Bytes>>| {
        let req = hyper::Request::post("http://txgate/")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(HONEST.as_bytes())))
            .unwrap();
        let sent = sender.send_request(req);
        async move {
            let response = sent.await.expect("h2c call");
            assert_eq!(response.status(), StatusCode::OK);
            response.into_body().collect().await.unwrap();
        }
    };
    let (mut quiet, quiet_conn) = open(()).await;
    let (mut busy, busy_conn) = open(()).await;
    // Taken before the call is sent: its idle stretch starts after this
    // moment, so a close seen less than an idle timeout after it was early.
    let last_call = Instant::now();
    call(&mut quiet).await;
    // The busy one calls every 250 ms for 7 s; the quiet one is closed
    // meanwhile, after one to two idle timeouts.
    let mut closed_after = None;
    while last_call.elapsed() < Duration::from_millis(7000) {
        call(&mut busy).await;
        if closed_after.is_none() && quiet_conn.is_finished() {
            closed_after = Some(last_call.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let closed_after = closed_after.expect("the idle h2c connection is still open after 7 s");
    assert!(
        closed_after >= idle,
        "closed {closed_after:?} after its last call, before the idle timeout"
    );
    assert!(
        quiet.ready().await.is_err(),
        "the idle connection still takes calls"
    );
    // The busy connection was never idle for a whole interval.
    assert!(!busy_conn.is_finished());
    call(&mut busy).await;
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_connections_idle_closed_total"), 1.0);
}

/// A call in flight keeps its connection from counting as idle: an h2c
/// call that takes over two idle intervals is answered, and the same
/// connection takes the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_keeps_its_h2c_connection_open() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let upstream = crate::support::SlowUpstream::start(Duration::from_millis(2600)).await;
    let config = TempFile::new("[server]\nidle_timeout_ms = 1000\n");
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    let io = TokioIo::new(TcpStream::connect(txgate.rpc_addr).await.unwrap());
    let (mut sender, conn) = http2::handshake::<_, _, Full<Bytes>>(TokioExecutor::new(), io)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    for _ in 0..2 {
        let req = hyper::Request::post("http://txgate/")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(HONEST.as_bytes())))
            .unwrap();
        let response = sender.send_request(req).await.expect("h2c call");
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.unwrap();
        assert!(!conn.is_finished(), "closed under a call in flight");
    }
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_connections_idle_closed_total"), 0.0);
}
