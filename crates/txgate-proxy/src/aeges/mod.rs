//! The Aeges listener (`[aeges] listen`, off by default), served apart
//! from the client port: where the Credible Layer sidecar posts its
//! failure reports (its `aeges_url` points here), and where the
//! sequencer's pool plugin asks about each transaction entering its pool
//! (gRPC over HTTP/2 cleartext on the same port: HTTP/1.1 and HTTP/2 are
//! told apart by the connection preface, gRPC by its content type), and
//! where proxyd asks about each submission it takes (its validation hook,
//! HTTP/1.1 JSON).
//!
//! **Whoever can post a report can ban traffic.** The listener is meant
//! for an internal address. A peer in none of `aeges.report_allow`,
//! `aeges.verify_allow` and `aeges.proxyd_allow` is answered 403 (with a
//! JSON `errorCode`, which is what proxyd reads) and closed at accept;
//! then every request is checked, cheapest first, before its body is read.
//!
//! - [`report`] answers `POST /report`;
//! - [`verify`] answers `aeges.v1.AegesService/VerifyTransaction`;
//! - [`proxyd`] answers `POST /proxyd/validate`;
//! - [`grpc`] frames unary gRPC calls over hyper's HTTP/2;
//! - [`token`] finds the token a request carries.
//!
//! proxyd keeps up to 10 connections per host, idle for up to 30 s: a peer
//! in `aeges.proxyd_allow` takes a connection slot among its own
//! ([`MAX_PROXYD_CONNECTIONS`]) first, never one the sidecar needs unless
//! it may also report or ask, and may stay idle longer than proxyd does
//! ([`PROXYD_IDLE`]), so proxyd closes first and never sends into a
//! connection txgate is closing.

pub mod grpc;
pub mod proxyd;
pub mod report;
mod token;
pub mod verify;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http_body_util::Either;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use proxyd::{HookSettings, ProxydHook};
pub use report::Reports;
pub use verify::{Verifier, VerifySettings};

use crate::metrics::Metrics;

/// Connections open at once at most; beyond it a new one is closed at
/// once (counted). A sidecar posts one report at a time; the pool plugin
/// keeps one HTTP/2 connection.
pub const MAX_CONNECTIONS: usize = 64;

/// HTTP/2 streams open at once on one connection. Beyond
/// `aeges.max_in_flight` over all connections a call is answered
/// `RESOURCE_EXHAUSTED` at once; this only bounds what one connection can
/// hold open.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1024;

/// Connections open at once at most from peers admitted for proxyd's hook
/// alone (a few proxyd hosts, 10 each at most).
pub const MAX_PROXYD_CONNECTIONS: usize = 128;

/// How long an HTTP/1.1 connection may wait for a request's head, idle
/// between requests included; a sidecar posts a report at a time.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The same for a peer admitted for proxyd's hook: above proxyd's own 30 s
/// idle time, so the closing side is proxyd's.
pub const PROXYD_IDLE: Duration = Duration::from_secs(35);

/// What the listener serves.
#[derive(Debug)]
pub struct Aeges {
    /// `POST /report`.
    pub reports: Reports,
    /// `VerifyTransaction`.
    pub verifier: Verifier,
    /// `POST /proxyd/validate`.
    pub proxyd: ProxydHook,
}

impl Aeges {
    /// Whether `peer` may connect at all: it may report or ask.
    pub fn admits(&self, peer: IpAddr) -> bool {
        self.reports.allows(peer) || self.verifier.allows(peer) || self.proxyd.allows(peer)
    }

    /// Whether `peer` may report or ask the pool's question.
    fn sidecar_or_pool(&self, peer: IpAddr) -> bool {
        self.reports.allows(peer) || self.verifier.allows(peer)
    }

    fn metrics(&self) -> &Metrics {
        self.reports.metrics()
    }
}

/// An IPv4 peer seen through an IPv6 socket is checked as IPv4.
pub(crate) use txgate_identity::canonical;

/// Whether a request is gRPC: by its content type, as gRPC defines it.
fn is_grpc<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// How long, after the stop, open connections get to finish the request
/// they are on.
const DRAIN: Duration = Duration::from_secs(2);

/// [`serve`] on a thread of its own with a single-threaded runtime, like
/// the client port's workers: a connection, its HTTP/2 streams and their
/// answers stay on one thread, with no wake-up crossing threads per call.
/// Ends when the thread does (after `stop`, or if it fails).
pub async fn serve_on_own_thread(
    listener: std::net::TcpListener,
    aeges: Arc<Aeges>,
    stop: CancellationToken,
) {
    let (done, ended) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("aeges".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    tracing::error!(error = %e, "aeges runtime failed to start");
                    return;
                }
            };
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, aeges, stop).await,
                    Err(e) => tracing::error!(error = %e, "aeges listener failed"),
                }
            });
            // Connections still draining after `DRAIN` go with the
            // runtime, and with them their handles on the queue.
            drop(runtime);
            let _ = done.send(());
        });
    if let Err(e) = thread {
        tracing::error!(error = %e, "aeges thread failed to start");
        return;
    }
    // Sent or dropped (a panic): either way the listener is gone.
    let _ = ended.await;
}

/// Serves the Aeges endpoints until `stop` is cancelled. Then every
/// connection finishes the request it is on and closes (a sidecar keeps
/// its connection alive between reports), so that the last handle on the
/// batch worker's queue goes and the worker can drain and end; this
/// returns once they have (or after [`DRAIN`]).
pub async fn serve(listener: TcpListener, aeges: Arc<Aeges>, stop: CancellationToken) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let hook_slots = Arc::new(tokio::sync::Semaphore::new(MAX_PROXYD_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => None,
            accepted = listener.accept() => Some(accepted),
        };
        let Some(accepted) = accepted else {
            // Closed first: a client reconnecting is refused at once (the
            // pool plugin then fails open at once, not at its deadline).
            drop(listener);
            let drained = async {
                let _ = slots.acquire_many(MAX_CONNECTIONS as u32).await;
                let _ = hook_slots.acquire_many(MAX_PROXYD_CONNECTIONS as u32).await;
            };
            let _ = tokio::time::timeout(DRAIN, drained).await;
            return;
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
        if !aeges.admits(peer.ip()) {
            aeges.metrics().aeges.refused_source.inc();
            tokio::spawn(refuse(stream));
            continue;
        }
        // proxyd's peers take the hook's slots first; the sidecar's and the
        // pool's only if they may also use those.
        let hook_peer = aeges.proxyd.allows(peer.ip());
        let permit = match hook_peer {
            true => hook_slots.clone().try_acquire_owned().or_else(|e| {
                match aeges.sidecar_or_pool(peer.ip()) {
                    true => slots.clone().try_acquire_owned(),
                    false => Err(e),
                }
            }),
            false => slots.clone().try_acquire_owned(),
        };
        let Ok(permit) = permit else {
            aeges.metrics().aeges.connections_refused.inc();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let aeges = aeges.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // hyper-util's protocol detection has no timeout of its own: a
            // peer that never sends its first bytes would keep its slot.
            if !preface_arrives(&stream).await {
                aeges.metrics().aeges.connections_idle.inc();
                return;
            }
            let service = hyper::service::service_fn(move |req| {
                let aeges = aeges.clone();
                async move {
                    Ok::<_, Infallible>(if is_grpc(&req) {
                        aeges
                            .verifier
                            .handle(peer.ip(), req)
                            .await
                            .map(Either::Right)
                    } else if req.version() == http::Version::HTTP_2 {
                        // Reports are HTTP/1.1, one at a time per
                        // connection: their memory bound holds.
                        aeges.metrics().aeges.not_found.inc();
                        grpc::http_status(http::StatusCode::HTTP_VERSION_NOT_SUPPORTED)
                            .map(Either::Right)
                    } else if req.uri().path() == proxyd::PATH {
                        aeges.proxyd.handle(peer.ip(), req).await.map(Either::Left)
                    } else {
                        aeges.reports.handle(peer.ip(), req).await.map(Either::Left)
                    })
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(if hook_peer { PROXYD_IDLE } else { HEAD_TIMEOUT });
            builder
                .http2()
                .timer(hyper_util::rt::TokioTimer::new())
                .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
                // A peer that vanished without closing is found within a
                // minute.
                .keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(20));
            let connection = builder.serve_connection(io, service);
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

/// The HTTP/2 connection preface, which tells HTTP/2 from HTTP/1.1.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How long a new connection may take to show which protocol it speaks.
const PREFACE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether, within [`PREFACE_TIMEOUT`], the peer sends enough to tell its
/// protocol: the whole HTTP/2 preface, or bytes that cannot begin it.
async fn preface_arrives(stream: &tokio::net::TcpStream) -> bool {
    let wait = async {
        let mut buf = [0u8; 24];
        let mut seen = 0;
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            if n >= PREFACE.len() || buf[..n] != PREFACE[..n] {
                return true;
            }
            if n == seen {
                // Nothing new since the last look: peek returns at once
                // while bytes wait, so pause instead of spinning.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen = n;
        }
    };
    tokio::time::timeout(PREFACE_TIMEOUT, wait)
        .await
        .unwrap_or(false)
}

/// A canned 403 for a peer outside the allow-lists, then close. Its body
/// is the hook's error form, which is what proxyd reads (it ignores the
/// status); the sidecar and the pool plugin read only the status.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    const BODY: &str = r#"{"unauthorized":{},"errorCode":"source_not_allowed","errorMessage":"source not allowed"}"#;
    let forbidden = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(forbidden.as_bytes()),
    )
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
}

#[cfg(test)]
mod tests;
