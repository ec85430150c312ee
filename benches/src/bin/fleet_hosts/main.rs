//! The fleet across hosts (issue 40's bench): how fast a ban reported to
//! one instance reaches the others, on one host against separate network
//! hosts, and whether any ban is lost over a long run with a partition
//! every few minutes.
//!
//! Three txgate instances share bans through the fleet's ban log on one
//! redis-server, with anvil as their node; each instance takes failure
//! reports on its Aeges listener (as the Credible Layer sidecar posts
//! them). The bench reaches each instance directly (no balancer: every
//! instance's refusals are checked on its own address).
//!
//! - `propagation`: report to one instance → first refusal of the same
//!   calldata from another account on each other instance, p50/p99 over
//!   `--reports` reports per layout, the layouts in interleaved rounds:
//!   loopback, namespaced hosts, and (with `--delay-ms`) namespaced hosts
//!   whose links to Redis pass a relay that holds every byte that long.
//! - `partition`: `--minutes` of reports at `--rate`/s while a host (a, b,
//!   c, then Redis, in turn) is cut off for `--cut` seconds every
//!   `--every` seconds; every report checked on every instance (refused
//!   within 2 s of the moment it could arrive), RSS and the log's length
//!   sampled every 10 s.
//!
//! Needs root (network namespaces), redis-server and redis-cli. Traffic
//! stays on loopback and the namespaces' bridge; both runs stop by
//! themselves. `benches/load/fleet_hosts.sh propagation` or
//! `benches/load/fleet_hosts.sh partition --minutes 30`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use txgate_benches::CargoBench;
use txgate_benches::procs::client;

mod fleet;
mod partition;
mod probe;
mod propagation;

use fleet::{Fleet, Layout};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    run: Run,
    #[command(flatten)]
    _cargo: CargoBench,
}

#[derive(Subcommand)]
enum Run {
    /// Report → refusal on the other instances, per layout.
    Propagation {
        /// Reports per layout.
        #[arg(long, default_value_t = 1_000)]
        reports: u64,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 5)]
        rounds: u64,
        /// Also a layout whose links to Redis are this many ms away (each
        /// way).
        #[arg(long)]
        delay_ms: Option<u64>,
    },
    /// The long run with partitions.
    Partition {
        #[arg(long, default_value_t = 30)]
        minutes: u64,
        /// Seconds between cuts.
        #[arg(long, default_value_t = 120)]
        every: u64,
        /// Seconds a host stays cut off.
        #[arg(long, default_value_t = 30)]
        cut: u64,
        /// Reports a second.
        #[arg(long, default_value_t = 2.0)]
        rate: f64,
        /// The hosts cut off, in turn (of a, b, c, redis).
        #[arg(long, value_delimiter = ',', default_value = "a,b,c,redis")]
        order: Vec<String>,
        /// Minutes of warm-up before memory is compared.
        #[arg(long, default_value_t = 5)]
        warmup: u64,
        /// The ban log's cap (`redis.ban_log_max_entries`).
        #[arg(long, default_value_t = 4096)]
        max_entries: usize,
        /// Where to write the samples (CSV).
        #[arg(long)]
        csv: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() {
    let client = client(64);
    match Args::parse().run {
        Run::Propagation {
            reports,
            rounds,
            delay_ms,
        } => {
            let mut layouts = vec![Layout::OneHost, Layout::Hosts];
            layouts.extend(delay_ms.map(|ms| Layout::Delayed(Duration::from_millis(ms))));
            let mut fleets = Vec::new();
            for layout in layouts {
                fleets.push(Fleet::start(&client, layout, 4096).await);
            }
            propagation::run(&client, &fleets, reports, rounds).await;
        }
        Run::Partition {
            minutes,
            every,
            cut,
            rate,
            order,
            warmup,
            max_entries,
            csv,
        } => {
            let order: Vec<&'static str> = order
                .iter()
                .map(|name| {
                    ["a", "b", "c", "redis"]
                        .into_iter()
                        .find(|known| known == name)
                        .unwrap_or_else(|| panic!("--order: no host {name} (a, b, c, redis)"))
                })
                .collect();
            let fleet = Fleet::start(&client, Layout::Hosts, max_entries).await;
            let plan = partition::Plan {
                minutes,
                every: Duration::from_secs(every),
                cut: Duration::from_secs(cut),
                rate,
                order,
                warmup: Duration::from_secs(warmup * 60),
            };
            partition::run(&client, &fleet, plan, csv.as_deref()).await;
        }
    }
}
