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
//!   submissions flow;
//! - while the nodes' heads differ, a client polling `eth_blockNumber` and
//!   reading `latest` never sees the chain go backwards, and a `latest`
//!   read never lands on a node below the agreed head;
//! - a replica frozen (SIGSTOP) under read load is out within a few
//!   probes, and no read started after that fails; a replica whose head
//!   stands still while the others' advance is out after
//!   `max_head_age_ms`; one lagging by more than `max_block_lag` is out,
//!   and back once it catches up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};

use crate::support::{Anvil, Eoa, TempFile, Txgate, fund, get, metric, rpc, rpc_json};

/// Whose balance marks each node: 1 wei on the first replica, 2 on the
/// second, 3 on the sequencer.
pub(crate) const MARKER: Address = Address::repeat_byte(0x4d);

pub(crate) struct Group {
    pub(crate) sequencer: Anvil,
    pub(crate) replicas: [Anvil; 2],
    pub(crate) txgate: Txgate,
    _config: TempFile,
}

fn port_of(node: &Anvil) -> u16 {
    node.url.rsplit(':').next().unwrap().parse().unwrap()
}

pub(crate) async fn mark(node: &Anvil, wei: u64) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "anvil_setBalance",
        "params": [format!("{MARKER}"), format!("0x{wei:x}")]});
    let (status, answer) = rpc_json(&node.url, &body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
}

/// The three nodes, marked, and txgate over them, ready (every node in).
pub(crate) async fn group() -> Group {
    group_with("call_timeout_ms = 5000").await
}

/// [`group`] with more `[upstream]` keys.
pub(crate) async fn group_with(upstream: &str) -> Group {
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
{}

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
        upstream, sequencer.url, replicas[0].url, replicas[1].url
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
    pub(crate) async fn wait_in(&self, node: &str, up: bool) {
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
    // One log line says which node took it, how long it took, what it said.
    let logged = |line: &String| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["message"] == "submission forwarded"
                && v["node"] == "seq"
                && v["tx_hash"] == hash.as_str()
                && v["outcome"] == "accepted"
                && v["duration_ms"].is_u64()
        })
    };
    let lines = g
        .txgate
        .logs_until(Duration::from_secs(5), |lines| lines.iter().any(logged))
        .await;
    assert!(lines.iter().any(logged), "no submission line: {lines:?}");
    // Within the read-your-writes window, the client's receipt comes from
    // the sequencer: a replica has never heard of the transaction, so any
    // receipt at all is the sequencer's (asked again for a moment while
    // anvil mines it on a loaded machine).
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "eth_getTransactionReceipt",
        "params": [hash]});
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (_, receipt) = rpc_json(&g.txgate.url, &body.to_string()).await;
        if receipt["result"].is_object() {
            break;
        }
        assert!(Instant::now() < deadline, "no receipt: {receipt}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // And its nonce at `latest` is the sequencer's newest (1), not the
    // agreed head's (0: the replicas never saw the block): a read of the
    // client's own writes keeps its tag.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "eth_getTransactionCount",
        "params": [format!("{}", sender.address), "latest"]});
    let (_, nonce) = rpc_json(&g.txgate.url, &body.to_string()).await;
    assert_eq!(nonce["result"], "0x1", "{nonce}");

    // A batch mixing reads and a submission is split by role: the reads
    // are the replicas', the submission the sequencer's, the answers in
    // the caller's order under its ids.
    let raw = sender.sign(1, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let read = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "eth_getBalance",
            "params": [format!("{MARKER}"), "0x0"]})
    };
    let batch = json!([
        read("a"),
        {"jsonrpc": "2.0", "id": "tx", "method": "eth_sendRawTransaction", "params": [raw]},
        read("b"),
        read("c"),
    ]);
    let (status, answers) = rpc_json(&g.txgate.url, &batch.to_string()).await;
    assert_eq!(status, 200, "{answers}");
    let ids: Vec<&str> = answers
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "tx", "b", "c"], "{answers}");
    for i in [0, 2, 3] {
        let marker = answers[i]["result"].as_str().unwrap();
        assert!(
            marker == "0x1" || marker == "0x2",
            "a read went to the sequencer: {answers}"
        );
    }
    let hash = answers[1]["result"].as_str().expect("a hash").to_string();
    assert!(by_hash(&g.sequencer, &hash).await.is_object());
    for replica in &g.replicas {
        assert!(by_hash(replica, &hash).await.is_null(), "a replica got it");
    }
    // A batch's submission gets its own line too, naming its node.
    g.submission_logged(&hash, "seq", "accepted").await;
}

impl Group {
    /// Waits (up to 5 s) for the submission-log line of `hash`.
    pub(crate) async fn submission_logged(&self, hash: &str, node: &str, outcome: &str) {
        let logged = |line: &String| {
            serde_json::from_str::<Value>(line).is_ok_and(|v| {
                v["message"] == "submission forwarded"
                    && v["node"] == node
                    && v["tx_hash"] == hash
                    && v["outcome"] == outcome
                    && v["duration_ms"].is_u64()
            })
        };
        let lines = self
            .txgate
            .logs_until(Duration::from_secs(5), |lines| lines.iter().any(logged))
            .await;
        assert!(lines.iter().any(logged), "no line for {hash}: {lines:?}");
    }
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
    // Reads still have the replicas, alone and beside a submission in a
    // batch: only the submission's part fails.
    assert!(g.marker("latest").await.is_ok());
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance",
            "params": [format!("{MARKER}"), "0x0"]},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_sendRawTransaction", "params": [raw]},
    ]);
    let (status, answers) = rpc_json(&g.txgate.url, &batch.to_string()).await;
    assert_eq!(status, 200, "{answers}");
    assert!(answers[0]["result"].is_string(), "{answers}");
    assert_eq!(answers[1]["error"]["code"], -32603, "{answers}");
    assert_eq!(
        answers[1]["error"]["message"], "no healthy upstream",
        "{answers}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, _) = get(&format!("{}/readyz", g.txgate.admin_url)).await;
        if status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz stayed ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The log says which node went out and why, by name.
    let out = |line: &String| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["message"] == "upstream node out" && v["node"] == "seq" && v["reason"].is_string()
        })
    };
    let lines = g
        .txgate
        .logs_until(Duration::from_secs(5), |lines| lines.iter().any(out))
        .await;
    assert!(
        lines.iter().any(out),
        "no line for the node going out: {lines:?}"
    );
    // It lists every node by name, with its state, head and lag.
    let (_, _, body) = get(&format!("{}/readyz", g.txgate.admin_url)).await;
    let ready: Value = serde_json::from_slice(&body).unwrap();
    let nodes = ready["nodes"].as_array().expect("nodes");
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["seq", "r1", "r2"], "{ready}");
    assert_eq!(nodes[0]["state"], "out", "{ready}");
    assert_eq!(nodes[0]["role"], "sequencer", "{ready}");
    assert_eq!(nodes[1]["state"], "in", "{ready}");
    assert_eq!(nodes[1]["head"], 0, "{ready}");
    assert_eq!(nodes[1]["lag"], 0, "{ready}");

    g.sequencer = Anvil::start_on(port).await;
    fund(&g.sequencer.url, &[sender.address]).await;
    g.wait_in("seq", true).await;
    let (status, answer) = send(&g.txgate.url, &raw).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"].is_string(), "{answer}");
    let (status, _, _) = get(&format!("{}/readyz", g.txgate.admin_url)).await;
    assert_eq!(status, 200);
}

async fn mine(node: &Anvil, blocks: u64) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "anvil_mine",
        "params": [format!("0x{blocks:x}")]});
    let (status, answer) = rpc_json(&node.url, &body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
}

impl Group {
    async fn agreed_head(&self) -> f64 {
        let (_, _, body) = get(&format!("{}/metrics", self.txgate.admin_url)).await;
        metric(
            std::str::from_utf8(&body).unwrap(),
            "txgate_upstream_agreed_head",
        )
    }

    async fn wait_agreed(&self, head: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.agreed_head().await != head as f64 {
            assert!(
                Instant::now() < deadline,
                "agreed head never reached {head}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn block_number(&self) -> u64 {
        let body = r#"{"jsonrpc":"2.0","id":"b","method":"eth_blockNumber","params":[]}"#;
        let (status, answer) = rpc_json(&self.txgate.url, body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["id"], "b");
        u64::from_str_radix(
            answer["result"].as_str().unwrap().trim_start_matches("0x"),
            16,
        )
        .unwrap()
    }

    async fn latest_block(&self) -> u64 {
        let body =
            r#"{"jsonrpc":"2.0","id":3,"method":"eth_getBlockByNumber","params":["latest",false]}"#;
        let (status, answer) = rpc_json(&self.txgate.url, body).await;
        assert_eq!(status, 200, "{answer}");
        let number = answer["result"]["number"].as_str().expect("a block");
        u64::from_str_radix(number.trim_start_matches("0x"), 16).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_never_goes_backwards_while_the_nodes_heads_differ() {
    let g = group().await;
    // Heads 10 (sequencer), 12 and 6 (replicas): a majority has 10.
    mine(&g.sequencer, 10).await;
    mine(&g.replicas[0], 12).await;
    mine(&g.replicas[1], 6).await;
    g.wait_agreed(10).await;
    // A latest read goes only to a node at or above the agreed head: the
    // replica at 6 never answers one, and the block is the agreed one.
    for _ in 0..20 {
        assert_eq!(g.marker("latest").await.unwrap(), 1);
    }
    assert_eq!(g.latest_block().await, 10);

    let mut seen = Vec::new();
    for round in 0..45 {
        if round == 15 {
            mine(&g.replicas[1], 10).await; // 16: the majority has 12
        }
        if round == 30 {
            mine(&g.sequencer, 8).await; // 18: the majority has 16
        }
        seen.push(g.block_number().await);
        seen.push(g.latest_block().await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "went backwards: {seen:?}"
    );
    assert_eq!(seen.first(), Some(&10), "{seen:?}");
    g.wait_agreed(16).await;
    assert_eq!(g.block_number().await, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_is_out_within_a_few_probes_and_then_costs_no_read() {
    let g = group_with("call_timeout_ms = 1500\nfail_after = 2").await;
    let stop_at = Instant::now() + Duration::from_secs(4);
    let url = g.txgate.url.clone();
    let readers: Vec<_> = (0..10)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut reads = Vec::new();
                let body = json!({"jsonrpc": "2.0", "id": 7, "method": "eth_getBalance",
                    "params": [format!("{MARKER}"), "0x0"]})
                .to_string();
                while Instant::now() < stop_at {
                    let started = Instant::now();
                    let ok = match rpc(&url, &body).await {
                        Ok((status, _, bytes)) if status == 200 => {
                            serde_json::from_slice::<Value>(&bytes).unwrap()["result"].is_string()
                        }
                        _ => false,
                    };
                    reads.push((started, ok));
                }
                reads
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let frozen_at = Instant::now();
    g.replicas[0].proc.signal(libc::SIGSTOP);
    g.wait_in("r1", false).await;
    let out_at = Instant::now();
    // Two probes of 200 ms that time out at 500 ms, or five calls: well
    // inside two seconds.
    assert!(
        out_at - frozen_at < Duration::from_secs(2),
        "out after {:?}",
        out_at - frozen_at
    );
    let mut after = 0;
    for reader in readers {
        for (started, ok) in reader.await.unwrap() {
            if started > out_at {
                after += 1;
                assert!(ok, "a read started after the replica was out failed");
            }
        }
    }
    assert!(after > 50, "only {after} reads after the replica went out");
    g.replicas[0].proc.signal(libc::SIGCONT);
    g.wait_in("r1", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_head_stands_still_or_lags_is_out_and_back_when_it_catches_up() {
    let g = group_with("max_head_age_ms = 1500\nmax_block_lag = 8").await;
    // The others advance, the first replica's head stands still.
    for _ in 0..4 {
        mine(&g.sequencer, 1).await;
        mine(&g.replicas[1], 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    g.wait_in("r1", false).await;
    // It moves again, to the others' head: back.
    mine(&g.replicas[0], 4).await;
    g.wait_in("r1", true).await;

    // Lagging by more than max_block_lag: out, though its head moves.
    mine(&g.sequencer, 12).await;
    mine(&g.replicas[1], 12).await;
    mine(&g.replicas[0], 1).await;
    g.wait_in("r1", false).await;
    let mut seen = BTreeMap::new();
    for _ in 0..20 {
        *seen.entry(g.marker("0x0").await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        seen.get(&1),
        None,
        "the lagging replica took reads: {seen:?}"
    );
    mine(&g.replicas[0], 11).await;
    g.wait_in("r1", true).await;
}
