//! The sidecar links: one stream per configured source, the batching
//! worker that applies what they learn, and the channel the ShouldForward
//! probe uses.
//!
//! ```text
//! source ──gRPC stream──▶ stream::run ──bounded queue──▶ worker::run ──▶ Screen::apply
//!   (txgate.v1 / rpcproxy.v1: invalidations;
//!    sidecar.transport.v1: every tx's result, failures resolved by hash)
//! Aeges listener ──POST /report──────────▶ (same queue)
//! ```
//!
//! - [`protocol`] subscribes in each protocol and turns its messages into
//!   one [`protocol::Message`] type.
//! - [`stream`] keeps one subscription per source, converts each message,
//!   and queues it. It reconnects with capped exponential backoff and
//!   jitter, and reports each source's link in `/readyz` and metrics (a
//!   server that does not speak the configured protocol answers gRPC
//!   UNIMPLEMENTED: one clear log line, the source marked down, retried).
//!   While links are down, screening keeps everything it learned and
//!   forwards the rest (fail open). Asked to stop, it stops between two
//!   messages: a message it received is always queued first.
//! - The queue is bounded. When it is full the stream waits for room
//!   before reading the next message, so HTTP/2 flow control slows the
//!   sidecar: nothing is dropped, and the wait is counted.
//! - [`worker`] takes whatever is queued (up to `batch_max`) and applies it
//!   in one pass, so a storm turns into few large batches and request
//!   handling never waits for it. The same failure arriving from several
//!   sources is charged and counted once (the engine deduplicates by tx
//!   hash). It ends once every source is gone and the queue is empty.
//! - [`shared_bans`] (with `[redis]`): bans only this instance can learn
//!   (a report, a result failure of a transaction it forwarded) are
//!   published on a Redis channel, through the [`crate::fleet`] link, and
//!   the other instances' are queued here.

pub mod protocol;
pub mod reconnect;
pub mod shared_bans;
pub mod stream;
pub mod worker;

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// How txgate finds a silent sidecar connection.
#[derive(Debug, Clone, Copy)]
pub struct Keepalive {
    /// A PING after this long without a frame from the sidecar (zero:
    /// none).
    pub interval: Duration,
    /// A PING unanswered this long closes the connection.
    pub timeout: Duration,
}

impl From<&txgate_config::SidecarConfig> for Keepalive {
    fn from(sidecar: &txgate_config::SidecarConfig) -> Keepalive {
        Keepalive {
            interval: sidecar.keepalive,
            timeout: sidecar.keepalive_timeout,
        }
    }
}

/// A lazily connected channel to the sidecar (connects on first use and
/// reconnects by itself). Must run inside a tokio runtime.
pub fn channel(
    url: &str,
    connect_timeout: Duration,
    keepalive: Keepalive,
) -> Result<Channel, String> {
    Ok(endpoint(url, connect_timeout, keepalive)?.connect_lazy())
}

/// The endpoint of a sidecar at `url`: connects within `connect_timeout`,
/// and PINGs after `keepalive.interval` without a frame, idle or not,
/// closing a connection whose PING goes unanswered `keepalive.timeout` (a
/// silent host sends no reset: without it, a stream from a partitioned or
/// dead sidecar would wait for TCP's own retries, or for ever).
pub fn endpoint(
    url: &str,
    connect_timeout: Duration,
    keepalive: Keepalive,
) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("sidecar url: {e}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true);
    Ok(match keepalive.interval.is_zero() {
        true => endpoint,
        false => endpoint
            .http2_keep_alive_interval(keepalive.interval)
            .keep_alive_timeout(keepalive.timeout)
            .keep_alive_while_idle(true),
    })
}
