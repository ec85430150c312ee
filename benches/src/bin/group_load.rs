//! The node group under load (issue 38), over loopback, in one run:
//!
//! 1. **CPU per call over a group against one upstream.** Two txgates
//!    (release build), one in front of a lone anvil (the short form,
//!    `[upstream] url`), one in front of a group of three anvils (one
//!    sequencer, two replicas, `[[upstream.nodes]]`; `--replicas N` for
//!    another count), both with every other setting at its default. The
//!    same reads at `--rate` calls/s (open loop, latency counted from when
//!    a call was due) over 20 keep-alive connections, one call in flight
//!    on each, in interleaved rounds (the order reversed every other
//!    round), for two mixes:
//!    - *reads*: `eth_getBalance` at `latest` and at block 0,
//!      `eth_chainId`, `eth_blockNumber`, in turn. Over a group txgate
//!      answers `eth_blockNumber` itself at the agreed head and pins
//!      `latest` to it; the lone node gets every call.
//!    - *forwarded*: the same without `eth_blockNumber`, so that every
//!      call goes to a node on both sides.
//!
//!    Per round, txgate's CPU per call (utime+stime of its PID from /proc:
//!    the anvils' CPU is not counted), p50 and p99, the load client's own
//!    CPU per call, and txgate's context switches per call (its threads'
//!    sleeps and wake-ups, where a profile puts most of its kernel time).
//!    Target: the group's CPU per call ≤ 1.05× the lone node's.
//! 2. **Failover under load.** `--failover-rate` reads/s (the *reads* mix)
//!    through the group's txgate for `--failover-seconds`, while a replica
//!    (each in turn) is killed every 10 s, from 3 s on, left down 1 s
//!    and started again on the same port, its marker balance set again
//!    (`anvil_setBalance`) before txgate takes it back
//!    (`txgate_upstream_node_up{node}` back to 1). Every read that fails
//!    is counted (a status other than 200, an error object, a transport
//!    error or a timeout, a wrong answer); target: none. Also the reads
//!    done, p99, `txgate_upstream_failovers_total` over the load, which
//!    node answered (each node's marker balance differs), and each
//!    cycle's times.
//!
//! Anvils mine no block (heads stay at 0, so a restarted node is at the
//! group's head at once): the group's routing, pinning and failover are
//! measured, not agreement between nodes' states.
//!
//! `benches/load/group_load.sh` (or `cargo build --release -p txgate -p
//! txgate-benches && target/release/group_load`); flags: `--rate N`
//! (3000), `--seconds S` (3), `--rounds R` (5), `--failover-rate N`
//! (5000), `--failover-seconds S` (60; 0 skips the part), `--mix reads`
//! or `--mix forwarded` (one mix alone in the CPU rounds, to profile it),
//! `--replicas N` (2).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use bytes::Bytes;
use clap::Parser;
use serde_json::{Value, json};
use txgate_benches::CargoBench;
use txgate_benches::open_loop::{OpenLoop, Outcome};
use txgate_benches::procs::{
    HttpClient, Proc, client, context_switches, get_text, metric, metric_series, post,
    restartable_port, wait_up,
};
use txgate_benches::start::{Scratch, Txgate, anvil, anvil_on, arg, release};
use txgate_benches::stats::{Sample, median};

/// The node group's load: CPU per call against one upstream, failover.
#[derive(Parser)]
struct Args {
    /// Calls a second in the CPU rounds.
    #[arg(long, default_value_t = 3_000)]
    rate: u64,
    /// Seconds of each measured round.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Reads a second under failover.
    #[arg(long, default_value_t = 5_000)]
    failover_rate: u64,
    /// The mixes of the CPU rounds (both by default; one alone, to profile
    /// it): `reads` or `forwarded`.
    #[arg(long, value_enum)]
    mix: Option<Mix>,
    /// Replicas in the group, beside its sequencer.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    replicas: u64,
    /// Seconds of the failover load (0: no failover part).
    #[arg(long, default_value_t = 60)]
    failover_seconds: u64,
    #[command(flatten)]
    _cargo: CargoBench,
}

/// Keep-alive connections of the load.
const CONNECTIONS: usize = 20;
/// Whose balance tells the nodes apart.
const MARKER: Address = Address::repeat_byte(0x4d);
/// The lone node's marker balance (wei); replica `rN`'s is N.
const LONE: u64 = 200;
/// The sequencer's.
const SEQUENCER: u64 = 100;
/// A replica is killed this often under the failover load…
const KILL_EVERY: Duration = Duration::from_secs(10);
/// …the first this far into it…
const FIRST_KILL: Duration = Duration::from_secs(3);
/// …and left down this long before it is started again.
const DOWN_FOR: Duration = Duration::from_secs(1);
/// How long a restarted replica may take to be back in the group.
const BACK_WITHIN: Duration = Duration::from_secs(15);

/// Which calls a load sends, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mix {
    /// Balance at `latest` and at 0, the chain id, the block number.
    Reads,
    /// The same without the block number, which a group answers itself.
    Forwarded,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Reads => "reads",
            Mix::Forwarded => "forwarded",
        }
    }

    /// `count` calls, ids unique and telling what was asked (`b…` a
    /// balance, `c…` the chain id, `n…` the block number).
    fn bodies(self, count: usize) -> Vec<Bytes> {
        let kinds = match self {
            Mix::Reads => 4,
            Mix::Forwarded => 3,
        };
        let marker = format!("{MARKER}");
        (0..count)
            .map(|i| {
                let call = match i % kinds {
                    0 => json!({"jsonrpc": "2.0", "id": format!("b{i}"),
                        "method": "eth_getBalance", "params": [marker, "latest"]}),
                    1 => json!({"jsonrpc": "2.0", "id": format!("b{i}"),
                        "method": "eth_getBalance", "params": [marker, "0x0"]}),
                    2 => json!({"jsonrpc": "2.0", "id": format!("c{i}"),
                        "method": "eth_chainId", "params": []}),
                    _ => json!({"jsonrpc": "2.0", "id": format!("n{i}"),
                        "method": "eth_blockNumber", "params": []}),
                };
                Bytes::from(call.to_string())
            })
            .collect()
    }
}

/// Reads an answer: the marker balance for a balance read (which node
/// answered), `None` for the others; `Err` for anything but a right
/// answer (status, error object, no result, a marker not in `markers`).
fn answer(status: u16, body: &[u8], markers: &[u64]) -> Result<Option<u64>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| format!("status {status}, no JSON"))?;
    if let Some(error) = v.get("error") {
        return Err(format!(
            "status {status}, error {} {}",
            error["code"], error["message"]
        ));
    }
    if status != 200 {
        return Err(format!("status {status}"));
    }
    let id = v["id"].as_str().unwrap_or_default();
    let hex = v["result"]
        .as_str()
        .ok_or_else(|| format!("no result: {}", v["result"]))?;
    let number = u64::from_str_radix(hex.trim_start_matches("0x"), 16)
        .map_err(|_| format!("not a number: {hex}"))?;
    match id.as_bytes().first() {
        Some(b'b') if markers.contains(&number) => Ok(Some(number)),
        Some(b'b') => Err(format!("wrong marker {number}")),
        Some(b'c') if number == 31337 => Ok(None),
        Some(b'c') => Err(format!("wrong chain id {number}")),
        Some(b'n') => Ok(None),
        _ => Err(format!("unknown id {id:?}")),
    }
}

/// One node of the group.
struct Node {
    name: String,
    role: &'static str,
    marker: u64,
    port: u16,
    /// Its anvil; `None` while it is down.
    proc: Option<Proc>,
}

impl Node {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A node on `port`, started, its marker set.
    async fn start(
        http: &HttpClient,
        name: String,
        role: &'static str,
        marker: u64,
        port: u16,
    ) -> Node {
        let mut node = Node {
            name,
            role,
            marker,
            port,
            proc: None,
        };
        node.restart(http).await;
        node
    }

    /// Starts its anvil on its port and sets its marker; checks it reads
    /// back.
    async fn restart(&mut self, http: &HttpClient) {
        let (proc, url) = anvil_on(http, self.port, &[]).await;
        self.proc = Some(proc);
        mark(http, &url, self.marker).await;
    }
}

/// Sets the marker's balance on the node at `url` and reads it back.
async fn mark(http: &HttpClient, url: &str, wei: u64) {
    let set = json!({"jsonrpc": "2.0", "id": 1, "method": "anvil_setBalance",
        "params": [format!("{MARKER}"), format!("0x{wei:x}")]});
    let (status, v) = post(http, url, set.to_string()).await.expect("setBalance");
    assert_eq!(status, 200, "{v}");
    let get = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance",
        "params": [format!("{MARKER}"), "latest"]});
    let (_, v) = post(http, url, get.to_string()).await.expect("getBalance");
    assert_eq!(v["result"], format!("0x{wei:x}"), "marker not set on {url}");
}

/// txgate's admin `/metrics`.
async fn metrics(http: &HttpClient, txgate: &Txgate) -> String {
    get_text(http, &format!("{}/metrics", txgate.admin()))
        .await
        .unwrap_or_default()
}

/// Whether txgate has `node` in (`txgate_upstream_node_up` 1).
async fn node_up(http: &HttpClient, txgate: &Txgate, name: &str, role: &str) -> bool {
    let series = format!(r#"txgate_upstream_node_up{{node="{name}",role="{role}"}}"#);
    metric(&metrics(http, txgate).await, &series) == Some(1.0)
}

/// Waits up to `limit` for `node` to be in (`up`) or out; how long it took.
async fn wait_node(
    http: &HttpClient,
    txgate: &Txgate,
    node: &Node,
    up: bool,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if node_up(http, txgate, &node.name, node.role).await == up {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// One round's figures: CPU in µs per call, latency in ms.
#[derive(Debug, Clone, Copy)]
struct Round {
    server_us: f64,
    client_us: f64,
    p50: f64,
    p99: f64,
    rate: f64,
    failed: usize,
    /// txgate's context switches per call.
    switches: f64,
}

impl Round {
    fn of((out, switches): &(Outcome<Option<u64>>, f64)) -> Round {
        let l = out.latencies_ms();
        Round {
            switches: *switches,
            server_us: out.server_us(),
            client_us: out.client_us(),
            p50: l.median(),
            p99: l.quantile(0.99),
            rate: out.rate(),
            failed: out.failed(),
        }
    }
}

/// A load of `bodies` at `rate` through `txgate`, answers checked
/// against `markers`; with txgate's context switches per call.
async fn load(
    txgate: &Txgate,
    rate: u64,
    bodies: Vec<Bytes>,
    markers: Vec<u64>,
) -> (Outcome<Option<u64>>, f64) {
    let load = OpenLoop {
        port: txgate.port,
        path: "/",
        headers: &[],
        connections: CONNECTIONS,
        rate,
        server_pid: txgate.pid(),
    };
    let switches = context_switches(txgate.pid());
    let out = load
        .run(bodies, move |status, body| answer(status, body, &markers))
        .await;
    let switches = (context_switches(txgate.pid()) - switches) as f64 / out.requests() as f64;
    for (kind, n) in &out.errors {
        println!("    failed: {n} × {kind}");
    }
    (out, switches)
}

/// Prints a setting's rounds and medians; the medians.
fn summary(name: &str, rounds: &[Round]) -> Round {
    let m = |f: fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let per_round: Vec<String> = rounds
        .iter()
        .map(|r| format!("{:.1}", r.server_us))
        .collect();
    let r = Round {
        server_us: m(|r| r.server_us),
        client_us: m(|r| r.client_us),
        p50: m(|r| r.p50),
        p99: m(|r| r.p99),
        rate: m(|r| r.rate),
        failed: rounds.iter().map(|r| r.failed).sum(),
        switches: m(|r| r.switches),
    };
    println!(
        "  {name:<16} txgate {:6.1} µs/call (rounds {})  p50 {:.3} ms  p99 {:.3} ms  \
         client {:5.1} µs/call  txgate {:.2} context switches/call  {:.0} calls/s  failed {}",
        r.server_us,
        per_round.join(", "),
        r.p50,
        r.p99,
        r.client_us,
        r.switches,
        r.rate,
        r.failed
    );
    r
}

fn main() {
    let a = Args::parse();
    // The load client: one runtime thread for the connections and the
    // answers, and the pacing thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(a));
}

async fn run(a: Args) {
    let http = client(4);
    let scratch = Scratch::new("group_load");
    let (lone_proc, lone_url) = anvil(&http, &[]).await;
    mark(&http, &lone_url, LONE).await;
    let mut nodes = vec![
        Node::start(
            &http,
            "seq".into(),
            "sequencer",
            SEQUENCER,
            restartable_port(),
        )
        .await,
    ];
    for r in 1..=a.replicas {
        nodes.push(Node::start(&http, format!("r{r}"), "replica", r, restartable_port()).await);
    }
    let lone_config = scratch.write("lone.toml", &format!("[upstream]\nurl = \"{lone_url}\"\n"));
    let group_config = scratch.write(
        "group.toml",
        &nodes
            .iter()
            .map(|n| {
                format!(
                    "[[upstream.nodes]]\nname = \"{}\"\nurl = \"{}\"\nrole = \"{}\"\n\n",
                    n.name,
                    n.url(),
                    n.role
                )
            })
            .collect::<String>(),
    );
    let lone = Txgate::spawn_with(&release("txgate"), &["--config", arg(&lone_config)]);
    let group = Txgate::spawn_with(&release("txgate"), &["--config", arg(&group_config)]);
    wait_up(&http, &lone.url()).await;
    wait_up(&http, &group.url()).await;
    for node in &nodes {
        // A node is in after `recover_after` (2) probes, 2 s apart.
        wait_node(&http, &group, node, true, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{} never came in", node.name));
    }

    // The answers a group's read may have: a replica's marker, or the
    // sequencer's (where no replica is in).
    let markers: Vec<u64> = nodes.iter().map(|n| n.marker).collect();
    cpu_rounds(&a, &lone, &group, &markers).await;
    if a.failover_seconds > 0 {
        failover(&a, &http, &group, &mut nodes, &markers).await;
    }
    drop((lone, group, lone_proc, nodes, scratch));
}

/// Part 1: txgate's CPU per call, lone node against the group.
async fn cpu_rounds(a: &Args, lone: &Txgate, group: &Txgate, markers: &[u64]) {
    println!(
        "CPU per call: txgate over one anvil (short form) against txgate over a group of \
         1 sequencer and {} replicas; {} calls/s over {CONNECTIONS} keep-alive \
         connections, {} s rounds, {} interleaved rounds (medians; target: group ≤ 1.05× lone)",
        a.replicas, a.rate, a.seconds, a.rounds
    );
    let count = (a.rate * a.seconds) as usize;
    let mixes = match a.mix {
        Some(mix) => vec![mix],
        None => vec![Mix::Reads, Mix::Forwarded],
    };
    let settings: Vec<(&str, Mix)> = mixes
        .iter()
        .flat_map(|&mix| [("lone", mix), ("group", mix)])
        .collect();
    let target = |who: &str| -> (&Txgate, Vec<u64>) {
        if who == "lone" {
            (lone, vec![LONE])
        } else {
            (group, markers.to_vec())
        }
    };
    // Warm-up: connections, pools, caches.
    for &(who, mix) in &settings {
        let (txgate, markers) = target(who);
        let _ = load(txgate, a.rate, mix.bodies(count / 3), markers).await;
    }
    let mut rounds: BTreeMap<(&str, &str), Vec<Round>> = BTreeMap::new();
    for r in 0..a.rounds {
        let mut order = settings.clone();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut line = Vec::new();
        for (who, mix) in order {
            let (txgate, markers) = target(who);
            let round = Round::of(&load(txgate, a.rate, mix.bodies(count), markers).await);
            line.push(format!(
                "{who}/{} {:.1} µs p99 {:.2} ms",
                mix.name(),
                round.server_us,
                round.p99
            ));
            rounds.entry((mix.name(), who)).or_default().push(round);
        }
        println!("  round {}: {}", r + 1, line.join(" | "));
    }
    for mix in mixes {
        let l = summary(
            &format!("lone/{}", mix.name()),
            &rounds[&(mix.name(), "lone")],
        );
        let g = summary(
            &format!("group/{}", mix.name()),
            &rounds[&(mix.name(), "group")],
        );
        let ratios: Vec<f64> = rounds[&(mix.name(), "group")]
            .iter()
            .zip(&rounds[&(mix.name(), "lone")])
            .map(|(g, l)| g.server_us / l.server_us)
            .collect();
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        let ratio = median(&ratios);
        println!(
            "  {}: group/lone txgate CPU per call {:.3}× (median of per-round ratios {}; \
             ratio of medians {:.3}×): target ≤ 1.05× {}",
            mix.name(),
            ratio,
            listed.join(", "),
            g.server_us / l.server_us,
            if ratio <= 1.05 { "met" } else { "NOT met" }
        );
    }
}

/// What one kill and restart of a replica came to.
struct Cycle {
    node: String,
    killed_at: f64,
    out_after: Option<Duration>,
    up_after: Duration,
    back_after: Option<Duration>,
}

/// Part 2: reads under failover, a replica killed every 10 s.
async fn failover(
    a: &Args,
    http: &HttpClient,
    group: &Txgate,
    nodes: &mut [Node],
    markers: &[u64],
) {
    println!(
        "Failover: {} reads/s (reads mix) over {CONNECTIONS} keep-alive connections through \
         the group's txgate for {} s; a replica (each in turn) killed every {} s from {} s \
         on, down {} s, started again on its port with its marker (target: no failed read)",
        a.failover_rate,
        a.failover_seconds,
        KILL_EVERY.as_secs(),
        FIRST_KILL.as_secs(),
        DOWN_FOR.as_secs()
    );
    let name = "txgate_upstream_failovers_total";
    let before: BTreeMap<String, f64> = metric_series(&metrics(http, group).await, name)
        .into_iter()
        .collect();
    let count = (a.failover_rate * a.failover_seconds) as usize;
    let seconds = Duration::from_secs(a.failover_seconds);
    let bodies = Mix::Reads.bodies(count);
    let started = Instant::now();
    let churn = async {
        let mut cycles = Vec::new();
        let mut at = FIRST_KILL;
        let mut k = 0;
        while at + DOWN_FOR < seconds {
            tokio::time::sleep_until((started + at).into()).await;
            let i = 1 + k % a.replicas as usize;
            let killed_at = started.elapsed().as_secs_f64();
            // SIGKILL, reaped: the port is free again.
            drop(nodes[i].proc.take());
            let out_after = wait_node(http, group, &nodes[i], false, DOWN_FOR).await;
            tokio::time::sleep_until((started + at + DOWN_FOR).into()).await;
            let restarted = Instant::now();
            nodes[i].restart(http).await;
            let up_after = restarted.elapsed();
            let back_after = wait_node(http, group, &nodes[i], true, BACK_WITHIN).await;
            cycles.push(Cycle {
                node: nodes[i].name.clone(),
                killed_at,
                out_after,
                up_after,
                back_after: back_after.map(|d| d + up_after),
            });
            k += 1;
            at += KILL_EVERY;
        }
        cycles
    };
    let ((out, switches), cycles) = tokio::join!(
        load(group, a.failover_rate, bodies, markers.to_vec()),
        churn
    );
    let after: BTreeMap<String, f64> = metric_series(&metrics(http, group).await, name)
        .into_iter()
        .collect();
    let l: Sample = out.latencies_ms();
    let mut by_node: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, marker) in &out.answers {
        if let Some(m) = marker {
            *by_node.entry(*m).or_default() += 1;
        }
    }
    let node_of = |m: u64| match m {
        SEQUENCER => "seq".to_string(),
        r => format!("r{r}"),
    };
    for c in &cycles {
        let out = c.out_after.map_or("not seen within 1 s".into(), |d| {
            format!("{:.0} ms", d.as_secs_f64() * 1000.0)
        });
        let back = c.back_after.map_or("NEVER (15 s)".into(), |d| {
            format!("{:.2} s", d.as_secs_f64())
        });
        println!(
            "  {:>5.1} s: {} killed; out in txgate after {out}; anvil up {:.0} ms after the \
             restart, marker set; back in txgate {back} after the restart",
            c.killed_at,
            c.node,
            c.up_after.as_secs_f64() * 1000.0,
        );
    }
    let failovers: Vec<String> = after
        .iter()
        .map(|(labels, v)| {
            format!(
                "{labels} {}",
                v - before.get(labels).copied().unwrap_or_default()
            )
        })
        .collect();
    let total: f64 = after.values().sum::<f64>() - before.values().sum::<f64>();
    let answered: Vec<String> = by_node
        .iter()
        .map(|(m, n)| format!("{} {n}", node_of(*m)))
        .collect();
    println!(
        "  reads {} ({:.0}/s) in {:.1} s, failed {} (target 0: {}); p50 {:.3} ms  p99 {:.3} ms  \
         p99.9 {:.3} ms  max {:.1} ms; failovers {total} ({}); balance reads answered by {}; \
         kills {}, all back: {}; txgate {:.1} µs/call ({switches:.2} context switches/call), \
         client {:.1} µs/call",
        out.requests(),
        out.rate(),
        out.elapsed,
        out.failed(),
        if out.failed() == 0 { "met" } else { "NOT met" },
        l.median(),
        l.quantile(0.99),
        l.quantile(0.999),
        l.max(),
        if failovers.is_empty() {
            "none".to_string()
        } else {
            failovers.join(", ")
        },
        answered.join(", "),
        cycles.len(),
        cycles.iter().all(|c| c.back_after.is_some()),
        out.server_us(),
        out.client_us(),
    );
}
