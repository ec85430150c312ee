//! The invalidation stream: subscribe, convert, queue; reconnect with
//! capped exponential backoff and jitter.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::transport::Endpoint;
use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient;
use txgate_proto::{to_invalidation, v1};
use txgate_screen::Invalidation;

use crate::health::{Readiness, SidecarLink};
use crate::metrics::Metrics;

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

/// How reading one subscription ended.
#[derive(Debug)]
pub enum Ended {
    /// Asked to stop; every message received was queued.
    Stopped,
    /// The worker is gone (shutdown): nothing more can be applied.
    Closed,
    /// The sidecar ended the stream.
    Finished,
    /// The stream broke.
    Broken(Status),
}

/// Subscribes to the sidecar's invalidations and queues them until `stop`
/// is cancelled, reconnecting whenever the stream ends or breaks.
pub async fn run(
    settings: StreamSettings,
    queue: mpsc::Sender<Invalidation>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    stop: CancellationToken,
) {
    let m = &metrics.sidecar;
    let mut delay = settings.reconnect_initial;
    readiness.set_sidecar(SidecarLink::Down);
    loop {
        let endpoint = match Endpoint::from_shared(settings.url.clone()) {
            Ok(endpoint) => endpoint
                .connect_timeout(settings.connect_timeout)
                .tcp_nodelay(true),
            Err(e) => {
                tracing::error!(error = %e, "sidecar url is not usable; no invalidations");
                return;
            }
        };
        let subscribed = tokio::select! {
            () = stop.cancelled() => return,
            subscribed = async {
                let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
                RpcProxyHeuristicsClient::new(channel)
                    .stream_invalidations(())
                    .await
                    .map_err(|status| {
                        tracing::warn!(code = ?status.code(), message = status.message(),
                            "sidecar refused the subscription");
                        status.to_string()
                    })
            } => subscribed,
        };
        match subscribed {
            Ok(response) => {
                readiness.set_sidecar(SidecarLink::Up);
                delay = settings.reconnect_initial;
                match forward(response.into_inner(), &queue, &metrics, &stop).await {
                    Ended::Stopped => return,
                    Ended::Closed => {
                        // The worker is gone: nothing received is applied
                        // any more, so the link is not up.
                        tracing::error!("invalidation worker gone; sidecar stream closed");
                        readiness.set_sidecar(SidecarLink::Down);
                        return;
                    }
                    Ended::Finished => tracing::warn!("sidecar ended the invalidation stream"),
                    Ended::Broken(status) => {
                        tracing::warn!(code = ?status.code(), "sidecar stream broke")
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "sidecar connect failed"),
        }
        readiness.set_sidecar(SidecarLink::Down);
        m.reconnects.inc();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(jittered(delay)) => {}
        }
        delay = (delay * 2).min(settings.reconnect_max);
    }
}

/// Queues every message of one subscription. `stop` is checked only
/// between messages: a message read from the stream is always queued (or
/// the worker is gone), so nothing received is lost at shutdown.
pub async fn forward<S>(
    mut stream: S,
    queue: &mpsc::Sender<Invalidation>,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Ended
where
    S: Stream<Item = Result<v1::Invalidation, Status>> + Unpin,
{
    loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => return Ended::Stopped,
            next = stream.next() => next,
        };
        match next {
            Some(Ok(message)) => {
                if !enqueue(&message, queue, metrics).await {
                    return Ended::Closed;
                }
            }
            Some(Err(status)) => return Ended::Broken(status),
            None => return Ended::Finished,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use txgate_proto::invalidation_message;
    use txgate_screen::{AssertionKey, Fingerprint};

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(1000));
            assert!(d >= Duration::from_millis(750) && d <= Duration::from_millis(1250));
        }
    }

    fn message(i: u8) -> v1::Invalidation {
        let fp = Fingerprint::from_parts(
            alloy_primitives::Address::repeat_byte(i),
            &[1, 2, 3, 4],
            alloy_primitives::U256::ZERO,
            21_000,
        );
        let key = AssertionKey {
            id: alloy_primitives::B256::repeat_byte(7),
            version: 1,
        };
        invalidation_message(&fp, key, None, None, 1, 0)
    }

    /// Defect: at shutdown the stream task was aborted while it could be
    /// waiting for room in a full queue, and the message it held was lost.
    /// Stopped now, it queues what it holds first.
    #[tokio::test]
    async fn a_stop_never_loses_a_received_message() {
        let metrics = Metrics::new();
        let (queue, mut rx) = mpsc::channel(1);
        let stop = CancellationToken::new();
        let messages: Vec<Result<v1::Invalidation, Status>> =
            (0..10).map(|i| Ok(message(i))).collect();
        let drained = {
            let forwarding = forward(
                futures_util::stream::iter(messages),
                &queue,
                &metrics,
                &stop,
            );
            tokio::pin!(forwarding);
            // The first message fills the queue; the second waits for room.
            assert!(
                tokio::time::timeout(Duration::from_millis(50), &mut forwarding)
                    .await
                    .is_err()
            );
            assert_eq!(metrics.sidecar.received.get(), 2);
            // Shutdown: stop reading. The worker drains meanwhile.
            stop.cancel();
            let drained = tokio::spawn(async move {
                let mut n = 0;
                while rx.recv().await.is_some() {
                    n += 1;
                }
                n
            });
            assert!(matches!(forwarding.await, Ended::Stopped));
            drained
        };
        drop(queue);
        let applied = drained.await.unwrap_or(0);
        assert_eq!(
            applied as u64,
            metrics.sidecar.received.get(),
            "every message received was queued"
        );
        assert_eq!(applied, 2, "no message read after the stop");
    }
}
