//! The sidecar link: the invalidation stream, the batching worker, and the
//! ShouldForward client.
//!
//! ```text
//! sidecar ──gRPC stream──▶ stream_task ──bounded queue──▶ batch_worker ──▶ Screen::apply
//! ```
//!
//! - [`stream_task`] subscribes, converts each message, and queues it. It
//!   reconnects with capped exponential backoff and jitter, and reports the
//!   link in `/readyz` and metrics. While it is down, screening keeps
//!   everything it learned and forwards the rest (fail open).
//! - The queue is bounded. When it is full the stream task waits for room
//!   before reading the next message, so HTTP/2 flow control slows the
//!   sidecar: nothing is dropped, and the wait is counted.
//! - [`batch_worker`] takes whatever is queued (up to `batch_max`) and
//!   applies it in one pass, so a storm turns into few large batches and
//!   request handling never waits for it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient;
use txgate_proto::{to_invalidation, v1};
use txgate_screen::Invalidation;

use crate::Invalidations;
use crate::health::{Readiness, SidecarLink};
use crate::metrics::Metrics;
use std::sync::Arc;

/// Stream settings.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// `http://host:port`.
    pub url: String,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// First reconnect delay.
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
}

/// A lazily connected channel to the sidecar (connects on first use and
/// reconnects by itself).
pub fn channel(url: &str, connect_timeout: Duration) -> Result<Channel, String> {
    Ok(Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("sidecar url: {e}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .connect_lazy())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `delay` with ±25% jitter, from the clock's low bits (no RNG needed for
/// spreading a fleet's reconnects).
fn jittered(delay: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let spread = f64::from(nanos % 1000) / 1000.0 * 0.5 - 0.25;
    delay.mul_f64(1.0 + spread)
}

/// Subscribes to the sidecar's invalidations and queues them, forever.
pub async fn stream_task(
    settings: StreamSettings,
    queue: mpsc::Sender<Invalidation>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) {
    let m = &metrics.sidecar;
    let mut delay = settings.reconnect_initial;
    readiness.set_sidecar(SidecarLink::Down);
    loop {
        let connected = Endpoint::from_shared(settings.url.clone()).map(|e| {
            e.connect_timeout(settings.connect_timeout)
                .tcp_nodelay(true)
        });
        let endpoint = match connected {
            Ok(endpoint) => endpoint,
            Err(e) => {
                tracing::error!(error = %e, "sidecar url is not usable; no invalidations");
                return;
            }
        };
        match endpoint.connect().await {
            Ok(channel) => {
                let mut client = RpcProxyHeuristicsClient::new(channel);
                match client.stream_invalidations(()).await {
                    Ok(response) => {
                        readiness.set_sidecar(SidecarLink::Up);
                        delay = settings.reconnect_initial;
                        let mut stream = response.into_inner();
                        loop {
                            match stream.message().await {
                                Ok(Some(message)) => {
                                    if !enqueue(&message, &queue, &metrics).await {
                                        return;
                                    }
                                }
                                Ok(None) => {
                                    tracing::warn!("sidecar ended the invalidation stream");
                                    break;
                                }
                                Err(status) => {
                                    tracing::warn!(code = ?status.code(), "sidecar stream broke");
                                    break;
                                }
                            }
                        }
                    }
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = status.message(), "sidecar refused the subscription");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "sidecar connect failed"),
        }
        readiness.set_sidecar(SidecarLink::Down);
        m.reconnects.inc();
        tokio::time::sleep(jittered(delay)).await;
        delay = (delay * 2).min(settings.reconnect_max);
    }
}

/// Converts and queues one message; false when the worker is gone.
async fn enqueue(
    message: &v1::Invalidation,
    queue: &mpsc::Sender<Invalidation>,
    metrics: &Metrics,
) -> bool {
    let m = &metrics.sidecar;
    m.received.inc();
    let invalidation = match to_invalidation(message) {
        Ok(inv) => inv,
        Err(e) => {
            m.malformed.inc();
            tracing::warn!(error = %e, "malformed invalidation from the sidecar, not applied");
            return true;
        }
    };
    if message.observed_at > 0 {
        let lag = unix_ms().saturating_sub(message.observed_at);
        m.lag.observe(lag as f64 / 1000.0);
    }
    match queue.try_send(invalidation) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(invalidation)) => {
            // Wait for room: the stream is not read meanwhile, which slows
            // the sidecar down. Nothing is dropped.
            m.queue_full.inc();
            if queue.send(invalidation).await.is_err() {
                return false;
            }
        }
        Err(mpsc::error::TrySendError::Closed(_)) => return false,
    }
    m.queue_depth
        .set((queue.max_capacity() - queue.capacity()) as i64);
    true
}

/// Applies queued invalidations in batches of up to `batch_max`, forever
/// (until every sender is gone).
pub async fn batch_worker(
    mut queue: mpsc::Receiver<Invalidation>,
    invalidations: Invalidations,
    batch_max: usize,
    metrics: Arc<Metrics>,
) {
    let mut batch = Vec::with_capacity(batch_max);
    while queue.recv_many(&mut batch, batch_max).await > 0 {
        invalidations.apply(&batch);
        metrics.sidecar.batches.inc();
        metrics.sidecar.queue_depth.set(queue.len() as i64);
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(1000));
            assert!(d >= Duration::from_millis(750) && d <= Duration::from_millis(1250));
        }
    }
}
