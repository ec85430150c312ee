//! txgate's request path, outermost first; the folders follow it, and
//! imports point one way: down the path, to the ground floor.
//!
//! - [`server`]: the listening sockets, the workers (one per core), the
//!   accept loop with its connection cap, HTTP/1.1 and h2c, TLS, who each
//!   client is ([`server::identity`]), header-read timeout and graceful
//!   drain. It serves any tower service the stack gives it.
//! - [`limits`]: what a caller may use: per-client rates by API key or
//!   client IP ([`limits::clients`]) and the global in-flight cap
//!   ([`limits::admission`]), decided before the body is read, and the
//!   pacing of clients that keep being refused (`limits::pacing`).
//! - [`rpc`]: body cap and timeout, content type, JSON-RPC framing, method
//!   [`rpc::policy`], forwarding of lone calls and batches,
//!   [`rpc::websocket`] (the same checks for each message on a client
//!   WebSocket), and [`rpc::rescue`], the refusals of the JSON-RPC stage.
//! - [`screening`]: the per-call tower stack that screens raw-transaction
//!   submissions; its state is a shared [`txgate_screen::Screen`], learned
//!   through [`Invalidations`] ([`screening::state`]).
//! - [`upstream`]: pooled keep-alive client to the node.
//!
//! The stack is assembled in one place, `stack` (per worker, from handles
//! built once per process). Beside the request path:
//!
//! - [`sidecar`]: one stream per sidecar source (`txgate.v1`,
//!   `rpcproxy.v1`, `sidecar.transport.v1`) and the batching worker.
//! - [`aeges`]: the Aeges listener: the Credible Layer sidecar's failure
//!   reports and the sequencer pool's `VerifyTransaction`.
//! - [`fleet`]: the one link to the fleet's Redis (connect, timeout,
//!   backoff), used by the limits' sync and the shared bans.
//! - [`ops`]: the operator's side: admin endpoints, health, the ban
//!   snapshot on disk.
//! - [`background`]: the one owner of every background task.
//!
//! The ground floor, which every stage uses and which uses none of them:
//! [`request`] (the body type, the client, its connection's slot, and how
//! a stage's refusal becomes a JSON-RPC error) and [`metrics`].
//!
//! [`Proxy`] assembles them from a validated config; [`Proxy::run`] is the
//! outline of a process's life.

#![deny(unreachable_pub)]

pub mod aeges;
pub mod background;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod metrics;
pub mod ops;
pub mod request;
pub mod rpc;
pub mod screening;
pub mod server;
pub mod sidecar;
pub(crate) mod stack;
mod start;
pub(crate) mod timers;
pub mod upstream;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use txgate_config::{ScreenConfig, Settings, Source};
use txgate_screen::Screen;

pub use screening::state::Invalidations;
pub use server::listeners::Listeners;

use crate::background::{Fatal, FatalReceiver, fatal_channel};
use crate::limits::admission::AdmissionLayer;
use crate::limits::clients::{ClientLimitLayer, ClientLimits};
use crate::limits::sync::FleetLink;
use crate::metrics::Metrics;
use crate::ops::health::{Readiness, SnapshotState};
use crate::screening::VerdictCache;
use crate::server::identity::Edge;
use crate::server::workers::Workers;
use crate::server::{Drained, ServerSettings};
use crate::upstream::group::{Conductor, GroupState, Nodes};

/// Why a proxy cannot be built from a config.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The upstream client cannot be built from `upstream.url` and
    /// `[upstream.tls]`.
    #[error("{0}")]
    Upstream(String),
    /// TLS on the client port cannot start (`[server.tls]`).
    #[error("{0}")]
    Tls(String),
}

/// Reads and checks every TLS file the config names, as starting would:
/// the client port's certificate and key (`[server.tls]`), and the CA and
/// client certificate of an `https://` or `wss://` node (`[upstream.tls]`).
/// For `check-config`; the error names the setting.
pub fn check_tls(settings: &Settings) -> Result<(), String> {
    check_upstream_tls(settings)?;
    let metrics = Arc::new(Metrics::new());
    server::tls::Tls::new(&settings.server.tls, settings.server.http2, metrics).map(|_| ())
}

/// The client config of each TLS node (its own TLS settings) and of an
/// `https://` op-conductor, built once to refuse bad files at start (each
/// pool builds its own).
fn check_upstream_tls(settings: &Settings) -> Result<(), String> {
    let nodes = settings.nodes().nodes();
    let ws = settings.websocket.enabled;
    for (i, node) in nodes.iter().enumerate() {
        let mut urls = vec![&node.url];
        if ws && let Some(url) = settings.websocket_urls().get(i) {
            urls.push(url);
        }
        let tls: Vec<_> = urls.into_iter().filter(|url| url.is_tls()).collect();
        for url in &tls {
            upstream::tls::server_name(url)?;
        }
        if !tls.is_empty() {
            upstream::tls::client_config(&node.tls, &[])?;
        }
    }
    for url in settings.nodes().conductors().iter().filter(|u| u.is_tls()) {
        upstream::tls::server_name(url)?;
        upstream::tls::client_config(&settings.upstream.tls, &[])?;
    }
    Ok(())
}

/// How a run ended.
#[derive(Debug)]
pub struct Exit {
    /// Whether the connections drained within the grace period.
    pub drained: Drained,
    /// The failure that ended the run, if it was not a shutdown signal.
    pub fatal: Option<Fatal>,
}

/// The assembled proxy, ready to serve.
#[derive(Debug)]
pub struct Proxy {
    config: Arc<Settings>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    screen: Option<Arc<Screen>>,
    verdicts: Option<Arc<VerdictCache>>,
    sources: Vec<Source>,
    /// The probe task's clients to the nodes; their shared state is every
    /// worker's.
    probe_nodes: Nodes,
    client_limits: Option<Arc<ClientLimits>>,
    fleet: Option<Arc<FleetLink>>,
    /// How far the fleet's ban log is read (saved in the snapshot).
    ban_log: txgate_fleet::LogPosition,
    admin: Arc<ops::admin::Admin>,
    conditions: Arc<rpc::conditional::Conditions>,
    /// TLS on the client port, if on.
    tls: Option<server::tls::Tls>,
    /// Holds refusals of clients that keep being refused (`None`: off, or
    /// nothing is refused).
    pacer: Option<Arc<limits::pacing::Pacer>>,
}

/// Reads the API keys again on the operator's signal (SIGHUP).
#[derive(Debug, Clone)]
pub struct KeyReloader {
    limits: Arc<ClientLimits>,
    config: Arc<Settings>,
}

impl KeyReloader {
    /// Reloads `limits.keys_file` (and the config's keys); logs the
    /// outcome. On an error the keys in force stay.
    pub fn reload(&self) {
        match self.limits.reload(&self.config.limits) {
            Ok(keys) => tracing::info!(keys, "API keys reloaded"),
            Err(e) => tracing::error!(error = %e, "API keys not reloaded; the previous keys stay"),
        }
    }
}

impl Proxy {
    /// Builds every stage from the settings (validated and parsed once, at
    /// the edge), and restores the ban snapshot.
    pub fn new(settings: Settings) -> Result<Proxy, BuildError> {
        let config = &settings;
        let admin_token = settings.admin_token().map(str::to_string);
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new(metrics.clone()));
        let group = Arc::new(GroupState::new(
            settings.nodes(),
            &config.upstream,
            &config.screen.chain_ids,
            metrics.clone(),
        ));
        readiness.set_nodes(group.clone());
        let conductor = Conductor::new(
            settings.nodes(),
            &config.upstream,
            &config.admission,
            &group,
            metrics.clone(),
        )
        .map_err(BuildError::Upstream)?;
        let probe_nodes = Nodes::new(
            settings.nodes(),
            &config.upstream,
            &config.admission,
            metrics.clone(),
            group,
        )
        .map_err(BuildError::Upstream)?
        .with_conductor(conductor);
        check_upstream_tls(&settings).map_err(BuildError::Upstream)?;
        let tls = server::tls::Tls::new(&config.server.tls, config.server.http2, metrics.clone())
            .map_err(BuildError::Tls)?;
        metrics
            .http
            .max_in_flight
            .set(config.admission.max_in_flight as i64);
        let screen = config.screen.enabled.then(|| {
            let settings = screening::state::screen_settings(
                &config.screen,
                &config.sidecar,
                config.tracks_hot_calls(),
            );
            metrics
                .screen
                .set_capacity(&settings, config.sidecar.max_verdicts);
            Arc::new(Screen::new(
                settings,
                tokio::time::Instant::now().into_std(),
            ))
        });
        // How far the fleet's ban log is read: from the snapshot, else
        // nowhere yet.
        let ban_log = txgate_fleet::LogPosition::default();
        match (&screen, snapshot_path(&config.screen)) {
            (Some(screen), Some(path)) => {
                ops::snapshot::load(&path, screen, &metrics, &readiness, &ban_log);
            }
            _ => readiness.set_snapshot(SnapshotState::Disabled),
        }
        // Sources are learned from only while screening.
        let sources = settings.sources().to_vec();
        let learning = !sources.is_empty() || settings.aeges_listen().is_some();
        let sources = match &screen {
            Some(_) => sources,
            None => {
                if learning {
                    tracing::warn!(
                        "screening is off: the sidecar sources and the aeges listener are not started"
                    );
                }
                Vec::new()
            }
        };
        // ShouldForward verdicts, shared by every worker.
        let verdicts = sources.iter().any(|s| s.should_forward).then(|| {
            Arc::new(VerdictCache::new(
                config.sidecar.max_verdicts,
                config.sidecar.max_probes_in_flight,
            ))
        });
        let fleet = config.redis.enabled().then(Arc::<FleetLink>::default);
        let client_limits = ClientLimits::new(
            &config.limits,
            settings.exempt().to_vec(),
            &config.redis,
            fleet.clone(),
            metrics.clone(),
        )
        .map(Arc::new);
        let rates = rpc::conditional::Rates::new(
            &config.conditional,
            &config.redis,
            fleet.clone(),
            &metrics,
        )
        .map(Arc::new);
        let fleet = match fleet {
            Some(link) if client_limits.is_some() || rates.is_some() => {
                readiness.set_redis(link.clone());
                Some(link)
            }
            Some(_) => {
                tracing::info!("no per-client or conditional limit is set: Redis shares bans only");
                None
            }
            None => None,
        };
        let conditions = Arc::new(rpc::conditional::Conditions::new(
            &config.conditional,
            settings.conditional_targets(),
            settings.conditional_callers(),
            rates,
            &metrics,
        ));
        let admin = Arc::new(ops::admin::Admin {
            metrics: metrics.clone(),
            readiness: readiness.clone(),
            bans: screen.as_ref().map(|screen| {
                ops::admin::Bans::new(
                    screen.clone(),
                    admin_token.clone(),
                    config.admin.max_import_bytes,
                    metrics.clone(),
                )
            }),
            switch: ops::admin::switch::Switch::new(conditions.clone(), admin_token),
        });
        let pacer = limits::pacing::Pacer::new(
            &config.screen.pacing,
            config.limits.ipv6_prefix,
            metrics.clone(),
        )
        .filter(|_| config.screen.enabled && !config.screen.monitor_only);
        Ok(Proxy {
            tls,
            pacer,
            client_limits,
            fleet,
            ban_log,
            admin,
            conditions,
            config: Arc::new(settings),
            metrics,
            readiness,
            screen,
            verdicts,
            sources,
            probe_nodes,
        })
    }

    /// Where invalidations go (`None` when screening is off).
    pub fn invalidations(&self) -> Option<Invalidations> {
        self.screen
            .as_ref()
            .map(|screen| Invalidations::new(screen.clone(), self.metrics.clone()))
    }

    /// What reloads the API keys, when per-client limits are on.
    pub fn key_reloader(&self) -> Option<KeyReloader> {
        self.client_limits.as_ref().map(|limits| KeyReloader {
            limits: limits.clone(),
            config: self.config.clone(),
        })
    }

    /// TLS on the client port, if on: its certificate is reloaded on
    /// SIGHUP ([`server::tls::Tls::reload`]).
    pub fn tls(&self) -> Option<server::tls::Tls> {
        self.tls.clone()
    }

    /// The checks on conditional transactions (their switch is flipped on
    /// SIGHUP).
    pub fn conditions(&self) -> Arc<rpc::conditional::Conditions> {
        self.conditions.clone()
    }

    /// The metrics registry and handles.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Serves until `shutdown` completes or a part txgate cannot serve
    /// without fails, then stops accepting, marks itself not ready, drains
    /// the calls in flight for up to the grace period, and stops the
    /// background work in order (the last snapshot is written last).
    pub async fn run(self, listeners: Listeners, shutdown: impl Future<Output = ()>) -> Exit {
        let (fatal, mut failures) = fatal_channel();
        let (server, stack) = match self.worker_share() {
            Ok(share) => share,
            Err(e) => return self.failed_to_start("websocket", e).await,
        };
        let workers = match Workers::start(listeners.rpc, &server, &stack, &fatal) {
            Ok(workers) => workers,
            Err(e) => return self.failed_to_start("workers", e.to_string()).await,
        };
        let background = match self.start_background(listeners.admin, &fatal) {
            Ok(background) => background,
            Err(failure) => {
                let _ = workers.drain().await;
                return self.failed_to_start(&failure.part, failure.error).await;
            }
        };
        let failure = wait_for_stop(shutdown, &mut failures).await;
        if let Some(failure) = &failure {
            self.readiness.set_failed(&failure.part);
        }
        self.readiness.start_draining();
        let failure = match failure {
            Some(failure) => Some(failure),
            None => self.lame_duck(&mut failures).await,
        };
        // Held refusals go out now; the grace period is for calls.
        if let Some(pacer) = &self.pacer {
            pacer.stop_holding();
        }
        let (drained, drain_failure) = workers.drain().await;
        background.stop().await;
        // A part that failed while draining (a worker, the admin listener)
        // still makes the exit a failure.
        let fatal = failure.or(drain_failure).or_else(|| failures.try_recv());
        Exit { drained, fatal }
    }

    /// Keeps serving, not ready, for `shutdown.drain_delay_ms`, so that a
    /// load balancer takes this instance out of rotation before it stops
    /// accepting; cut short (and the failure returned) if a part fails
    /// meanwhile.
    async fn lame_duck(&self, failures: &mut FatalReceiver) -> Option<Fatal> {
        let delay = self.config.shutdown.drain_delay;
        if delay.is_zero() {
            return None;
        }
        tracing::info!(
            delay_ms = delay.as_millis() as u64,
            "not ready; serving on until the load balancer notices"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => None,
            failure = failures.recv() => {
                self.readiness.set_failed(&failure.part);
                tracing::error!(part = failure.part, "failed while draining: stopping now");
                Some(failure)
            }
        }
    }

    /// What the workers share: the server's side (settings, client
    /// identity, the stop) and the stack every worker builds its service
    /// from.
    fn worker_share(&self) -> Result<(server::workers::Shared, stack::Stack), String> {
        let config = &self.config;
        let admission = AdmissionLayer::new(
            config.admission.max_in_flight,
            config.admission.retry_after_secs,
            self.metrics.clone(),
        );
        // One stop for the workers' accept loops and their WebSocket
        // sessions.
        let stop = tokio_util::sync::CancellationToken::new();
        let websockets = rpc::websocket::WebSockets::new(
            &config.websocket,
            &config.upstream,
            config.nodes(),
            config.websocket_urls(),
            self.probe_nodes.state().clone(),
            admission.clone(),
            stop.clone(),
            self.metrics.clone(),
        )?
        .map(Arc::new);
        let server = server::workers::Shared {
            metrics: self.metrics.clone(),
            settings: ServerSettings {
                max_connections: config
                    .server
                    .max_connections
                    .div_ceil(config.server.effective_workers()),
                header_read_timeout: config.server.header_read_timeout,
                idle_timeout: config.server.idle_timeout,
                http2: config.server.http2,
                grace_period: config.shutdown.grace_period,
                tls: self.tls.clone(),
            },
            edge: Arc::new(Edge::new(
                &config.server,
                config.trusted_proxies().to_vec(),
                self.metrics.clone(),
            )),
            stop,
        };
        let probed = self.sources.iter().find(|s| s.should_forward).cloned();
        let stack = stack::Stack {
            group: self.probe_nodes.state().clone(),
            config: config.clone(),
            metrics: self.metrics.clone(),
            client_limits: ClientLimitLayer::new(
                self.client_limits.clone(),
                config.admission.retry_after_secs,
            ),
            admission,
            screen: self.screen.clone(),
            verdicts: self.verdicts.clone().zip(probed),
            process: rpc::PerProcess {
                refusals: Arc::new(screening::RefusalLog::new(
                    &self.config.log,
                    &self.metrics.screen,
                )),
                submissions: Arc::new(rpc::submission_log::SubmissionLog::new(
                    &self.config.log,
                    self.metrics.nodes.submission_log_suppressed.clone(),
                )),
                conditions: self.conditions.clone(),
                sync: Arc::new(rpc::sync::SyncCalls::new(
                    config.admission.effective_max_sync_in_flight(),
                    config.upstream.sync_call_timeout,
                    &self.metrics,
                )),
                websockets,
                pacer: self.pacer.clone(),
            },
        };
        Ok((server, stack))
    }

    async fn failed_to_start(&self, part: &str, error: String) -> Exit {
        let fatal = Fatal {
            part: part.to_string(),
            error,
        };
        tracing::error!(part, error = %fatal.error, "cannot start");
        self.readiness.set_failed(part);
        Exit {
            drained: Drained::Clean,
            fatal: Some(fatal),
        }
    }
}

/// The shutdown signal, or the first fatal failure.
async fn wait_for_stop(
    shutdown: impl Future<Output = ()>,
    failures: &mut FatalReceiver,
) -> Option<Fatal> {
    tokio::select! {
        () = shutdown => None,
        failure = failures.recv() => Some(failure),
    }
}

fn snapshot_path(screen: &ScreenConfig) -> Option<PathBuf> {
    let path = &screen.snapshot_path;
    (screen.enabled && !path.is_empty()).then(|| PathBuf::from(path))
}
