//! Misbehaving peers for the fault tests, real servers on loopback: an
//! HTTP/1.1 upstream that breaks the protocol in the way each call asks,
//! and a gRPC sidecar (HTTP/2, gRPC framing, protobuf) that sends what no
//! honest sidecar sends.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use txgate_proto::v1;

/// An upstream whose answer to a call is chosen by the call: a param
/// `"fault:<mode>"` picks the fault (see [`FaultyUpstream::MODES`]), any
/// other call is answered `{"result":"0x1"}` under its id, single or batch,
/// on a kept-alive connection.
pub struct FaultyUpstream {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyUpstream {
    /// Every fault it can play.
    pub const MODES: [&'static str; 9] = [
        "reset",
        "truncated_chunked",
        "garbage_status",
        "endless_headers",
        "slow_headers",
        "endless_chunked_body",
        "endless_close_delimited_body",
        "huge_content_length",
        "silent",
    ];

    pub async fn start() -> FaultyUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve_upstream(stream));
            }
        });
        FaultyUpstream { url, task }
    }
}

impl Drop for FaultyUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request (head and Content-Length body); None at EOF.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf[end + 4..end + 4 + len].to_vec());
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn fault_of(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let at = text.find("fault:")? + "fault:".len();
    Some(
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect(),
    )
}

fn answer_ok(body: &[u8]) -> Vec<u8> {
    let one = |call: &serde_json::Value| serde_json::json!({"jsonrpc":"2.0","id":call["id"],"result":"0x1"});
    let answer = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(calls)) => {
            serde_json::Value::Array(calls.iter().map(one).collect())
        }
        Ok(call) => one(&call),
        Err(_) => {
            serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}})
        }
    };
    let json = answer.to_string();
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    )
    .into_bytes()
}

async fn serve_upstream(mut stream: TcpStream) {
    while let Some(body) = read_request(&mut stream).await {
        let Some(fault) = fault_of(&body) else {
            if stream.write_all(&answer_ok(&body)).await.is_err() {
                return;
            }
            continue;
        };
        play(fault.as_str(), stream).await;
        return;
    }
}

/// Plays one fault on `stream`, then drops it.
async fn play(fault: &str, mut stream: TcpStream) {
    const OK_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
    match fault {
        "reset" => {
            let _ = stream
                .write_all(
                    format!("{OK_HEAD}Content-Length: 200\r\n\r\n{{\"jsonrpc\":\"2.0\",")
                        .as_bytes(),
                )
                .await;
            // Linger 0: close sends RST, not FIN (and a zero linger
            // never blocks the drop, which is what the deprecation is about).
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
        }
        "truncated_chunked" => {
            let _ = stream
                .write_all(
                    format!(
                        "{OK_HEAD}Transfer-Encoding: chunked\r\n\r\n40\r\n{{\"jsonrpc\":\"2.0\",\"id\":1,"
                    )
                    .as_bytes(),
                )
                .await;
            let _ = stream.shutdown().await;
        }
        "garbage_status" => {
            let _ = stream
                .write_all(b"HTTP/1.1 2x0 SURE\r\nContent-Length: 2\r\n\r\n{}")
                .await;
        }
        "endless_headers" => {
            let _ = stream.write_all(OK_HEAD.as_bytes()).await;
            let line = format!("X-Flood: {}\r\n", "a".repeat(1000));
            while stream.write_all(line.as_bytes()).await.is_ok() {}
        }
        "slow_headers" => {
            let _ = stream.write_all(OK_HEAD.as_bytes()).await;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if stream.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return;
                }
            }
        }
        "endless_chunked_body" => {
            let _ = stream
                .write_all(format!("{OK_HEAD}Transfer-Encoding: chunked\r\n\r\n").as_bytes())
                .await;
            let mut chunk = b"10000\r\n".to_vec();
            chunk.extend(std::iter::repeat_n(b' ', 0x10000));
            chunk.extend_from_slice(b"\r\n");
            while stream.write_all(&chunk).await.is_ok() {}
        }
        "endless_close_delimited_body" => {
            let _ = stream
                .write_all(format!("{OK_HEAD}Connection: close\r\n\r\n[").as_bytes())
                .await;
            let chunk = vec![b' '; 0x10000];
            while stream.write_all(&chunk).await.is_ok() {}
        }
        "huge_content_length" => {
            let _ = stream
                .write_all(format!("{OK_HEAD}Content-Length: 99999999999\r\n\r\n{{").as_bytes())
                .await;
            let mut sink = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut sink)).await;
        }
        "silent" => {
            // Hold the connection without a byte until txgate gives up.
            let mut sink = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut sink)).await;
        }
        other => panic!("unknown fault {other}"),
    }
}

/// An upstream that holds every call until the test releases it, then
/// answers `{"result":"0x1"}` under its id on a kept-alive connection: a
/// call stays in flight for exactly as long as the test needs, however
/// slow the machine, instead of for a fixed delay the test must race.
pub struct HeldUpstream {
    pub url: String,
    release: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HeldUpstream {
    pub async fn start() -> HeldUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (release, released) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let mut released = released.clone();
                tokio::spawn(async move {
                    while let Some(body) = read_request(&mut stream).await {
                        // Dropped (the test ended) before the release: the
                        // call is never answered.
                        if released.wait_for(|released| *released).await.is_err() {
                            return;
                        }
                        if stream.write_all(&answer_ok(&body)).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        HeldUpstream { url, release, task }
    }

    /// Answers every call held so far, and every later one at once.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

impl Drop for HeldUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a [`FaultySidecar`] does on each `StreamInvalidations`.
#[derive(Debug, Clone)]
pub enum StreamFault {
    /// Each valid message, then one the fault names, then each valid one
    /// again (the second group only reaches txgate when the fault does not
    /// break the stream), then hold the stream open.
    Around(Vec<v1::Invalidation>, Bad),
    /// One invalidation per stream (the n-th stream sends `make(n)`), then
    /// end the stream after the given time.
    Flap(fn(u64) -> v1::Invalidation, Duration),
    /// Nothing: the stream stays open and silent.
    Quiet,
}

/// A message no honest sidecar sends.
#[derive(Debug, Clone)]
pub enum Bad {
    /// Bytes that are not protobuf (an invalid wire type).
    Undecodable,
    /// A length prefix of this many bytes (only the prefix and 1 KiB sent).
    Oversize(u32),
    /// An invalidation that decodes but cannot be used.
    Unusable(Box<v1::Invalidation>),
}

/// A `txgate.sidecar.v1` server that misbehaves; ShouldForward answers
/// "deny" after `should_forward_delay`, or, from
/// [`FaultySidecar::start_holding_answers`], only once the test releases
/// the question.
pub struct FaultySidecar {
    pub addr: SocketAddr,
    pub streams: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// ShouldForward questions received.
    pub questions: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// ShouldForward questions let through to their answer (sent after
    /// `should_forward_delay`, or tried when txgate had already given up
    /// on the call and reset it).
    pub answers: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The n-th question (from 0) is answered once this is above n.
    release: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultySidecar {
    pub async fn start(fault: StreamFault, should_forward_delay: Duration) -> FaultySidecar {
        FaultySidecar::launch(fault, should_forward_delay, u64::MAX).await
    }

    /// Holds every ShouldForward answer until [`Self::release_answers`].
    pub async fn start_holding_answers(fault: StreamFault) -> FaultySidecar {
        FaultySidecar::launch(fault, Duration::ZERO, 0).await
    }

    /// Answers the questions received so far (not the later ones).
    pub fn release_answers(&self) {
        let asked = self.questions.load(std::sync::atomic::Ordering::SeqCst);
        self.release.send_modify(|upto| *upto = (*upto).max(asked));
    }

    async fn launch(
        fault: StreamFault,
        should_forward_delay: Duration,
        released: u64,
    ) -> FaultySidecar {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let streams = Arc::new(AtomicU64::new(0));
        let questions = Arc::new(AtomicU64::new(0));
        let answers = Arc::new(AtomicU64::new(0));
        let release = Arc::new(tokio::sync::watch::channel(released).0);
        let (counter, asked, answered, gate) = (
            streams.clone(),
            questions.clone(),
            answers.clone(),
            release.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (fault, counter) = (fault.clone(), counter.clone());
                let (asked, answered, gate) = (asked.clone(), answered.clone(), gate.clone());
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(stream).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        let (fault, counter) = (fault.clone(), counter.clone());
                        let (asked, answered) = (asked.clone(), answered.clone());
                        let mut released = gate.subscribe();
                        tokio::spawn(async move {
                            let path = request.uri().path().to_string();
                            if path.ends_with("/StreamInvalidations") {
                                let n = counter.fetch_add(1, Ordering::SeqCst);
                                stream_invalidations(fault, n, respond).await;
                            } else if path.ends_with("/ShouldForward") {
                                let n = asked.fetch_add(1, Ordering::SeqCst);
                                if released.wait_for(|upto| *upto > n).await.is_err() {
                                    return;
                                }
                                answered.fetch_add(1, Ordering::SeqCst);
                                should_forward(should_forward_delay, respond).await;
                            }
                        });
                    }
                });
            }
        });
        FaultySidecar {
            addr,
            streams,
            questions,
            answers,
            release,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FaultySidecar {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(message.len() as u32);
    frame.put_slice(message);
    frame.freeze()
}

fn grpc_head() -> http::Response<()> {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("response")
}

fn grpc_ok_trailers() -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    trailers
}

async fn stream_invalidations(
    fault: StreamFault,
    n: u64,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let Ok(mut send) = respond.send_response(grpc_head(), false) else {
        return;
    };
    match fault {
        StreamFault::Around(good, bad) => {
            for msg in &good {
                let _ = send.send_data(grpc_frame(&msg.encode_to_vec()), false);
            }
            let bad = match bad {
                // Field 1 with wire type 7, which does not exist.
                Bad::Undecodable => grpc_frame(&[0x0f, 0xff, 0xff, 0xff]),
                Bad::Oversize(len) => {
                    let mut frame = BytesMut::new();
                    frame.put_u8(0);
                    frame.put_u32(len);
                    frame.put_slice(&[0u8; 1024]);
                    frame.freeze()
                }
                Bad::Unusable(msg) => grpc_frame(&msg.encode_to_vec()),
            };
            let _ = send.send_data(bad, false);
            for msg in &good {
                let _ = send.send_data(grpc_frame(&msg.encode_to_vec()), false);
            }
            // Hold the stream open while txgate reads (or until it resets).
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
        StreamFault::Flap(make, after) => {
            let _ = send.send_data(grpc_frame(&make(n).encode_to_vec()), false);
            tokio::time::sleep(after).await;
            let _ = send.send_trailers(grpc_ok_trailers());
        }
        StreamFault::Quiet => tokio::time::sleep(Duration::from_secs(600)).await,
    }
}

async fn should_forward(delay: Duration, mut respond: h2::server::SendResponse<Bytes>) {
    tokio::time::sleep(delay).await;
    let answer = v1::ShouldForwardResponse {
        forward: false,
        assertions: Vec::new(),
        ttl_ms: 0,
    };
    let Ok(mut send) = respond.send_response(grpc_head(), false) else {
        return;
    };
    let _ = send.send_data(grpc_frame(&answer.encode_to_vec()), false);
    let _ = send.send_trailers(grpc_ok_trailers());
}

/// A call of the n-th test account (its own calldata, so its own
/// fingerprint), signed.
pub fn tx(n: u64) -> String {
    let mut input = vec![0xde, 0xad, 0xbe, 0xef];
    input.extend_from_slice(&n.to_be_bytes());
    crate::support::Eoa::new(7_000 + n).sign(
        0,
        alloy_primitives::Address::repeat_byte(0x77),
        &input,
        0,
        1_000_000_000,
    )
}

/// The invalidation a sidecar sends for `raw`.
pub fn ban(raw: &str) -> v1::Invalidation {
    let bytes = txgate_screen::decode_hex(raw).expect("hex");
    let decoded = txgate_screen::decode(&bytes).expect("tx");
    let fp = txgate_screen::Fingerprint::of(&decoded).expect("fingerprint");
    let key = txgate_screen::AssertionKey {
        id: alloy_primitives::B256::repeat_byte(0xa1),
        version: 1,
    };
    txgate_proto::invalidation_message(&fp, key, None, None, 1, 0)
}

/// Bans the fingerprints of `raws` through the admin import (two minutes,
/// no assertion), as an operator moving bans between instances does.
pub async fn import_bans(admin: &str, raws: &[String]) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let bans: Vec<serde_json::Value> = raws
        .iter()
        .map(|raw| {
            let bytes = txgate_screen::decode_hex(raw).expect("hex");
            let fp = txgate_screen::Fingerprint::of(&txgate_screen::decode(&bytes).expect("tx"))
                .expect("fingerprint");
            serde_json::json!({"fingerprint": fp.hash.to_string(), "expires_in_ms": 120_000,
                "suspect_for_ms": 120_000, "assertions": []})
        })
        .collect();
    let body = serde_json::json!({"format": "txgate-bans", "version": 1,
        "taken_at_unix_ms": now, "bans": bans});
    let (status, _, answer) = crate::support::post(
        &format!("{admin}/bans/import"),
        Some("application/json"),
        body.to_string(),
    )
    .await
    .expect("import");
    assert_eq!(
        status,
        hyper::StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
