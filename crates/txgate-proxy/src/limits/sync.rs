//! Per-client limits, and the conditional calls' lookup rates, held for
//! the whole fleet through Redis, with Redis never on a call's path: each
//! is a [`Synced`] table, synced by one task.
//!
//! Every instance decides alone, from its own table, at once. The table
//! remembers what each admitted call added to its client's TATs (GCRA's
//! "theoretical arrival time"). Every `redis.sync_interval_ms` the
//! [`run`] task sends those spans to Redis in one script call; the script
//! moves each client's fleet-wide TAT forward by them (from Redis's own
//! clock, so instances' clocks never meet) and answers how far ahead of now
//! each fleet TAT is; the instance moves its own TATs up to that. A client
//! over its limit anywhere in the fleet is therefore refused everywhere
//! one sync later, and refused until the fleet-wide debt is paid, so the
//! long-run rate is exact; within one interval a client spread over N
//! instances can get at most (N − 1) × (burst + rate × interval) calls
//! more than its limit (HEURISTICS.md).
//!
//! Why not leases of tokens: a lease held by one instance is a budget the
//! others cannot spend, so an honest client whose calls the balancer sends
//! elsewhere is refused while its tokens sit idle, and a client with no
//! lease yet must either wait on Redis or be let through on credit anyway.
//! Reporting spent time has neither cost.
//!
//! Redis down or slow (a sync or connect over `redis.timeout_ms`): each
//! instance enforces `redis.local_share` of every limit alone, counts it
//! (`txgate_redis_up` 0), says so in `/readyz`, drops the usage it cannot
//! report and reconnects as the fleet's [`Backoff`] says (100 ms doubling
//! to 2 s, ±20%: after a failover it follows the new primary within a few
//! seconds). The connection and its timeout are the fleet's [`Link`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use txgate_config::RedisConfig;
use txgate_limits::{Nanos, Spans, Table, Usage};

use crate::fleet::{Backoff, Link};
use crate::metrics::Metrics;

/// The state of the link to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    /// Not connected yet.
    Connecting = 0,
    /// The last sync succeeded: limits are the fleet's.
    Up = 1,
    /// Unreachable or slow: limits are local shares.
    Down = 2,
}

impl LinkState {
    /// The `/readyz` word.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Up => "up",
            LinkState::Down => "down",
        }
    }
}

/// Whether the fleet's limits are in force, read by every charge.
#[derive(Debug, Default)]
pub struct FleetLink {
    state: AtomicU8,
}

impl FleetLink {
    /// The link's state.
    pub fn state(&self) -> LinkState {
        match self.state.load(Ordering::Relaxed) {
            1 => LinkState::Up,
            2 => LinkState::Down,
            _ => LinkState::Connecting,
        }
    }

    /// Whether the last sync succeeded.
    pub fn up(&self) -> bool {
        self.state() == LinkState::Up
    }

    fn set(&self, state: LinkState, metrics: &Metrics) {
        let was = self.state.swap(state as u8, Ordering::Relaxed);
        metrics
            .limits
            .redis
            .up
            .set(i64::from(state == LinkState::Up));
        if was != state as u8 {
            match state {
                LinkState::Up => {
                    tracing::info!("Redis reachable: per-client limits are fleet-wide")
                }
                LinkState::Down => tracing::warn!(
                    "Redis unreachable: each instance enforces its local share of the limits"
                ),
                LinkState::Connecting => {}
            }
        }
    }
}

/// The script: KEYS are clients, ARGV two numbers per client (µs its
/// admitted calls added to its TAT of all calls, and of submissions).
/// Each fleet TAT moves from max(TAT, now) by its span, as GCRA does for an
/// admitted call; the key lives as long as the debt (plus a second). The
/// answer: per client, µs each TAT is ahead of Redis's now.
const SYNC: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, key in ipairs(KEYS) do
  local tat = redis.call('HMGET', key, 'c', 't')
  local c = math.max(tonumber(tat[1]) or 0, now) + tonumber(ARGV[2 * i - 1])
  local x = math.max(tonumber(tat[2]) or 0, now) + tonumber(ARGV[2 * i])
  redis.call('HSET', key, 'c', string.format('%.0f', c), 't', string.format('%.0f', x))
  redis.call('PEXPIRE', key, math.floor((math.max(c, x) - now) / 1000) + 1000)
  out[2 * i - 1] = c - now
  out[2 * i] = x - now
end
return out
";

/// Clients per script call: a sync of a big table does not stall Redis.
const CHUNK: usize = 512;
/// Clients drained per sync at most; the rest wait for the next.
const MAX_PER_SYNC: usize = 50_000;
/// With nothing to report, a PING this often keeps the state true.
const IDLE_PING: Duration = Duration::from_secs(1);

/// Which table a client is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// By client IP.
    Ip,
    /// By API key.
    Key,
    /// The lookups of every conditional call (one bucket).
    Conditional,
    /// The lookups of one signed conditional caller.
    Caller,
}

impl Kind {
    /// The metric label and the Redis key part.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ip => "ip",
            Kind::Key => "key",
            Kind::Conditional => "conditional",
            Kind::Caller => "caller",
        }
    }
}

/// A table of GCRA debts whose usage the fleet sync reports and whose
/// debts it takes back: the per-client limits, and the conditional calls'
/// rates.
pub trait Synced: std::fmt::Debug + Send + Sync + 'static {
    /// Nanoseconds on the table's own clock.
    fn now(&self) -> Nanos;
    /// Moves up to `max` entries' usage not yet reported into `out`.
    fn drain_unsynced(&self, out: &mut Vec<(Kind, Usage)>, max: usize);
    /// Takes the fleet's view of one entry at `now` (its clock): how far
    /// ahead of now its TATs are across the fleet.
    fn merge_fleet(&self, kind: Kind, key: u128, now: Nanos, ahead: Spans);
    /// Sets the table's gauges.
    fn update_gauges(&self);
}

/// Moves up to `max` entries' unsynced usage of `tables` into `out`
/// (appended), tagged with each table's kind.
pub fn drain_tables(tables: &[(Kind, &Table)], out: &mut Vec<(Kind, Usage)>, max: usize) {
    let mut usage = Vec::new();
    for (kind, table) in tables {
        usage.clear();
        table.drain_unsynced(&mut usage, max.saturating_sub(out.len()));
        out.extend(usage.iter().map(|u| (*kind, *u)));
    }
}

/// Keeps the tracked-clients gauges current until `stop`, when there is no
/// fleet to sync with.
pub async fn gauges(tables: Vec<Arc<dyn Synced>>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => tables.iter().for_each(|t| t.update_gauges()),
        }
    }
}

/// Syncs `tables` with Redis until `stop`; also keeps their gauges
/// current, and `state` true to the last connect or sync.
pub async fn run(
    tables: Vec<Arc<dyn Synced>>,
    state: Arc<FleetLink>,
    config: RedisConfig,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let m = &metrics.limits.redis;
    m.register_results();
    let link = match Link::new(&config) {
        Ok(link) => link,
        Err(e) => {
            // Validated at start; a URL the client still refuses leaves
            // the limits local, loudly.
            tracing::error!(url = %config.redacted_url(), error = %e, "Redis URL refused: limits stay local");
            state.set(LinkState::Down, &metrics);
            return;
        }
    };
    let script = Script::new(SYNC);
    let prefix = config.key_prefix.clone();
    let mut tick = tokio::time::interval(config.sync_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Retries at most 2 s apart (before jitter): after a failover the
    // limits follow the new primary within a few seconds of its promotion.
    let (mut conn, mut retry_at, mut backoff) =
        (None, Instant::now(), Backoff::up_to(Duration::from_secs(2)));
    let mut last_ok = Instant::now();
    let (mut batch, mut drained) = (Vec::new(), Vec::new());
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        batch.clear();
        for (index, table) in tables.iter().enumerate() {
            table.update_gauges();
            drained.clear();
            table.drain_unsynced(&mut drained, MAX_PER_SYNC.saturating_sub(batch.len()));
            batch.extend(drained.iter().map(|(kind, usage)| (index, *kind, *usage)));
        }
        if conn.is_none() && Instant::now() >= retry_at {
            match link.connect().await {
                Ok(c) => {
                    m.connected(true).inc();
                    conn = Some(c);
                    backoff.succeeded();
                    last_ok = Instant::now();
                    state.set(LinkState::Up, &metrics);
                }
                Err(e) => {
                    m.connected(false).inc();
                    tracing::debug!(error = %e, "Redis connect failed");
                    state.set(LinkState::Down, &metrics);
                    retry_at = Instant::now() + backoff.failed();
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            m.dropped.inc_by(batch.len() as u64);
            continue;
        };
        if batch.is_empty() && last_ok.elapsed() < IDLE_PING {
            continue;
        }
        let synced = sync(c, &link, &script, &prefix, &tables, &batch).await;
        match synced {
            Ok(()) => {
                m.synced(true).inc();
                m.clients_synced.inc_by(batch.len() as u64);
                last_ok = Instant::now();
                state.set(LinkState::Up, &metrics);
            }
            Err(e) => {
                m.synced(false).inc();
                m.dropped.inc_by(batch.len() as u64);
                tracing::debug!(error = %e, "Redis sync failed");
                state.set(LinkState::Down, &metrics);
                conn = None;
                retry_at = Instant::now() + backoff.failed();
            }
        }
    }
}

/// Reports `batch` (an empty one is a PING) and merges the answers; each
/// round trip within the `link`'s timeout.
async fn sync(
    conn: &mut MultiplexedConnection,
    link: &Link,
    script: &Script,
    prefix: &str,
    tables: &[Arc<dyn Synced>],
    batch: &[(usize, Kind, Usage)],
) -> redis::RedisResult<()> {
    if batch.is_empty() {
        return link
            .within(redis::cmd("PING").query_async::<()>(conn))
            .await;
    }
    for chunk in batch.chunks(CHUNK) {
        let mut call = script.prepare_invoke();
        for (_, kind, usage) in chunk {
            call.key(format!("{prefix}:{}:{:032x}", kind.as_str(), usage.key));
            call.arg(micros(usage.spans.calls))
                .arg(micros(usage.spans.txs));
        }
        let ahead: Vec<i64> = link.within(call.invoke_async(conn)).await?;
        // Each table's clock read once per chunk.
        let nows: Vec<Nanos> = tables.iter().map(|t| t.now()).collect();
        for ((index, kind, usage), ahead) in chunk.iter().zip(ahead.chunks_exact(2)) {
            let nanos = |us: i64| u64::try_from(us).unwrap_or(0).saturating_mul(1000);
            let spans = Spans {
                calls: nanos(ahead[0]),
                txs: nanos(ahead[1]),
            };
            tables[*index].merge_fleet(*kind, usage.key, nows[*index], spans);
        }
    }
    Ok(())
}

/// Nanoseconds as whole microseconds, rounded up (a call is never free).
fn micros(nanos: u64) -> u64 {
    nanos.div_ceil(1000)
}
