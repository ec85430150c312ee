#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use txgate_screen::{Invalidation, Screen, ScreenSettings};

use super::*;
use crate::metrics::Metrics;

/// How a test listener is set up.
pub(super) struct Options {
    pub report_allow: &'static str,
    pub verify_allow: &'static str,
    pub proxyd_allow: &'static str,
    pub max_in_flight: usize,
    pub max_verify_bytes: usize,
    pub monitor_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            report_allow: "127.0.0.0/8",
            verify_allow: "127.0.0.0/8",
            proxyd_allow: "",
            max_in_flight: 64,
            max_verify_bytes: 4096,
            monitor_only: false,
        }
    }
}

/// An Aeges listener on a free loopback port, stopped when dropped.
pub(super) struct Fixture {
    pub addr: SocketAddr,
    pub screen: Arc<Screen>,
    pub metrics: Arc<Metrics>,
    pub queue: Option<mpsc::Receiver<Invalidation>>,
    pub stop: CancellationToken,
    pub server: Option<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    pub(super) async fn start(o: Options) -> Fixture {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (queue, rx) = mpsc::channel(4);
        let screen = Arc::new(Screen::new(
            ScreenSettings::default(),
            std::time::Instant::now(),
        ));
        let metrics = Arc::new(Metrics::new());
        let nets = |s: &str| {
            s.split(',')
                .filter(|s| !s.is_empty())
                .map(|n| n.parse().unwrap())
                .collect::<Vec<_>>()
        };
        let aeges = Arc::new(Aeges {
            reports: Reports::new(
                nets(o.report_allow),
                None,
                4096,
                queue,
                screen.clone(),
                metrics.clone(),
            ),
            verifier: Verifier::new(
                VerifySettings {
                    allow: nets(o.verify_allow),
                    max_bytes: o.max_verify_bytes,
                    max_in_flight: o.max_in_flight,
                    monitor_only: o.monitor_only,
                },
                screen.clone(),
                metrics.clone(),
            ),
            proxyd: ProxydHook::new(
                HookSettings {
                    allow: nets(o.proxyd_allow),
                    token: None,
                    max_bytes: 4096,
                    txs_per_sec: 1000,
                    burst: 100,
                    max_in_flight: o.max_in_flight,
                    monitor_only: o.monitor_only,
                },
                screen.clone(),
                metrics.clone(),
            ),
        });
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, aeges, stop.clone()));
        Fixture {
            addr,
            screen,
            metrics,
            queue: Some(rx),
            stop,
            server: Some(server),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A TCP connection to `addr` from the loopback address `from`.
pub(super) async fn connect_from(from: &str, addr: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

fn report_body() -> String {
    format!(
        r#"["0x{}",{{"caller":"0x{}","kind":"0x{}","gas_limit":21000,"data":"0x"}}]"#,
        "11".repeat(32),
        "22".repeat(20),
        "33".repeat(20)
    )
}

/// Defect found in review: a sidecar's keep-alive connection held the
/// queue open after the stop, so the batch worker could not drain and
/// end until its deadline. Stopped now, idle connections close.
#[tokio::test]
async fn a_stop_closes_kept_alive_connections_and_releases_the_queue() {
    let mut f = Fixture::start(Options::default()).await;
    let mut rx = f.queue.take().unwrap();
    let body = report_body();
    let mut conn = tokio::net::TcpStream::connect(f.addr).await.unwrap();
    let request = format!(
        "POST /report HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = [0u8; 64];
    let n = conn.read(&mut answer).await.unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    assert!(rx.recv().await.is_some(), "the report was queued");
    // The connection stays open; the stop must still release the queue.
    f.stop.cancel();
    let closed = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
    assert!(matches!(closed, Ok(None)), "the queue was released");
    assert!(f.server.take().unwrap().await.is_ok());
}

/// A body that never finishes arriving gets 408 after the body timeout,
/// and the connection cap closes what is over it.
#[tokio::test]
async fn a_slow_body_gets_408_and_connections_are_capped() {
    let f = Fixture::start(Options::default()).await;
    let mut slow = tokio::net::TcpStream::connect(f.addr).await.unwrap();
    slow.write_all(b"POST /report HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n[")
        .await
        .unwrap();
    let mut answer = [0u8; 64];
    let started = std::time::Instant::now();
    let n = tokio::time::timeout(
        report::BODY_TIMEOUT + Duration::from_secs(2),
        slow.read(&mut answer),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer"))
    .unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    assert!(started.elapsed() >= report::BODY_TIMEOUT - Duration::from_millis(100));
    assert_eq!(f.metrics.aeges.timeout.get(), 1);
    // MAX_CONNECTIONS held open: the next one is closed at once.
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(tokio::net::TcpStream::connect(f.addr).await.unwrap());
    }
    let mut over = tokio::net::TcpStream::connect(f.addr).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(2), over.read(&mut answer)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "closed: {closed:?}"
    );
    assert!(f.metrics.aeges.connections_refused.get() >= 1);
}

/// A peer in neither allow-list is answered 403 and closed at accept:
/// however many connect, none takes a slot from the sidecar or the pool.
#[tokio::test]
async fn outsiders_are_closed_at_accept_and_take_no_slot() {
    let f = Fixture::start(Options {
        report_allow: "127.0.0.1/32",
        verify_allow: "127.0.0.3/32",
        ..Options::default()
    })
    .await;
    let mut outsiders = Vec::new();
    for _ in 0..MAX_CONNECTIONS + 10 {
        let mut conn = connect_from("127.0.0.2", f.addr).await;
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut answer)).await;
        assert!(matches!(read, Ok(Ok(_))), "closed: {read:?}");
        assert!(
            answer.starts_with(b"HTTP/1.1 403"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
        // proxyd reads only the body: an errorCode, never "all allowed".
        let text = String::from_utf8_lossy(&answer);
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["errorCode"], "source_not_allowed");
        outsiders.push(conn);
    }
    // The sidecar still gets in, and so does the pool's address (which
    // may not report: 403 per request).
    for (from, want) in [("127.0.0.1", "HTTP/1.1 405"), ("127.0.0.3", "HTTP/1.1 403")] {
        let mut inside = connect_from(from, f.addr).await;
        let body = report_body();
        let request = if from == "127.0.0.1" {
            "GET /report HTTP/1.1\r\nhost: x\r\n\r\n".to_string()
        } else {
            format!(
                "POST /report HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        inside.write_all(request.as_bytes()).await.unwrap();
        let mut answer = [0u8; 32];
        let n = inside.read(&mut answer).await.unwrap();
        assert!(
            answer[..n].starts_with(want.as_bytes()),
            "{from}: {:?}",
            String::from_utf8_lossy(&answer[..n])
        );
    }
    assert_eq!(
        f.metrics.aeges.refused_source.get(),
        (MAX_CONNECTIONS + 10 + 1) as u64
    );
    assert_eq!(f.metrics.aeges.connections_refused.get(), 0);
}
