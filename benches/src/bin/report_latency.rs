//! Report to first refusal: how long after the Credible Layer sidecar posts
//! a failure report to txgate's Aeges listener is the same calldata from
//! another account refused (-32003)?
//!
//! Real anvil and txgate (Aeges listener with a token) on loopback. Each
//! round posts a report (`[tx_hash, TxEnv]`, as the production sidecar
//! does) for a call with fresh calldata, then submits the same calldata
//! signed by an unfunded account back to back until txgate refuses it; the
//! figure is from the start of the POST to that refusal. The baseline,
//! measured in the same rounds (interleaved), is the least that path can
//! take: one POST of a report and one submission that txgate refuses at
//! once (calldata banned during the warm-up), with nothing to wait for; a
//! ratio near 1 means the refusal waited for no batch. Target: median
//! ≤ 10 ms.
//!
//! `cargo build --release -p txgate -p txgate-benches &&
//!  target/release/report_latency` (or `benches/load/report_latency.sh`).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, hex, keccak256};
use clap::Parser;
use serde_json::json;
use txgate_benches::procs::{HttpClient, client, free_port, post};
use txgate_benches::start::{Txgate, anvil, release};
use txgate_benches::stats::Sample;
use txgate_benches::{CargoBench, Eoa, call, raw_hex, send_raw};

const TOKEN: &str = "bench-token";
const TARGET: Address = Address::repeat_byte(0x7e);
const GAS: u64 = 100_000;

/// Report to first refusal, against the floor of that path.
#[derive(Parser)]
struct Args {
    /// Measured rounds (after 10 of warm-up).
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    #[command(flatten)]
    _cargo: CargoBench,
}

fn report(round: u64, input: &[u8]) -> String {
    let hash: B256 = keccak256(round.to_be_bytes());
    json!([format!("{hash}"), {
        "tx_type": 2, "caller": format!("{}", Eoa::new(0x3c, round).address),
        "gas_limit": GAS, "gas_price": 2_000_000_000u64, "kind": format!("{TARGET}"),
        "value": "0x0", "data": format!("0x{}", hex::encode(input)), "nonce": 0,
        "chain_id": 31337, "access_list": [], "gas_priority_fee": 1_000_000_000u64,
        "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
    }])
    .to_string()
}

/// Posts the report, then submits `raw` until it is refused; the time
/// from the POST to the refusal, and the submissions it took.
async fn to_refusal(
    client: &HttpClient,
    aeges: &str,
    rpc: &str,
    report: String,
    raw: &str,
) -> (Duration, usize) {
    let started = Instant::now();
    let (status, _) = post(client, aeges, report).await.expect("report");
    assert_eq!(status, 200, "report refused");
    let body = send_raw(raw);
    for tries in 1.. {
        let (_, answer) = post(client, rpc, body.clone()).await.expect("submit");
        if answer["error"]["code"] == -32003 {
            return (started.elapsed(), tries);
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never refused: {answer}"
        );
    }
    unreachable!()
}

/// The floor: one report POST and one submission refused at once.
async fn floor(client: &HttpClient, aeges: &str, rpc: &str, report: String, raw: &str) -> Duration {
    let started = Instant::now();
    let (status, _) = post(client, aeges, report).await.expect("report");
    assert_eq!(status, 200);
    let (_, answer) = post(client, rpc, send_raw(raw)).await.expect("submit");
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let rounds = Args::parse().rounds;
    let client = client(8);
    let (_anvil, node) = anvil(&client, &[]).await;
    let aeges_port = free_port();
    let txgate = Txgate::start(
        &client,
        &release("txgate"),
        &node,
        &[
            "--aeges-listen",
            &format!("127.0.0.1:{aeges_port}"),
            "--aeges-report-token",
            TOKEN,
            // Every round ends in refusals from this one client, with no
            // submission the node takes: paced, its refusals would soon
            // wait 64 ms each, and the figure would be the hold, not the
            // time the report took to reach screening.
            "--pacing",
            "false",
        ],
    )
    .await;
    let rpc = txgate.url();
    let aeges = format!("http://127.0.0.1:{aeges_port}/report?token={TOKEN}");

    // Warm-up: connections, caches; the last one's copy stays refused.
    let mut denied = String::new();
    for round in 0..10u64 {
        let input = call([0xee, 0, 0, 1], round);
        let raw = raw_hex(&Eoa::new(0x4d, round).sign(0, TARGET, &input, GAS, 1));
        to_refusal(&client, &aeges, &rpc, report(round, &input), &raw).await;
        denied = raw;
    }
    let (mut latency, mut base, mut tries) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds as u64 {
        let round = 1_000 + 2 * i;
        let input = call([0xee, 0, 0, 2], round);
        let raw = raw_hex(&Eoa::new(0x4d, round).sign(0, TARGET, &input, GAS, 1));
        // The floor's report bans calldata nobody submits; its submission
        // is refused already.
        let other = call([0xee, 0, 0, 3], round);
        let measure = async {
            let (t, n) = to_refusal(&client, &aeges, &rpc, report(round, &input), &raw).await;
            latency.push(t.as_secs_f64() * 1e3);
            tries.push(n as f64);
        };
        let baseline = async {
            let t = floor(&client, &aeges, &rpc, report(round + 1, &other), &denied).await;
            base.push(t.as_secs_f64() * 1e3);
        };
        // Alternate which goes first.
        if i % 2 == 0 {
            measure.await;
            baseline.await;
        } else {
            baseline.await;
            measure.await;
        }
    }
    let (latency, base) = (Sample::new(latency), Sample::new(base));
    let (l50, l90, b50, b90) = (
        latency.median(),
        latency.quantile(0.9),
        base.median(),
        base.quantile(0.9),
    );
    let t50 = Sample::new(tries).median();
    println!("report to first refusal, {rounds} interleaved rounds (target: median <= 10 ms)");
    println!(
        "  report → refusal: median {l50:6.2} ms, p90 {l90:6.2} ms (median {t50} submissions)"
    );
    println!("  floor (one POST + one submission): median {b50:6.2} ms, p90 {b90:6.2} ms");
    println!("  ratio of medians: {:.2}×", l50 / b50);
}
