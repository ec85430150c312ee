//! The propagation phase: an invalidation injected at the sidecar while a
//! prober sends the same calldata from another EOA every millisecond; the
//! time from the injection to the first refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, post};
use txgate_benches::stats::Sample;
use txgate_benches::{Eoa, call, send_raw};

use crate::{POKE, sign};

/// The assertion the `p`-th propagation probe's invalidation names: one
/// each, so that the probes never add up to a cooldown on the probed call
/// (which would refuse the prober before the injection, and so measure
/// the cooldown, and pace the prober as a client on a streak).
fn probe_assertion(p: usize) -> String {
    format!("0x{}{:08x}", "e5".repeat(28), p)
}

/// One probe per pair of `probers` (the victim whose transaction is
/// invalidated, the prober): the injection-to-refusal times in ms of the
/// probes refused within 5 s, and each probe's row of the series (its
/// injection in s of the run, by `since`, and its time).
pub(crate) async fn propagation(
    client: &HttpClient,
    txgate_url: &str,
    sidecar_admin: &str,
    probers: &[Eoa],
    since: impl Fn(Instant) -> f64,
) -> (Sample, Vec<Value>) {
    let mut propagation = Vec::new();
    let mut probe_series = Vec::new();
    for (p, pair) in probers.chunks_exact(2).enumerate() {
        let (victim, prober) = (&pair[0], &pair[1]);
        let input = call(POKE, 5_000_000 + p as u64);
        let injected_raw = sign(victim, 0, &input, 1_000_000_000);
        let probe_raw = sign(prober, 0, &input, 1_000_000_000);
        let found = Arc::new(AtomicBool::new(false));
        let prober_task = {
            let (client, url, found, raw) = (
                client.clone(),
                txgate_url.to_string(),
                found.clone(),
                probe_raw.clone(),
            );
            tokio::spawn(async move {
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(5) {
                    if let Ok((_, v)) = post(&client, &url, send_raw(&raw)).await
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
            client,
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
    (Sample::new(propagation), probe_series)
}
