//! txgate over a group of real nodes: three anvils, one the sequencer and
//! two replicas (issue 38). Each node is told apart by what it holds: a
//! marker balance that differs per node, and the transactions it was
//! sent. Anvils are separate chains that share a chain id (31337), so
//! these tests prove routing and failover, not agreement between nodes'
//! states (which needs nodes that share a genesis and sync).
//!
//! - reads spread over the replicas, submissions reach only the sequencer,
//!   a `pending` read and a read of the client's own writes go to it;
//! - a replica killed under read load from 20 connections costs no read,
//!   and once restarted it takes reads again;
//! - the sequencer killed: submissions are answered at once with 503
//!   -32603 "no healthy upstream" and `/readyz` says not ready; restarted,
//!   submissions flow.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};

use crate::support::{Anvil, Eoa, TempFile, Txgate, fund, get, metric, rpc, rpc_json};

/// Whose balance marks each node: 1 wei on the first replica, 2 on the
/// second, 3 on the sequencer.
const MARKER: Address = Address::repeat_byte(0x4d);

struct Group {
    sequencer: Anvil,
    replicas: [Anvil; 2],
    txgate: Txgate,
    _config: TempFile,
}

fn port_of(node: &Anvil) -> u16 {
    node.url.rsplit(':').next().unwrap().parse().unwrap()
}

async fn mark(node: &Anvil, wei: u64) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "anvil_setBalance",
        "params": [format!("{MARKER}"), format!("0x{wei:x}")]});
    let (status, answer) = rpc_json(&node.url, &body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
}

/// The three nodes, marked, and txgate over them, ready (every node in).
async fn group() -> Group {
    let sequencer = Anvil::start().await;
    let replicas = [Anvil::start().await, Anvil::start().await];
    mark(&replicas[0], 1).await;
    mark(&replicas[1], 2).await;
    mark(&sequencer, 3).await;
    let config = TempFile::new(&format!(
        r#"[upstream]
health_interval_ms = 200
probe_timeout_ms = 500
recover_after = 1
call_timeout_ms = 5000

[[upstream.nodes]]
name = "seq"
url = "{}"
role = "sequencer"

[[upstream.nodes]]
name = "r1"
url = "{}"
role = "replica"

[[upstream.nodes]]
name = "r2"
url = "{}"
role = "replica"
"#,
        sequencer.url, replicas[0].url, replicas[1].url
    ));
    let txgate = Txgate::spawn(&[
        "--config",
        config.arg(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]);
    let group = Group {
        sequencer,
        replicas,
        txgate,
        _config: config,
    };
    for node in ["seq", "r1", "r2"] {
        group.wait_in(node, true).await;
    }
    group
}

impl Group {
    async fn node_up(&self, node: &str) -> f64 {
        let (_, _, body) = get(&format!("{}/metrics", self.txgate.admin_url)).await;
        let text = String::from_utf8(body.to_vec()).unwrap();
        let role = if node == "seq" {
            "sequencer"
        } else {
            "replica"
        };
        metric(
            &text,
            &format!(r#"txgate_upstream_node_up{{node="{node}",role="{role}"}}"#),
        )
    }

    /// Waits (up to 10 s) for `node` to be in (or out).
    async fn wait_in(&self, node: &str, up: bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (self.node_up(node).await == 1.0) != up {
            assert!(Instant::now() < deadline, "{node} never went {up}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The marker's balance through txgate at `tag`: which node answered.
    async fn marker(&self, tag: &str) -> Result<u64, String> {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "eth_getBalance",
            "params": [format!("{MARKER}"), tag]});
        let (status, _, bytes) = rpc(&self.txgate.url, &body.to_string()).await?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        match answer["result"].as_str() {
            Some(hex) if status == 200 => {
                u64::from_str_radix(hex.trim_start_matches("0x"), 16).map_err(|e| e.to_string())
            }
            _ => Err(format!("{status}: {answer}")),
        }
    }
}

pub(crate) async fn send(url: &str, raw: &str) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction",
        "params": [raw]});
    let (status, answer) = rpc_json(url, &body.to_string()).await;
    (status.as_u16(), answer)
}

pub(crate) async fn by_hash(node: &Anvil, hash: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionByHash",
        "params": [hash]});
    rpc_json(&node.url, &body.to_string()).await.1["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_spread_over_replicas_and_submissions_reach_only_the_sequencer() {
    let g = group().await;
    let mut seen = BTreeMap::new();
    for _ in 0..40 {
        *seen.entry(g.marker("latest").await.unwrap()).or_insert(0) += 1;
    }
    assert!(seen.get(&1).is_some_and(|n| *n >= 5), "{seen:?}");
    assert!(seen.get(&2).is_some_and(|n| *n >= 5), "{seen:?}");
    assert_eq!(seen.get(&3), None, "reads went to the sequencer: {seen:?}");
    // The pending block is the sequencer's.
    assert_eq!(g.marker("pending").await.unwrap(), 3);

    let sender = Eoa::new(0x38);
    fund(&g.sequencer.url, &[sender.address]).await;
    let raw = sender.sign(0, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let (status, answer) = send(&g.txgate.url, &raw).await;
    assert_eq!(status, 200, "{answer}");
    let hash = answer["result"].as_str().expect("a hash").to_string();
    assert!(by_hash(&g.sequencer, &hash).await.is_object());
    for replica in &g.replicas {
        assert!(by_hash(replica, &hash).await.is_null(), "a replica got it");
    }
    // Within the read-your-writes window, the client's receipt comes from
    // the sequencer (a replica has never heard of it).
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "eth_getTransactionReceipt",
        "params": [hash]});
    let (_, receipt) = rpc_json(&g.txgate.url, &body.to_string()).await;
    assert!(receipt["result"].is_object(), "{receipt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_read_load_costs_no_read_and_comes_back() {
    let mut g = group().await;
    let stop_at = Instant::now() + Duration::from_secs(3);
    let url = g.txgate.url.clone();
    let readers: Vec<_> = (0..20)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut failed = Vec::new();
                let mut reads = 0;
                let body = json!({"jsonrpc": "2.0", "id": 7, "method": "eth_getBalance",
                    "params": [format!("{MARKER}"), "latest"]})
                .to_string();
                while Instant::now() < stop_at {
                    reads += 1;
                    match rpc(&url, &body).await {
                        Ok((status, _, bytes)) if status == 200 => {
                            let v: Value = serde_json::from_slice(&bytes).unwrap();
                            if v["result"].is_null() {
                                failed.push(v.to_string());
                            }
                        }
                        other => failed.push(format!("{other:?}")),
                    }
                }
                (reads, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let port = port_of(&g.replicas[0]);
    g.replicas[0].proc.kill();
    let mut total = 0;
    for reader in readers {
        let (reads, failed) = reader.await.unwrap();
        total += reads;
        assert!(failed.is_empty(), "failed reads: {failed:?}");
    }
    assert!(total > 200, "only {total} reads");
    g.wait_in("r1", false).await;

    // Back where it was: it takes reads again.
    g.replicas[0] = Anvil::start_on(port).await;
    mark(&g.replicas[0], 1).await;
    g.wait_in("r1", true).await;
    let mut back = false;
    for _ in 0..40 {
        back |= g.marker("latest").await.unwrap() == 1;
    }
    assert!(back, "the restarted replica took no read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sequencer_killed_answers_submissions_at_once_and_readiness_follows() {
    let mut g = group().await;
    let sender = Eoa::new(0x39);
    let port = port_of(&g.sequencer);
    g.sequencer.proc.kill();
    let raw = sender.sign(0, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let started = Instant::now();
    let (status, answer) = send(&g.txgate.url, &raw).await;
    assert!(started.elapsed() < Duration::from_secs(2), "not at once");
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["message"], "no healthy upstream",
        "{answer}"
    );
    // Reads still have the replicas.
    assert!(g.marker("latest").await.is_ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, _) = get(&format!("{}/readyz", g.txgate.admin_url)).await;
        if status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz stayed ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    g.sequencer = Anvil::start_on(port).await;
    fund(&g.sequencer.url, &[sender.address]).await;
    g.wait_in("seq", true).await;
    let (status, answer) = send(&g.txgate.url, &raw).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"].is_string(), "{answer}");
    let (status, _, _) = get(&format!("{}/readyz", g.txgate.admin_url)).await;
    assert_eq!(status, 200);
}
