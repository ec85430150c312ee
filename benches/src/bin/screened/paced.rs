//! What a user feels: submissions sent at a fixed rate (half the node's
//! measured maximum), open loop, straight to the node and through txgate
//! in alternating phases, each with accounts of its own; the added p50 and
//! p99 of a submission are txgate's phase's less the direct phase's.
//!
//! anvil stops answering while it mines a block (a block of thousands of
//! transfers takes it hundreds of milliseconds), so with its interval
//! mining on, its own stalls are the p99 of both phases and what txgate
//! adds cannot be read. The paced phases therefore run with interval
//! mining paused, and each phase's transfers are mined out (`evm_mine`
//! until the pool is empty) before the next phase: every phase meets an
//! empty pool and a node doing nothing but taking submissions.

use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::json;
use txgate_benches::procs::{HttpClient, client, post};
use txgate_benches::stats::percentile;
use txgate_benches::{Eoa, raw_hex, send_raw};

/// One paced phase's round trips, in ms, sorted; and the failures.
pub(crate) struct Paced {
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) failed: u64,
    /// The rate the phase reached (sent / span of the sends).
    pub(crate) offered_per_s: f64,
    /// Each answered submission in the order sent: when it was sent (ms
    /// from the phase's start) and its round trip (ms).
    pub(crate) timeline: Vec<(f64, f64)>,
}

impl Paced {
    pub(crate) fn p(&self, q: f64) -> f64 {
        percentile(&self.latencies_ms, q)
    }
}

/// `count` transfers from `senders` fresh accounts of `seed`, in the order
/// they are sent: sender `k % senders` with nonce `k / senders`, so one
/// sender's transfers are `senders / rate` apart and arrive in order.
pub(crate) fn sign_paced(seed: u64, senders: u64, count: u64) -> (Vec<Eoa>, Vec<String>) {
    let eoas: Vec<Eoa> = (0..senders)
        .map(|s| Eoa::new(0x5d, seed * 1_000_000 + s))
        .collect();
    let raws = (0..count)
        .map(|k| {
            let (s, nonce) = (k % senders, k / senders);
            let n = seed * 10_000_000 + k;
            let to = Address::left_padding_from(&(0xbcd0_0000_0000 + n).to_be_bytes());
            raw_hex(&eoas[s as usize].sign(nonce, to, &[], 30_000, 1_000_000_000))
        })
        .collect();
    (eoas, raws)
}

/// Sends `raws` at `rate` a second, each at its own time whatever the
/// answers before it (open loop), and waits for every answer. tokio's
/// timer has a 1 ms tick, so above 1 000 a second the sends leave in
/// small bursts, one per tick; a round trip is timed from its task's
/// start, so a wait before the task runs is not counted (alike for every
/// target).
pub(crate) async fn send_paced(url: &str, raws: Vec<String>, rate: f64) -> Paced {
    let client: HttpClient = client(256);
    let started = tokio::time::Instant::now();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut calls = Vec::with_capacity(raws.len());
    let total = raws.len();
    for (i, raw) in raws.into_iter().enumerate() {
        tokio::time::sleep_until(started + gap * i as u32).await;
        let (client, url) = (client.clone(), url.to_string());
        calls.push(tokio::spawn(async move {
            let t = Instant::now();
            let sent_ms = started.elapsed().as_secs_f64() * 1000.0;
            match post(&client, &url, send_raw(&raw)).await {
                Ok((200, v)) if v["result"].is_string() => {
                    Some((sent_ms, t.elapsed().as_secs_f64() * 1000.0))
                }
                _ => None,
            }
        }));
    }
    let span = started.elapsed().as_secs_f64();
    let (mut timeline, mut failed) = (Vec::with_capacity(total), 0);
    for call in calls {
        match call.await.ok().flatten() {
            Some(answered) => timeline.push(answered),
            None => failed += 1,
        }
    }
    let mut latencies_ms: Vec<f64> = timeline.iter().map(|&(_, ms)| ms).collect();
    latencies_ms.sort_by(f64::total_cmp);
    Paced {
        latencies_ms,
        failed,
        offered_per_s: total as f64 / span.max(1e-9),
        timeline,
    }
}

/// Calls `method` on anvil and returns its result.
async fn call(
    control: &HttpClient,
    node: &str,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    match post(control, node, body.to_string()).await {
        Ok((200, v)) if v.get("error").is_none() => v["result"].clone(),
        other => panic!("{method} on {node}: {other:?}"),
    }
}

/// Pauses anvil's interval mining (blocks are then mined only by
/// [`mine_out`]).
pub(crate) async fn pause_mining(control: &HttpClient, node: &str) {
    call(control, node, "evm_setIntervalMining", json!([0])).await;
}

/// Mines blocks until anvil's pool holds nothing pending; what is left
/// queued (behind a nonce gap a failed submission left) is dropped, so
/// the next phase meets an empty pool.
pub(crate) async fn mine_out(control: &HttpClient, node: &str) {
    let count = |status: &serde_json::Value, key: &str| {
        status[key]
            .as_str()
            .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
            .or_else(|| status[key].as_u64())
    };
    for _ in 0..100 {
        let status = call(control, node, "txpool_status", json!([])).await;
        if count(&status, "pending") == Some(0) {
            if count(&status, "queued") != Some(0) {
                call(control, node, "anvil_dropAllTransactions", json!([])).await;
            }
            return;
        }
        call(control, node, "evm_mine", json!([])).await;
    }
    panic!("anvil's pool still held pending transfers after 100 blocks");
}
