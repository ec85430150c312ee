//! The sidecar link: the invalidation stream, the batching worker that
//! applies it, and the channel the ShouldForward probe uses.
//!
//! ```text
//! sidecar ──gRPC stream──▶ stream::run ──bounded queue──▶ worker::run ──▶ Screen::apply
//! ```
//!
//! - [`stream`] subscribes, converts each message, and queues it. It
//!   reconnects with capped exponential backoff and jitter, and reports the
//!   link in `/readyz` and metrics. While it is down, screening keeps
//!   everything it learned and forwards the rest (fail open). Asked to
//!   stop, it stops between two messages: a message it received is always
//!   queued first.
//! - The queue is bounded. When it is full the stream waits for room
//!   before reading the next message, so HTTP/2 flow control slows the
//!   sidecar: nothing is dropped, and the wait is counted.
//! - [`worker`] takes whatever is queued (up to `batch_max`) and applies it
//!   in one pass, so a storm turns into few large batches and request
//!   handling never waits for it. It ends once the stream is gone and the
//!   queue is empty.

pub mod stream;
pub mod worker;

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// A lazily connected channel to the sidecar (connects on first use and
/// reconnects by itself). Must run inside a tokio runtime.
pub fn channel(url: &str, connect_timeout: Duration) -> Result<Channel, String> {
    Ok(Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("sidecar url: {e}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .connect_lazy())
}
