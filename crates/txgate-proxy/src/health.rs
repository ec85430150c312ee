//! Readiness: the upstream health probe and the draining flag behind
//! `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use crate::metrics::Metrics;
use crate::upstream::Upstream;

/// What `/readyz` reports.
#[derive(Debug)]
pub struct Readiness {
    upstream_up: AtomicBool,
    draining: AtomicBool,
    sidecar: AtomicU8,
    metrics: Arc<Metrics>,
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
        self.upstream_up() && !self.draining()
    }

    /// Records a probe result.
    pub fn set_upstream_up(&self, up: bool) {
        let was = self.upstream_up.swap(up, Ordering::AcqRel);
        self.metrics.upstream_up.set(i64::from(up));
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
        self.metrics.draining.set(1);
    }
}

/// The probe task: `eth_chainId` every `interval`. The returned future runs
/// until dropped; the binary spawns it and aborts it at shutdown.
pub async fn probe_task(upstream: Upstream, readiness: Arc<Readiness>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let up = upstream.probe().await;
        readiness.set_upstream_up(up);
    }
}
