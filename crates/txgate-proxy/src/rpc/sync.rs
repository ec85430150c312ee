//! `eth_sendRawTransactionSync` (EIP-7966): the node holds the call until
//! the transaction's receipt (or its own timeout, up to a minute), so a
//! sync call holds an in-flight slot and an upstream connection thousands
//! of times longer than any other call. It gets its own upstream timeout
//! (`upstream.sync_call_timeout_ms`, above the node's longest wait, so the
//! node's own timeout answer arrives first) and its own cap in flight
//! (`admission.max_sync_in_flight`), taken as soon as the method is known,
//! before screening: over it the call is refused at once (HTTP 429,
//! -32005), and the other slots stay free for fast calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};

use crate::metrics::Metrics;
use crate::rpc::rescue::Refusal;

/// The method.
pub const METHOD: &str = "eth_sendRawTransactionSync";

/// The cap and timeout of sync calls, one per process.
#[derive(Debug)]
pub struct SyncCalls {
    max: usize,
    in_flight: AtomicUsize,
    timeout: Duration,
    gauge: IntGauge,
    refused: IntCounter,
}

/// One sync call's slot, given back when dropped.
#[derive(Debug)]
pub struct SyncSlot {
    calls: Arc<SyncCalls>,
}

impl Drop for SyncSlot {
    fn drop(&mut self) {
        self.calls.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.calls.gauge.dec();
    }
}

impl SyncCalls {
    /// At most `max` sync calls in flight (`admission.max_sync_in_flight`,
    /// resolved), each given `timeout` (`upstream.sync_call_timeout_ms`).
    pub fn new(max: usize, timeout: Duration, metrics: &Metrics) -> SyncCalls {
        let m = &metrics.upstream;
        m.sync_max_in_flight
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        SyncCalls {
            max,
            in_flight: AtomicUsize::new(0),
            timeout,
            gauge: m.sync_in_flight.clone(),
            refused: m.sync_refused.clone(),
        }
    }

    /// A slot when `method` is the sync method (`Ok(None)` for any other);
    /// [`Refusal::SyncOverloaded`] when every slot is taken.
    pub fn enter(self: &Arc<Self>, method: &str) -> Result<Option<SyncSlot>, Refusal> {
        if method != METHOD {
            return Ok(None);
        }
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            });
        if taken.is_err() {
            self.refused.inc();
            return Err(Refusal::SyncOverloaded);
        }
        self.gauge.inc();
        Ok(Some(SyncSlot {
            calls: self.clone(),
        }))
    }

    /// The upstream timeout of a request that holds `slots` sync slots
    /// (`None`: none, the ordinary call timeout). A node runs the calls
    /// of a batch one after another, so each sync call adds its wait.
    pub fn timeout(&self, slots: usize) -> Option<Duration> {
        let slots = u32::try_from(slots).unwrap_or(u32::MAX);
        (slots > 0).then(|| self.timeout.saturating_mul(slots))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_sync_calls_take_slots_and_the_cap_holds() {
        let metrics = Metrics::new();
        let sync = Arc::new(SyncCalls::new(2, Duration::from_secs(65), &metrics));
        assert!(sync.enter("eth_sendRawTransaction").unwrap().is_none());
        let a = sync.enter(METHOD).unwrap().unwrap();
        let b = sync.enter(METHOD).unwrap().unwrap();
        assert!(matches!(sync.enter(METHOD), Err(Refusal::SyncOverloaded)));
        assert_eq!(metrics.upstream.sync_in_flight.get(), 2);
        assert_eq!(metrics.upstream.sync_refused.get(), 1);
        drop(a);
        let c = sync.enter(METHOD).unwrap().unwrap();
        drop((b, c));
        assert_eq!(metrics.upstream.sync_in_flight.get(), 0);
        assert_eq!(sync.timeout(1), Some(Duration::from_millis(65_000)));
        assert_eq!(sync.timeout(3), Some(Duration::from_millis(195_000)));
        assert_eq!(sync.timeout(0), None);
    }
}
