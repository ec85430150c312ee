//! Ban propagation: from the start of a report's POST to one instance to
//! the first refusal of the same calldata (from another account) on each
//! of the other two, for each layout in interleaved rounds. The floor, in
//! the same rounds: one report POST and one submission the instance
//! refuses at once (the ban of the last measured report), the figure's
//! resolution. Before a ban arrives, each probe is forwarded to the node
//! (which refuses it: the account is unfunded), so the figure holds up to
//! one node round trip more than the floor. Each
//! measured report follows a pause in which every reader of the log is
//! waiting on its next read.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use txgate_benches::procs::HttpClient;
use txgate_benches::stats::Sample;

use crate::fleet::{Fleet, Layout};
use crate::probe::{Reported, refused, report};

/// The pause before each measured report, beyond three times the relay's
/// delay where there is one: longer than a reader's round trip to Redis.
const SETTLE: Duration = Duration::from_millis(25);

/// What one layout measured.
#[derive(Default)]
struct Figures {
    /// Report to refusal, one per report and other instance, in ms.
    took: Vec<f64>,
    /// The floor, one per report, in ms.
    floor: Vec<f64>,
    /// Refusals that never came within 5 s.
    missed: usize,
}

/// Report to each other instance's first refusal (back-to-back
/// submissions), in ms; `None` for one that did not refuse within 5 s.
async fn to_refusals(client: &HttpClient, fleet: &Fleet, ban: &Reported) -> Vec<Option<f64>> {
    let started = Instant::now();
    assert!(
        report(client, &fleet.instances[0].report, &ban.report).await,
        "a report was not taken"
    );
    join_all(fleet.instances[1..].iter().map(|other| async {
        while started.elapsed() < Duration::from_secs(5) {
            if refused(client, &other.rpc, &ban.copy, Duration::from_secs(1)).await {
                return Some(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        None
    }))
    .await
}

/// One report POST and one submission refused at once, in ms.
async fn floor(client: &HttpClient, fleet: &Fleet, unused: &Reported, denied: &Reported) -> f64 {
    let started = Instant::now();
    assert!(report(client, &fleet.instances[0].report, &unused.report).await);
    assert!(
        refused(
            client,
            &fleet.instances[1].rpc,
            &denied.copy,
            Duration::from_secs(1)
        )
        .await,
        "the floor's copy was not refused"
    );
    started.elapsed().as_secs_f64() * 1e3
}

/// `reports` reports per layout over `rounds` interleaved rounds; prints
/// the table.
pub(crate) async fn run(client: &HttpClient, fleets: &[Fleet], reports: u64, rounds: u64) {
    let mut figures: Vec<Figures> = fleets.iter().map(|_| Figures::default()).collect();
    let mut denied = Vec::new();
    // Warm-up: connections and caches; the last ban of each fleet stays
    // live for its floor.
    for (f, fleet) in fleets.iter().enumerate() {
        let series = f as u8;
        for n in 0..20 {
            let ban = Reported::new(series, n);
            let took = to_refusals(client, fleet, &ban).await;
            assert!(
                took.iter().all(Option::is_some),
                "warm-up: a ban never arrived"
            );
        }
        denied.push(Reported::new(series, 19));
    }
    let per_round = reports.div_ceil(rounds);
    for round in 0..rounds {
        for k in 0..fleets.len() {
            // Rotate which layout goes first.
            let f = (k + round as usize) % fleets.len();
            let series = f as u8;
            for i in 0..per_round {
                let n = 1_000 + 2 * (round * per_round + i);
                let t = floor(
                    client,
                    &fleets[f],
                    &Reported::new(series, n + 1),
                    &denied[f],
                )
                .await;
                figures[f].floor.push(t);
                // Every reader waits on its next read again before the
                // measured report (an entry that lands while a reader's
                // next read is still on its way waits for that read: one
                // more round trip to Redis, which is the layouts' own
                // difference, but not what this measures).
                let relay = match fleets[f].layout {
                    Layout::Delayed(one_way) => 3 * one_way,
                    _ => Duration::ZERO,
                };
                tokio::time::sleep(SETTLE + relay).await;
                let measured = Reported::new(series, n);
                let took = to_refusals(client, &fleets[f], &measured).await;
                let arrived = took.iter().all(Option::is_some);
                for t in took {
                    match t {
                        Some(ms) => figures[f].took.push(ms),
                        None => figures[f].missed += 1,
                    }
                }
                // The next floor's copy: a ban just learned (a ban lives
                // 128 s; one from the warm-up would end in a long run).
                if arrived {
                    denied[f] = measured;
                }
            }
        }
    }
    println!(
        "ban propagation, report to one instance → first refusal on each other instance \
         ({per_round} reports a layout a round, {rounds} interleaved rounds)"
    );
    println!(
        "| layout | reports | p50 ms | p99 ms | max ms | floor p50 ms | p50 / floor | p50 / one host's | missed (5 s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let base = Sample::new(figures[0].took.clone()).median();
    for (fleet, fig) in fleets.iter().zip(&figures) {
        let took = Sample::new(fig.took.clone());
        let floor = Sample::new(fig.floor.clone()).median();
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}× | {:.2}× | {} |",
            fleet.layout.name(),
            fig.floor.len(),
            took.median(),
            took.quantile(0.99),
            took.max(),
            floor,
            took.median() / floor,
            took.median() / base,
            fig.missed
        );
    }
}
