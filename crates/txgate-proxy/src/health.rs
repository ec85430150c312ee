//! Readiness: the upstream health probe and the draining flag behind
//! `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::upstream::Upstream;

/// What `/readyz` reports.
#[derive(Debug)]
pub struct Readiness {
    upstream_up: AtomicBool,
    draining: AtomicBool,
    sidecar: AtomicU8,
    snapshot: AtomicU8,
    /// The part whose failure ends the process, once one failed.
    failed: Mutex<Option<String>>,
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
    /// Configured, stream not open.
    Down,
    /// Stream open.
    Up,
}

impl SidecarLink {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            SidecarLink::Disabled => "disabled",
            SidecarLink::Down => "down",
            SidecarLink::Up => "up",
        }
    }
}

impl Readiness {
    /// Not ready until the first probe succeeds.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Readiness {
            upstream_up: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            sidecar: AtomicU8::new(0),
            snapshot: AtomicU8::new(0),
            failed: Mutex::new(None),
            metrics,
        }
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

    /// The sidecar link.
    pub fn sidecar(&self) -> SidecarLink {
        match self.sidecar.load(Ordering::Acquire) {
            1 => SidecarLink::Down,
            2 => SidecarLink::Up,
            _ => SidecarLink::Disabled,
        }
    }

    /// Records the sidecar link's state.
    pub fn set_sidecar(&self, link: SidecarLink) {
        let value = match link {
            SidecarLink::Disabled => 0,
            SidecarLink::Down => 1,
            SidecarLink::Up => 2,
        };
        let was = self.sidecar.swap(value, Ordering::AcqRel);
        self.metrics
            .sidecar
            .up
            .set(i64::from(link == SidecarLink::Up));
        match (was, link) {
            (2, SidecarLink::Up) | (1, SidecarLink::Down) | (0, SidecarLink::Disabled) => {}
            (_, SidecarLink::Up) => tracing::info!("sidecar stream open"),
            // Lost after being up: the operator wants to know.
            (2, SidecarLink::Down) => {
                tracing::warn!("sidecar unreachable: forwarding (fail open), keeping learned bans")
            }
            (_, SidecarLink::Down) => tracing::info!("connecting to the sidecar"),
            (_, SidecarLink::Disabled) => {}
        }
    }

    /// Marks the start of shutdown: `/readyz` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.metrics.http.draining.set(1);
    }
}

/// The probe task: `eth_chainId` every `interval`, until `stop`.
pub async fn probe_task(
    upstream: Upstream,
    readiness: Arc<Readiness>,
    interval: Duration,
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
            up = upstream.probe() => up,
        };
        readiness.set_upstream_up(up);
    }
}
