//! The honest client: distinct valid transactions at a steady rate, open
//! loop (a request every 1/rate s, whatever the previous did), each
//! call's latency kept with the time it was sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, post};
use txgate_benches::{Eoa, call, raw_hex, send_raw};

use crate::{POKE, sign};

/// What the honest client saw in one phase.
pub(crate) struct Honest {
    /// Latencies in ms of the successes, sorted.
    pub(crate) latencies: Vec<f64>,
    /// Calls that failed.
    pub(crate) failed: u64,
    /// Every call in the order sent: when (s since the run's origin) and
    /// its latency in ms (`None`: failed).
    series: Vec<(f64, Option<f64>)>,
}

/// What the honest client sends.
#[derive(Clone, Copy)]
pub(crate) struct HonestLoad {
    pub(crate) rate: u64,
    pub(crate) seconds: u64,
    /// Zero-value transfers to fresh addresses instead of pokes.
    pub(crate) transfers: bool,
}

/// The honest client: `rate`/s distinct valid transactions for `seconds`,
/// open loop.
pub(crate) async fn honest(
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
            let answer = post(&client, &url, send_raw(&raw)).await;
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
pub(crate) fn honest_series(h: &Honest) -> Value {
    json!({
        "sent_s": h.series.iter().map(|s| s.0).collect::<Vec<_>>(),
        "latency_ms": h.series.iter().map(|s| s.1).collect::<Vec<_>>(),
    })
}
