//! txgate's request path, outermost first.
//!
//! - [`server`]: accept loop, connection cap, HTTP/1.1 and h2c, header-read
//!   timeout, graceful drain.
//! - [`admission`]: one global in-flight cap shared by every clone of the
//!   service, decided before the body is read (HTTP 429).
//! - [`rpc`]: body cap and timeout, content type, JSON-RPC framing, method
//!   [`policy`], forwarding of lone calls and batches.
//! - [`upstream`]: pooled keep-alive client to the node.
//! - [`rescue`]: the one place refusals become HTTP responses.
//! - [`admin`], [`health`], [`metrics`]: the operator's side.
//!
//! [`Proxy`] assembles them from a validated config.

#![deny(unreachable_pub)]

pub mod admin;
pub mod admission;
mod h1;
pub mod health;
pub mod metrics;
pub mod policy;
pub mod rescue;
pub mod rpc;
pub mod server;
pub mod upstream;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tower::ServiceBuilder;
use txgate_config::Config;

use crate::admission::AdmissionLayer;
use crate::health::Readiness;
use crate::metrics::Metrics;
use crate::rpc::RpcService;
use crate::server::{Drained, ServerSettings};
use crate::upstream::Upstream;

/// Listening sockets, bound before the proxy starts so that bind errors are
/// reported at once and tests can ask for port 0.
#[derive(Debug)]
pub struct Listeners {
    rpc: Vec<std::net::TcpListener>,
    admin: std::net::TcpListener,
}

impl Listeners {
    /// Binds `workers` client sockets on one address with `SO_REUSEPORT`
    /// (the kernel spreads connections across them) and the admin socket.
    /// Must run inside a tokio runtime.
    pub fn bind(rpc: SocketAddr, admin: SocketAddr, workers: usize) -> io::Result<Listeners> {
        let mut sockets = Vec::with_capacity(workers);
        let mut addr = rpc;
        for _ in 0..workers.max(1) {
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            socket.set_reuseport(true)?;
            socket.set_nodelay(true)?;
            socket.bind(addr)?;
            let listener = socket.listen(4096)?;
            // Port 0: the other workers join the port the first one got.
            addr = listener.local_addr()?;
            sockets.push(listener.into_std()?);
        }
        let admin = std::net::TcpListener::bind(admin)?;
        admin.set_nonblocking(true)?;
        Ok(Listeners {
            rpc: sockets,
            admin,
        })
    }

    /// The client-facing address.
    pub fn rpc_addr(&self) -> io::Result<SocketAddr> {
        self.rpc
            .first()
            .ok_or_else(|| io::Error::other("no listener"))?
            .local_addr()
    }

    /// The admin address.
    pub fn admin_addr(&self) -> io::Result<SocketAddr> {
        self.admin.local_addr()
    }
}

/// The assembled proxy, ready to serve.
#[derive(Debug)]
pub struct Proxy {
    config: Config,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
}

impl Proxy {
    /// Builds every stage from a validated config.
    pub fn new(config: Config) -> Result<Proxy, String> {
        config.validate().map_err(|e| e.to_string())?;
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new(metrics.clone()));
        Ok(Proxy {
            config,
            metrics,
            readiness,
        })
    }

    /// The metrics registry and handles.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Serves until `shutdown` completes, then stops accepting, marks itself
    /// not ready, and drains in-flight calls for up to the grace period.
    ///
    /// Thread per core: each client listener gets its own thread with a
    /// single-threaded runtime and its own upstream pool, like nginx's
    /// workers, so a request never hops threads between the client socket
    /// and the upstream socket. Shared state (the admission counter,
    /// metrics) is atomics. The calling task keeps the admin endpoints and
    /// the health probe.
    pub async fn run(self, listeners: Listeners, shutdown: impl Future<Output = ()>) -> Drained {
        let Proxy {
            config,
            metrics,
            readiness,
        } = self;
        let config = Arc::new(config);

        // Admission: one in-flight cap for the whole process, shared by
        // every worker and connection.
        let admission = AdmissionLayer::new(
            config.admission.max_in_flight,
            config.admission.retry_after_secs,
            metrics.clone(),
        );
        let settings = ServerSettings {
            max_connections: config.server.max_connections.div_ceil(listeners.rpc.len()),
            header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
            http2: config.server.http2,
            grace_period: Duration::from_millis(config.shutdown.grace_period_ms),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut workers = Vec::with_capacity(listeners.rpc.len());
        for (index, listener) in listeners.rpc.into_iter().enumerate() {
            let (config, metrics, admission, settings) = (
                config.clone(),
                metrics.clone(),
                admission.clone(),
                settings.clone(),
            );
            let mut stop = stop_rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("txgate-worker-{index}"))
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let drained = runtime.block_on(async move {
                        let listener = TcpListener::from_std(listener)?;
                        let upstream =
                            Upstream::new(&config, metrics.clone()).map_err(io::Error::other)?;
                        let service = ServiceBuilder::new()
                            .layer(admission)
                            // JSON-RPC: body cap, content type, framing, method
                            // policy, forwarding to the upstream.
                            .service(RpcService::new(&config, upstream, metrics.clone()));
                        let stopped = async move {
                            let _ = stop.wait_for(|stop| *stop).await;
                        };
                        Ok::<_, io::Error>(
                            server::serve(listener, service, settings, metrics, stopped).await,
                        )
                    })?;
                    // Connections still open after the grace period are cut here.
                    runtime.shutdown_timeout(Duration::from_millis(50));
                    Ok::<_, io::Error>(drained)
                });
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => tracing::error!(error = %e, "cannot start a worker thread"),
            }
        }

        let Ok(admin) = TcpListener::from_std(listeners.admin) else {
            tracing::error!("cannot register the admin listener");
            return Drained::TimedOut;
        };
        let probe_upstream = match Upstream::new(&config, metrics.clone()) {
            Ok(upstream) => upstream,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the probe client");
                return Drained::TimedOut;
            }
        };
        let probe = tokio::spawn(health::probe_task(
            probe_upstream,
            readiness.clone(),
            Duration::from_millis(config.upstream.health_interval_ms),
        ));
        let admin_task = tokio::spawn(admin::serve(admin, metrics.clone(), readiness.clone()));

        shutdown.await;
        readiness.start_draining();
        let _ = stop_tx.send(true);
        let mut drained = Drained::Clean;
        for worker in workers {
            let joined = tokio::task::spawn_blocking(move || worker.join()).await;
            match joined {
                Ok(Ok(Ok(Drained::Clean))) => {}
                Ok(Ok(Ok(Drained::TimedOut))) => drained = Drained::TimedOut,
                Ok(Ok(Err(e))) => {
                    tracing::error!(error = %e, "worker failed");
                    drained = Drained::TimedOut;
                }
                _ => {
                    tracing::error!("worker panicked");
                    drained = Drained::TimedOut;
                }
            }
        }
        probe.abort();
        admin_task.abort();
        drained
    }
}
