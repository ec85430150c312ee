//! The worker threads: one per client listener, each with its own
//! single-threaded runtime and upstream pool, like nginx's workers, so a
//! request never hops threads between the client socket and the upstream
//! socket. Shared state (the admission counter, metrics, screening) is
//! atomics and sharded locks.
//!
//! A worker that ends before it is asked to, or panics, is reported as a
//! fatal failure ([`FatalGuard`]): the proxy cannot serve its share of the
//! port without it.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use txgate_config::{Config, Source};
use txgate_screen::Screen;

use crate::background::{Fatal, FatalGuard, FatalSender};
use crate::limits::admission::AdmissionLayer;
use crate::limits::clients::ClientLimitLayer;
use crate::ops::metrics::Metrics;
use crate::rpc::PerProcess;
use crate::rpc::RpcService;
use crate::rpc::conditional::Conditions;
use crate::rpc::sync::SyncCalls;
use crate::rpc::websocket::WebSockets;
use crate::screening::{ProbeClient, RefusalLog, VerdictCache};
use crate::server::identity::Edge;
use crate::server::pacing::Pacer;
use crate::server::{self, Drained, ServerSettings};
use crate::sidecar;
use crate::upstream::Upstream;

/// What every worker shares.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) admission: AdmissionLayer,
    /// Client WebSockets (`None`: off).
    pub(crate) websockets: Option<Arc<WebSockets>>,
    /// Cancelled to drain: the accept loops and the WebSocket sessions.
    pub(crate) stop: CancellationToken,
    /// Per-client rates, before admission.
    pub(crate) client_limits: ClientLimitLayer,
    pub(crate) settings: ServerSettings,
    /// Who the clients are (trusted proxies, PROXY protocol).
    pub(crate) edge: Arc<Edge>,
    pub(crate) screen: Option<Arc<Screen>>,
    /// The refusal log: one rate for the whole process.
    pub(crate) refusals: Arc<RefusalLog>,
    /// The checks on conditional transactions: one rate for the process.
    pub(crate) conditions: Arc<Conditions>,
    /// The cap and timeout of sync calls, one per process.
    pub(crate) sync: Arc<SyncCalls>,
    pub(crate) verdicts: Option<Arc<VerdictCache>>,
    /// The source ShouldForward asks, if one does.
    pub(crate) probed: Option<Source>,
    /// Holds refusals of clients that keep being refused (`None`: off).
    pub(crate) pacer: Option<Arc<Pacer>>,
}

/// The running workers.
#[derive(Debug)]
pub(crate) struct Workers {
    threads: Vec<JoinHandle<io::Result<Drained>>>,
    stop: CancellationToken,
}

impl Workers {
    /// Starts one worker per listener.
    pub(crate) fn start(
        listeners: Vec<std::net::TcpListener>,
        shared: &Shared,
        fatal: &FatalSender,
    ) -> io::Result<Workers> {
        let stop = shared.stop.clone();
        let mut threads = Vec::with_capacity(listeners.len());
        for (index, listener) in listeners.into_iter().enumerate() {
            let (shared, stop) = (shared.clone(), stop.clone());
            let part = format!("worker-{index}");
            let guard = FatalGuard::new(part.clone(), stop.clone(), fatal.clone());
            let fatal = fatal.clone();
            let thread = std::thread::Builder::new()
                .name(format!("txgate-worker-{index}"))
                .spawn(move || {
                    let guard = std::cell::RefCell::new(guard);
                    // A broken listener is reported at once (unless the
                    // proxy is stopping anyway), so the proxy starts
                    // draining while this worker's connections finish
                    // their calls; the guard then has nothing left to say.
                    let watched = stop.clone();
                    let served = serve(listener, shared, stop, |e| {
                        if !watched.is_cancelled() {
                            fatal.report(part, format!("listener: {e}"));
                            guard.borrow_mut().disarm();
                        }
                    });
                    if let Err(e) = &served {
                        guard.borrow_mut().failed(e.to_string());
                    }
                    served
                })?;
            threads.push(thread);
        }
        Ok(Workers { threads, stop })
    }

    /// Stops accepting on every worker and waits for their connections to
    /// drain (each within the grace period). A worker that failed or
    /// panicked while draining is returned as a failure.
    pub(crate) async fn drain(self) -> (Drained, Option<Fatal>) {
        self.stop.cancel();
        let mut drained = Drained::Clean;
        let mut failure = None;
        for (index, thread) in self.threads.into_iter().enumerate() {
            let error = match tokio::task::spawn_blocking(move || thread.join()).await {
                Ok(Ok(Ok(Drained::Clean))) => continue,
                Ok(Ok(Ok(Drained::TimedOut))) => {
                    drained = Drained::TimedOut;
                    continue;
                }
                Ok(Ok(Err(e))) => e.to_string(),
                _ => "panicked".to_string(),
            };
            tracing::error!(worker = index, error = %error, "worker failed while draining");
            drained = Drained::TimedOut;
            failure.get_or_insert(Fatal {
                part: format!("worker-{index}"),
                error,
            });
        }
        (drained, failure)
    }
}

/// One worker thread's life: its runtime, its upstream pool, its sidecar
/// connection, its share of the port, until `stop`.
fn serve(
    listener: std::net::TcpListener,
    shared: Shared,
    stop: CancellationToken,
    broken: impl FnOnce(&io::Error),
) -> io::Result<Drained> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let Shared {
        config,
        metrics,
        admission,
        websockets,
        stop: _,
        client_limits,
        settings,
        edge,
        screen,
        refusals,
        conditions,
        sync,
        verdicts,
        probed,
        pacer,
    } = shared;
    let lane_owner = websockets.clone();
    let served = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        let upstream = Upstream::new(&config, metrics.clone()).map_err(io::Error::other)?;
        // Each worker asks the sidecar over its own connection, from its
        // own runtime; the verdicts are shared.
        let probe = match (verdicts, probed) {
            (Some(verdicts), Some(source)) => {
                let channel = sidecar::channel(
                    &format!("http://{}", source.url.authority()),
                    Duration::from_millis(config.sidecar.connect_timeout_ms),
                )
                .map_err(io::Error::other)?;
                ProbeClient::new(
                    source.protocol,
                    channel,
                    config.sidecar.should_forward_scope,
                    Duration::from_millis(config.sidecar.should_forward_timeout_ms),
                    config.sidecar.verdict_ttl_ms,
                    verdicts,
                    metrics.clone(),
                )
                .map(Arc::new)
            }
            _ => None,
        };
        let service = ServiceBuilder::new()
            // Per-client rates (API key, else client IP), before the body
            // is read: a client over its rate takes no in-flight slot.
            .layer(client_limits)
            // One in-flight cap for the whole process, decided before the
            // body is read.
            .layer(admission)
            // JSON-RPC: body cap, content type, framing, method policy,
            // the screening stack for raw transactions, forwarding.
            .service(RpcService::new(
                &config,
                upstream,
                metrics.clone(),
                screen,
                probe,
                PerProcess {
                    refusals,
                    conditions,
                    sync,
                    websockets,
                    pacer: pacer.clone(),
                },
            ));
        let drained = server::serve(
            listener,
            service,
            edge,
            settings,
            metrics,
            stop.cancelled_owned(),
            broken,
        )
        .await;
        // The worker's lane to the node ends with a close frame, not with
        // the runtime.
        if let Some(websockets) = &lane_owner {
            websockets.close_lane_here().await;
        }
        drained
    });
    // Connections still open after the grace period are cut here, and
    // nothing (a name lookup on a blocking thread) holds the worker longer.
    runtime.shutdown_timeout(Duration::from_millis(50));
    served
}
