//! The client-facing server, in the order a connection meets it: the
//! listening sockets ([`listeners`]), one worker per core (`workers`), who
//! each client is ([`identity`]: PROXY protocol, trusted forwarding
//! headers), TLS when it is on ([`tls`]), and here the accept loop with a
//! connection cap, HTTP/1.1 keep-alive and HTTP/2 (h2c, or ALPN `h2` over
//! TLS) on one port, header-read timeout, graceful drain.

pub mod identity;
pub mod listeners;
mod proxy_protocol;
pub mod tls;
pub(crate) mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Service;

use crate::metrics::Metrics;
use crate::request::{Body, ConnectionSlot};
use identity::{Edge, Identified};

/// Server settings, from `[server]` and `[shutdown]`.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to receive request headers (HTTP/1.1).
    pub header_read_timeout: Duration,
    /// Time a connection may go without starting a request.
    pub idle_timeout: Duration,
    /// Serve h2c beside HTTP/1.1.
    pub http2: bool,
    /// Time in-flight calls get after the shutdown signal.
    pub grace_period: Duration,
    /// TLS on the port (`None`: cleartext).
    pub tls: Option<tls::Tls>,
}

#[cfg(test)]
impl ServerSettings {
    /// Cleartext HTTP/1.1, 16 connections, a 30 s grace period: the
    /// settings of the tests that drive a listener by hand.
    pub(crate) fn for_tests() -> ServerSettings {
        ServerSettings {
            max_connections: 16,
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            http2: false,
            grace_period: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// How serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished within the grace period.
    Clean,
    /// The grace period ran out with connections still open.
    TimedOut,
}

/// Whether an accept error passes by itself (the process or the system is
/// out of a resource, or one connection died before it was accepted), as
/// opposed to a listener that no longer works.
pub fn accept_error_is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted
            | ConnectionReset
            | ConnectionRefused
            | Interrupted
            | WouldBlock
            | TimedOut
    ) {
        return true;
    }
    // EMFILE, ENFILE, ENOBUFS, ENOMEM, EPROTO, EPERM (a firewall refusing
    // one connection), EAGAIN.
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EPERM
                | libc::EAGAIN
        )
    )
}

/// Serves `service` on `listener` until `shutdown` completes, then drains.
/// Each connection first learns who it is from `edge` (PROXY header), and
/// each request carries its [`crate::request::Client`]. An accept error that does
/// not pass by itself ends accepting: `failed` hears of it at once (the
/// caller reports the listener as failed and stops the proxy, which ends
/// the WebSocket sessions: they follow the proxy's stop, not this
/// drain), then the connections already accepted drain as on a shutdown,
/// within the grace period, and serving returns how they drained. Calls
/// under way are not cut because the listener broke.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    edge: Arc<Edge>,
    settings: ServerSettings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
    failed: impl FnOnce(&std::io::Error),
) -> std::io::Result<Drained>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .keep_alive(true);
    // An h2c connection has no request-head timeout once its preface is
    // in: it is pinged after each header timeout of silence and closed if
    // the ping is not answered within another, so a peer that sent the
    // preface and nothing more (not an HTTP/2 client) frees its slot.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(settings.header_read_timeout)
        .keep_alive_timeout(settings.header_read_timeout);
    let builder = if settings.http2 {
        builder
    } else {
        builder.http1_only()
    };

    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    // Cancelled when draining begins: connections still waiting for their
    // PROXY header or first bytes are closed at once (they have no call to
    // finish); the others are shut down gracefully.
    let drain = tokio_util::sync::CancellationToken::new();
    tokio::pin!(shutdown);
    let mut failed = Some(failed);

    loop {
        // Wait for a free connection slot first: beyond the cap, clients
        // wait in the kernel's accept queue instead of being reset.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if accept_error_is_transient(&e) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => {
                    if let Some(failed) = failed.take() {
                        failed(&e);
                    }
                    break;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        metrics.http.connections_total.inc();
        let slot = Arc::new(ConnectionSlot::new(
            permit,
            metrics.http.open_connections.clone(),
        ));
        let (builder, service, edge, drain, tls) = (
            builder.clone(),
            service.clone(),
            edge.clone(),
            drain.clone(),
            settings.tls.clone(),
        );
        let ending = Ending {
            drain: drain.clone(),
            idle_timeout: settings.idle_timeout,
            slot: slot.clone(),
            idle_closed: metrics.http.idle_closed.clone(),
        };
        tokio::spawn(async move {
            let opened = tokio::select! {
                opened = edge.open(stream, peer) => opened,
                () = drain.cancelled() => None,
            };
            if let Some((io, connection)) = opened {
                let service = Identified::new(service, edge.clone(), connection, slot.clone());
                match tls {
                    None => serve_connection(&builder, io, service, ending).await,
                    Some(tls) => {
                        // After the PROXY header, before HTTP; then HTTP's
                        // first bytes within the header timeout, as on a
                        // cleartext connection.
                        let secured = tokio::select! {
                            secured = async {
                                let io = tls.handshake(io).await?;
                                edge.first_request(io).await
                            } => secured,
                            () = drain.cancelled() => None,
                        };
                        if let Some(io) = secured {
                            serve_connection(&builder, io, service, ending).await;
                        }
                    }
                }
            }
            // A connection upgraded to a WebSocket keeps its slot until
            // the session ends.
            drop(slot);
        });
    }

    // Stop accepting: new clients get connection refused and go elsewhere.
    // Shut down, not only closed: another descriptor of this socket (kept
    // by whoever started the worker) must not keep it listening.
    let _ = socket2::SockRef::from(&listener).shutdown(std::net::Shutdown::Read);
    drop(listener);
    drain.cancel();
    tracing::info!(
        grace_ms = settings.grace_period.as_millis() as u64,
        "draining connections"
    );
    // HTTP connections finish their calls; WebSocket sessions (told by the
    // same stop) answer theirs and close: every slot comes back.
    let all = u32::try_from(settings.max_connections).unwrap_or(u32::MAX);
    let drained = async {
        let _ = slots.acquire_many(all).await;
    };
    Ok(
        match tokio::time::timeout(settings.grace_period, drained).await {
            Ok(()) => Drained::Clean,
            Err(_) => Drained::TimedOut,
        },
    )
}

/// Whether a served connection is being shut down, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    No,
    /// The drain: calls under way get the grace period.
    Drain,
    /// Idle: dropped if still open one interval later.
    Idle,
}

/// What ends a served connection early: the drain, or a stretch of
/// `idle_timeout` with no request started (the slot marks them).
struct Ending {
    drain: tokio_util::sync::CancellationToken,
    idle_timeout: Duration,
    slot: Arc<ConnectionSlot>,
    idle_closed: prometheus::IntCounter,
}

/// Serves HTTP (and upgrades) on one connection until it ends, or until
/// the drain or an idle stretch shuts it down gracefully (calls under way
/// finish; HTTP/2 gets a GOAWAY, HTTP/1.1 no keep-alive).
///
/// The idle check costs one timer per `idle_timeout` per connection, not
/// one per call: each request only marks the slot as it starts and as it
/// ends (and counts itself in flight between), and the timer, when it
/// fires, reads and clears the mark. A connection idle from just after a
/// check is so closed after between one and two timeouts; one with a call
/// in flight never is.
async fn serve_connection<I, S>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    ending: Ending,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
        .into_owned();
    tokio::pin!(connection);
    let Ending {
        drain,
        idle_timeout,
        slot,
        idle_closed,
    } = ending;
    let mut check =
        tokio::time::interval_at(tokio::time::Instant::now() + idle_timeout, idle_timeout);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One waiter on the drain for the connection's life.
    let stopped = drain.cancelled();
    tokio::pin!(stopped);
    let mut state = Closing::No;
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut stopped, if state == Closing::No => {
                connection.as_mut().graceful_shutdown();
                state = Closing::Drain;
            }
            _ = check.tick(), if state != Closing::Drain => {
                // Still open a whole interval after its idle shutdown: an
                // HTTP/2 client that never acknowledges the shutdown's ping
                // would otherwise keep it, still taking streams.
                if state == Closing::Idle {
                    return;
                }
                if slot.idle_since_last_look() {
                    idle_closed.inc();
                    connection.as_mut().graceful_shutdown();
                    state = Closing::Idle;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that stops working (here shut down under the accept
    /// loop, which makes `accept` fail with EINVAL on Linux) is reported at
    /// once, while a call on a connection already accepted is still under
    /// way; that call still gets its answer, and serving ends once it has
    /// drained. Serving used to return at the error, and the worker's
    /// runtime then cut the call.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_broken_listener_is_reported_at_once_and_calls_under_way_finish() {
        use std::os::fd::AsFd;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::sync::{Notify, mpsc, oneshot};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = socket2::Socket::from(listener.as_fd().try_clone_to_owned().unwrap());
        let metrics = Arc::new(Metrics::new());
        let edge = Arc::new(Edge::new(
            &txgate_config::ServerConfig::default(),
            Vec::new(),
            metrics.clone(),
        ));
        let settings = ServerSettings::for_tests();
        // Each call says it has arrived, then answers when the test lets it.
        let (arrived, mut calls) = mpsc::unbounded_channel();
        let answer = Arc::new(Notify::new());
        let service = {
            let answer = answer.clone();
            tower::service_fn(move |_: Request<Incoming>| {
                let (arrived, answer) = (arrived.clone(), answer.clone());
                async move {
                    let _ = arrived.send(());
                    answer.notified().await;
                    Ok::<_, Infallible>(Response::new(Body::from("answered")))
                }
            })
        };
        let (told, heard) = oneshot::channel();
        let served = tokio::spawn(serve(
            listener,
            service,
            edge,
            settings,
            metrics,
            std::future::pending(),
            move |e: &std::io::Error| {
                let _ = told.send(e.raw_os_error());
            },
        ));

        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        let wait = Duration::from_secs(10);
        tokio::time::timeout(wait, calls.recv())
            .await
            .expect("the call reaches the service")
            .unwrap();
        handle.shutdown(std::net::Shutdown::Both).unwrap();

        let errno = tokio::time::timeout(wait, heard)
            .await
            .expect("the broken listener is reported")
            .unwrap();
        assert_eq!(errno, Some(libc::EINVAL));
        // Reported while the call is under way: serving waits for it.
        assert!(!served.is_finished(), "serving drains before it ends");

        answer.notify_one();
        let mut reply = Vec::new();
        tokio::time::timeout(wait, client.read_to_end(&mut reply))
            .await
            .expect("the connection closes once answered")
            .unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.ends_with("answered"), "{reply}");

        let drained = tokio::time::timeout(wait, served)
            .await
            .expect("serving ends once drained")
            .unwrap()
            .unwrap();
        assert_eq!(drained, Drained::Clean);
    }

    #[test]
    fn accept_errors_that_pass_and_those_that_do_not() {
        for errno in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOBUFS,
            libc::ECONNABORTED,
        ] {
            assert!(accept_error_is_transient(
                &std::io::Error::from_raw_os_error(errno)
            ));
        }
        for errno in [libc::EBADF, libc::EINVAL, libc::ENOTSOCK] {
            assert!(!accept_error_is_transient(
                &std::io::Error::from_raw_os_error(errno)
            ));
        }
    }
}
