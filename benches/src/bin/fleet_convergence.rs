//! Fleet convergence: how long after the sidecar learns a ban does every
//! instance of a fleet refuse it, and how long after a new instance starts
//! does it refuse the bans already live?
//!
//! Real anvil, one example sidecar and three txgate instances subscribed to
//! it, on loopback. **Fleet**: each probe injects an invalidation for fresh
//! calldata at the sidecar (`POST /invalidations`, as the production
//! sidecar would stream it) while three pollers, one per instance, submit
//! the same calldata from another (unfunded) account back to back; the
//! figure per instance is from the start of the injection POST to that
//! instance's first `denied_fingerprint`. Baseline in the same probes: one
//! round trip of a submission that an instance refuses at once (a ban from
//! an earlier probe), the figure's resolution. **New instance**: with the
//! probes' bans live at the sidecar, a fourth instance (no snapshot) is
//! started; the figures are from spawning it to its first answer
//! (`eth_chainId`, the start-up baseline), to its first refusal of a ban
//! learned before it existed, and to `/readyz` saying its source caught up.
//! Targets (issue 8): fleet max ≤ 100 ms; new instance ≤ 1 s.
//!
//! `benches/load/fleet_convergence.sh [--probes 20] [--starts 5]`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use alloy_primitives::Address;
use clap::Parser;
use serde_json::{Value, json};
use txgate_benches::procs::{HttpClient, client, get_text, post, wait_up};
use txgate_benches::start::{Txgate, anvil, release, sidecar, sidecar_config};
use txgate_benches::stats::Sample;
use txgate_benches::{CargoBench, Eoa, call, raw_hex, send_raw};

const TARGET: Address = Address::repeat_byte(0x5c);
const GAS: u64 = 100_000;

/// Fleet convergence: injection to refusal on every instance, and a new
/// instance's start to its first refusal of a live ban.
#[derive(Parser)]
struct Args {
    /// Probes of the fleet (after 2 of warm-up).
    #[arg(long, default_value_t = 20)]
    probes: usize,
    /// Starts of a new instance.
    #[arg(long, default_value_t = 5)]
    starts: usize,
    #[command(flatten)]
    _cargo: CargoBench,
}

async fn get(client: &HttpClient, url: &str) -> Option<Value> {
    serde_json::from_str(&get_text(client, url).await?).ok()
}

async fn refused(client: &HttpClient, rpc: &str, raw: &str) -> bool {
    matches!(post(client, rpc, send_raw(raw)).await,
        Ok((_, v)) if v["error"]["data"]["reason"] == "denied_fingerprint")
}

/// Submits `raw` to `rpc` back to back until refused: the instant.
async fn until_refused(client: HttpClient, rpc: String, raw: String) -> Option<Instant> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if refused(&client, &rpc, &raw).await {
            return Some(Instant::now());
        }
    }
    None
}

/// An instance of the fleet, subscribed to `sidecar`; not waited for.
fn instance(node: &str, sidecar: &str) -> Txgate {
    Txgate::spawn(
        &release("txgate"),
        node,
        &[
            "--sidecar",
            sidecar,
            // The probes are one client refused over and over: paced, the
            // figure would be the hold, not the ban's way to the instance.
            "--pacing",
            "false",
        ],
    )
}

async fn caught_up(client: &HttpClient, admin: &str) -> bool {
    get(client, &format!("{admin}/readyz"))
        .await
        .is_some_and(|v| v["sidecars"][0]["caught_up"] == true)
}

/// The median and the largest of `v`.
fn stats(v: &[f64]) -> (f64, f64) {
    let sample = Sample::new(v.to_vec());
    (sample.median(), sample.max())
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let client = client(16);
    let (_anvil, node) = anvil(&client, &[]).await;
    let sidecar = sidecar(&client, &node, &sidecar_config()).await;
    let inject_url = format!("{}/invalidations", sidecar.admin);
    let fleet: Vec<Txgate> = (0..3).map(|_| instance(&node, &sidecar.grpc)).collect();
    for i in &fleet {
        wait_up(&client, &i.url()).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !caught_up(&client, &i.admin()).await {
            assert!(Instant::now() < deadline, "{} never subscribed", i.admin());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Fleet: injection → first refusal on each instance.
    let (mut per, mut all, mut floor) = (vec![Vec::new(); 3], Vec::new(), Vec::new());
    let mut banned_probe = None::<String>;
    for p in 0..a.probes as u64 + 2 {
        let input = call([0x5c, 0, 0, 1], p);
        let injected_raw = raw_hex(&Eoa::new(0x61, p).sign(0, TARGET, &input, GAS, 1));
        let probe_raw = raw_hex(&Eoa::new(0x62, p).sign(0, TARGET, &input, GAS, 1));
        let pollers: Vec<_> = fleet
            .iter()
            .map(|i| tokio::spawn(until_refused(client.clone(), i.url(), probe_raw.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let injected = Instant::now();
        let body = json!({"raw_tx": injected_raw, "assertion_id": format!("0x{}", "c7".repeat(32)), "assertion_version": 1});
        let (status, answer) = post(&client, &inject_url, body.to_string()).await.unwrap();
        assert_eq!(status, 200, "{answer}");
        let mut times = Vec::new();
        for poller in pollers {
            let at = poller
                .await
                .unwrap()
                .expect("an instance never refused the ban");
            times.push(at.saturating_duration_since(injected).as_secs_f64() * 1e3);
        }
        // The floor: a submission refused at once, on each instance.
        if let Some(raw) = &banned_probe {
            for i in &fleet {
                let started = Instant::now();
                assert!(refused(&client, &i.url(), raw).await);
                floor.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        banned_probe = Some(probe_raw);
        if p < 2 {
            continue; // warm-up
        }
        for (n, t) in times.iter().enumerate() {
            per[n].push(*t);
            all.push(*t);
        }
    }
    println!(
        "fleet of 3, {} probes: injection at the sidecar → first refusal (target: max <= 100 ms)",
        a.probes
    );
    for (n, v) in per.iter().enumerate() {
        let (median, max) = stats(v);
        println!(
            "  instance {}: median {median:6.2} ms, max {max:6.2} ms",
            n + 1
        );
    }
    let (median, max) = stats(&all);
    println!("  all:        median {median:6.2} ms, max {max:6.2} ms");
    let (fmedian, fmax) = stats(&floor);
    println!("  floor (one refused submission): median {fmedian:6.3} ms, max {fmax:6.3} ms");

    // New instance: spawn → first answer, first refusal of a live ban,
    // caught up.
    let live = banned_probe.expect("probes ran");
    let (mut answer, mut refusal, mut caught) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.starts {
        let spawned = Instant::now();
        let fresh = instance(&node, &sidecar.grpc);
        let (rpc, admin) = (fresh.url(), fresh.admin());
        let (mut t_answer, mut t_refused, mut t_caught) = (None, None, None);
        while spawned.elapsed() < Duration::from_secs(10)
            && (t_answer.is_none() || t_refused.is_none() || t_caught.is_none())
        {
            if t_answer.is_none()
                && post(
                    &client,
                    &rpc,
                    json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}).to_string(),
                )
                .await
                .is_ok_and(|(s, _)| s == 200)
            {
                t_answer = Some(spawned.elapsed());
            }
            if t_answer.is_some() && t_refused.is_none() && refused(&client, &rpc, &live).await {
                t_refused = Some(spawned.elapsed());
            }
            if t_answer.is_some() && t_caught.is_none() && caught_up(&client, &admin).await {
                t_caught = Some(spawned.elapsed());
            }
            if t_answer.is_none() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let ms =
            |t: Option<Duration>| t.expect("the new instance never got there").as_secs_f64() * 1e3;
        answer.push(ms(t_answer));
        refusal.push(ms(t_refused));
        caught.push(ms(t_caught));
        drop(fresh);
    }
    println!(
        "new instance, {} starts: spawn → ... (target: first refusal <= 1000 ms)",
        a.starts
    );
    for (name, v) in [
        ("first answer (eth_chainId)", &answer),
        ("first refusal of a live ban", &refusal),
        ("/readyz caught_up", &caught),
    ] {
        let (median, max) = stats(v);
        println!("  {name:28} median {median:7.1} ms, max {max:7.1} ms");
    }
}
