//! The Aeges listener (`[aeges] listen`, off by default): where the
//! Credible Layer sidecar posts its failure reports (its `aeges_url` points
//! here), served apart from the client port.
//!
//! **Whoever can post here can ban traffic.** The listener is meant for an
//! internal address; every request is checked, cheapest first, before its
//! body is read: the peer against `aeges.report_allow` (403), then the
//! token `aeges.report_token` (401), then the size cap (413).
//!
//! - [`report`]: `POST /report`.

pub mod report;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use report::Reports;

/// Connections open at once at most; beyond it a new one is closed at
/// once (counted). A sidecar posts one report at a time.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves the Aeges endpoints until `stop` is cancelled. Then every
/// connection finishes the request it is on and closes (a sidecar keeps
/// its connection alive between reports), so that the last handle on the
/// batch worker's queue goes and the worker can drain and end.
pub async fn serve(listener: TcpListener, reports: Arc<Reports>, stop: CancellationToken) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer): (_, SocketAddr) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if crate::server::accept_error_is_transient(&e) => {
                tracing::warn!(error = %e, "aeges accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                // The listener no longer works: this task ends, and its
                // guard reports the Aeges listener as failed.
                tracing::error!(error = %e, "aeges listener failed");
                return;
            }
        };
        // Outsiders are answered and closed at once: they never hold a
        // connection slot the sidecar needs.
        if !reports.allows(peer.ip()) {
            reports.metrics().aeges.refused_source.inc();
            tokio::spawn(refuse(stream));
            continue;
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            reports.metrics().aeges.connections_refused.inc();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let reports = reports.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let reports = reports.clone();
                async move { Ok::<_, Infallible>(reports.handle(peer.ip(), req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(io, service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
}

/// A canned 403 for a peer outside the allow-list, then close.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    const FORBIDDEN: &[u8] = b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\
        content-length: 19\r\nconnection: close\r\n\r\nsource not allowed\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(FORBIDDEN)).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use txgate_screen::{Screen, ScreenSettings};

    use crate::metrics::Metrics;

    /// Defect found in review: a sidecar's keep-alive connection held the
    /// queue open after the stop, so the batch worker could not drain and
    /// end until its deadline. Stopped now, idle connections close.
    #[tokio::test]
    async fn a_stop_closes_kept_alive_connections_and_releases_the_queue() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let (queue, mut rx) = tokio::sync::mpsc::channel(4);
        let allow = vec!["127.0.0.0/8".parse().unwrap_or_else(|e| panic!("{e}"))];
        let screen = Arc::new(Screen::new(
            ScreenSettings::default(),
            std::time::Instant::now(),
        ));
        let reports = Arc::new(Reports::new(
            allow,
            None,
            4096,
            queue,
            screen,
            Arc::new(Metrics::new()),
        ));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, reports, stop.clone()));
        let body = format!(
            r#"["0x{}",{{"caller":"0x{}","kind":"0x{}","gas_limit":21000,"data":"0x"}}]"#,
            "11".repeat(32),
            "22".repeat(20),
            "33".repeat(20)
        );
        let mut conn = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let request = format!(
            "POST /report HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(request.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = [0u8; 64];
        let n = conn
            .read(&mut answer)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
        assert!(rx.recv().await.is_some(), "the report was queued");
        // The connection stays open; the stop must still release the queue.
        stop.cancel();
        let closed = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
        assert!(matches!(closed, Ok(None)), "the queue was released");
        assert!(server.await.is_ok());
    }

    /// A body that never finishes arriving gets 408 after the body timeout,
    /// and the connection cap closes what is over it.
    #[tokio::test]
    async fn a_slow_body_gets_408_and_connections_are_capped() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let (queue, _rx) = tokio::sync::mpsc::channel(4);
        let allow = vec!["127.0.0.0/8".parse().unwrap_or_else(|e| panic!("{e}"))];
        let screen = Arc::new(Screen::new(
            ScreenSettings::default(),
            std::time::Instant::now(),
        ));
        let metrics = Arc::new(Metrics::new());
        let reports = Arc::new(Reports::new(
            allow,
            None,
            4096,
            queue,
            screen,
            metrics.clone(),
        ));
        let stop = CancellationToken::new();
        let _server = tokio::spawn(serve(listener, reports, stop.clone()));
        let mut slow = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        slow.write_all(b"POST /report HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n[")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = [0u8; 64];
        let started = std::time::Instant::now();
        let n = tokio::time::timeout(
            report::BODY_TIMEOUT + Duration::from_secs(2),
            slow.read(&mut answer),
        )
        .await
        .unwrap_or_else(|_| panic!("no answer"))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 408"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
        assert!(started.elapsed() >= report::BODY_TIMEOUT - Duration::from_millis(100));
        assert_eq!(metrics.aeges.timeout.get(), 1);
        // MAX_CONNECTIONS held open: the next one is closed at once.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(
                tokio::net::TcpStream::connect(addr)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        let mut over = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let closed = tokio::time::timeout(Duration::from_secs(2), over.read(&mut answer)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "closed: {closed:?}"
        );
        assert!(metrics.aeges.connections_refused.get() >= 1);
        stop.cancel();
    }

    /// A peer outside the allow-list is answered 403 and closed at accept:
    /// however many connect, none takes a slot from the sidecar.
    #[tokio::test]
    async fn outsiders_are_closed_at_accept_and_take_no_slot() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let (queue, _rx) = tokio::sync::mpsc::channel(4);
        let allow = vec!["127.0.0.1/32".parse().unwrap_or_else(|e| panic!("{e}"))];
        let screen = Arc::new(Screen::new(
            ScreenSettings::default(),
            std::time::Instant::now(),
        ));
        let metrics = Arc::new(Metrics::new());
        let reports = Arc::new(Reports::new(
            allow,
            None,
            4096,
            queue,
            screen,
            metrics.clone(),
        ));
        let stop = CancellationToken::new();
        let _server = tokio::spawn(serve(listener, reports, stop.clone()));
        let mut outsiders = Vec::new();
        for _ in 0..MAX_CONNECTIONS + 10 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
            socket
                .bind("127.0.0.2:0".parse().unwrap_or_else(|e| panic!("{e}")))
                .unwrap_or_else(|e| panic!("{e}"));
            let mut conn = socket.connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
            let mut answer = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut answer)).await;
            assert!(matches!(read, Ok(Ok(_))), "closed: {read:?}");
            assert!(
                answer.starts_with(b"HTTP/1.1 403"),
                "{:?}",
                String::from_utf8_lossy(&answer)
            );
            outsiders.push(conn);
        }
        // The sidecar still gets in.
        let mut inside = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        inside
            .write_all(b"GET /report HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = [0u8; 32];
        let n = inside
            .read(&mut answer)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 405"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
        assert_eq!(
            metrics.aeges.refused_source.get(),
            (MAX_CONNECTIONS + 10) as u64
        );
        assert_eq!(metrics.aeges.connections_refused.get(), 0);
        stop.cancel();
    }
}
