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
use serde_json::json;
use txgate_benches::procs::{HttpClient, client, free_port, post, root, spawn, wait_up};
use txgate_benches::{Eoa, call, raw_hex};

const TOKEN: &str = "bench-token";
const TARGET: Address = Address::repeat_byte(0x7e);
const GAS: u64 = 100_000;

fn rounds() -> usize {
    let mut it = std::env::args().skip(1);
    let mut rounds = 200;
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--rounds" => rounds = it.next().expect("value").parse().expect("rounds"),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    rounds
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

fn submission(raw: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]})
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
    let body = submission(raw);
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
    let (_, answer) = post(client, rpc, submission(raw)).await.expect("submit");
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    started.elapsed()
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let rounds = rounds();
    let tools = root().join(".tools/bin");
    let release = root().join("target/release");
    let client = client(8);
    let (anvil_port, rpc_port, admin_port, aeges_port) =
        (free_port(), free_port(), free_port(), free_port());
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
    let rpc = format!("http://127.0.0.1:{rpc_port}");
    let _txgate = spawn(
        &release.join("txgate"),
        &[
            "--listen",
            &format!("127.0.0.1:{rpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--aeges-listen",
            &format!("127.0.0.1:{aeges_port}"),
            "--aeges-report-token",
            TOKEN,
            "--upstream",
            &node,
            // Every round ends in refusals from this one client, with no
            // submission the node takes: paced, its refusals would soon
            // wait 64 ms each, and the figure would be the hold, not the
            // time the report took to reach screening.
            "--pacing",
            "false",
        ],
    );
    wait_up(&client, &rpc).await;
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
    let (l50, l90, b50, b90) = (
        percentile(&mut latency.clone(), 0.5),
        percentile(&mut latency, 0.9),
        percentile(&mut base.clone(), 0.5),
        percentile(&mut base, 0.9),
    );
    let t50 = percentile(&mut tries, 0.5);
    println!("report to first refusal, {rounds} interleaved rounds (target: median <= 10 ms)");
    println!(
        "  report → refusal: median {l50:6.2} ms, p90 {l90:6.2} ms (median {t50} submissions)"
    );
    println!("  floor (one POST + one submission): median {b50:6.2} ms, p90 {b90:6.2} ms");
    println!("  ratio of medians: {:.2}×", l50 / b50);
}
