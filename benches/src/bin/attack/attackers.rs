//! The attackers (a child process of the run, at the lowest CPU
//! priority): replays of a banned call and fresh-but-invalidating calls
//! from many EOAs, as fast as they are answered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use txgate_benches::procs::{HttpClient, client_from, post};
use txgate_benches::{Eoa, call, send_raw};

use crate::{ATTACKER_ADDR, POKE, SWEEP, eoa, sign};

/// Child mode: `connections` workers send attacker traffic to `url` for
/// `seconds`; returns the outcomes by refusal reason.
pub(crate) async fn attack(
    url: &str,
    attackers: u64,
    connections: usize,
    seconds: u64,
) -> BTreeMap<String, u64> {
    // The attackers are one client, the honest load another (their own
    // loopback addresses), as to the proxy they are.
    let client: HttpClient = client_from(1024, ATTACKER_ADDR.parse().expect("address"));
    let attackers: Arc<Vec<Eoa>> = Arc::new((0..attackers).map(|i| eoa(100_000 + i)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut attack_tasks = Vec::new();
    // Banned calldata, signed once per attacker: a replayed payload from
    // every attacker EOA at an extreme tip.
    let banned: Arc<Vec<String>> = Arc::new(
        attackers
            .iter()
            .map(|eoa| sign(eoa, 1, &call(POKE, 13), 900_000_000_000))
            .collect(),
    );
    for worker in 0..connections {
        let (client, url, attackers, banned, stop, sent) = (
            client.clone(),
            url.to_string(),
            attackers.clone(),
            banned.clone(),
            stop.clone(),
            sent.clone(),
        );
        attack_tasks.push(tokio::spawn(async move {
            let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
            // This worker's attackers, with their next nonce (attacker 0
            // spent nonce 0 on the first invalidated call).
            let mine: Vec<usize> = (worker..attackers.len()).step_by(connections).collect();
            let mut nonces: Vec<u64> = mine.iter().map(|&i| u64::from(i == 0)).collect();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = (n as usize / 2) % mine.len();
                let index = mine[slot];
                let raw = if n.is_multiple_of(2) {
                    banned[index].clone()
                } else {
                    // Fresh but invalidating: a forbidden selector with new
                    // arguments, a new fingerprint each time, valid nonce.
                    let salt = (worker as u64) << 40 | n;
                    sign(
                        &attackers[index],
                        nonces[slot],
                        &call(SWEEP, salt),
                        900_000_000_000,
                    )
                };
                n += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                let outcome = match post(&client, &url, send_raw(&raw)).await {
                    Ok((_, v)) => match v["error"]["data"]["reason"].as_str() {
                        Some(reason) => reason.to_string(),
                        None if v["result"].is_string() => {
                            if n.is_multiple_of(2) {
                                nonces[slot] += 1;
                            }
                            "forwarded".into()
                        }
                        None => "node_error".into(),
                    },
                    Err(_) => "transport_error".into(),
                };
                *outcomes.entry(outcome).or_default() += 1;
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for t in attack_tasks {
        for (k, v) in t.await.unwrap() {
            *outcomes.entry(k).or_default() += v;
        }
    }
    outcomes
}
