//! What a proxy runs beside its workers, started in the order it must
//! stop: the admin listener, the health probe, the limits' sync, TLS
//! reloads, pacing's upkeep, and, while screening, what learns bans (one
//! stream per sidecar source, the shared bans, the Aeges listener, all
//! feeding the batch worker) and the ban snapshot.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use txgate_screen::Screen;

use crate::background::{Background, Fatal, FatalSender, Role};
use crate::screening::state::Invalidations;
use crate::{Proxy, aeges, limits, ops, screening, sidecar, snapshot_path};

impl Proxy {
    /// Every background task, in the order they must stop: the admin
    /// listener and the health probe serve through the drain; the sidecar
    /// stream stops between two messages, then the batch worker applies
    /// what was queued, then the snapshot task writes the last snapshot.
    pub(crate) fn start_background(
        &self,
        admin: std::net::TcpListener,
        fatal: &FatalSender,
    ) -> Result<Background, Fatal> {
        let (config, metrics, readiness) = (&self.config, &self.metrics, &self.readiness);
        let mut background = Background::new(fatal.clone(), metrics.clone());
        let admin = TcpListener::from_std(admin).map_err(|e| Fatal {
            part: "admin".into(),
            error: e.to_string(),
        })?;
        // Stop deadlines: the stream and the queue drain in well under a
        // second; the last snapshot of a million bans takes a few. The sum
        // stays inside deploy/txgate.service's TimeoutStopSec with the
        // default grace period.
        let quick = Duration::from_secs(2);
        background.spawn("admin", Role::Essential, quick, |stop| {
            ops::admin::serve(admin, self.admin.clone(), stop)
        });
        let nodes = self.probe_nodes.clone();
        let (interval, timeout) = (
            config.upstream.health_interval,
            config.upstream.probe_timeout,
        );
        background.spawn("health-probe", Role::Optional, quick, |stop| {
            ops::health::probe_task(nodes, readiness.clone(), interval, timeout, stop)
        });
        self.start_client_limits(&mut background);
        if let Some(tls) = &self.tls
            && let Some(interval) = tls.reload_interval()
        {
            background.spawn("tls-reload", Role::Optional, quick, |stop| {
                tls.watch(interval, stop)
            });
        }
        if let Some(pacer) = &self.pacer {
            background.spawn("pacing", Role::Optional, quick, |stop| {
                pacer.clone().upkeep(stop)
            });
        }
        let Some(screen) = &self.screen else {
            return Ok(background);
        };
        let verdicts = self.verdicts.clone();
        background.spawn("upkeep", Role::Optional, quick, |stop| {
            screening::state::upkeep(screen.clone(), verdicts, metrics.clone(), stop)
        });
        self.start_learning(screen, &mut background)?;
        if let Some(path) = snapshot_path(&config.screen) {
            let interval = config.screen.snapshot_interval;
            background.spawn(
                "ban-snapshot",
                Role::Optional,
                Duration::from_secs(30),
                |stop| {
                    let position = self.ban_log.clone();
                    ops::snapshot::run(
                        path,
                        screen.clone(),
                        metrics.clone(),
                        interval,
                        position,
                        stop,
                    )
                },
            );
        }
        Ok(background)
    }

    /// The rate limits' task: the fleet sync with Redis when one is
    /// configured (the per-client limits and the conditional calls'
    /// rates), else the tracked-clients gauges alone.
    fn start_client_limits(&self, background: &mut Background) {
        let quick = Duration::from_secs(2);
        // The conditional rates first: a handful of entries, drained every
        // sync even when the per-client tables have more than one sync
        // takes.
        let mut tables: Vec<Arc<dyn limits::sync::Synced>> = Vec::new();
        if let Some(rates) = self.conditions.rates() {
            tables.push(rates);
        }
        if let Some(limits) = &self.client_limits {
            tables.push(limits.clone());
        }
        if tables.is_empty() {
            return;
        }
        match &self.fleet {
            Some(link) => {
                let (link, config) = (link.clone(), self.config.redis.clone());
                let metrics = self.metrics.clone();
                background.spawn("limits-fleet-sync", Role::Optional, quick, |stop| {
                    limits::sync::run(tables, link, config, metrics, stop)
                });
            }
            None => {
                background.spawn("limits-gauges", Role::Optional, quick, |stop| {
                    limits::sync::gauges(tables, stop)
                });
            }
        }
    }

    /// The Aeges listener on `addr`: failure reports onto `queue`, and the
    /// pool's questions judged against `screen`.
    fn start_aeges(
        &self,
        addr: std::net::SocketAddr,
        queue: tokio::sync::mpsc::Sender<txgate_screen::Invalidation>,
        share: Option<sidecar::shared_bans::Share>,
        screen: &Arc<Screen>,
        background: &mut Background,
    ) -> Result<(), Fatal> {
        let (config, metrics) = (&self.config, &self.metrics);
        let fatal = |error: String| Fatal {
            part: "aeges".into(),
            error,
        };
        let listener = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| fatal(format!("cannot bind {addr}: {e}")))?;
        let reports = aeges::Reports::new(
            config.aeges_report_allow().to_vec(),
            Some(config.aeges.report_token.clone()),
            config.aeges.max_report_bytes,
            queue,
            screen.clone(),
            metrics.clone(),
        )
        .with_share(share);
        let verifier = aeges::Verifier::new(
            aeges::VerifySettings {
                allow: config.aeges_verify_allow().to_vec(),
                max_bytes: config.aeges.max_verify_bytes,
                max_in_flight: config.aeges.max_in_flight,
                monitor_only: config.screen.monitor_only,
            },
            screen.clone(),
            metrics.clone(),
        );
        let proxyd = aeges::ProxydHook::new(
            aeges::HookSettings {
                allow: config.aeges_proxyd_allow().to_vec(),
                token: Some(config.aeges.proxyd_token.clone()),
                max_bytes: config.aeges.max_proxyd_bytes,
                txs_per_sec: config.aeges.proxyd_txs_per_sec,
                burst: config.aeges.proxyd_burst,
                max_in_flight: config.aeges.max_in_flight,
                monitor_only: config.screen.monitor_only,
            },
            screen.clone(),
            metrics.clone(),
        );
        let served = Arc::new(aeges::Aeges {
            reports,
            verifier,
            proxyd,
        });
        tracing::info!(
            aeges = %addr,
            "aeges listener: POST /report, gRPC aeges.v1.AegesService/VerifyTransaction, \
             POST /proxyd/validate"
        );
        background.spawn("aeges", Role::Essential, Duration::from_secs(3), |stop| {
            aeges::serve_on_own_thread(listener, served, stop)
        });
        Ok(())
    }

    /// What learns bans: one stream per sidecar source and the Aeges
    /// listener, all feeding one queue that the batch worker applies.
    fn start_learning(
        &self,
        screen: &Arc<Screen>,
        background: &mut Background,
    ) -> Result<(), Fatal> {
        let (config, metrics, readiness) = (&self.config, &self.metrics, &self.readiness);
        let aeges = config.aeges_listen();
        // With Redis, an instance also learns the bans the others share.
        let fleet = config.redis.enabled();
        if self.sources.is_empty() && aeges.is_none() && !fleet {
            return Ok(());
        }
        let (queue, queued) = tokio::sync::mpsc::channel(config.sidecar.channel_capacity);
        let (share, outbox) = match fleet {
            true => {
                let (share, outbox) = sidecar::shared_bans::share(metrics.clone());
                (Some(share), Some(outbox))
            }
            false => (None, None),
        };
        let sink = sidecar::stream::Sink {
            queue: queue.clone(),
            screen: screen.clone(),
            metrics: metrics.clone(),
            share: share.clone(),
        };
        for source in &self.sources {
            let url = format!("http://{}", source.url.authority());
            let index = readiness.add_source(source.protocol.as_str(), &url);
            let settings = sidecar::stream::StreamSettings {
                protocol: source.protocol,
                url,
                connect_timeout: config.sidecar.connect_timeout,
                keepalive: sidecar::Keepalive::from(&config.sidecar),
                reconnect_initial: config.sidecar.reconnect_initial,
                reconnect_max: config.sidecar.reconnect_max,
                max_message_bytes: config.sidecar.max_message_bytes,
            };
            let sink = sink.clone();
            background.spawn(
                "sidecar-stream",
                Role::Optional,
                Duration::from_secs(5),
                |stop| sidecar::stream::run(settings, sink, readiness.clone(), index, stop),
            );
        }
        drop(sink);
        if let Some(outbox) = outbox {
            let settings = sidecar::shared_bans::LogSettings {
                redis: config.redis.clone(),
                window: ban_log_window(&config.screen),
            };
            let invalidations = Invalidations::new(screen.clone(), metrics.clone());
            let (position, metrics) = (self.ban_log.clone(), metrics.clone());
            background.spawn(
                "fleet-bans",
                Role::Optional,
                Duration::from_secs(2),
                |stop| {
                    sidecar::shared_bans::run(
                        settings,
                        outbox,
                        invalidations,
                        position,
                        metrics,
                        stop,
                    )
                },
            );
        }
        if let Some(addr) = aeges {
            self.start_aeges(addr, queue.clone(), share, screen, background)?;
        }
        drop(queue);
        // Ends by itself once every source and the listener are gone and
        // the queue is empty.
        let invalidations = Invalidations::new(screen.clone(), metrics.clone());
        let batch_max = config.sidecar.batch_max;
        background.spawn(
            "invalidation-worker",
            Role::Optional,
            Duration::from_secs(10),
            |_| sidecar::worker::run(queued, invalidations, batch_max),
        );
        Ok(())
    }
}

/// How long an entry of the fleet's ban log can hold a live ban: the
/// longest life of what it carries (a ban, a failure's window), plus the
/// clock skew a start may have.
fn ban_log_window(screen: &txgate_config::ScreenConfig) -> Duration {
    let skew = Duration::from_millis(txgate_screen::wall::MAX_CLOCK_SKEW);
    screen.denied_ttl.max(screen.recent_failure_ttl) + skew
}
