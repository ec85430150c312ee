//! Readiness: the upstream health probe and the draining flag behind
//! `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::limits::sync::FleetLink;
use crate::metrics::Metrics;
use crate::upstream::group::{GroupState, Nodes, probe_round};

/// What `/readyz` reports.
#[derive(Debug)]
pub struct Readiness {
    upstream_up: AtomicBool,
    draining: AtomicBool,
    sources: Mutex<Vec<SourceState>>,
    snapshot: AtomicU8,
    /// The part whose failure ends the process, once one failed.
    failed: Mutex<Option<String>>,
    /// The link to the fleet's Redis, when one is configured.
    redis: std::sync::OnceLock<Arc<FleetLink>>,
    /// The node group, for its nodes' states.
    nodes: std::sync::OnceLock<Arc<GroupState>>,
    metrics: Arc<Metrics>,
}

/// What the start made of the ban snapshot, as `/readyz` reports it. Never
/// decides readiness: txgate serves without its bans rather than not at
/// all, and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotState {
    /// No snapshot configured.
    Disabled,
    /// Configured; no file yet (a first start).
    Empty,
    /// Restored from the newest file.
    Restored,
    /// The newest was missing or unusable; restored the previous one.
    RestoredPrevious,
    /// Neither file was usable: started without bans.
    Failed,
}

impl SnapshotState {
    const ALL: [SnapshotState; 5] = [
        SnapshotState::Disabled,
        SnapshotState::Empty,
        SnapshotState::Restored,
        SnapshotState::RestoredPrevious,
        SnapshotState::Failed,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotState::Disabled => "disabled",
            SnapshotState::Empty => "empty",
            SnapshotState::Restored => "restored",
            SnapshotState::RestoredPrevious => "restored_previous",
            SnapshotState::Failed => "failed",
        }
    }
}

/// The sidecar link as `/readyz` reports it. The link does not decide
/// readiness: with the sidecar down txgate fails open and keeps serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarLink {
    /// No sidecar configured.
    Disabled,
    /// Configured, stream not open (of every source, in the aggregate).
    Down,
    /// Some sources' streams open, not all (aggregate only).
    Partial,
    /// Stream open (of every source, in the aggregate).
    Up,
}

impl SidecarLink {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            SidecarLink::Disabled => "disabled",
            SidecarLink::Down => "down",
            SidecarLink::Partial => "partial",
            SidecarLink::Up => "up",
        }
    }
}

/// One sidecar source's link, as `/readyz` details it.
#[derive(Debug, Clone)]
pub struct SourceState {
    /// Its protocol (`txgate.v1`, `rpcproxy.v1`, `sidecar.transport.v1`).
    pub protocol: &'static str,
    /// Its URL.
    pub url: String,
    /// Its stream.
    pub link: SidecarLink,
    /// Why it is down, when known (for example `unimplemented`: the server
    /// does not speak the configured protocol).
    pub error: Option<&'static str>,
    /// For a source asked to replay (`txgate.v1`): whether it has sent its
    /// live set since the stream opened. `None`: no replay in its protocol.
    pub caught_up: Option<bool>,
}

impl Readiness {
    /// Not ready until the first probe succeeds.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Readiness {
            upstream_up: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            sources: Mutex::new(Vec::new()),
            snapshot: AtomicU8::new(0),
            failed: Mutex::new(None),
            redis: std::sync::OnceLock::new(),
            nodes: std::sync::OnceLock::new(),
            metrics,
        }
    }

    /// Reports the fleet's Redis link in `/readyz` (never decides
    /// readiness: without Redis, limits are local and txgate serves).
    pub fn set_redis(&self, link: Arc<FleetLink>) {
        let _ = self.redis.set(link);
    }

    /// Reports the node group's nodes in `/readyz`.
    pub fn set_nodes(&self, group: Arc<GroupState>) {
        let _ = self.nodes.set(group);
    }

    /// The node group, once set (`None` in the short form, whose one node
    /// is `upstream`).
    pub fn nodes(&self) -> Option<&GroupState> {
        self.nodes
            .get()
            .map(|group| &**group)
            .filter(|group| !group.is_short_form())
    }

    /// The fleet's Redis link, when one is configured.
    pub fn redis(&self) -> Option<&FleetLink> {
        self.redis.get().map(|link| &**link)
    }

    /// Whether the last upstream probe succeeded.
    pub fn upstream_up(&self) -> bool {
        self.upstream_up.load(Ordering::Acquire)
    }

    /// Whether shutdown has begun.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Ready to take traffic.
    pub fn ready(&self) -> bool {
        self.upstream_up() && !self.draining() && self.failed().is_none()
    }

    /// The part that failed, if one did (the process is ending).
    pub fn failed(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the failure of a part txgate cannot serve without:
    /// `/readyz` answers 503 from now on and names it.
    pub fn set_failed(&self, part: &str) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.get_or_insert_with(|| part.to_string());
        self.metrics.process.fatal_failures.inc();
    }

    /// What the start made of the ban snapshot.
    pub fn snapshot(&self) -> SnapshotState {
        SnapshotState::ALL
            .get(usize::from(self.snapshot.load(Ordering::Acquire)))
            .copied()
            .unwrap_or(SnapshotState::Disabled)
    }

    /// Records what the start made of the ban snapshot.
    pub fn set_snapshot(&self, state: SnapshotState) {
        self.snapshot.store(state as u8, Ordering::Release);
    }

    /// Records a probe result.
    pub fn set_upstream_up(&self, up: bool) {
        let was = self.upstream_up.swap(up, Ordering::AcqRel);
        self.metrics.upstream.up.set(i64::from(up));
        if was != up {
            if up {
                tracing::info!("upstream reachable");
            } else {
                tracing::warn!("upstream unreachable");
            }
        }
    }

    fn sources_lock(&self) -> std::sync::MutexGuard<'_, Vec<SourceState>> {
        self.sources.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sidecar links in one word: disabled (no source), up (every
    /// source's stream open), down (none), partial.
    pub fn sidecar(&self) -> SidecarLink {
        let sources = self.sources_lock();
        let up = sources.iter().filter(|s| s.link == SidecarLink::Up).count();
        match (sources.len(), up) {
            (0, _) => SidecarLink::Disabled,
            (n, up) if up == n => SidecarLink::Up,
            (_, 0) => SidecarLink::Down,
            _ => SidecarLink::Partial,
        }
    }

    /// Each source's link.
    pub fn sources(&self) -> Vec<SourceState> {
        self.sources_lock().clone()
    }

    /// Registers a sidecar source (down until its stream opens); returns
    /// its index for [`Readiness::set_source`].
    pub fn add_source(&self, protocol: &'static str, url: &str) -> usize {
        let mut sources = self.sources_lock();
        sources.push(SourceState {
            protocol,
            url: url.to_string(),
            link: SidecarLink::Down,
            error: None,
            caught_up: (protocol == "txgate.v1").then_some(false),
        });
        self.metrics
            .sidecar
            .source_up
            .with_label_values(&[protocol, url])
            .set(0);
        sources.len() - 1
    }

    /// Records a source's link, and why it is down when known; logs the
    /// changes (not every retry), unless `log` is false (a flapping link,
    /// whose ends the stream logs at powers of two).
    pub fn set_source(
        &self,
        index: usize,
        link: SidecarLink,
        error: Option<&'static str>,
        log: bool,
    ) {
        let mut sources = self.sources_lock();
        let Some(source) = sources.get_mut(index) else {
            return;
        };
        let (was, was_error) = (source.link, source.error);
        source.link = link;
        source.error = error;
        // A stream (re)opened replays from scratch.
        if source.caught_up.is_some() && was != link {
            source.caught_up = Some(false);
            self.metrics
                .sidecar
                .caught_up
                .with_label_values(&[source.protocol, &source.url])
                .set(0);
        }
        let (protocol, url) = (source.protocol, source.url.clone());
        // The gauges are set under the lock, so two sources changing at
        // once cannot leave a stale count.
        let up = sources.iter().filter(|s| s.link == SidecarLink::Up).count();
        self.metrics.sidecar.up.set(up as i64);
        self.metrics
            .sidecar
            .source_up
            .with_label_values(&[protocol, &url])
            .set(i64::from(link == SidecarLink::Up));
        drop(sources);
        match (was, link) {
            _ if !log => {}
            (SidecarLink::Up, SidecarLink::Up) => {}
            (_, SidecarLink::Up) => tracing::info!(protocol, url, "sidecar stream open"),
            // Lost after being up: the operator wants to know.
            (SidecarLink::Up, _) => tracing::warn!(
                protocol,
                url,
                reason = error.unwrap_or_default(),
                "sidecar link lost: forwarding (fail open), keeping learned bans"
            ),
            _ if error != was_error && error == Some("unimplemented") => tracing::error!(
                protocol,
                url,
                "the sidecar does not serve this protocol (gRPC UNIMPLEMENTED): check the \
                 source's `protocol` in [sidecar]; forwarding (fail open), retrying with backoff"
            ),
            // Never reached yet, or a new reason: one line per change, not
            // per retry.
            _ if error != was_error && error.is_some() => tracing::warn!(
                protocol,
                url,
                reason = error.unwrap_or_default(),
                "sidecar source down: forwarding (fail open), retrying with backoff"
            ),
            _ => {}
        }
    }

    /// Records that a source has replayed its live set.
    pub fn set_caught_up(&self, index: usize) {
        let mut sources = self.sources_lock();
        let Some(source) = sources.get_mut(index) else {
            return;
        };
        if source.caught_up == Some(false) {
            source.caught_up = Some(true);
            self.metrics
                .sidecar
                .caught_up
                .with_label_values(&[source.protocol, &source.url])
                .set(1);
            tracing::info!(
                protocol = source.protocol,
                url = source.url,
                "sidecar caught up: every live ban replayed"
            );
        }
    }

    /// Marks the start of shutdown: `/readyz` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.metrics.http.draining.set(1);
    }
}

/// The probe task: a round of node probes every `interval` (each within
/// `timeout`), until `stop`.
pub async fn probe_task(
    nodes: Nodes,
    readiness: Arc<Readiness>,
    interval: Duration,
    timeout: Duration,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let up = tokio::select! {
            () = stop.cancelled() => return,
            up = probe_round(&nodes, timeout) => up,
        };
        readiness.set_upstream_up(up);
    }
}
