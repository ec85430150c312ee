//! txgate's /metrics as the summary and the plots read it: its decision
//! counters by reason, sampled over the run, a counter, a histogram's
//! p99.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use txgate_benches::procs::{HttpClient, get_text, metric};

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
pub(crate) async fn sample_decisions(
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

/// The value of `series` in a /metrics text; 0 when it is not there.
pub(crate) fn stat(metrics: &str, series: &str) -> f64 {
    metric(metrics, series).unwrap_or(0.0)
}

/// p99 of a Prometheus histogram `name`, in ms, from its cumulative
/// buckets (an upper bound: the `le` of the bucket that holds the 99th
/// percentile).
pub(crate) fn histogram_p99(metrics: &str, name: &str) -> f64 {
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
}
