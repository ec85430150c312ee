//! The appender: what this instance learned, appended to the log until
//! Redis confirms it.
//!
//! Bans wait in the outbox (the [`Share`](super::Share) channel, then the
//! batch in hand) until an `XADD` of their entry succeeds; a failed append
//! keeps them, reconnects and tries again. Each append also trims the log:
//! by age in the same command (`MINID ~`, entries older than the window on
//! the primary's clock, read from the id of this appender's previous
//! append: the first append after a start trims nothing by age, since this
//! host's clock may run ahead of the primary's and cut live entries), and
//! by length (`XTRIM MAXLEN ~`) in the same round trip. Only the append's
//! own answer confirms it: a trim the server refuses (an ACL user without
//! `XTRIM`) is counted (`trim_failed`) and the append stands. Through
//! Sentinel, an append waits up to 2 s for one replica to have it too
//! (`WAIT 1`), then counts as confirmed on the primary alone: a failover
//! right after a replicated append keeps it if Sentinel promotes that
//! replica (the one furthest along, at equal priority). The bans of an
//! append confirmed on the primary alone are kept (4096 at most) until a
//! replica has every write of the connection, and appended again on the
//! next connection: a failover, or a split brain healing (a primary cut
//! off with this instance, whose log the new primary's replaces), would
//! otherwise lose them. At stop, what waits gets one last try.

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
    // Appended on this connection and confirmed on the primary alone (no
    // replica had them within 2 s): a failover may lose them, and so does
    // the losing side of a split brain once it heals. Appended again on
    // the next connection; forgotten once a replica has every write of
    // this one.
    let mut unreplicated: Vec<Invalidation> = Vec::new();
    // What to append again, before the outbox.
    let mut again: std::collections::VecDeque<Invalidation> = std::collections::VecDeque::new();
    // Whether `pending` is being appended again (taken from `again`).
    let mut repeat = false;
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
                m.outbox
                    .set((pending.len() + outbox.len() + again.len()) as i64);
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(backoff.failed()) => continue,
                }
            }
        };
        // Whatever the last connection appended on the primary alone goes
        // to this one first (twice in the log is harmless).
        for ban in unreplicated.drain(..).rev() {
            again.push_front(ban);
        }
        again.truncate(MAX_AGAIN);
        loop {
            // New bans first; then what is to be appended again (those
            // outlived by now skipped, not waited on).
            if pending.is_empty() {
                repeat = false;
                while pending.len() < MAX_BANS_PER_ENTRY
                    && let Ok(ban) = outbox.try_recv()
                {
                    pending.push(ban);
                }
            }
            while pending.is_empty() && !again.is_empty() {
                let n = again.len().min(MAX_BANS_PER_ENTRY);
                pending.extend(again.drain(..n).filter(|ban| live(ban, settings)));
                repeat = true;
            }
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
                    // Idle with appends on the primary alone: asked again
                    // whether a replica has them now, which also finds a
                    // primary gone (failed, or demoted when a split brain
                    // heals) before the next ban, so that they are
                    // appended again at once.
                    () = tokio::time::sleep(RECHECK), if !unreplicated.is_empty() => {
                        let mut wait = redis::cmd("WAIT");
                        wait.arg(1).arg(1);
                        match link.within(wait.query_async::<i64>(&mut conn)).await {
                            Ok(n) if n >= 1 => unreplicated.clear(),
                            Ok(_) => {}
                            Err(e) if e.code() == Some("NOPERM") => unreplicated.clear(),
                            Err(_) => {
                                m.reconnects.inc();
                                break;
                            }
                        }
                        continue;
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
            m.outbox
                .set((pending.len() + outbox.len() + again.len()) as i64);
            match append(
                link, &mut conn, settings, &key, origin, &pending, clock, metrics,
            )
            .await
            {
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
            if repeat {
                // Appended again: not waited on (no replica had them last
                // time either); a later wait, or the idle check, confirms
                // every write of the connection.
                keep_unreplicated(&mut unreplicated, &pending, settings);
            } else if settings.redis.uses_sentinel() {
                match replicated(link, &mut conn, metrics, &stop).await {
                    // Every write of this connection so far is on a replica.
                    Replica::Had => unreplicated.clear(),
                    Replica::Alone => keep_unreplicated(&mut unreplicated, &pending, settings),
                    Replica::Unknowable => {}
                    Replica::Failed => {
                        // The primary failed (its entry is re-appended to
                        // the next one), or the instance stops (one last
                        // try).
                        m.reconnects.inc();
                        break;
                    }
                }
            }
            // Bans learned here, counted once: not again when appended
            // again.
            if !repeat {
                m.appended.inc_by(pending.len() as u64);
            }
            pending.clear();
            m.outbox.set((outbox.len() + again.len()) as i64);
        }
        if stop.is_cancelled() {
            break;
        }
        // While Redis cannot be written, the gauge follows what waits.
        m.outbox
            .set((pending.len() + outbox.len() + again.len()) as i64);
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(backoff.failed()) => {}
        }
    }
    // What was to be appended again goes in the last try too.
    let mut pending: Vec<Invalidation> = pending;
    pending.splice(0..0, again);
    let at = LastTry {
        link,
        settings,
        key: &key,
        origin,
        clock,
    };
    last_try(at, &mut outbox, pending, metrics).await;
}

/// Whether `ban` can still hold anywhere: its start is within the window.
fn live(ban: &Invalidation, settings: &LogSettings) -> bool {
    let window = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
    ban.started.saturating_add(window) > wall_now()
}

/// How long the last try at stop may take in all, within the task's own
/// stop deadline.
const LAST_TRY: std::time::Duration = std::time::Duration::from_millis(1500);

/// Where the last try appends, and the primary's clock as last seen.
struct LastTry<'a> {
    link: &'a Link,
    settings: &'a LogSettings,
    key: &'a str,
    origin: &'a str,
    clock: Option<u64>,
}

/// At stop: one try (one connect, each entry within the timeout, all
/// within [`LAST_TRY`]) to append what still waits; what fails, is left,
/// or has outlived the window is counted as dropped.
async fn last_try(
    at: LastTry<'_>,
    outbox: &mut mpsc::Receiver<Invalidation>,
    mut pending: Vec<Invalidation>,
    metrics: &Metrics,
) {
    let LastTry {
        link,
        settings,
        key,
        origin,
        clock,
    } = at;
    let m = &metrics.sidecar.fleet_bans;
    while let Ok(ban) = outbox.try_recv() {
        pending.push(ban);
    }
    if pending.is_empty() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LAST_TRY;
    let before = pending.len();
    pending.retain(|ban| live(ban, settings));
    m.dropped.inc_by((before - pending.len()) as u64);
    let tried = tokio::time::timeout_at(deadline, link.connect()).await;
    let Ok(Ok(mut conn)) = tried else {
        m.dropped.inc_by(pending.len() as u64);
        m.outbox.set(0);
        return;
    };
    for chunk in pending.chunks(MAX_BANS_PER_ENTRY) {
        let sent = tokio::time::timeout_at(
            deadline,
            append(
                link, &mut conn, settings, key, origin, chunk, clock, metrics,
            ),
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

/// Bans kept to append again after a reconnect, at most: beyond it, the
/// oldest are only in the log of the primary they were appended to.
const MAX_AGAIN: usize = 4096;

/// Keeps `appended` (appended on the primary alone) to append again: the
/// live ones, the newest [`MAX_AGAIN`] at most.
fn keep_unreplicated(
    unreplicated: &mut Vec<Invalidation>,
    appended: &[Invalidation],
    settings: &LogSettings,
) {
    unreplicated.retain(|ban| live(ban, settings));
    unreplicated.extend_from_slice(appended);
    let over = unreplicated.len().saturating_sub(MAX_AGAIN);
    unreplicated.drain(..over);
}

/// How often an idle appender with appends on the primary alone asks
/// again whether a replica has them.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What a replica has of a connection's writes.
enum Replica {
    /// One has every write so far.
    Had,
    /// None had them within [`REPLICA_WAIT`]: confirmed on the primary
    /// alone.
    Alone,
    /// Not to be known: the user may not run `WAIT`.
    Unknowable,
    /// The connection failed, or the instance stops.
    Failed,
}

/// Waits until a replica has every write of `conn` (`WAIT 1`), at most
/// [`REPLICA_WAIT`] (a wait on the primary alone is counted once per
/// append). Each wait lasts half the link's timeout, asked again every
/// 100 ms.
async fn replicated(
    link: &Link,
    conn: &mut MultiplexedConnection,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Replica {
    let wait_ms = (link.timeout() / 2).as_millis().max(1) as u64;
    let give_up = tokio::time::Instant::now() + REPLICA_WAIT;
    let mut counted = false;
    loop {
        if counted && tokio::time::Instant::now() >= give_up {
            return Replica::Alone;
        }
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(wait_ms);
        match link.within(wait.query_async::<i64>(conn)).await {
            Ok(n) if n >= 1 => return Replica::Had,
            Ok(_) => {
                if !counted {
                    metrics.sidecar.fleet_bans.unreplicated.inc();
                    counted = true;
                }
            }
            // A user the ACL does not allow `WAIT` cannot learn about the
            // replicas: the append stands on the primary alone, as `ROLE`
            // is taken at its word (`Link`), rather than be appended again
            // forever.
            Err(e) if e.code() == Some("NOPERM") => {
                if !counted {
                    metrics.sidecar.fleet_bans.unreplicated.inc();
                }
                return Replica::Unknowable;
            }
            Err(_) => return Replica::Failed,
        }
        tokio::select! {
            () = stop.cancelled() => return Replica::Failed,
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

/// Appends one entry of `bans` and trims the log, within the timeout;
/// returns the entry's id. `clock`: the primary's clock at this
/// appender's last append (`None`: no trim by age, see the module doc).
#[allow(clippy::too_many_arguments)]
async fn append(
    link: &Link,
    conn: &mut MultiplexedConnection,
    settings: &LogSettings,
    key: &str,
    origin: &str,
    bans: &[Invalidation],
    clock: Option<u64>,
    metrics: &Metrics,
) -> redis::RedisResult<StreamId> {
    let mut pipe = redis::pipe();
    // Each command's answer on its own: a refused trim must not read as a
    // failed append (which would append the same bans again forever).
    pipe.ignore_errors();
    let xadd = pipe.cmd("XADD").arg(key);
    if let Some(edge) = trim_edge(clock, settings.window) {
        xadd.arg("MINID").arg("~").arg(edge);
    }
    xadd.arg("*")
        .arg("origin")
        .arg(origin)
        .arg("bans")
        .arg(entry::encode(bans))
        .cmd("XTRIM")
        .arg(key)
        .arg("MAXLEN")
        .arg("~")
        .arg(settings.redis.ban_log_max_entries);
    let answers: Vec<redis::Value> = link.within(pipe.query_async(conn)).await?;
    let mut answers = answers.into_iter();
    let (Some(added), Some(trimmed)) = (answers.next(), answers.next()) else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "XADD and XTRIM answers",
        )));
    };
    let id: String = redis::from_redis_value(added.extract_error()?)?;
    if let Err(e) = trimmed.extract_error() {
        metrics.sidecar.fleet_bans.trim_failed.inc();
        tracing::debug!(error = %e, "ban log: the trim was refused; the append stands");
    }
    id.parse()
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "XADD id")))
}

/// The id below which entries are trimmed by age: the window back from the
/// primary's clock; none while that clock is unknown (this host's own
/// could be ahead of it and cut entries that still hold).
fn trim_edge(clock: Option<u64>, window: std::time::Duration) -> Option<u64> {
    let window = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    clock.map(|ms| ms.saturating_sub(window))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use alloy_primitives::{Address, B256};
    use txgate_config::RedisConfig;

    use super::*;

    #[test]
    fn the_log_is_trimmed_by_age_only_on_the_primarys_clock() {
        let window = Duration::from_secs(130);
        assert_eq!(trim_edge(None, window), None);
        assert_eq!(trim_edge(Some(1_000_000), window), Some(870_000));
        assert_eq!(trim_edge(Some(5), window), Some(0));
    }

    /// While Redis cannot be reached, the outbox gauge counts every ban
    /// that waits, not just those of the append that failed first.
    #[tokio::test]
    async fn the_outbox_gauge_follows_what_waits_while_redis_is_down() {
        // A port nothing listens on: every connect is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let settings = LogSettings {
            redis: RedisConfig {
                url: format!("redis://127.0.0.1:{port}"),
                timeout: Duration::from_millis(100),
                ..RedisConfig::default()
            },
            window: Duration::from_secs(130),
        };
        let link = Link::new(&settings.redis).unwrap();
        let metrics = Arc::new(Metrics::new());
        let (share, outbox) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let task = {
            let (metrics, stop) = (metrics.clone(), stop.clone());
            tokio::spawn(async move {
                run(&link, &settings, "here", outbox, &metrics, stop).await;
            })
        };
        for i in 0..10u8 {
            let ban = Invalidation {
                fingerprint: B256::repeat_byte(i + 1),
                target: Address::repeat_byte(0x44),
                selector: [1, 2, 3, 4],
                assertion: None,
                tx_hash: None,
                sender: None,
                started: wall_now(),
            };
            share.send(ban).await.unwrap();
        }
        let gauge = &metrics.sidecar.fleet_bans.outbox;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while gauge.get() < 10 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(gauge.get(), 10);
        stop.cancel();
        task.await.unwrap();
        // The last try could not connect either: every ban counted dropped.
        assert_eq!(metrics.sidecar.fleet_bans.dropped.get(), 10);
        assert_eq!(gauge.get(), 0);
    }
}
