//! Bans that only one instance hears, shared with the fleet through a
//! durable log in Redis.
//!
//! A failure report reaches the one instance at the sidecar's `aeges_url`;
//! a result-stream failure names only a tx hash, which only the instance
//! that forwarded the transaction can turn into a fingerprint. Both become
//! invalidations there, and that instance appends them to the Redis stream
//! `<redis.key_prefix>:bans:log` ([`append`]). Every instance reads the
//! stream from the last entry it applied ([`read`]) and applies what is
//! there (its own entries too, harmlessly), so a ban is never lost to a
//! moment offline:
//!
//! - a reconnect resumes after the last entry applied; a restart, after the
//!   position saved in the ban snapshot with the bans it covers; a fresh
//!   instance reads every entry still in the log;
//! - the log keeps the entries young enough to hold a live ban (it is
//!   trimmed by age, `MINID`, at each append) and at most
//!   `redis.ban_log_max_entries` entries; a reader whose position was cut
//!   while its entries were live counts a gap, and a reader ahead of the
//!   log (a failover to a replica that missed the last entries) reads the
//!   whole log again;
//! - reading an entry twice is harmless: each ban carries its start, runs
//!   only what is left of its life, and charges its sender once;
//! - what this instance learns waits in an outbox until Redis confirms it
//!   (bounded: [`OUTBOX`] bans, beyond which an offer is dropped and
//!   counted; the ban still holds here).
//!
//! The appender and the reader each have their own connection through the
//! fleet's [`Link`], reconnecting after a failure as [`Backoff`] says, at
//! most 1 s apart.
//!
//! [`Link`]: crate::fleet::Link
//! [`Backoff`]: crate::fleet::Backoff

mod append;
mod read;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use txgate_config::RedisConfig;
use txgate_fleet::LogPosition;
use txgate_screen::Invalidation;

use crate::fleet::Link;
use crate::metrics::Metrics;
use crate::screening::state::Invalidations;

/// Bans waiting to be appended at most; beyond, an offer is dropped and
/// counted.
pub const OUTBOX: usize = 4096;
/// The longest wait before reconnecting a link of the log, before its
/// ±20% jitter: at most 480 ms with it. A host cut off on its link may
/// still be resolving its peer's address (ARP retries once a second) for
/// up to a second after the link is back, and an attempt under way may
/// take `redis.timeout_ms` to give up: the retry must fit the log's 2 s
/// from heal to ban beside both.
const LONGEST_RETRY: Duration = Duration::from_millis(400);

/// Where a source puts a ban the rest of the fleet should hear.
#[derive(Debug, Clone)]
pub struct Share {
    outbox: mpsc::Sender<Invalidation>,
    metrics: Arc<Metrics>,
}

impl Share {
    /// Offers `invalidation` for appending; never waits.
    pub fn offer(&self, invalidation: &Invalidation) {
        if self.outbox.try_send(*invalidation).is_err() {
            self.metrics.sidecar.fleet_bans.dropped.inc();
        }
    }
}

/// A [`Share`] and the outbox [`run`] appends from.
pub fn share(metrics: Arc<Metrics>) -> (Share, mpsc::Receiver<Invalidation>) {
    let (outbox, appended) = mpsc::channel(OUTBOX);
    (Share { outbox, metrics }, appended)
}

/// The log's settings.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// The fleet's Redis.
    pub redis: RedisConfig,
    /// How long an entry can hold a live ban: the longest life of what it
    /// carries (a ban, a failure), plus the clock skew allowed.
    pub window: Duration,
}

impl LogSettings {
    fn key(&self) -> String {
        format!("{}:bans:log", self.redis.key_prefix)
    }
}

/// Appends what [`Share`] offers and applies what the others append, until
/// `stop`.
pub async fn run(
    settings: LogSettings,
    outbox: mpsc::Receiver<Invalidation>,
    invalidations: Invalidations,
    position: LogPosition,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let Ok(link) = Link::new(&settings.redis) else {
        tracing::error!(url = %settings.redis.redacted_url(),
            "Redis URL refused: bans are not shared with the fleet");
        return;
    };
    let origin = format!("{:016x}", process_origin());
    tokio::join!(
        append::run(&link, &settings, &origin, outbox, &metrics, stop.clone()),
        read::run(
            &link,
            &settings,
            &origin,
            &invalidations,
            &position,
            &metrics,
            stop
        ),
    );
}

/// This process's name in the log (its entries carry it, so that it does
/// not count them as received): the PID and the start time.
fn process_origin() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}
