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

/// Serves the Aeges endpoints until `stop` is cancelled; connections in
/// flight finish their request.
pub async fn serve(listener: TcpListener, reports: Arc<Reports>, stop: CancellationToken) {
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
        let _ = stream.set_nodelay(true);
        let reports = reports.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let reports = reports.clone();
                async move { Ok::<_, Infallible>(reports.handle(peer.ip(), req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(io, service)
                .await;
        });
    }
}
