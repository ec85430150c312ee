//! The long run across hosts: reports posted at a steady rate to the
//! instances that can be reached, while one host at a time (an instance or
//! Redis, in turn) is cut off the network for a while every few minutes.
//! Every report is checked on every instance: from the moment the ban can
//! reach it (the report posted, and the reporter's, Redis's and the
//! instance's own links up, the latest of those), it must be refused
//! within 2 s. Each instance's checks are one probe loop (one client, one
//! connection). Memory of each instance and the ban log's length are
//! sampled throughout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use txgate_benches::procs::{HttpClient, get_text, metric};

use crate::fleet::{Fleet, LOG_KEY, Resident, redis_cli, resident};

mod summary;

use crate::probe::{Reported, refused, report};
use summary::Check;

/// The run's shape.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) minutes: u64,
    pub(crate) every: Duration,
    pub(crate) cut: Duration,
    pub(crate) rate: f64,
    pub(crate) order: Vec<&'static str>,
    pub(crate) warmup: Duration,
}

/// Which host is cut off, and when each was last joined again.
#[derive(Default)]
struct Links {
    cut: Option<&'static str>,
    healed: HashMap<&'static str, Instant>,
}

type Shared = Arc<Mutex<Links>>;

fn links(shared: &Shared) -> std::sync::MutexGuard<'_, Links> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How one check ended.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Refused, this long after the ban could reach the instance (at
    /// `ready`); whether that moment was a heal (the ban waited out a
    /// partition).
    Refused {
        ms: f64,
        ready: Instant,
        /// The host whose heal that moment was, if any (the ban waited out
        /// its partition).
        healed_by: Option<&'static str>,
        /// More than 2 s had passed since `ready` when a cut it needed
        /// began (the clock then started again from the next heal).
        late_before_cut: bool,
    },
    /// Not refused within 10 s of `ready`, the moment it could be.
    Lost { ready: Instant },
}

/// How long one probe may take: a probe sent just as a host is cut off (or
/// on a connection the cut left stale) is given up soon, and the next one
/// opens a new connection, so a heal is not followed by a wait for TCP's
/// own retry (1 s for a lost SYN).
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// A report to check on one instance.
struct Pending {
    reporter: &'static str,
    posted: Instant,
    copy: String,
    /// The hosts whose links the ban needs: the instance's own, and unless
    /// it is the reporter, the reporter's and Redis's.
    needs: Vec<&'static str>,
    /// The moment the ban could arrive, as last seen.
    last_ready: Option<Instant>,
    /// More than 2 s had passed since that moment when a cut it needed
    /// began (the clock then starts again from that cut's heal).
    late_before_cut: bool,
}

/// When `p`'s ban could reach the instance, and whose heal that was (if
/// any); `None` while a link it needs is cut.
fn moment(shared: &Shared, p: &Pending) -> Option<(Instant, Option<&'static str>)> {
    let l = links(shared);
    if l.cut.is_some_and(|c| p.needs.contains(&c)) {
        return None;
    }
    let mut moment = (p.posted, None);
    for n in &p.needs {
        if let Some(&t) = l.healed.get(n).filter(|&&t| t > moment.0) {
            moment = (t, Some(*n));
        }
    }
    Some(moment)
}

/// The checks of instance `name`: every pending report's copy submitted
/// in turn, a sweep every 5 ms, skipping those a cut holds, until each is
/// refused or 10 s have passed since its ban could arrive. One probe at a
/// time: the bench's own load on an instance stays one client on one
/// connection, also when a heal releases a backlog. Ends once `queue`
/// closes and nothing waits.
async fn checker(
    client: HttpClient,
    shared: Shared,
    rpc: String,
    name: &'static str,
    mut queue: mpsc::UnboundedReceiver<Pending>,
    started: Instant,
) -> Vec<Check> {
    let mut pending: Vec<Pending> = Vec::new();
    let mut done = Vec::new();
    let mut open = true;
    while open || !pending.is_empty() {
        loop {
            match queue.try_recv() {
                Ok(p) => pending.push(p),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if pending.is_empty() {
            match queue.recv().await {
                Some(p) => pending.push(p),
                None => open = false,
            }
            continue;
        }
        let mut i = 0;
        while i < pending.len() {
            let Some((ready, healed_by)) = moment(&shared, &pending[i]) else {
                let p = &mut pending[i];
                if p.last_ready
                    .is_some_and(|r| r.elapsed() > Duration::from_secs(2))
                {
                    p.late_before_cut = true;
                }
                i += 1;
                continue;
            };
            pending[i].last_ready = Some(ready);
            let outcome = if refused(&client, &rpc, &pending[i].copy, PROBE_TIMEOUT).await {
                // A cut may have begun during the probe: the moment is the
                // one the probe was sent after, which is no later.
                Some(Outcome::Refused {
                    ms: ready.elapsed().as_secs_f64() * 1e3,
                    ready,
                    healed_by,
                    late_before_cut: pending[i].late_before_cut,
                })
            } else if ready.elapsed() > Duration::from_secs(10) {
                Some(Outcome::Lost { ready })
            } else {
                None
            };
            match outcome {
                Some(outcome) => {
                    let p = pending.swap_remove(i);
                    done.push(Check {
                        instance: name,
                        reporter: p.reporter,
                        posted: p.posted.duration_since(started),
                        outcome,
                    });
                }
                None => i += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done
}

/// One sample of memory and of the log.
struct Row {
    at_s: f64,
    resident: Vec<Option<Resident>>,
    /// What jemalloc says each instance holds (`allocated`), in KiB.
    allocated_kib: Vec<Option<f64>>,
    log_len: Option<u64>,
    redis_bytes: Option<u64>,
}

fn redis_used_memory(redis: SocketAddr) -> Option<u64> {
    let info = redis_cli(redis, &["INFO", "memory"])?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs the plan on `fleet` (laid out on hosts); prints what it found, and
/// writes the samples to `csv` where given.
pub(crate) async fn run(
    client: &HttpClient,
    fleet: &Fleet,
    plan: Plan,
    csv: Option<&std::path::Path>,
) {
    let hosts = fleet
        .hosts()
        .expect("the partition run needs the namespaced layout");
    let shared: Shared = Arc::default();
    let started = Instant::now();
    let end = started + Duration::from_secs(plan.minutes * 60);
    let order = plan.order.clone();
    let (mut queues, mut checkers) = (Vec::new(), Vec::new());
    for instance in &fleet.instances {
        let (queue, checks) = mpsc::unbounded_channel();
        queues.push(queue);
        checkers.push(tokio::spawn(checker(
            client.clone(),
            shared.clone(),
            instance.rpc.clone(),
            instance.name,
            checks,
            started,
        )));
    }
    let (mut next_cut, mut turn, mut cuts) = (started + plan.every / 2, 0usize, Vec::new());
    let mut heal_at: Option<Instant> = None;
    let (mut next_report, mut n, mut refused_reports) = (started, 0u64, 0u64);
    // Samples on a task of their own: a sample waits for a cut-off Redis
    // (up to 2 s a question), which must not hold the cuts and reports.
    let sampler = {
        let pids: Vec<u32> = fleet.instances.iter().map(|i| i.pid()).collect();
        let admins: Vec<String> = fleet.instances.iter().map(|i| i.admin.clone()).collect();
        let redis = fleet.redis;
        let client = client.clone();
        tokio::spawn(async move {
            let mut rows = Vec::new();
            let mut next = started;
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                let pids = pids.clone();
                let mut allocated_kib = Vec::new();
                for admin in &admins {
                    let url = format!("{admin}/metrics");
                    let scrape = get_text(&client, &url);
                    let text = tokio::time::timeout(Duration::from_millis(500), scrape).await;
                    allocated_kib.push(text.ok().flatten().and_then(|t| {
                        metric(&t, "txgate_allocator_bytes{kind=\"allocated\"}").map(|b| b / 1024.0)
                    }));
                }
                let row = tokio::task::spawn_blocking(move || Row {
                    at_s: started.elapsed().as_secs_f64(),
                    resident: pids.iter().map(|&p| resident(p)).collect(),
                    allocated_kib,
                    log_len: redis_cli(redis, &["XLEN", LOG_KEY]).and_then(|v| v.parse().ok()),
                    redis_bytes: redis_used_memory(redis),
                })
                .await;
                rows.extend(row.ok());
                next += Duration::from_secs(10);
            }
            rows
        })
    };
    let gap = Duration::from_secs_f64(1.0 / plan.rate);
    while Instant::now() < end {
        let now = Instant::now();
        if heal_at.is_some_and(|h| now >= h) {
            let name = links(&shared).cut.unwrap_or_else(|| unreachable!());
            hosts.heal(name);
            // The host counts as cut until its heal time is known, in one
            // step: a check never sees it up with an older heal time.
            let mut l = links(&shared);
            l.cut = None;
            l.healed.insert(name, Instant::now());
            drop(l);
            heal_at = None;
        } else if heal_at.is_none() && now >= next_cut && now + plan.cut < end {
            let name = order[turn % order.len()];
            turn += 1;
            links(&shared).cut = Some(name);
            hosts.partition(name);
            cuts.push((name, now.duration_since(started)));
            heal_at = Some(now + plan.cut);
            next_cut += plan.every;
        }
        if now >= next_report {
            next_report += gap;
            let cut = links(&shared).cut;
            let reachable: Vec<usize> = (0..fleet.instances.len())
                .filter(|&i| Some(fleet.instances[i].name) != cut)
                .collect();
            let reporter = reachable[n as usize % reachable.len()];
            let ban = Reported::new(0x70, n);
            n += 1;
            let posted = Instant::now();
            if !report(client, &fleet.instances[reporter].report, &ban.report).await {
                refused_reports += 1;
                continue;
            }
            let to = fleet.instances[reporter].name;
            for (instance, queue) in fleet.instances.iter().zip(&queues) {
                let needs = match instance.name == to {
                    true => vec![to],
                    false => vec![instance.name, to, "redis"],
                };
                let _ = queue.send(Pending {
                    reporter: to,
                    posted,
                    copy: ban.copy.clone(),
                    needs,
                    last_ready: None,
                    late_before_cut: false,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The guard dropped before the heal locks again.
    let cut = links(&shared).cut;
    if let Some(name) = cut {
        hosts.heal(name);
        let mut l = links(&shared);
        l.cut = None;
        l.healed.insert(name, Instant::now());
    }
    drop(queues);
    let rows = sampler.await.unwrap_or_default();
    let mut outcomes = Vec::new();
    for checker in checkers {
        outcomes.extend(checker.await.unwrap_or_default());
    }
    let mut counters = Vec::new();
    for instance in &fleet.instances {
        let text = get_text(client, &format!("{}/metrics", instance.admin))
            .await
            .unwrap_or_default();
        let count = |event: &str| {
            metric(
                &text,
                &format!("txgate_fleet_bans_total{{event=\"{event}\"}}"),
            )
            .unwrap_or(0.0)
        };
        counters.push((
            instance.name,
            [
                "appended",
                "received",
                "gap",
                "reconnect",
                "dropped",
                "append_failed",
            ]
            .map(|e| (e, count(e))),
        ));
    }
    summary::summary(
        &plan,
        started,
        n,
        refused_reports,
        &cuts,
        &outcomes,
        &rows,
        &counters,
    );
    if let Some(path) = csv {
        summary::write_csv(path, &rows);
    }
}
