//! The batch-probe benchmark: a JSON-RPC batch of submissions that each
//! wait for the sidecar's ShouldForward answer, through txgate, against the
//! same kind of batch sent to the node directly.
//!
//! Real anvil, the example sidecar answering ShouldForward after
//! `--delay-ms` (50), and txgate with the probe on (deadline 400 ms), all
//! on loopback. Each round sends a batch of `--batch` (40) fresh signed
//! transfers to distinct unprotected targets (so every one has a new
//! fingerprint and waits for an answer) to the node, then another to
//! txgate; the figure is the time txgate adds over the node, median of
//! `--rounds` (15) interleaved rounds. Sequential screening would add
//! batch × delay; the target is ≤ 250 ms for 40 × 50 ms.
//!
//! `cargo build --release -p txgate -p example-sidecar -p txgate-benches &&
//!  target/release/batch_probe` (or `benches/load/batch_probe.sh`).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, client, free_port, post, root, spawn, wait_up};
use txgate_benches::{Eoa, raw_hex};

struct Args {
    rounds: usize,
    batch: usize,
    delay_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 15,
        batch: 40,
        delay_ms: 50,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("flag value");
        match flag.as_str() {
            "--rounds" => a.rounds = value().parse().expect("rounds"),
            "--batch" => a.batch = value().parse().expect("batch"),
            "--delay-ms" => a.delay_ms = value().parse().expect("delay"),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A batch of transfers from `eoas` (nonce `nonce`), to distinct targets.
fn batch(eoas: &[Eoa], nonce: u64, round: usize) -> String {
    let calls: Vec<Value> = eoas
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut target = [0u8; 20];
            target[..8].copy_from_slice(&(round as u64).to_be_bytes());
            target[12..].copy_from_slice(&(i as u64 + 1).to_be_bytes());
            let raw = raw_hex(&e.sign(nonce, Address::from(target), &[], 21_000, 1_000_000_000));
            json!({"jsonrpc": "2.0", "id": i, "method": "eth_sendRawTransaction", "params": [raw]})
        })
        .collect();
    Value::Array(calls).to_string()
}

async fn timed(client: &HttpClient, url: &str, body: String, expect: usize) -> Duration {
    let started = Instant::now();
    let (status, answer) = post(client, url, body).await.expect("batch");
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    let answers = answer.as_array().expect("batch answer");
    assert_eq!(answers.len(), expect);
    for a in answers {
        assert!(a["result"].is_string(), "{a}");
    }
    elapsed
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let a = args();
    let tools = root().join(".tools/bin");
    let release = root().join("target/release");
    let client = client(64);
    let (anvil_port, grpc_port, sidecar_admin, rpc_port, admin_port) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let node = format!("http://127.0.0.1:{anvil_port}");
    let _anvil = spawn(
        &tools.join("anvil"),
        &[
            "--host",
            "127.0.0.1",
            "--port",
            &anvil_port.to_string(),
            "--silent",
        ],
    );
    wait_up(&client, &node).await;
    let dir = std::env::temp_dir().join(format!("txgate-batch-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sidecar_config = dir.join("sidecar.toml");
    let shipped = std::fs::read_to_string(root().join("config/example-sidecar.toml")).unwrap();
    std::fs::write(
        &sidecar_config,
        format!("should_forward_delay_ms = {}\n{shipped}", a.delay_ms),
    )
    .unwrap();
    let _sidecar = spawn(
        &release.join("example-sidecar"),
        &[
            "--listen",
            &format!("127.0.0.1:{grpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{sidecar_admin}"),
            "--node",
            &node,
            "--config",
            sidecar_config.to_str().unwrap(),
        ],
    );
    let txgate_config = dir.join("txgate.toml");
    std::fs::write(
        &txgate_config,
        "[sidecar]\nshould_forward = true\nshould_forward_scope = \"all\"\nshould_forward_timeout_ms = 400\n",
    )
    .unwrap();
    let txgate_url = format!("http://127.0.0.1:{rpc_port}");
    let _txgate = spawn(
        &release.join("txgate"),
        &[
            "--config",
            txgate_config.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{rpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--upstream",
            &node,
            "--sidecar",
            &format!("http://127.0.0.1:{grpc_port}"),
        ],
    );
    wait_up(&client, &txgate_url).await;

    // Two sets of accounts (node, txgate), funded in one batch.
    let eoas: Vec<Eoa> = (0..2 * a.batch as u64).map(|i| Eoa::new(0x5b, i)).collect();
    let fund: Vec<Value> = eoas
        .iter()
        .enumerate()
        .map(|(i, e)| {
            json!({"jsonrpc": "2.0", "id": i, "method": "anvil_setBalance",
                "params": [format!("{}", e.address), "0x56bc75e2d63100000"]})
        })
        .collect();
    post(&client, &node, Value::Array(fund).to_string())
        .await
        .expect("fund");
    let (direct, screened) = eoas.split_at(a.batch);
    // Warm-up: the connections to the node and to the sidecar.
    let mut nonce = 0;
    timed(&client, &node, batch(direct, nonce, 0), a.batch).await;
    timed(&client, &txgate_url, batch(screened, nonce, 0), a.batch).await;
    nonce += 1;

    let (mut node_ms, mut txgate_ms, mut added_ms) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=a.rounds {
        // Alternate which goes first.
        let (n, t) = if round % 2 == 0 {
            let n = timed(&client, &node, batch(direct, nonce, round), a.batch).await;
            let t = timed(&client, &txgate_url, batch(screened, nonce, round), a.batch).await;
            (n, t)
        } else {
            let t = timed(&client, &txgate_url, batch(screened, nonce, round), a.batch).await;
            let n = timed(&client, &node, batch(direct, nonce, round), a.batch).await;
            (n, t)
        };
        nonce += 1;
        let (n, t) = (n.as_secs_f64() * 1e3, t.as_secs_f64() * 1e3);
        println!(
            "round {round:2}: node {n:7.1} ms, through txgate {t:7.1} ms, added {:7.1} ms",
            t - n
        );
        node_ms.push(n);
        txgate_ms.push(t);
        added_ms.push(t - n);
    }
    let metrics = scrape_metrics(&format!("127.0.0.1:{admin_port}")).await;
    let forwards = metrics
        .lines()
        .find_map(|l| l.strip_prefix("txgate_should_forward_total{result=\"forward\"} "))
        .unwrap_or("0");
    println!(
        "\nbatch of {} submissions, ShouldForward answered after {} ms, {} rounds (medians):",
        a.batch, a.delay_ms, a.rounds
    );
    println!(
        "  node {:.1} ms, through txgate {:.1} ms, added {:.1} ms (target <= 250 ms; sequential would add >= {} ms)",
        median(node_ms),
        median(txgate_ms),
        median(added_ms),
        a.batch as u64 * a.delay_ms
    );
    println!("  ShouldForward answers 'forward': {forwards}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET /metrics` over a plain TCP connection.
async fn scrape_metrics(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("admin");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out
}
