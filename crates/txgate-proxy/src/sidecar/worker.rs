//! The batching worker's queue: what every source puts on it ([`queue`])
//! and the worker that applies it in batches ([`run`]).

use tokio::sync::mpsc;
use txgate_screen::Invalidation;

use crate::metrics::Metrics;
use crate::screening::state::Invalidations;

/// Queues one invalidation, waiting for room when the queue is full
/// (counted); false when the worker is gone.
pub async fn queue(
    invalidation: Invalidation,
    queue: &mpsc::Sender<Invalidation>,
    metrics: &Metrics,
) -> bool {
    let m = &metrics.sidecar;
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

/// Applies queued invalidations in batches of up to `batch_max` until
/// every sender is gone and the queue is empty: at shutdown the stream
/// stops first, and what it queued is still applied.
pub async fn run(
    mut queue: mpsc::Receiver<Invalidation>,
    invalidations: Invalidations,
    batch_max: usize,
) {
    let mut batch = Vec::with_capacity(batch_max);
    while queue.recv_many(&mut batch, batch_max).await > 0 {
        invalidations.apply(&batch);
        let metrics = &invalidations.metrics().sidecar;
        metrics.batches.inc();
        metrics.queue_depth.set(queue.len() as i64);
        batch.clear();
    }
}
