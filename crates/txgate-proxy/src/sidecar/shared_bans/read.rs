//! The reader: the log's entries (every instance's, its own too), applied
//! in order from the last one applied here.
//!
//! On each connect it asks where the log stands (`XINFO STREAM`) and the
//! primary's replication id (`INFO replication`), and resumes as
//! [`txgate_fleet::resume`] says (after its own position; the whole log
//! when fresh, ahead of the log, or on a primary whose replication id is
//! not the one it last read on: the id is kept in memory only, so a
//! change while the instance is down goes unseen), then reads with `XREAD`
//! (blocking at most half the link's timeout, answered within the timeout
//! beyond that) and applies each reply's bans as one batch before it moves
//! its position past them: a snapshot never saves a position ahead of the
//! bans it holds. Its own entries are applied too (harmless: a ban runs
//! from its start and charges once), so a ban this instance learned but
//! had not applied when it stopped is not lost. An entry that does not
//! parse is counted and passed over, never read again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;
use txgate_fleet::{LogPosition, LogState, StreamId, entry, resume};
use txgate_screen::wall::MAX_CLOCK_SKEW;

use super::{LONGEST_RETRY, LogSettings};
use crate::fleet::{Backoff, Link};
use crate::metrics::Metrics;
use crate::screening::state::Invalidations;

/// Entries per read at most.
const PER_READ: usize = 64;
/// How often the lag in entries is measured.
const LAG_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn run(
    link: &Link,
    settings: &LogSettings,
    origin: &str,
    invalidations: &Invalidations,
    position: &LogPosition,
    metrics: &Arc<Metrics>,
    stop: CancellationToken,
) {
    let m = &metrics.sidecar.fleet_bans;
    let key = settings.key();
    // The read blocks at most half the link's timeout, so that a reply
    // (empty or not) always comes within it.
    let block = settings.redis.timeout / 2;
    let mut backoff = Backoff::up_to(LONGEST_RETRY);
    // The replication id of the primary the position was last read on
    // (`None`: not known, as after a start from a snapshot, or a user not
    // allowed `INFO`).
    let mut history: Option<String> = None;
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            c = connect(link, &key, block) => c,
        };
        let (mut conn, state) = match connected {
            // The backoff starts over once a read succeeds, not at the
            // connect: a Redis that takes connections but fails the reads
            // is retried ever more slowly.
            Ok(pair) => pair,
            Err(e) => {
                m.reconnects.inc();
                tracing::debug!(error = %e, "ban log: the reader's connect failed");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff.failed()) => continue,
                }
            }
        };
        // A primary on another history (promoted, or the other side of a
        // healed split brain) may hold entries behind this position that
        // were never read here.
        let other_history = matches!((&history, &state.replid), (Some(was), Some(is)) if was != is);
        if state.replid.is_some() {
            history.clone_from(&state.replid);
        }
        let start = resume(
            position.get(),
            state.log,
            state.length,
            settings.redis.ban_log_max_entries as u64,
            other_history,
        );
        if start.gap {
            m.gaps.inc();
            tracing::warn!(after = %start.after, "ban log: entries this instance had not read were cut while live");
        }
        if start.reset {
            m.resets.inc();
            tracing::warn!(saved = ?position.get(), last = %state.log.last_generated, other_history,
                "ban log: the primary is not the one this instance read from (a failover, a healed split brain, a deleted log): reading it all again");
        }
        tracing::info!(key, after = %start.after, "reading the fleet's ban log");
        let mut reader = Reader {
            after: start.after,
            replay_until: state.log.last_generated,
            // Reading from the start: every entry before the first kept
            // was cut, so the count read so far is known.
            ordinal: (start.after == StreamId::ZERO)
                .then(|| state.entries_added.saturating_sub(state.length)),
            measured: Instant::now(),
        };
        loop {
            let read = tokio::select! {
                () = stop.cancelled() => return,
                r = reader.read(link, &mut conn, &key, block) => r,
            };
            let Ok(reply) = read else {
                m.reconnects.inc();
                break;
            };
            backoff.succeeded();
            let full = reader.apply(&reply, origin, invalidations, position, metrics);
            if reader.measured.elapsed() >= LAG_EVERY {
                reader.measured = Instant::now();
                match link.within(info(&mut conn, &key)).await {
                    Ok(now) => {
                        if reader.ordinal.is_none() && !full {
                            reader.ordinal = Some(now.entries_added);
                        }
                        let behind = reader
                            .ordinal
                            .map_or(0, |o| now.entries_added.saturating_sub(o));
                        m.lag_entries.set(behind as i64);
                        // Both ends on the primary's clock: its last id
                        // against the last one applied here.
                        let lag = match now.log.last_generated > reader.after {
                            true => now.log.last_generated.ms.saturating_sub(reader.after.ms),
                            false => 0,
                        };
                        m.lag_seconds.set(lag as f64 / 1000.0);
                    }
                    Err(_) => {
                        m.reconnects.inc();
                        break;
                    }
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff.failed()) => {}
        }
    }
}

/// One connection's reading state.
struct Reader {
    /// Read the entries after this one.
    after: StreamId,
    /// Entries up to this one were in the log when the reader connected:
    /// what it reads of them is a replay.
    replay_until: StreamId,
    /// Entries appended to the log before `after`, when known (the lag in
    /// entries is the log's count past it).
    ordinal: Option<u64>,
    measured: Instant,
}

impl Reader {
    /// One `XREAD`: blocks at most `block`, answered within the link's
    /// timeout beyond it.
    async fn read(
        &self,
        link: &Link,
        conn: &mut MultiplexedConnection,
        key: &str,
        block: Duration,
    ) -> redis::RedisResult<Value> {
        let mut xread = redis::cmd("XREAD");
        xread
            .arg("COUNT")
            .arg(PER_READ)
            .arg("BLOCK")
            .arg(block.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(key)
            .arg(self.after.to_string());
        let deadline = link.timeout() + block;
        tokio::time::timeout(deadline, xread.query_async(conn))
            .await
            .unwrap_or_else(|_| {
                Err(redis::RedisError::from(std::io::Error::from(
                    std::io::ErrorKind::TimedOut,
                )))
            })
    }

    /// Applies the bans of the entries in `reply` as one batch,
    /// then moves the position past them; true when the read was full
    /// (more entries wait).
    fn apply(
        &mut self,
        reply: &Value,
        origin: &str,
        invalidations: &Invalidations,
        position: &LogPosition,
        metrics: &Metrics,
    ) -> bool {
        let m = &metrics.sidecar.fleet_bans;
        let entries = entries(reply);
        let mut bans = Vec::new();
        let (mut received, mut replayed) = (0u64, 0u64);
        let mut last = None;
        for e in &entries {
            let Some(id) = e.id else {
                m.malformed.inc();
                continue;
            };
            last = Some(id);
            match e.bans.map(entry::decode) {
                Some(Ok(mut found)) => {
                    // A start ahead of the entry's own time (the primary's
                    // clock) by more than the skew allowed is its host's
                    // clock running ahead: taken as the entry's time, the
                    // same at every read, so a replay never restarts it.
                    let latest = id.ms.saturating_add(MAX_CLOCK_SKEW);
                    for ban in &mut found {
                        ban.started = ban.started.min(latest);
                    }
                    if e.origin != Some(origin.as_bytes()) {
                        received += found.len() as u64;
                        if id <= self.replay_until {
                            replayed += found.len() as u64;
                        }
                    }
                    bans.extend(found);
                }
                _ => m.malformed.inc(),
            }
        }
        if !bans.is_empty() {
            // Counted first: once a ban refuses here, it is counted.
            m.received.inc_by(received);
            m.replayed.inc_by(replayed);
            invalidations.apply(&bans);
        }
        if let Some(id) = last {
            self.after = id;
            position.set(id);
        }
        if let Some(o) = self.ordinal.as_mut() {
            *o += entries.len() as u64;
        }
        entries.len() >= PER_READ
    }
}

/// One entry of an `XREAD` reply, as far as it parses: an entry whose id
/// does not parse is passed over; one whose fields do not is counted
/// malformed (its id still moves the reader past it).
struct Entry<'a> {
    id: Option<StreamId>,
    origin: Option<&'a [u8]>,
    bans: Option<&'a [u8]>,
}

/// The entries of an `XREAD` reply (nil: none), read from the raw reply so
/// that no field, however damaged, fails the whole read.
fn entries(reply: &Value) -> Vec<Entry<'_>> {
    let streams: &[Value] = match reply {
        Value::Array(streams) => streams,
        Value::Map(pairs) => {
            return pairs.iter().flat_map(|(_, ids)| entries_of(ids)).collect();
        }
        _ => return Vec::new(),
    };
    streams
        .iter()
        .filter_map(|s| match s {
            Value::Array(pair) => pair.get(1),
            _ => None,
        })
        .flat_map(entries_of)
        .collect()
}

fn entries_of(ids: &Value) -> Vec<Entry<'_>> {
    let Value::Array(ids) = ids else {
        return Vec::new();
    };
    ids.iter()
        .map(|e| {
            let parts = match e {
                Value::Array(parts) => parts.as_slice(),
                _ => &[],
            };
            let id = parts
                .first()
                .and_then(bytes)
                .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok());
            let fields = match parts.get(1) {
                Some(Value::Array(fields)) => fields.as_slice(),
                _ => &[],
            };
            let field = |name: &[u8]| {
                fields
                    .chunks(2)
                    .find(|p| p.first().and_then(bytes) == Some(name))
                    .and_then(|p| p.get(1).and_then(bytes))
            };
            Entry {
                id,
                origin: field(b"origin"),
                bans: field(b"bans"),
            }
        })
        .collect()
}

/// A string value's bytes.
fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// Where the log stands.
#[derive(Debug, Clone)]
struct Info {
    log: LogState,
    /// Entries ever appended (Redis 7).
    entries_added: u64,
    /// Entries kept.
    length: u64,
    /// The primary's replication id, read at connect only.
    replid: Option<String>,
}

/// A connection whose answers may take `block` beyond the link's timeout
/// (a blocking read), and where the log stands.
async fn connect(
    link: &Link,
    key: &str,
    block: Duration,
) -> redis::RedisResult<(MultiplexedConnection, Info)> {
    let mut conn = link.connect_with_slack(block).await?;
    let mut state = link.within(info(&mut conn, key)).await?;
    state.replid = link.within(replid(&mut conn)).await.ok().flatten();
    Ok((conn, state))
}

/// The primary's replication id (`INFO replication`'s `master_replid`):
/// it changes when a replica is promoted or a primary restarts with a
/// fresh data set. `None` when it cannot be read (a user not allowed
/// `INFO`): then no reset is decided from it.
async fn replid(conn: &mut MultiplexedConnection) -> redis::RedisResult<Option<String>> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    Ok(parse_replid(&text))
}

/// `master_replid` from an `INFO replication` text.
fn parse_replid(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("master_replid:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// `XINFO STREAM`; a log that does not exist is empty and never written.
async fn info(conn: &mut MultiplexedConnection, key: &str) -> redis::RedisResult<Info> {
    let reply: redis::RedisResult<Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(key)
        .query_async(conn)
        .await;
    let reply = match reply {
        Ok(v) => v,
        Err(e) if e.to_string().contains("no such key") => {
            return Ok(Info {
                log: LogState {
                    first: None,
                    last_generated: StreamId::ZERO,
                },
                entries_added: 0,
                length: 0,
                replid: None,
            });
        }
        Err(e) => return Err(e),
    };
    parse_info(&reply).ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "XINFO STREAM reply"))
    })
}

/// The fields of an `XINFO STREAM` reply (a map, or RESP2's flat array of
/// names and values) that the reader uses.
fn parse_info(reply: &Value) -> Option<Info> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        _ => return None,
    };
    let name = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let text = |v: &Value| name(v);
    let int = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    let (mut first, mut last, mut added, mut length) = (None, None, None, None);
    for (k, v) in pairs {
        match name(k)?.as_str() {
            "first-entry" => {
                first = match v {
                    Value::Nil => Some(None),
                    Value::Array(entry) => Some(Some(text(entry.first()?)?.parse().ok()?)),
                    _ => return None,
                }
            }
            "last-generated-id" => last = Some(text(v)?.parse().ok()?),
            "entries-added" => added = int(v),
            "length" => length = int(v),
            _ => {}
        }
    }
    Some(Info {
        log: LogState {
            first: first?,
            last_generated: last?,
        },
        entries_added: added.unwrap_or(0),
        length: length.unwrap_or(0),
        replid: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_damaged_entry_is_passed_over_never_failing_the_read() {
        let entry = |id: Value, fields: Vec<Value>| Value::Array(vec![id, Value::Array(fields)]);
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("txgate:bans:log"),
            Value::Array(vec![
                entry(
                    bulk("5-0"),
                    vec![bulk("origin"), bulk("a"), bulk("bans"), bulk("[]")],
                ),
                entry(bulk("6-0"), vec![Value::BulkString(vec![0xff]), bulk("x")]),
                entry(bulk("not-an-id"), vec![]),
                entry(Value::Int(3), vec![bulk("bans")]),
            ]),
        ])]);
        let got = entries(&reply);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].id, Some("5-0".parse().unwrap()));
        assert_eq!(
            (got[0].origin, got[0].bans),
            (Some(&b"a"[..]), Some(&b"[]"[..]))
        );
        assert_eq!(got[1].id, Some("6-0".parse().unwrap()));
        assert_eq!((got[1].origin, got[1].bans), (None, None));
        assert_eq!((got[2].id, got[3].id), (None, None));
        assert!(entries(&Value::Nil).is_empty());
    }

    #[test]
    fn the_replication_id_is_read_from_info() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
                    master_failover_state:no-failover\r\n\
                    master_replid:8f3a0c1d2e\r\nmaster_replid2:0000\r\n";
        assert_eq!(parse_replid(info).as_deref(), Some("8f3a0c1d2e"));
        assert_eq!(parse_replid("# Replication\r\nrole:master\r\n"), None);
        assert_eq!(parse_replid("master_replid:\r\n"), None);
    }

    #[test]
    fn an_xinfo_reply_gives_where_the_log_stands() {
        let flat = Value::Array(vec![
            bulk("length"),
            Value::Int(3),
            bulk("last-generated-id"),
            bulk("1700000000500-2"),
            bulk("entries-added"),
            Value::Int(10),
            bulk("first-entry"),
            Value::Array(vec![bulk("1700000000100-0"), Value::Array(vec![])]),
        ]);
        let info = parse_info(&flat).unwrap();
        assert_eq!(info.log.first, Some("1700000000100-0".parse().unwrap()));
        assert_eq!(info.log.last_generated, "1700000000500-2".parse().unwrap());
        assert_eq!((info.entries_added, info.length), (10, 3));
        let empty = Value::Map(vec![
            (bulk("length"), Value::Int(0)),
            (bulk("last-generated-id"), bulk("0-0")),
            (bulk("first-entry"), Value::Nil),
        ]);
        let info = parse_info(&empty).unwrap();
        assert_eq!(info.log.first, None);
        assert_eq!(info.log.last_generated, StreamId::ZERO);
        assert!(parse_info(&Value::Int(1)).is_none());
        assert!(parse_info(&Value::Array(vec![bulk("length"), Value::Int(0)])).is_none());
    }
}
