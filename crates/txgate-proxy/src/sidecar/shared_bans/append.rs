//! The appender: what this instance learned, appended to the log until
//! Redis confirms it.
//!
//! Bans wait in the outbox (the [`Share`](super::Share) channel, then the
//! batch in hand) until an `XADD` of their entry succeeds; a failed append
//! keeps them, reconnects and tries again. Each append also trims the log:
//! by age in the same command (`MINID ~`, entries older than the window),
//! and by length (`XTRIM MAXLEN ~`) in the same round trip. At stop, what
//! waits gets one last try.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
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
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => break,
            c = link.connect() => c,
        };
        let mut conn = match connected {
            Ok(conn) => {
                backoff.succeeded();
                conn
            }
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
            m.outbox.set((pending.len() + outbox.len()) as i64);
            if append(link, &mut conn, settings, &key, origin, &pending)
                .await
                .is_err()
            {
                m.append_failed.inc();
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

/// At stop: one try (one connect, each entry within the timeout) to append
/// what still waits; what fails is counted as dropped.
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
    let mut conn = match link.connect().await {
        Ok(conn) => conn,
        Err(_) => {
            m.dropped.inc_by(pending.len() as u64);
            return;
        }
    };
    for chunk in pending.chunks(MAX_BANS_PER_ENTRY) {
        match append(link, &mut conn, settings, key, origin, chunk).await {
            Ok(()) => m.appended.inc_by(chunk.len() as u64),
            Err(_) => m.dropped.inc_by(chunk.len() as u64),
        }
    }
    m.outbox.set(0);
}

/// Appends one entry of `bans` and trims the log, within the timeout.
async fn append(
    link: &Link,
    conn: &mut MultiplexedConnection,
    settings: &LogSettings,
    key: &str,
    origin: &str,
    bans: &[Invalidation],
) -> redis::RedisResult<()> {
    let window = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
    let edge = wall_now().saturating_sub(window);
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
        .ignore()
        .cmd("XTRIM")
        .arg(key)
        .arg("MAXLEN")
        .arg("~")
        .arg(settings.redis.ban_log_max_entries)
        .ignore();
    link.within(pipe.query_async::<()>(conn)).await
}
