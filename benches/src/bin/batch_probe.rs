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
use clap::Parser;
use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, client, get_text, metric, post};
use txgate_benches::start::{Scratch, Txgate, anvil, arg, fund, release, sidecar, sidecar_config};
use txgate_benches::stats::median;
use txgate_benches::{CargoBench, Eoa, raw_hex};

/// A batch of submissions waiting on ShouldForward, through txgate and
/// straight to the node.
#[derive(Parser)]
struct Args {
    /// Interleaved rounds (after one of warm-up).
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// Submissions in a batch.
    #[arg(long, default_value_t = 40)]
    batch: usize,
    /// The sidecar's delay before each ShouldForward answer, ms.
    #[arg(long, default_value_t = 50)]
    delay_ms: u64,
    #[command(flatten)]
    _cargo: CargoBench,
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

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let client = client(64);
    let (_anvil, node) = anvil(&client, &[]).await;
    let scratch = Scratch::new("batch-probe");
    let shipped = std::fs::read_to_string(sidecar_config()).unwrap();
    let sidecar_config = scratch.write(
        "sidecar.toml",
        &format!("should_forward_delay_ms = {}\n{shipped}", a.delay_ms),
    );
    let sidecar = sidecar(&client, &node, &sidecar_config).await;
    let txgate_config = scratch.write(
        "txgate.toml",
        "[sidecar]\nshould_forward = true\nshould_forward_scope = \"all\"\nshould_forward_timeout_ms = 400\n",
    );
    let txgate = Txgate::start(
        &client,
        &release("txgate"),
        &node,
        &["--config", arg(&txgate_config), "--sidecar", &sidecar.grpc],
    )
    .await;
    let txgate_url = txgate.url();

    // Two sets of accounts (node, txgate), funded in one batch.
    let eoas: Vec<Eoa> = (0..2 * a.batch as u64).map(|i| Eoa::new(0x5b, i)).collect();
    fund(&client, &node, eoas.iter().map(|e| e.address)).await;
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
    let metrics = get_text(&client, &format!("{}/metrics", txgate.admin()))
        .await
        .expect("txgate's /metrics");
    let forwards =
        metric(&metrics, "txgate_should_forward_total{result=\"forward\"}").unwrap_or(0.0);
    println!(
        "\nbatch of {} submissions, ShouldForward answered after {} ms, {} rounds (medians):",
        a.batch, a.delay_ms, a.rounds
    );
    println!(
        "  node {:.1} ms, through txgate {:.1} ms, added {:.1} ms (target <= 250 ms; sequential would add >= {} ms)",
        median(&node_ms),
        median(&txgate_ms),
        median(&added_ms),
        a.batch as u64 * a.delay_ms
    );
    println!("  ShouldForward answers 'forward': {forwards}");
}
