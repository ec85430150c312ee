//! A client connection's place under `server.max_connections`, shared by
//! the accept task and the WebSocket session the connection may become,
//! and the mark each request leaves on it for the idle check.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::OwnedSemaphorePermit;

/// A client connection's place under `server.max_connections`, given back
/// (and the open-connections gauge lowered) when its last holder drops it:
/// the accept task, or the WebSocket session the connection became.
#[derive(Debug)]
pub struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    open: prometheus::IntGauge,
    /// A request started or ended since the idle check last looked.
    touched: AtomicBool,
    /// Requests started and not yet answered.
    in_flight: AtomicU64,
}

impl ConnectionSlot {
    pub(crate) fn new(permit: OwnedSemaphorePermit, open: prometheus::IntGauge) -> ConnectionSlot {
        open.inc();
        ConnectionSlot {
            _permit: permit,
            open,
            touched: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
        }
    }

    /// A request started on the connection: marked, and in flight until
    /// the guard is dropped (with the request's future, answered or not).
    #[inline]
    pub(crate) fn start_request(self: &Arc<Self>) -> InFlight {
        self.touched.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Whether no request started or ended since the last look and none
    /// is in flight; the look clears the mark.
    pub(crate) fn idle_since_last_look(&self) -> bool {
        // The count first: a call that ended before this read (its
        // `Release` decrement seen here) marked the connection before it
        // ended, so the swap below sees that mark. Read the other way round
        // a call ending between the two reads would look idle.
        let busy = self.in_flight.load(Ordering::Acquire) != 0;
        let touched = self.touched.swap(false, Ordering::Relaxed);
        !touched && !busy
    }
}

/// A request in flight on its connection (see
/// `ConnectionSlot::start_request`).
#[derive(Debug)]
pub struct InFlight(Arc<ConnectionSlot>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Marked as well: the connection's idle stretch starts when its
        // last call ends, not at the check after it started (a check just
        // after a long call would find it idle while its client is sending
        // the next).
        self.0.touched.store(true, Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.dec();
    }
}
