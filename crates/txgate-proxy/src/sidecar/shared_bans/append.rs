//! The appender: what this instance learned, appended to the log until
//! Redis confirms it.
//!
//! Bans wait in the outbox (the [`Share`](super::Share) channel, then the
//! batch in hand) until an `XADD` of their entry succeeds; a failed append
//! keeps them, reconnects and tries again. Each append also trims the log:
//! by age in the same command (`MINID ~`, entries older than the window on
//! the primary's clock: the id of its previous append, else this host's
//! clock), and by length (`XTRIM MAXLEN ~`) in the same round trip; only
//! the append's own answer confirms it. Through
//! Sentinel, an append waits up to 2 s for one replica to have it too
//! (`WAIT 1`), then counts as confirmed on the primary alone: a failover
//! right after a replicated append keeps it if Sentinel promotes that
//! replica (the one furthest along, at equal priority). At stop, what
//! waits gets one last try.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use txgate_fleet::StreamId;
use txgate_fleet::entry::{self, MAX_BANS_PER_ENTRY};
use txgate_screen::Invalidation;

use super::{LONGEST_RETRY, LogSettings};
use crate::fleet::{Backoff, Link};
use crate::metrics::Metrics;
use crate::screening::state::wall_now;

pub(super) async fn run(
    link: &Link,
    settings: &LogSettings,
    origin: &str,
    mut outbox: mpsc::Receiver<Invalidation>,
    metrics: &Arc<Metrics>,
    stop: CancellationToken,
) {
    let m = &metrics.sidecar.fleet_bans;
    let key = settings.key();
    let mut backoff = Backoff::up_to(LONGEST_RETRY);
    // Bans taken from the outbox, not yet confirmed, oldest first.
    let mut pending: Vec<Invalidation> = Vec::with_capacity(MAX_BANS_PER_ENTRY);
    let mut open = true;
    // The primary's clock: the milliseconds of its last append's id.
    let mut clock: Option<u64> = None;
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => break,
            c = link.connect() => c,
        };
        // The backoff starts over once an append succeeds, not at the
        // connect: a Redis that takes connections but refuses the appends
        // is retried ever more slowly.
        let mut conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                m.reconnects.inc();
                tracing::debug!(error = %e, "ban log: the appender's connect failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(backoff.failed()) => continue,
                }
            }
        };
        loop {
            if pending.is_empty() {
                if !open {
                    // No source here shares: nothing more to append.
                    stop.cancelled().await;
                    return;
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    n = outbox.recv_many(&mut pending, MAX_BANS_PER_ENTRY) => {
                        if n == 0 {
                            open = false;
                            continue;
                        }
                    }
                }
            }
            // A ban whose life is over by now (it waited out an outage)
            // is not worth an entry.
            let before = pending.len();
            pending.retain(|ban| live(ban, settings));
            m.dropped.inc_by((before - pending.len()) as u64);
            if pending.is_empty() {
                continue;
            }
            m.outbox.set((pending.len() + outbox.len()) as i64);
            match append(link, &mut conn, settings, &key, origin, &pending, clock).await {
                Ok(id) => {
                    clock = Some(id.ms);
                    backoff.succeeded();
                }
                Err(_) => {
                    m.append_failed.inc();
                    m.reconnects.inc();
                    break;
                }
            }
            if settings.redis.uses_sentinel() && !replicated(link, &mut conn, metrics, &stop).await
            {
                // The primary failed (its entry is re-appended to the next
                // one), or the instance stops (one last try).
                m.reconnects.inc();
                break;
            }
            m.appended.inc_by(pending.len() as u64);
            pending.clear();
            m.outbox.set(outbox.len() as i64);
        }
        if stop.is_cancelled() {
            break;
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(backoff.failed()) => {}
        }
    }
    last_try(link, settings, &key, origin, &mut outbox, pending, metrics).await;
}

/// Whether `ban` can still hold anywhere: its start is within the window.
fn live(ban: &Invalidation, settings: &LogSettings) -> bool {
    let window = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
    ban.started.saturating_add(window) > wall_now()
}

/// How long the last try at stop may take in all, within the task's own
/// stop deadline.
const LAST_TRY: std::time::Duration = std::time::Duration::from_millis(1500);

/// At stop: one try (one connect, each entry within the timeout, all
/// within [`LAST_TRY`]) to append what still waits; what fails or is left
/// is counted as dropped.
async fn last_try(
    link: &Link,
    settings: &LogSettings,
    key: &str,
    origin: &str,
    outbox: &mut mpsc::Receiver<Invalidation>,
    mut pending: Vec<Invalidation>,
    metrics: &Metrics,
) {
    let m = &metrics.sidecar.fleet_bans;
    while let Ok(ban) = outbox.try_recv() {
        pending.push(ban);
    }
    if pending.is_empty() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LAST_TRY;
    pending.retain(|ban| live(ban, settings));
    let tried = tokio::time::timeout_at(deadline, link.connect()).await;
    let Ok(Ok(mut conn)) = tried else {
        m.dropped.inc_by(pending.len() as u64);
        m.outbox.set(0);
        return;
    };
    for chunk in pending.chunks(MAX_BANS_PER_ENTRY) {
        let sent = tokio::time::timeout_at(
            deadline,
            append(link, &mut conn, settings, key, origin, chunk, None),
        )
        .await;
        match sent {
            Ok(Ok(_)) => m.appended.inc_by(chunk.len() as u64),
            _ => m.dropped.inc_by(chunk.len() as u64),
        }
    }
    m.outbox.set(0);
}

/// How long an append waits for a replica before it is taken as confirmed
/// on the primary alone: a fleet whose replicas are all down keeps sharing
/// bans (at the risk a failover then carries), rather than stop.
const REPLICA_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits until a replica has every write of `conn` (`WAIT 1`): true once
/// one has, or after [`REPLICA_WAIT`] on the primary alone (counted once
/// per append); false when the connection fails or `stop` comes first.
/// Each wait lasts half the link's timeout, asked again every 100 ms.
async fn replicated(
    link: &Link,
    conn: &mut MultiplexedConnection,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> bool {
    let wait_ms = (link.timeout() / 2).as_millis().max(1) as u64;
    let give_up = tokio::time::Instant::now() + REPLICA_WAIT;
    let mut counted = false;
    loop {
        if counted && tokio::time::Instant::now() >= give_up {
            return true;
        }
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(wait_ms);
        match link.within(wait.query_async::<i64>(conn)).await {
            Ok(n) if n >= 1 => return true,
            Ok(_) => {
                if !counted {
                    metrics.sidecar.fleet_bans.unreplicated.inc();
                    counted = true;
                }
            }
            Err(_) => return false,
        }
        tokio::select! {
            () = stop.cancelled() => return false,
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

/// Appends one entry of `bans` and trims the log, within the timeout;
/// returns the entry's id. `clock`: the primary's clock at its last append
/// (`None`: this host's is used).
async fn append(
    link: &Link,
    conn: &mut MultiplexedConnection,
    settings: &LogSettings,
    key: &str,
    origin: &str,
    bans: &[Invalidation],
    clock: Option<u64>,
) -> redis::RedisResult<StreamId> {
    let window = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
    let edge = clock.unwrap_or_else(wall_now).saturating_sub(window);
    let mut pipe = redis::pipe();
    pipe.cmd("XADD")
        .arg(key)
        .arg("MINID")
        .arg("~")
        .arg(edge)
        .arg("*")
        .arg("origin")
        .arg(origin)
        .arg("bans")
        .arg(entry::encode(bans))
        .cmd("XTRIM")
        .arg(key)
        .arg("MAXLEN")
        .arg("~")
        .arg(settings.redis.ban_log_max_entries)
        .ignore();
    // The trim's failure does not undo the append: only the append's
    // answer counts.
    let (id,): (String,) = link.within(pipe.query_async(conn)).await?;
    id.parse()
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "XADD id")))
}
