//! What the partition run prints at its end, and its samples as CSV.

use std::path::Path;
use std::time::{Duration, Instant};

use txgate_benches::stats::{Sample, median};

use super::{Outcome, Plan, Row};

/// One report on one instance, as it ended.
pub(super) struct Check {
    pub(super) instance: &'static str,
    pub(super) reporter: &'static str,
    /// When the report was posted, from the start.
    pub(super) posted: Duration,
    pub(super) outcome: Outcome,
}

pub(super) type Counters = Vec<(&'static str, [(&'static str, f64); 6])>;

#[allow(clippy::too_many_arguments)]
pub(super) fn summary(
    plan: &Plan,
    started: Instant,
    reports: u64,
    not_taken: u64,
    cuts: &[(&str, Duration)],
    outcomes: &[Check],
    rows: &[Row],
    counters: &Counters,
) {
    println!(
        "partition run: {} min, a host cut off every {} s for {} s (in turn {}), {} reports/s",
        plan.minutes,
        plan.every.as_secs(),
        plan.cut.as_secs(),
        plan.order.join(", "),
        plan.rate
    );
    let cut_list: Vec<String> = cuts
        .iter()
        .map(|(n, at)| format!("{n}@{}s", at.as_secs()))
        .collect();
    println!("cuts: {}", cut_list.join(" "));
    println!("reports posted: {reports} ({not_taken} not taken)");
    let (mut direct, mut own, mut reporter, mut redis) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut lost, mut late) = (0, 0);
    let at = |t: Instant| t.duration_since(started).as_secs_f64();
    for check in outcomes {
        let (name, to, posted) = (check.instance, check.reporter, check.posted.as_secs_f64());
        match check.outcome {
            Outcome::Refused {
                ms,
                ready,
                healed_by,
                late_before_cut,
            } => {
                if ms > 2_000.0 || late_before_cut {
                    late += 1;
                    println!(
                        "  late: instance {name}, reported to {to} at {posted:.2} s, could arrive \
                         at {:.2} s, refused {ms:.0} ms after",
                        at(ready)
                    );
                }
                match healed_by {
                    None => direct.push(ms),
                    Some(host) if host == name => own.push(ms),
                    Some("redis") => redis.push(ms),
                    Some(_) => reporter.push(ms),
                }
            }
            Outcome::Lost { ready } => {
                lost += 1;
                println!(
                    "  lost: instance {name}, reported to {to} at {posted:.2} s, could arrive at \
                     {:.2} s, not refused within 10 s",
                    at(ready)
                );
            }
        }
    }
    println!(
        "checks (report × instance): {}; refused later than 2 s after the ban could arrive: {late}; \
         never refused (10 s): {lost}",
        outcomes.len()
    );
    for (what, sample) in [
        ("no partition in the way, from the report", direct),
        ("waited out its own partition, from the heal", own),
        (
            "waited out the reporter's partition, from the heal",
            reporter,
        ),
        ("waited out Redis's partition, from the heal", redis),
    ] {
        if sample.is_empty() {
            continue;
        }
        let s = Sample::new(sample);
        println!(
            "  {what}: {} checks, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (5 ms probes)",
            s.len(),
            s.median(),
            s.quantile(0.99),
            s.max()
        );
    }
    let warm = plan.warmup.as_secs_f64();
    let last = rows.last().map_or(0.0, |r| r.at_s);
    type Pick = fn(&Row, usize) -> Option<f64>;
    let kinds: [(&str, Pick); 4] = [
        ("RSS", |r, i| r.resident[i].map(|m| m.all)),
        ("anonymous RSS", |r, i| r.resident[i].map(|m| m.anon)),
        ("file RSS", |r, i| r.resident[i].map(|m| m.file)),
        ("jemalloc allocated", |r, i| r.allocated_kib[i]),
    ];
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let mut line = Vec::new();
        for (what, pick) in kinds {
            let window = |from: f64, to: f64| {
                let v: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.at_s >= from && r.at_s < to)
                    .filter_map(|r| pick(r, i))
                    .collect();
                median(&v)
            };
            let (early, late) = (window(warm, warm + 300.0), window(last - 300.0, last + 1.0));
            line.push(format!(
                "{what} {:.1} → {:.1} MiB ({:+.1}%)",
                early / 1024.0,
                late / 1024.0,
                (late / early - 1.0) * 100.0
            ));
        }
        println!(
            "  instance {name}, minutes {:.0}–{:.0} → the last 5: {}",
            warm / 60.0,
            warm / 60.0 + 5.0,
            line.join("; ")
        );
    }
    let lens: Vec<u64> = rows.iter().filter_map(|r| r.log_len).collect();
    let bytes: Vec<u64> = rows.iter().filter_map(|r| r.redis_bytes).collect();
    println!(
        "  ban log: at most {} entries (last {}), Redis used_memory at most {:.1} MiB ({} samples)",
        lens.iter().max().copied().unwrap_or(0),
        lens.last().copied().unwrap_or(0),
        bytes.iter().max().copied().unwrap_or(0) as f64 / 1048576.0,
        lens.len()
    );
    for (name, events) in counters {
        let line: Vec<String> = events.iter().map(|(e, v)| format!("{e} {v:.0}")).collect();
        println!("  {name}: txgate_fleet_bans_total {}", line.join(", "));
    }
}

/// The samples as CSV, at `path`.
pub(super) fn write_csv(path: &Path, rows: &[Row]) {
    let mut text = String::from("seconds");
    for name in ["a", "b", "c"] {
        for what in ["rss", "anon", "file", "allocated"] {
            text.push_str(&format!(",{what}_kib_{name}"));
        }
    }
    text.push_str(",log_entries,redis_used_bytes\n");
    for row in rows {
        let cell = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_default();
        text.push_str(&format!("{:.0}", row.at_s));
        for (r, a) in row.resident.iter().zip(&row.allocated_kib) {
            for v in [r.map(|r| r.all), r.map(|r| r.anon), r.map(|r| r.file), *a] {
                text.push(',');
                text.push_str(&cell(v));
            }
        }
        text.push_str(&format!(
            ",{},{}\n",
            cell(row.log_len.map(|v| v as f64)),
            cell(row.redis_bytes.map(|v| v as f64)),
        ));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
