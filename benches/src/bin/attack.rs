//! The attack benchmark: real anvil, the example sidecar and txgate on
//! loopback, an honest client at a steady rate, and 1000 attacker EOAs as
//! fast as the machine allows. Bounded in time; stops what it starts.
//!
//! Phases, in one run:
//! 1. **baseline**: the honest client alone, `--rate` distinct valid
//!    transactions per second for `--seconds`;
//! 2. **attack**: the same honest load, plus `--attackers` EOAs sending
//!    banned calldata (replays of a reverting call, fresh EOAs, high tips)
//!    and fresh-but-invalidating calls (a forbidden selector with new
//!    arguments, so a new fingerprint each time), over `--connections`;
//! 3. **propagation**: an invalidation injected at the sidecar while a
//!    prober sends the same calldata from another EOA every millisecond:
//!    the time from injection to the first refusal, `--probes` times.
//!
//! The honest client connects from 127.0.0.2 and the attackers from
//! 127.0.0.3: two clients to txgate, as on a real network.
//!
//! Honest latency is the `eth_sendRawTransaction` round trip through
//! txgate, sent open-loop (a request every 1/rate s, whatever the previous
//! did). Anvil mines a block per second (`--block-time 1`), so a submission
//! returns once the node has pooled it, as on a sequencer.
//!
//! Settings of the stack it starts:
//! - `--upstream anvil|sink` (anvil): what txgate forwards to. `sink` puts
//!   the sink (`src/bin/sink.rs`) in front of anvil: every raw transaction
//!   is taken at once and never mined, as at a sequencer's ingress, so the
//!   honest latency shows what txgate adds, not anvil's block building;
//!   set-up transactions then go to anvil directly to be mined and judged.
//! - `--should-forward off|hot|all` (off, txgate's default): txgate's
//!   `sidecar.should_forward_scope`, or no ShouldForward.
//! - `--cold-start`: the attacker's first sweep is not judged before the
//!   attack (by default it is, so the sweep call is hot when the fresh
//!   sweeps start, as when an attacker resubmits a call that failed).
//! - `--honest-call poke|transfer` (poke): the honest client pokes the
//!   protected contract (a call the replayed poke(13) makes hot: the cost
//!   to an honest user of a hot call), or sends zero-value transfers to
//!   fresh addresses (cold calls).
//!
//! `TXGATE_BIN=path` runs another build of txgate (for a same-run
//! comparison of two builds; a build older than `should_forward_scope`
//! refuses that key, so compare it with `--should-forward off`, or with
//! ShouldForward settings it knows).
//!
//! `cargo build --release -p txgate -p example-sidecar -p txgate-benches &&
//!  target/release/attack` (or `benches/load/attack.sh`, or interleaved
//! rounds of several settings with `benches/load/attack_rounds.sh`).
//!
//! The summary goes to stdout as JSON; `--json FILE` writes it too, with
//! the time series the plots read (`benches/report/attack_plots.py`) under
//! `series`: every honest call (sent at, latency), txgate's
//! `txgate_screen_decisions_total{decision,reason}` sampled every
//! `--sample-ms` (250) over the whole run, the phases' bounds, and each
//! probe's injection-to-refusal time.
//!
//! With `--node URL --txgate URL --txgate-admin URL --sidecar-admin URL`
//! the tool starts nothing and plays its story against a stack already
//! running (a fresh anvil with `--block-time 1`, as above: the contract's
//! address is the deployer's first), e.g. one a Prometheus scrapes
//! (`benches/load/dashboard.sh`).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use txgate_benches::procs::{
    HttpClient, Proc, client_from, cpu_ms, free_port, post, root, spawn, wait_up,
};
use txgate_benches::{Eoa, call, raw_hex};

/// The honest client's loopback address (and the set-up's, and the
/// prober's): a client of its own to txgate's per-client state (pacing,
/// limits).
const HONEST_ADDR: &str = "127.0.0.2";
/// The attackers' loopback address: one client, as a script on one host.
const ATTACKER_ADDR: &str = "127.0.0.3";
const GUARDED: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const DEPLOYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

struct Args {
    /// Child mode: only attack this txgate URL, print outcomes as JSON.
    attack_only: Option<String>,
    seconds: u64,
    rate: u64,
    attackers: u64,
    connections: usize,
    probes: usize,
    json: Option<PathBuf>,
    /// How often txgate's decision counters are sampled, in ms.
    sample_ms: u64,
    /// A running stack to play against instead of starting one.
    external: External,
    /// What txgate forwards to: anvil itself, or the sink in front of it.
    sink: bool,
    /// `sidecar.should_forward_scope` of the txgate started here ("hot" or
    /// "all"), or "off" for no ShouldForward.
    should_forward: String,
    /// Leave out the attacker's first sweep, judged before the attack: the
    /// attacked call is cold when the attack starts.
    cold_start: bool,
    /// The honest client sends zero-value transfers to fresh addresses
    /// (calls no invalidation names) instead of pokes of the protected
    /// contract (a call the attack's replays make hot).
    honest_transfers: bool,
}

/// The URLs of a stack started by someone else (all or none).
#[derive(Default)]
struct External {
    node: Option<String>,
    txgate: Option<String>,
    txgate_admin: Option<String>,
    sidecar_admin: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        attack_only: None,
        seconds: 8,
        rate: 200,
        attackers: 1000,
        connections: 32,
        probes: 20,
        json: None,
        sample_ms: 250,
        external: External::default(),
        sink: false,
        should_forward: "off".into(),
        cold_start: false,
        honest_transfers: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("flag value");
        match flag.as_str() {
            "--seconds" => a.seconds = value().parse().expect("seconds"),
            "--rate" => a.rate = value().parse().expect("rate"),
            "--attackers" => a.attackers = value().parse().expect("attackers"),
            "--connections" => a.connections = value().parse().expect("connections"),
            "--probes" => a.probes = value().parse().expect("probes"),
            "--json" => a.json = Some(value().into()),
            "--sample-ms" => a.sample_ms = value().parse().expect("sample-ms"),
            "--node" => a.external.node = Some(value()),
            "--txgate" => a.external.txgate = Some(value()),
            "--txgate-admin" => a.external.txgate_admin = Some(value()),
            "--sidecar-admin" => a.external.sidecar_admin = Some(value()),
            "--attack-only" => a.attack_only = Some(value()),
            "--upstream" => {
                a.sink = match value().as_str() {
                    "sink" => true,
                    "anvil" => false,
                    other => panic!("--upstream anvil|sink, not {other}"),
                }
            }
            "--should-forward" => {
                a.should_forward = value();
                assert!(
                    matches!(a.should_forward.as_str(), "off" | "hot" | "all"),
                    "--should-forward off|hot|all"
                );
            }
            "--cold-start" => a.cold_start = true,
            "--honest-call" => {
                a.honest_transfers = match value().as_str() {
                    "transfer" => true,
                    "poke" => false,
                    other => panic!("--honest-call poke|transfer, not {other}"),
                }
            }
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// An account of the run (keys apart from the other benches').
fn eoa(seed: u64) -> Eoa {
    Eoa::new(0x77, seed)
}

/// A signed call to the protected contract.
fn sign(eoa: &Eoa, nonce: u64, input: &[u8], tip: u128) -> String {
    raw_hex(&eoa.sign(
        nonce,
        GUARDED.parse().unwrap_or_default(),
        input,
        100_000,
        tip,
    ))
}

const POKE: [u8; 4] = [0x32, 0x14, 0x5f, 0x90];
const SWEEP: [u8; 4] = [0xaa, 0x60, 0xe7, 0x33];

fn send_body(raw: &str) -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":[raw]}).to_string()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What the honest client saw in one phase.
struct Honest {
    /// Latencies in ms of the successes, sorted.
    latencies: Vec<f64>,
    /// Calls that failed.
    failed: u64,
    /// Every call in the order sent: when (s since the run's origin) and
    /// its latency in ms (`None`: failed).
    series: Vec<(f64, Option<f64>)>,
}

/// What the honest client sends.
#[derive(Clone, Copy)]
struct HonestLoad {
    rate: u64,
    seconds: u64,
    /// Zero-value transfers to fresh addresses instead of pokes.
    transfers: bool,
}

/// The honest client: `rate`/s distinct valid transactions for `seconds`,
/// open loop.
async fn honest(
    client: HttpClient,
    url: String,
    eoas: Arc<Vec<Eoa>>,
    first_nonce: u64,
    load: HonestLoad,
    origin: Instant,
) -> Honest {
    let HonestLoad { rate, seconds, .. } = load;
    let total = rate * seconds;
    // Signed ahead: the client's own signing is not what is measured.
    let raws: Vec<String> = (0..total)
        .map(|i| {
            let eoa = &eoas[(i % eoas.len() as u64) as usize];
            let nonce = first_nonce + i / eoas.len() as u64;
            let n = 1_000_000 + first_nonce * 100_000 + i;
            if load.transfers {
                let to = alloy_primitives::Address::left_padding_from(
                    &(0xfeed_0000_0000 + n).to_be_bytes(),
                );
                raw_hex(&eoa.sign(nonce, to, &[], 100_000, 1_000_000_000))
            } else {
                sign(eoa, nonce, &call(POKE, n), 1_000_000_000)
            }
        })
        .collect();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let mut tasks = Vec::with_capacity(raws.len());
    let mut tasks_sent_at = Vec::with_capacity(raws.len());
    for raw in raws {
        tick.tick().await;
        let (client, url) = (client.clone(), url.clone());
        let sent_at = origin.elapsed().as_secs_f64();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let answer = post(&client, &url, send_body(&raw)).await;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            match answer {
                Ok((200, v)) if v["result"].is_string() => Ok(ms),
                other => Err(format!("{other:?}")),
            }
        }));
        tasks_sent_at.push(sent_at);
    }
    let mut latencies = Vec::new();
    let mut series = Vec::with_capacity(tasks.len());
    let mut failed = 0;
    let mut first_error = None;
    for (task, sent_at) in tasks.into_iter().zip(tasks_sent_at) {
        match task.await.unwrap() {
            Ok(ms) => {
                latencies.push(ms);
                series.push((sent_at, Some(ms)));
            }
            Err(e) => {
                failed += 1;
                series.push((sent_at, None));
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        eprintln!("first honest failure: {e}");
    }
    latencies.sort_by(f64::total_cmp);
    Honest {
        latencies,
        failed,
        series,
    }
}

/// The series of one honest phase as JSON columns.
fn honest_series(h: &Honest) -> Value {
    json!({
        "sent_s": h.series.iter().map(|s| s.0).collect::<Vec<_>>(),
        "latency_ms": h.series.iter().map(|s| s.1).collect::<Vec<_>>(),
    })
}

/// GETs `url`'s body as text (`None` on any error).
async fn get_text(client: &HttpClient, url: &str) -> Option<String> {
    let request = hyper::Request::get(url)
        .body(Full::new(Bytes::new()))
        .ok()?;
    let response = client.request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// `txgate_screen_decisions_total` from a /metrics text, keyed
/// `decision:reason`.
fn decisions(metrics: &str) -> BTreeMap<String, f64> {
    let label = |labels: &str, name: &str| {
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let len = labels[start..].find('"')?;
        Some(labels[start..start + len].to_string())
    };
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("txgate_screen_decisions_total{"))
        .filter_map(|rest| {
            let (labels, value) = rest.split_once("} ")?;
            let key = format!(
                "{}:{}",
                label(labels, "decision")?,
                label(labels, "reason")?
            );
            Some((key, value.trim().parse::<f64>().ok()?))
        })
        .collect()
}

/// Samples txgate's decision counters every `every` until `stop`: (s since
/// the run's origin, counters), one sample at least after `stop`.
async fn sample_decisions(
    client: HttpClient,
    metrics_url: String,
    origin: Instant,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<(f64, BTreeMap<String, f64>)> {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let last = stop.load(Ordering::Relaxed);
        let asked = origin.elapsed().as_secs_f64();
        if let Some(text) = get_text(&client, &metrics_url).await {
            // Stamped halfway through the scrape.
            let at = (asked + origin.elapsed().as_secs_f64()) / 2.0;
            samples.push((at, decisions(&text)));
        }
        if last {
            return samples;
        }
    }
}

/// Child mode: `connections` workers send attacker traffic to `url` for
/// `seconds`; returns the outcomes by refusal reason.
async fn attack(
    url: &str,
    attackers: u64,
    connections: usize,
    seconds: u64,
) -> BTreeMap<String, u64> {
    // The attackers are one client, the honest load another (their own
    // loopback addresses), as to the proxy they are.
    let client: HttpClient = client_from(1024, ATTACKER_ADDR.parse().expect("address"));
    let attackers: Arc<Vec<Eoa>> = Arc::new((0..attackers).map(|i| eoa(100_000 + i)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut attack_tasks = Vec::new();
    // Banned calldata, signed once per attacker: a replayed payload from
    // every attacker EOA at an extreme tip.
    let banned: Arc<Vec<String>> = Arc::new(
        attackers
            .iter()
            .map(|eoa| sign(eoa, 1, &call(POKE, 13), 900_000_000_000))
            .collect(),
    );
    for worker in 0..connections {
        let (client, url, attackers, banned, stop, sent) = (
            client.clone(),
            url.to_string(),
            attackers.clone(),
            banned.clone(),
            stop.clone(),
            sent.clone(),
        );
        attack_tasks.push(tokio::spawn(async move {
            let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
            // This worker's attackers, with their next nonce (attacker 0
            // spent nonce 0 on the first invalidated call).
            let mine: Vec<usize> = (worker..attackers.len()).step_by(connections).collect();
            let mut nonces: Vec<u64> = mine.iter().map(|&i| u64::from(i == 0)).collect();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = (n as usize / 2) % mine.len();
                let index = mine[slot];
                let raw = if n.is_multiple_of(2) {
                    banned[index].clone()
                } else {
                    // Fresh but invalidating: a forbidden selector with new
                    // arguments, a new fingerprint each time, valid nonce.
                    let salt = (worker as u64) << 40 | n;
                    sign(
                        &attackers[index],
                        nonces[slot],
                        &call(SWEEP, salt),
                        900_000_000_000,
                    )
                };
                n += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                let outcome = match post(&client, &url, send_body(&raw)).await {
                    Ok((_, v)) => match v["error"]["data"]["reason"].as_str() {
                        Some(reason) => reason.to_string(),
                        None if v["result"].is_string() => {
                            if n.is_multiple_of(2) {
                                nonces[slot] += 1;
                            }
                            "forwarded".into()
                        }
                        None => "node_error".into(),
                    },
                    Err(_) => "transport_error".into(),
                };
                *outcomes.entry(outcome).or_default() += 1;
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for t in attack_tasks {
        for (k, v) in t.await.unwrap() {
            *outcomes.entry(k).or_default() += v;
        }
    }
    outcomes
}

/// The assertion the `p`-th propagation probe's invalidation names: one
/// each, so that the probes never add up to a cooldown on the probed call
/// (which would refuse the prober before the injection, and so measure
/// the cooldown, and pace the prober as a client on a streak).
fn probe_assertion(p: usize) -> String {
    format!("0x{}{:08x}", "e5".repeat(28), p)
}

/// Where the node, txgate and the sidecar answer.
struct Stack {
    /// txgate's process id, when this tool started it.
    txgate_pid: Option<u32>,
    node: String,
    /// Where set-up transactions go to be mined: txgate when its upstream
    /// is the node, the node when it is the sink (which mines nothing).
    setup: String,
    txgate: String,
    txgate_admin: String,
    sidecar_admin: String,
}

impl Stack {
    /// The stack named on the command line, if one is.
    fn external(e: &External) -> Option<Stack> {
        let given = [&e.node, &e.txgate, &e.txgate_admin, &e.sidecar_admin];
        if given.iter().all(|u| u.is_none()) {
            return None;
        }
        let url = |u: &Option<String>| {
            u.clone()
                .expect("--node, --txgate, --txgate-admin and --sidecar-admin go together")
                .trim_end_matches('/')
                .to_string()
        };
        Some(Stack {
            node: url(&e.node),
            setup: url(&e.txgate),
            txgate: url(&e.txgate),
            txgate_admin: url(&e.txgate_admin),
            txgate_pid: None,
            sidecar_admin: url(&e.sidecar_admin),
        })
    }

    /// Starts anvil (a block per second), the example sidecar, the sink
    /// with `--upstream sink`, and txgate on free loopback ports; they stop
    /// when the processes are dropped.
    async fn start(client: &HttpClient, a: &Args) -> (Vec<Proc>, Stack) {
        let tools = root().join(".tools/bin");
        let release = root().join("target/release");
        let (anvil_port, grpc_port, sidecar_admin, rpc_port, admin_port, sink_port) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let node = format!("http://127.0.0.1:{anvil_port}");
        let anvil = spawn(
            &tools.join("anvil"),
            &[
                "--host",
                "127.0.0.1",
                "--port",
                &anvil_port.to_string(),
                "--silent",
                "--block-time",
                "1",
                "--gas-limit",
                "3000000000",
                "--order",
                "fifo",
            ],
        );
        wait_up(client, &node).await;
        let sidecar = spawn(
            &release.join("example-sidecar"),
            &[
                "--listen",
                &format!("127.0.0.1:{grpc_port}"),
                "--admin-listen",
                &format!("127.0.0.1:{sidecar_admin}"),
                "--node",
                &node,
                "--config",
                root().join("config/example-sidecar.toml").to_str().unwrap(),
            ],
        );
        let mut procs = Vec::new();
        let upstream = if a.sink {
            let url = format!("http://127.0.0.1:{sink_port}");
            procs.push(spawn(
                &release.join("sink"),
                &[
                    "--listen",
                    &format!("127.0.0.1:{sink_port}"),
                    "--node",
                    &node,
                ],
            ));
            wait_up(client, &url).await;
            url
        } else {
            node.clone()
        };
        let config =
            std::env::temp_dir().join(format!("txgate-attack-{}.toml", std::process::id()));
        std::fs::write(
            &config,
            match a.should_forward.as_str() {
                "off" => String::new(),
                scope => format!(
                    "[sidecar]\nshould_forward = true\nshould_forward_scope = \"{scope}\"\n"
                ),
            },
        )
        .unwrap();
        // TXGATE_BIN: another build of txgate (a same-run comparison).
        let txgate_bin = std::env::var_os("TXGATE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| release.join("txgate"));
        let txgate = spawn(
            &txgate_bin,
            &[
                "--config",
                config.to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{rpc_port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin_port}"),
                "--upstream",
                &upstream,
                "--sidecar",
                &format!("http://127.0.0.1:{grpc_port}"),
                "--max-in-flight",
                "4096",
            ],
        );
        let txgate_url = format!("http://127.0.0.1:{rpc_port}");
        let txgate_pid = Some(txgate.pid());
        procs.extend([txgate, sidecar, anvil]);
        (
            procs,
            Stack {
                setup: if a.sink { node.clone() } else { txgate_url },
                node,
                txgate: format!("http://127.0.0.1:{rpc_port}"),
                txgate_admin: format!("http://127.0.0.1:{admin_port}"),
                txgate_pid,
                sidecar_admin: format!("http://127.0.0.1:{sidecar_admin}"),
            },
        )
    }
}

#[tokio::main]
async fn main() {
    let a = args();
    if let Some(url) = &a.attack_only {
        let outcomes = attack(url, a.attackers, a.connections, a.seconds).await;
        let path = a.json.expect("--json for the outcomes");
        std::fs::write(path, serde_json::to_string(&outcomes).unwrap()).unwrap();
        return;
    }
    let tools = root().join(".tools/bin");
    let client: HttpClient = client_from(1024, HONEST_ADDR.parse().expect("address"));

    let (_stack, stack) = match Stack::external(&a.external) {
        Some(stack) => (Vec::new(), stack),
        None => Stack::start(&client, &a).await,
    };
    wait_up(&client, &stack.node).await;
    wait_up(&client, &stack.txgate).await;
    let _ = std::fs::remove_file(
        std::env::temp_dir().join(format!("txgate-attack-{}.toml", std::process::id())),
    );
    let (node, txgate_url) = (stack.node.clone(), stack.txgate.clone());
    let metrics_url = format!("{}/metrics", stack.txgate_admin);
    let sidecar_admin = stack.sidecar_admin.clone();

    // Deploy the protected contract (nonce 0 of anvil's first account).
    let bytecode = std::fs::read_to_string(root().join("contracts/Guarded.bin")).unwrap();
    let out = Command::new(tools.join("cast"))
        .args([
            "send",
            "--json",
            "--rpc-url",
            &stack.setup,
            "--private-key",
            DEPLOYER,
            "--create",
            bytecode.trim(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deploy: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Fund everyone in one batch.
    let honest_eoas: Arc<Vec<Eoa>> = Arc::new((0..50).map(|i| eoa(10 + i)).collect());
    let attackers: Arc<Vec<Eoa>> = Arc::new((0..a.attackers).map(|i| eoa(100_000 + i)).collect());
    let probers: Vec<Eoa> = (0..a.probes as u64 * 2).map(|i| eoa(900_000 + i)).collect();
    let first_sweeper = eoa(99_999);
    let everyone: Vec<Value> = honest_eoas
        .iter()
        .chain(attackers.iter())
        .chain(probers.iter())
        .chain(std::iter::once(&first_sweeper))
        .enumerate()
        .map(|(i, e)| {
            json!({"jsonrpc":"2.0","id":i,"method":"anvil_setBalance",
            "params":[format!("{}", e.address), "0x56bc75e2d63100000"]})
        })
        .collect();
    post(&client, &node, Value::Array(everyone).to_string())
        .await
        .unwrap();

    // The first invalidations, from the chain: one reverting poke(13), and
    // (unless --cold-start) the attacker's first sweep, which makes the
    // sweep call hot before the attack's fresh sweeps arrive.
    let first = sign(&attackers[0], 0, &call(POKE, 13), 1_000_000_000);
    let first_sweep = sign(&first_sweeper, 0, &call(SWEEP, 1), 1_000_000_000);
    let mut firsts = vec![first];
    if !a.cold_start {
        firsts.push(first_sweep);
    }
    for raw in &firsts {
        post(&client, &stack.setup, send_body(raw)).await.unwrap();
    }
    for raw in &firsts {
        let banned_ready = async {
            for _ in 0..500 {
                if let Ok((_, v)) = post(&client, &txgate_url, send_body(raw)).await
                    && v["error"]["data"]["reason"] == "recent_failure"
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        };
        assert!(banned_ready.await, "a first invalidation never arrived");
    }

    // The run's clock, and txgate's decision counters sampled on it until
    // the probes are done.
    let origin = Instant::now();
    let origin_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let since = |at: Instant| at.saturating_duration_since(origin).as_secs_f64();
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_decisions(
        client.clone(),
        metrics_url.clone(),
        origin,
        Duration::from_millis(a.sample_ms.max(10)),
        stop_sampling.clone(),
    ));

    let load = HonestLoad {
        rate: a.rate,
        seconds: a.seconds,
        transfers: a.honest_transfers,
    };
    // 1. Baseline: honest alone.
    eprintln!("baseline: {} tx/s honest for {} s", a.rate, a.seconds);
    let baseline_started = Instant::now();
    let baseline = honest(
        client.clone(),
        txgate_url.clone(),
        honest_eoas.clone(),
        0,
        load,
        origin,
    )
    .await;
    let baseline_ended = Instant::now();
    let (base, base_failed) = (&baseline.latencies, baseline.failed);

    // 2. Attack: honest plus attackers.
    eprintln!(
        "attack: {} attacker EOAs over {} connections",
        a.attackers, a.connections
    );
    // The attackers run in a child process at the lowest CPU priority: on a
    // small machine they would otherwise take the cores the node, the
    // sidecar and txgate need, and measure the machine, not txgate. They
    // still send as fast as what is left allows.
    let outcomes_file =
        std::env::temp_dir().join(format!("txgate-attack-{}.json", std::process::id()));
    let mut attacker_proc = Command::new("nice")
        .args(["-n", "19"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--attack-only",
            &txgate_url,
            "--attackers",
            &a.attackers.to_string(),
            "--connections",
            &a.connections.to_string(),
            "--seconds",
            &(a.seconds + 1).to_string(),
            "--json",
            outcomes_file.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the attackers");
    let attackers_started = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attack_started = Instant::now();
    let cpu_at_attack = stack.txgate_pid.map(cpu_ms);
    let under_attack = honest(
        client.clone(),
        txgate_url.clone(),
        honest_eoas.clone(),
        a.seconds * a.rate / 50 + 1,
        load,
        origin,
    )
    .await;
    let honest_under_attack_ended = Instant::now();
    let txgate_cpu_ms = stack
        .txgate_pid
        .zip(cpu_at_attack)
        .map(|(pid, at)| cpu_ms(pid) - at);
    let (under, under_failed) = (&under_attack.latencies, under_attack.failed);
    let _ = attacker_proc.wait();
    let attackers_ended = Instant::now();
    let attack_secs = attack_started.elapsed().as_secs_f64() + 0.5;
    let outcomes: BTreeMap<String, u64> =
        serde_json::from_str(&std::fs::read_to_string(&outcomes_file).expect("attack outcomes"))
            .expect("outcomes json");
    let _ = std::fs::remove_file(&outcomes_file);

    // 3. Propagation: injection at the sidecar → first refusal at txgate.
    let propagation_started = Instant::now();
    let mut propagation = Vec::new();
    let mut probe_series = Vec::new();
    for p in 0..a.probes {
        let (victim, prober) = (&probers[2 * p], &probers[2 * p + 1]);
        let input = call(POKE, 5_000_000 + p as u64);
        let injected_raw = sign(victim, 0, &input, 1_000_000_000);
        let probe_raw = sign(prober, 0, &input, 1_000_000_000);
        let found = Arc::new(AtomicBool::new(false));
        let prober_task = {
            let (client, url, found, raw) = (
                client.clone(),
                txgate_url.clone(),
                found.clone(),
                probe_raw.clone(),
            );
            tokio::spawn(async move {
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(5) {
                    if let Ok((_, v)) = post(&client, &url, send_body(&raw)).await
                        && v["error"]["data"]["reason"] == "denied_fingerprint"
                    {
                        found.store(true, Ordering::Relaxed);
                        return Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                None
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let injected = Instant::now();
        post(
            &client,
            &format!("{sidecar_admin}/invalidations"),
            json!({"raw_tx": injected_raw, "assertion_id": probe_assertion(p), "assertion_version": 1}).to_string(),
        )
        .await
        .unwrap();
        let refused_at = prober_task.await.unwrap();
        if let Some(at) = refused_at {
            propagation.push(at.saturating_duration_since(injected).as_secs_f64() * 1000.0);
        }
        probe_series.push(json!({
            "injected_s": since(injected),
            "ms": refused_at.map(|at| at.saturating_duration_since(injected).as_secs_f64() * 1000.0),
        }));
    }
    let propagation_ended = Instant::now();
    propagation.sort_by(f64::total_cmp);
    stop_sampling.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();

    let metrics = get_text(&client, &metrics_url)
        .await
        .expect("txgate's /metrics");
    let stat = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };

    // p99 of a Prometheus histogram, from its cumulative buckets (an upper
    // bound: the `le` of the bucket that holds the 99th percentile).
    let histogram_p99 = |name: &str| {
        let buckets: Vec<(f64, f64)> = metrics
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{name}_bucket{{le=\"")))
            .filter_map(|rest| {
                let (le, count) = rest.split_once("\"} ")?;
                Some((
                    le.parse::<f64>().unwrap_or(f64::INFINITY),
                    count.parse::<f64>().ok()?,
                ))
            })
            .collect();
        let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
        buckets
            .iter()
            .find(|(_, count)| *count >= total * 0.99)
            .map(|(le, _)| le * 1000.0)
            .unwrap_or(f64::NAN)
    };
    let total_attack: u64 = outcomes.values().sum();
    let refused: u64 = outcomes
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "forwarded" | "node_error" | "transport_error"))
        .map(|(_, v)| v)
        .sum();
    let honest_total = |l: &Vec<f64>, f: u64| l.len() as u64 + f;
    let forwarded = outcomes.get("forwarded").copied().unwrap_or(0);
    // txgate's CPU over the honest-under-attack phase, per call it served
    // then (the attack's calls of that phase, estimated at the attack's
    // mean rate, and the honest ones).
    let attack_phase_s = honest_under_attack_ended
        .saturating_duration_since(attack_started)
        .as_secs_f64();
    let calls_in_phase = total_attack as f64 / attack_secs * attack_phase_s
        + (under.len() as u64 + under_failed) as f64;
    let probes = |result: &str| {
        stat(&format!(
            "txgate_should_forward_total{{result=\"{result}\"}}"
        ))
    };
    let summary = json!({
        "rate": a.rate, "seconds": a.seconds, "attackers": a.attackers, "connections": a.connections,
        "upstream": if a.sink { "sink" } else { "anvil" },
        "should_forward": a.should_forward, "cold_start": a.cold_start,
        "honest_call": if a.honest_transfers { "transfer" } else { "poke" },
        "baseline": {"ok": base.len(), "failed": base_failed,
            "success": base.len() as f64 / honest_total(base, base_failed) as f64,
            "p50_ms": percentile(base, 0.5), "p99_ms": percentile(base, 0.99)},
        "under_attack": {"ok": under.len(), "failed": under_failed,
            "success": under.len() as f64 / honest_total(under, under_failed) as f64,
            "p50_ms": percentile(under, 0.5), "p99_ms": percentile(under, 0.99)},
        "p99_ratio": percentile(under, 0.99) / percentile(base, 0.99),
        "attack": {"sent": total_attack, "per_second": total_attack as f64 / attack_secs,
            "refused_share": refused as f64 / total_attack.max(1) as f64,
            "reached_upstream_share": forwarded as f64 / total_attack.max(1) as f64,
            "outcomes": outcomes},
        "txgate_cpu_under_attack": {"ms": txgate_cpu_ms,
            "us_per_call": txgate_cpu_ms.map(|ms| ms * 1000.0 / calls_in_phase.max(1.0)),
            "cores": txgate_cpu_ms.map(|ms| ms / 1000.0 / attack_phase_s.max(0.001))},
        "should_forward_probes": {"forward": probes("forward"), "deny": probes("deny"),
            "timeout": probes("timeout"), "error": probes("error"), "saturated": probes("saturated"),
            "cold": stat("txgate_should_forward_cold_total")},
        "propagation_ms": {"n": propagation.len(), "p50": percentile(&propagation, 0.5),
            "max": propagation.last().copied().unwrap_or(f64::NAN)},
        "txgate": {"invalidations_received": stat("txgate_sidecar_invalidations_received_total"),
            "screening_p99_ms_at_most": histogram_p99("txgate_screen_duration_seconds"),
            "upstream_p99_ms_at_most": histogram_p99("txgate_upstream_duration_seconds"),
            "request_p99_ms_at_most": histogram_p99("txgate_request_duration_seconds"),
            "denied_entries": stat("txgate_screen_entries{cache=\"denied\"}")},
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    if let Some(path) = a.json {
        // The counters as columns: one array per `decision:reason`, a
        // value per sample (0 where a sample lacks it).
        let keys: std::collections::BTreeSet<&String> =
            samples.iter().flat_map(|(_, c)| c.keys()).collect();
        let counters: serde_json::Map<String, Value> = keys
            .into_iter()
            .map(|k| {
                let column: Vec<f64> = samples
                    .iter()
                    .map(|(_, c)| c.get(k).copied().unwrap_or(0.0))
                    .collect();
                (k.clone(), json!(column))
            })
            .collect();
        let series = json!({
            "origin_unix_s": origin_unix,
            "phases": {
                "baseline": [since(baseline_started), since(baseline_ended)],
                "attackers": [since(attackers_started), since(attackers_ended)],
                "honest_under_attack": [since(attack_started), since(honest_under_attack_ended)],
                "propagation": [since(propagation_started), since(propagation_ended)],
            },
            "honest": {
                "baseline": honest_series(&baseline),
                "under_attack": honest_series(&under_attack),
            },
            "decisions": {
                "sample_ms": a.sample_ms,
                "t_s": samples.iter().map(|s| s.0).collect::<Vec<_>>(),
                "counters": counters,
            },
            "probes": probe_series,
        });
        let mut full = summary.clone();
        full["series"] = series;
        std::fs::write(path, full.to_string()).unwrap();
    }
}
