//! txgate's request path, outermost first.
//!
//! - [`server`]: accept loop, connection cap, HTTP/1.1 and h2c, header-read
//!   timeout, graceful drain.
//! - [`admission`]: one global in-flight cap shared by every clone of the
//!   service, decided before the body is read (HTTP 429).
//! - [`rpc`]: body cap and timeout, content type, JSON-RPC framing, method
//!   [`policy`], forwarding of lone calls and batches.
//! - [`screening`]: the per-call tower stack that screens raw-transaction
//!   submissions; its state is a shared [`txgate_screen::Screen`], learned
//!   through [`Proxy::apply`].
//! - [`upstream`]: pooled keep-alive client to the node.
//! - [`rescue`]: the one place refusals become HTTP responses.
//! - [`sidecar`]: the invalidation stream from the sidecar, the batching
//!   worker that applies it, and the ShouldForward client.
//! - [`snapshot`]: the ban snapshot on disk.
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
pub mod screening;
pub mod server;
pub mod sidecar;
pub mod snapshot;
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
use txgate_screen::{Applied, Invalidation, Screen, ScreenSettings};

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
    screen: Option<Arc<Screen>>,
}

/// Screening settings from the config's `[screen]` section.
pub fn screen_settings(config: &txgate_config::Screen) -> ScreenSettings {
    let secs = |s: u64| s.saturating_mul(1000);
    ScreenSettings {
        chain_ids: config.chain_ids.clone(),
        denied_ttl: secs(config.denied_ttl_secs),
        suspect_window: secs(config.suspect_window_secs),
        max_denied: config.max_denied,
        recent_failure_ttl: secs(config.recent_failure_ttl_secs),
        max_recent_failures: config.max_recent_failures,
        sender_cache_ttl: secs(config.sender_cache_ttl_secs),
        max_cached_senders: config.max_cached_senders,
        pending_timeout: secs(config.pending_timeout_secs),
        max_pending: config.max_pending,
        shaping_hold: config.shaping_hold_ms,
        backpressure: txgate_screen::backpressure::BackpressureSettings {
            capacity: f64::from(config.backpressure.tokens),
            refill_per_sec: config.backpressure.refill_per_sec,
            backoff_initial: config.backpressure.backoff_initial_ms,
            backoff_max: config.backpressure.backoff_max_ms,
            max_senders: config.backpressure.max_senders,
        },
        cooldown: txgate_screen::assertion::CooldownSettings {
            distinct_fingerprints: config.cooldown.distinct_fingerprints,
            window: secs(config.denied_ttl_secs),
            duration: secs(config.cooldown.duration_secs),
            trickle_interval: config.cooldown.trickle_interval_ms,
            max_assertions: config.cooldown.max_assertions,
        },
    }
}

/// The one way screening state is learned: batches of invalidations.
/// Cheap to clone; shared with whatever delivers verdicts.
#[derive(Debug, Clone)]
pub struct Invalidations {
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
}

impl Invalidations {
    /// Applies a batch in one pass (see [`Screen::apply`]) and counts what
    /// it did.
    pub fn apply(&self, batch: &[Invalidation]) -> Applied {
        let now = self.screen.millis(tokio::time::Instant::now().into_std());
        let applied = self.screen.apply(batch, now);
        self.metrics.screen.applied(&applied);
        applied
    }
}

/// Background upkeep of the screening state: every tick, sweep one shard
/// of each cache (a full pass every 64 ticks, each step short) and refresh
/// the size gauges.
async fn screen_upkeep(screen: Arc<Screen>, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = screen.millis(tokio::time::Instant::now().into_std());
        screen.sweep(now, 1);
        metrics.screen.sizes(&screen.sizes());
    }
}

impl Proxy {
    /// Builds every stage from a validated config.
    pub fn new(config: Config) -> Result<Proxy, String> {
        config.validate().map_err(|e| e.to_string())?;
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new(metrics.clone()));
        let screen = config.screen.enabled.then(|| {
            Arc::new(Screen::new(
                screen_settings(&config.screen),
                tokio::time::Instant::now().into_std(),
            ))
        });
        if let Some(screen) = &screen
            && !config.screen.snapshot_path.is_empty()
        {
            snapshot::load(std::path::Path::new(&config.screen.snapshot_path), screen);
        }
        Ok(Proxy {
            config,
            metrics,
            readiness,
            screen,
        })
    }

    /// Where invalidations go (`None` when screening is off).
    pub fn invalidations(&self) -> Option<Invalidations> {
        self.screen.as_ref().map(|screen| Invalidations {
            screen: screen.clone(),
            metrics: self.metrics.clone(),
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
            screen,
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
        // ShouldForward verdicts, shared by every worker.
        let sidecar_on = !config.sidecar.url.is_empty() && screen.is_some();
        let verdicts = (sidecar_on && config.sidecar.should_forward).then(|| {
            Arc::new(txgate_screen::ttl::TtlMap::<alloy_primitives::B256, ()>::new(100_000))
        });
        let mut workers = Vec::with_capacity(listeners.rpc.len());
        for (index, listener) in listeners.rpc.into_iter().enumerate() {
            let (config, metrics, admission, settings, screen, verdicts) = (
                config.clone(),
                metrics.clone(),
                admission.clone(),
                settings.clone(),
                screen.clone(),
                verdicts.clone(),
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
                        // Each worker talks to the sidecar over its own
                        // connection, from its own runtime.
                        let probe = match (&verdicts, config.sidecar.should_forward) {
                            (Some(verdicts), true) => {
                                let channel = sidecar::channel(
                                    &config.sidecar.url,
                                    Duration::from_millis(config.sidecar.connect_timeout_ms),
                                )
                                .map_err(io::Error::other)?;
                                Some(Arc::new(screening::ProbeClient::new(
                                    channel,
                                    Duration::from_millis(config.sidecar.should_forward_timeout_ms),
                                    config.sidecar.verdict_ttl_ms,
                                    verdicts.clone(),
                                    metrics.clone(),
                                )))
                            }
                            _ => None,
                        };
                        let service = ServiceBuilder::new()
                            .layer(admission)
                            // JSON-RPC: body cap, content type, framing, method
                            // policy, the screening stack for raw
                            // transactions, forwarding to the upstream.
                            .service(RpcService::new(
                                &config,
                                upstream,
                                metrics.clone(),
                                screen,
                                probe,
                            ));
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
        let upkeep = screen
            .clone()
            .map(|screen| tokio::spawn(screen_upkeep(screen, metrics.clone())));
        let mut background = Vec::new();
        let mut link = None;
        if let Some(screen) = &screen {
            if sidecar_on {
                let (queue_tx, queue_rx) =
                    tokio::sync::mpsc::channel(config.sidecar.channel_capacity);
                let invalidations = Invalidations {
                    screen: screen.clone(),
                    metrics: metrics.clone(),
                };
                let worker = tokio::spawn(sidecar::batch_worker(
                    queue_rx,
                    invalidations,
                    config.sidecar.batch_max,
                    metrics.clone(),
                ));
                let stream = tokio::spawn(sidecar::stream_task(
                    sidecar::StreamSettings {
                        url: config.sidecar.url.clone(),
                        connect_timeout: Duration::from_millis(config.sidecar.connect_timeout_ms),
                        reconnect_initial: Duration::from_millis(
                            config.sidecar.reconnect_initial_ms,
                        ),
                        reconnect_max: Duration::from_millis(config.sidecar.reconnect_max_ms),
                    },
                    queue_tx,
                    metrics.clone(),
                    readiness.clone(),
                ));
                link = Some((stream, worker));
            }
            if !config.screen.snapshot_path.is_empty() {
                background.push(tokio::spawn(snapshot::periodic(
                    config.screen.snapshot_path.clone().into(),
                    screen.clone(),
                    metrics.clone(),
                    Duration::from_secs(config.screen.snapshot_interval_secs),
                )));
            }
        }

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
        if let Some(upkeep) = upkeep {
            upkeep.abort();
        }
        for task in background {
            task.abort();
        }
        // Stop reading the sidecar, then let the worker apply what was
        // already received (the stream task held the queue's only sender):
        // nothing accepted is lost, and the snapshot below includes it.
        if let Some((stream, worker)) = link {
            stream.abort();
            let _ = stream.await;
            if tokio::time::timeout(Duration::from_secs(5), worker)
                .await
                .is_err()
            {
                tracing::warn!("invalidation queue not drained within 5 s");
            }
        }
        // A restart forgets no ban: the last snapshot is taken after the
        // drain, with everything learned until then.
        if let Some(screen) = &screen
            && !config.screen.snapshot_path.is_empty()
        {
            let path = std::path::PathBuf::from(&config.screen.snapshot_path);
            let (screen, metrics) = (screen.clone(), metrics.clone());
            let _ = tokio::task::spawn_blocking(move || {
                snapshot::save_counted(&path, &screen, &metrics)
            })
            .await;
        }
        drained
    }
}
