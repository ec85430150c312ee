//! The batching worker: applies queued invalidations in batches.

use tokio::sync::mpsc;
use txgate_screen::Invalidation;

use crate::Invalidations;

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
