//! The soak's three loads, each until told to stop: honest calls at a
//! steady rate, the attack from fresh unfunded EOAs, invalidation storms
//! at the sidecar; and the counters they share with the sampler.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use alloy_primitives::Address;
use serde_json::json;
use txgate_benches::procs::{HttpClient, client, post};
use txgate_benches::{Eoa, call, raw_hex, send_raw};

const GUARDED: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const SWEEP: [u8; 4] = [0xaa, 0x60, 0xe7, 0x33];
const NOTE: [u8; 4] = [0x0b, 0xad, 0xf0, 0x0d];

/// Counters shared by the loads and the sampler.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) honest_sent: AtomicU64,
    pub(crate) honest_ok: AtomicU64,
    pub(crate) honest_failed: AtomicU64,
    /// Refused by txgate.
    pub(crate) attack_refused: AtomicU64,
    /// Forwarded by txgate and refused by the node.
    pub(crate) attack_node_refused: AtomicU64,
    /// Forwarded by txgate and taken by the node.
    pub(crate) attack_forwarded: AtomicU64,
    pub(crate) attack_other: AtomicU64,
    pub(crate) storms: AtomicU64,
}

/// One honest call: the i-th of the run.
async fn honest_call(
    client: &HttpClient,
    url: &str,
    eoas: &[Eoa],
    nonces: &[AtomicU64],
    i: u64,
) -> Result<(), String> {
    let who = ((i / 4) % eoas.len() as u64) as usize;
    let body = match i % 4 {
        0 => {
            let nonce = nonces[who].fetch_add(1, Ordering::SeqCst);
            let to: Address = "0x00000000000000000000000000000000000a11ce"
                .parse()
                .unwrap();
            send_raw(&raw_hex(&eoas[who].sign(
                nonce,
                to,
                &call(NOTE, i),
                60_000,
                1_000_000_000,
            )))
        }
        1 => json!({"jsonrpc":"2.0","id":i,"method":"eth_blockNumber","params":[]}).to_string(),
        2 => json!({"jsonrpc":"2.0","id":i,"method":"eth_getBalance",
            "params":[format!("{}", eoas[who].address), "latest"]})
        .to_string(),
        _ => json!({"jsonrpc":"2.0","id":i,"method":"eth_chainId","params":[]}).to_string(),
    };
    match post(client, url, body).await {
        Ok((200, v)) if v["result"].is_string() => Ok(()),
        other => Err(format!("call {i}: {other:?}")),
    }
}

/// The honest load, open loop, until `stop`.
pub(crate) async fn honest(
    url: String,
    rate: u64,
    eoas: Arc<Vec<Eoa>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let client = client(256);
    let nonces: Arc<Vec<AtomicU64>> = Arc::new(eoas.iter().map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let (client, url, eoas, nonces, counters, errors) = (
            client.clone(),
            url.clone(),
            eoas.clone(),
            nonces.clone(),
            counters.clone(),
            errors.clone(),
        );
        counters.honest_sent.fetch_add(1, Ordering::Relaxed);
        tasks.push(tokio::spawn(async move {
            match honest_call(&client, &url, &eoas, &nonces, i).await {
                Ok(()) => {
                    counters.honest_ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    counters.honest_failed.fetch_add(1, Ordering::Relaxed);
                    let mut errors = errors.lock().unwrap();
                    if errors.len() < 20 {
                        errors.push(e);
                    }
                }
            }
        }));
        // Reap finished calls now and then so the list stays short.
        if tasks.len() > 4096 {
            tasks.retain(|t| !t.is_finished());
        }
        i += 1;
    }
    for t in tasks {
        let _ = t.await;
    }
    errors.lock().unwrap().clone()
}

/// The attack, `rate` calls/s over 8 connections, until `stop`.
pub(crate) async fn attack(url: String, rate: u64, counters: Arc<Counters>, stop: Arc<AtomicBool>) {
    let client = client(16);
    let per_worker = (rate / 8).max(1);
    let workers: Vec<_> = (0..8u64)
        .map(|w| {
            let (client, url, counters, stop) =
                (client.clone(), url.clone(), counters.clone(), stop.clone());
            tokio::spawn(async move {
                let guarded: Address = GUARDED.parse().unwrap();
                let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_worker));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    // A fresh unfunded EOA every time; even: the banned
                    // payload, odd: a new fingerprint.
                    let eoa = Eoa::new(0x66, w << 40 | n);
                    let input = if n.is_multiple_of(2) {
                        call(SWEEP, 13)
                    } else {
                        call(SWEEP, w << 40 | n)
                    };
                    let raw = raw_hex(&eoa.sign(0, guarded, &input, 100_000, 900_000_000_000));
                    n += 1;
                    let outcome = post(&client, &url, send_raw(&raw)).await;
                    // txgate's refusals name their reason in `error.data`;
                    // an error without one is the node's (the sender is
                    // unfunded): the call reached the node.
                    let counter = match &outcome {
                        Ok((_, v))
                            if (v["error"]["code"] == -32003 || v["error"]["code"] == -32005)
                                && v["error"]["data"]["reason"].is_string() =>
                        {
                            &counters.attack_refused
                        }
                        Ok((_, v)) if v["error"].is_object() => &counters.attack_node_refused,
                        Ok((_, v)) if v["result"].is_string() => &counters.attack_forwarded,
                        _ => &counters.attack_other,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
}

/// Invalidation storms at the sidecar every `every` s, until `stop`.
pub(crate) async fn storms(
    admin: String,
    every: u64,
    size: u64,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    let client = client(2);
    let banned = raw_hex(&Eoa::new(0x66, u64::MAX).sign(
        0,
        GUARDED.parse().unwrap(),
        &call(SWEEP, 13),
        100_000,
        900_000_000_000,
    ));
    let mut round = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(every));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let url = format!("{admin}/invalidations");
        let id = format!("0x{:064x}", 0xa2);
        let replay = json!({"raw_tx": banned, "assertion_id": id, "assertion_version": 1});
        // A new synthetic id each round: these bans are fresh every time.
        let synthetic = format!("0x{:064x}", 0xb000 + round);
        let storm = json!({"synthetic": size, "assertion_id": synthetic, "assertion_version": 1});
        for body in [replay, storm] {
            match post(&client, &url, body.to_string()).await {
                Ok((200, _)) => {}
                other => panic!("injection refused: {other:?}"),
            }
        }
        counters.storms.fetch_add(1, Ordering::Relaxed);
        round += 1;
    }
}
