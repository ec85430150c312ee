//! WebSocket load: anvil's WebSocket straight, through txgate, and through
//! nginx proxying WebSocket, in the same run, in interleaved rounds.
//!
//! Two measurements per round and target:
//! - **round trips**: `--clients` (50) kept sockets each send `eth_chainId`
//!   and wait for its answer, for `--duration` seconds after a 1 s
//!   warm-up: messages/s over all sockets, p50 and p99 of a round trip;
//! - **fan-out**: `--subscribers` (1000) sockets subscribe to `newHeads`;
//!   then `--blocks` (20) blocks are mined one by one (`evm_mine` over
//!   HTTP, straight to anvil): for each block, the time from the mine
//!   call's start to the last subscriber's notification; median and p99
//!   over the blocks.
//!
//! It prints per-round figures, then medians over rounds and the ratios
//! txgate/nginx (messages/s) and txgate/direct (fan-out p99).
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/ws_load --rounds 3` (`--only txgate` runs one target,
//! for a profile). Needs nginx (Debian nginx-light,
//! scripts/install-bench-tools.sh). txgate is `target/release/txgate` or
//! `$TXGATE_BIN`; with `$TXGATE_BASELINE_BIN`, that build runs too as
//! target "before" (a change is kept only if it wins in the same run).
//! Loopback only; bounded in count and time; stops what it
//! starts.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use txgate_benches::CargoBench;
use txgate_benches::procs::{HttpClient, client, free_port, post, tree_cpu_ms};
use txgate_benches::start::{Scratch, Txgate, anvil, arg, nginx, txgate_bin};
use txgate_benches::stats::{median, percentile};

/// WebSocket round trips and new-heads fan-out: anvil straight, through
/// txgate and through nginx.
#[derive(Parser)]
struct Args {
    /// Sockets of the round trips.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Seconds of round trips measured, after 1 s of warm-up.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Sockets subscribed to newHeads.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Blocks mined for the fan-out.
    #[arg(long, default_value_t = 20)]
    blocks: usize,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Only this target (for a profile); no ratios.
    #[arg(long, value_parser = ["direct", "nginx", "txgate", "before"])]
    only: Option<String>,
    #[command(flatten)]
    _cargo: CargoBench,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str) -> Socket {
    for _ in 0..50 {
        if let Ok((socket, _)) = tokio_tungstenite::connect_async(url).await {
            return socket;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no WebSocket at {url}");
}

/// The next text message as JSON (pings skipped); `None` when closed.
async fn next_json(socket: &mut Socket) -> Option<Value> {
    while let Some(Ok(message)) = socket.next().await {
        match message {
            Message::Text(text) => return serde_json::from_str(&text).ok(),
            Message::Binary(bytes) => return serde_json::from_slice(&bytes).ok(),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
    None
}

#[derive(Debug, Clone, Copy)]
struct RoundTrips {
    per_sec: f64,
    /// The proxy's CPU (user + system, its workers included) per message,
    /// µs; 0 for the node itself.
    cpu_us: f64,
    p50_us: f64,
    p99_us: f64,
}

/// `clients` sockets, each one call at a time, for `duration` after 1 s.
async fn round_trips(
    url: &str,
    clients: usize,
    duration: Duration,
    proxy: Option<u32>,
) -> RoundTrips {
    let warm = Duration::from_secs(1);
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let mut socket = connect(&url).await;
            tokio::time::sleep_until(start.into()).await;
            let (measure_from, end) = (start + warm, start + warm + duration);
            let mut latencies = Vec::new();
            let mut id = 0u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                id += 1;
                let call =
                    json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId", "params": []});
                if socket.send(Message::text(call.to_string())).await.is_err() {
                    break;
                }
                match next_json(&mut socket).await {
                    Some(answer) if answer["result"].is_string() => {}
                    other => panic!("{url}: bad answer {other:?}"),
                }
                if sent >= measure_from {
                    latencies.push(sent.elapsed().as_secs_f64() * 1e6);
                }
            }
            let _ = socket.close(None).await;
            latencies
        }));
    }
    // The proxy's CPU over the measured window only.
    let cpu = async {
        tokio::time::sleep_until((start + warm).into()).await;
        let from = proxy.map(tree_cpu_ms);
        tokio::time::sleep(duration).await;
        proxy.map(tree_cpu_ms).zip(from).map(|(to, from)| to - from)
    };
    let (cpu_ms, _) = tokio::join!(cpu, async {});
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_by(f64::total_cmp);
    RoundTrips {
        cpu_us: cpu_ms.map_or(0.0, |ms| ms * 1000.0 / all.len().max(1) as f64),
        per_sec: all.len() as f64 / duration.as_secs_f64(),
        p50_us: percentile(&all, 0.5),
        p99_us: percentile(&all, 0.99),
    }
}

#[derive(Debug, Clone, Copy)]
struct FanOut {
    p50_ms: f64,
    p99_ms: f64,
}

/// `subscribers` sockets on `newHeads`; `blocks` blocks mined on `node`;
/// per block, mine call start → last notification.
async fn fan_out(url: &str, node: &str, subscribers: usize, blocks: usize) -> FanOut {
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Instant)>();
    let ready = Arc::new(tokio::sync::Semaphore::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let (url, tx, ready, stop) = (url.to_string(), tx.clone(), ready.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut socket = connect(&url).await;
            let call = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe",
                "params": ["newHeads"]});
            socket.send(Message::text(call.to_string())).await.unwrap();
            let answer = next_json(&mut socket).await.expect("subscribed");
            assert!(answer["result"].is_string(), "{url}: {answer}");
            ready.add_permits(1);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    message = next_json(&mut socket) => {
                        let Some(message) = message else { break };
                        let number = message["params"]["result"]["number"]
                            .as_str()
                            .and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok());
                        if let Some(number) = number {
                            let _ = tx.send((number, Instant::now()));
                        }
                    }
                }
            }
            let _ = socket.close(None).await;
        }));
    }
    drop(tx);
    let all = u32::try_from(subscribers).unwrap();
    tokio::time::timeout(Duration::from_secs(60), ready.acquire_many(all))
        .await
        .expect("every subscriber subscribed")
        .unwrap()
        .forget();
    let http = client(4);
    let mut lasts = Vec::new();
    for _ in 0..blocks {
        let started = Instant::now();
        let (_, mined) = post(
            &http,
            node,
            json!({"jsonrpc": "2.0", "id": 1, "method": "evm_mine", "params": []}).to_string(),
        )
        .await
        .unwrap();
        assert!(mined.get("error").is_none(), "{mined}");
        let mut seen = 0usize;
        let mut last = started;
        let mut number = None;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen < subscribers {
            let (n, at) = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .expect("every subscriber notified within 10 s")
                .expect("subscribers alive");
            // Every subscriber sees the same block; a stale one is skipped.
            if *number.get_or_insert(n) != n {
                continue;
            }
            seen += 1;
            last = last.max(at);
        }
        lasts.push(last.duration_since(started).as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    for task in tasks {
        let _ = task.await;
    }
    lasts.sort_by(f64::total_cmp);
    FanOut {
        p50_ms: percentile(&lasts, 0.5),
        p99_ms: percentile(&lasts, 0.99),
    }
}

/// nginx proxying WebSocket (and HTTP) to the node on `node_port`,
/// listening on `listen`.
fn nginx_http(listen: u16, node_port: u16) -> String {
    format!(
        "map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}\n\
         upstream node {{ server 127.0.0.1:{node_port}; }}\n\
         server {{ listen 127.0.0.1:{listen}; location / {{ proxy_pass http://node;\n\
         proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade;\n\
         proxy_set_header Connection $connection_upgrade; proxy_read_timeout 3600s;\n\
         proxy_buffering off; }} }}\n"
    )
}

/// Starts txgate (`bin`) with the bench's config in front of `node`, once
/// it answers.
async fn start_txgate(
    http: &HttpClient,
    bin: &std::path::Path,
    config: &std::path::Path,
    node: &str,
) -> Txgate {
    Txgate::start(http, bin, node, &["-c", arg(config), "--log-level", "warn"]).await
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let http = client(4);
    let scratch = Scratch::new("ws-load");

    let (_anvil, node) = anvil(&http, &[]).await;
    let node_port: u16 = node.rsplit(':').next().unwrap().parse().unwrap();
    // The bench's own sockets send far above the default 500 frames/s.
    let config = scratch.write(
        "txgate.toml",
        "[websocket]\nmax_frames_per_sec = 1000000\nframe_burst = 1000000\n\
         max_subscriptions = 100000\n[server]\nmax_connections = 20000\n",
    );
    let txgate = start_txgate(&http, &txgate_bin(), &config, &node).await;
    let before = match std::env::var_os("TXGATE_BASELINE_BIN") {
        Some(bin) => Some(start_txgate(&http, &PathBuf::from(bin), &config, &node).await),
        None => None,
    };
    let ng_port = free_port();
    let nginx_proc = nginx(
        &http,
        scratch.path(),
        "auto",
        &nginx_http(ng_port, node_port),
        &format!("http://127.0.0.1:{ng_port}"),
    )
    .await;

    let mut targets = vec![
        ("direct", format!("ws://127.0.0.1:{node_port}/"), None),
        (
            "nginx",
            format!("ws://127.0.0.1:{ng_port}/"),
            Some(nginx_proc.0.pid()),
        ),
        (
            "txgate",
            format!("ws://127.0.0.1:{}/", txgate.port),
            Some(txgate.pid()),
        ),
    ];
    if let Some(before) = &before {
        targets.push((
            "before",
            format!("ws://127.0.0.1:{}/", before.port),
            Some(before.pid()),
        ));
    }
    println!(
        "WebSocket load: {} sockets x {} s of eth_chainId round trips; fan-out to {} subscribers over {} blocks; {} rounds",
        a.clients, a.duration, a.subscribers, a.blocks, a.rounds
    );
    let mut trips: Vec<Vec<RoundTrips>> = vec![Vec::new(); targets.len()];
    let mut fans: Vec<Vec<FanOut>> = vec![Vec::new(); targets.len()];
    for round in 0..a.rounds {
        println!("\nround {}:", round + 1);
        // Rotate the order so no target always goes first.
        for k in 0..targets.len() {
            let i = (k + round) % targets.len();
            let (name, url, pid) = &targets[i];
            if a.only.as_ref().is_some_and(|only| only != name) {
                continue;
            }
            let t = round_trips(url, a.clients, Duration::from_secs(a.duration), *pid).await;
            let f = fan_out(url, &node, a.subscribers, a.blocks).await;
            println!(
                "  {name:7} {:>9.0} msg/s  p50 {:>6.0} us  p99 {:>6.0} us  cpu {:>5.1} us/msg | fan-out last subscriber p50 {:>6.2} ms  p99 {:>6.2} ms",
                t.per_sec, t.p50_us, t.p99_us, t.cpu_us, f.p50_ms, f.p99_ms
            );
            trips[i].push(t);
            fans[i].push(f);
        }
    }
    if a.only.is_some() {
        return;
    }
    println!("\nmedians over rounds:");
    for (i, (name, _, _)) in targets.iter().enumerate() {
        let m = |f: fn(&RoundTrips) -> f64| median(&trips[i].iter().map(f).collect::<Vec<_>>());
        let g = |f: fn(&FanOut) -> f64| median(&fans[i].iter().map(f).collect::<Vec<_>>());
        println!(
            "  {name:7} {:>9.0} msg/s  p50 {:>6.0} us  p99 {:>6.0} us  cpu {:>5.1} us/msg | fan-out p50 {:>6.2} ms  p99 {:>6.2} ms",
            m(|t| t.per_sec),
            m(|t| t.p50_us),
            m(|t| t.p99_us),
            m(|t| t.cpu_us),
            g(|f| f.p50_ms),
            g(|f| f.p99_ms)
        );
    }
    let ratio = |a: usize, b: usize, f: &dyn Fn(usize, usize) -> f64| {
        median(&(0..trips[a].len()).map(|r| f(r, b)).collect::<Vec<_>>())
    };
    let over_nginx = ratio(2, 1, &|r, b| trips[2][r].per_sec / trips[b][r].per_sec);
    let fan_ratio = ratio(2, 0, &|r, b| fans[2][r].p99_ms / fans[b][r].p99_ms);
    println!(
        "  txgate/nginx messages/s (median of per-round ratios): {over_nginx:.2}x (target >= 1.0x)"
    );
    println!(
        "  txgate/direct fan-out p99 (median of per-round ratios): {fan_ratio:.2}x (target <= 2.0x)"
    );
    if before.is_some() {
        let over = ratio(2, 3, &|r, b| trips[2][r].per_sec / trips[b][r].per_sec);
        let fan = ratio(2, 3, &|r, b| fans[2][r].p99_ms / fans[b][r].p99_ms);
        println!(
            "  txgate/before messages/s {over:.2}x, fan-out p99 {fan:.2}x (medians of per-round ratios)"
        );
    }
}
