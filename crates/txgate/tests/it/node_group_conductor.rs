//! txgate following op-conductor's leader: two anvils as sequencers (raft
//! IDs `seq-a` and `seq-b`), one replica, and a conductor of the test's
//! own that answers `conductor_leaderWithID` as op-conductor does, its
//! leader switched by the test. The conductor is the second of two URLs;
//! the first has nothing listening, so each round that starts there moves
//! on to the next.
//!
//! - before the conductor names a leader, submissions are refused (503)
//!   and `/readyz` says not ready;
//! - named, submissions reach only the leader's anvil; switched, only the
//!   new one's; the change is logged once, by node name;
//! - an ID no sequencer has, and then the conductor gone: submissions keep
//!   going to the last leader, and the misses are counted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::node_group::{by_hash, send};
use crate::support::{Anvil, Eoa, TempFile, Txgate, free_port, fund, get, metric};

/// A stand-in for op-conductor's RPC: `conductor_leaderWithID` answered
/// with the leader it is told, on kept-alive HTTP/1.1 connections.
struct FakeConductor {
    url: String,
    leader: Arc<Mutex<String>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FakeConductor {
    async fn start(leader: &str) -> FakeConductor {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let leader = Arc::new(Mutex::new(leader.to_string()));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (leader, tasks) = (leader.clone(), tasks.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let task = tokio::spawn(serve(stream, leader.clone()));
                    tasks.lock().unwrap().push(task);
                }
            })
        };
        tasks.lock().unwrap().push(accept);
        FakeConductor {
            url: format!("http://{addr}"),
            leader,
            tasks,
        }
    }

    fn set_leader(&self, id: &str) {
        *self.leader.lock().unwrap() = id.to_string();
    }

    /// Gone: the port closed, every open connection dropped.
    fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Drop for FakeConductor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One connection: each request's `id` echoed, the result op-conductor's
/// `ServerInfo` of the leader (an empty ID and address while it knows
/// none), written as go-ethereum's encoder writes it.
async fn serve(mut stream: TcpStream, leader: Arc<Mutex<String>>) {
    let mut buf = Vec::new();
    loop {
        let Some(body) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(request["method"], "conductor_leaderWithID", "{request}");
        let id = leader.lock().unwrap().clone();
        let addr = if id.is_empty() { "" } else { "127.0.0.1:50050" };
        let answer = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": request["id"],
                "result": {"id": id, "addr": addr, "suffrage": 0}})
        );
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if stream
            .write_all(format!("{head}{answer}").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The body of the next request on `stream` (its head read up to the
/// blank line, the body by `content-length`).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    while buf.len() < end + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[end..end + length].to_vec();
    buf.drain(..end + length);
    Some(body)
}

struct Group {
    a: Anvil,
    b: Anvil,
    replica: Anvil,
    conductor: FakeConductor,
    txgate: Txgate,
    _config: TempFile,
}

impl Group {
    async fn metrics(&self) -> String {
        self.txgate.metrics().await
    }

    /// Waits (up to 10 s) for `check` to hold on `/metrics`.
    async fn wait_metrics(&self, what: &str, check: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.metrics().await;
            if check(&text) {
                return;
            }
            assert!(Instant::now() < deadline, "never: {what}\n{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_leader(&self, node: &str) {
        let series = format!(r#"txgate_upstream_leader{{node="{node}"}}"#);
        self.wait_metrics(&format!("{node} leads"), |text| {
            metric(text, &series) == 1.0
        })
        .await;
    }

    async fn ready(&self) -> u16 {
        let (status, _, _) = get(&format!("{}/readyz", self.txgate.admin_url)).await;
        status.as_u16()
    }

    /// The leader `/readyz` names (`null`: none).
    async fn ready_leader(&self) -> Value {
        let (_, _, body) = get(&format!("{}/readyz", self.txgate.admin_url)).await;
        serde_json::from_slice::<Value>(&body).unwrap()["leader"].clone()
    }
}

fn node_up(text: &str, node: &str, role: &str) -> bool {
    metric(
        text,
        &format!(r#"txgate_upstream_node_up{{node="{node}",role="{role}"}}"#),
    ) == 1.0
}

fn misses(text: &str, reason: &str) -> f64 {
    metric(
        text,
        &format!(r#"txgate_upstream_conductor_errors_total{{reason="{reason}"}}"#),
    )
}

/// Sends `raw` through txgate and returns its hash.
async fn accepted(g: &Group, raw: &str) -> String {
    let (status, answer) = send(&g.txgate.url, raw).await;
    assert_eq!(status, 200, "{answer}");
    answer["result"].as_str().expect("a hash").to_string()
}

async fn holds(node: &Anvil, hash: &str) -> bool {
    by_hash(node, hash).await.is_object()
}

/// Which of the three nodes hold `hash`: (a, b, replica).
async fn holders(g: &Group, hash: &str) -> (bool, bool, bool) {
    (
        holds(&g.a, hash).await,
        holds(&g.b, hash).await,
        holds(&g.replica, hash).await,
    )
}

/// The nodes, a conductor that knows no leader yet, and txgate over them
/// with every node in.
async fn group() -> Group {
    let (a, b, replica) = (
        Anvil::start().await,
        Anvil::start().await,
        Anvil::start().await,
    );
    let conductor = FakeConductor::start("").await;
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let config = TempFile::new(&format!(
        r#"[upstream]
health_interval_ms = 200
probe_timeout_ms = 500
recover_after = 1
call_timeout_ms = 5000
conductor_url = ["{nowhere}", "{}"]

[[upstream.nodes]]
name = "a"
url = "{}"
role = "sequencer"
conductor_id = "seq-a"

[[upstream.nodes]]
name = "b"
url = "{}"
role = "sequencer"
conductor_id = "seq-b"

[[upstream.nodes]]
name = "r"
url = "{}"
role = "replica"
"#,
        conductor.url, a.url, b.url, replica.url
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
    let g = Group {
        a,
        b,
        replica,
        conductor,
        txgate,
        _config: config,
    };
    g.wait_metrics("every node in", |text| {
        node_up(text, "a", "sequencer")
            && node_up(text, "b", "sequencer")
            && node_up(text, "r", "replica")
    })
    .await;
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_follow_op_conductors_leader_and_stay_with_it_while_it_is_gone() {
    let g = group().await;
    let sender = Eoa::new(0x3c);
    fund(&g.a.url, &[sender.address]).await;
    fund(&g.b.url, &[sender.address]).await;
    let to = |byte| Address::repeat_byte(byte);

    // No leader named yet: a submission has nowhere to go, and the
    // instance says it is not ready, rather than guess a sequencer.
    g.wait_metrics("a round that named no leader", |text| {
        misses(text, "no_leader") >= 1.0
    })
    .await;
    let (status, answer) = send(
        &g.txgate.url,
        &sender.sign(0, to(0x11), &[], 1, 1_000_000_000),
    )
    .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(g.ready().await, 503);
    assert_eq!(g.ready_leader().await, Value::Null);

    // seq-a leads: submissions reach a alone.
    g.conductor.set_leader("seq-a");
    g.wait_leader("a").await;
    let text = g.metrics().await;
    assert_eq!(metric(&text, r#"txgate_upstream_leader{node="b"}"#), 0.0);
    assert!(
        misses(&text, "call") >= 1.0,
        "the first URL refuses: {text}"
    );
    let hash = accepted(&g, &sender.sign(0, to(0x11), &[], 1, 1_000_000_000)).await;
    assert_eq!(holders(&g, &hash).await, (true, false, false));
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.ready().await != 200 {
        assert!(
            Instant::now() < deadline,
            "/readyz stayed 503 with a leader"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    assert_eq!(g.ready_leader().await, "a");

    // Leadership moves to seq-b: submissions follow it.
    g.conductor.set_leader("seq-b");
    g.wait_leader("b").await;
    assert_eq!(g.ready_leader().await, "b");
    let hash = accepted(&g, &sender.sign(0, to(0x22), &[], 1, 1_000_000_000)).await;
    assert_eq!(holders(&g, &hash).await, (false, true, false));

    // An ID no sequencer has (a leader overridden by hand): b stays.
    g.conductor.set_leader("N/A (Leader overridden)");
    g.wait_metrics("an unknown ID counted", |text| {
        misses(text, "unknown_id") >= 1.0
    })
    .await;
    let hash = accepted(&g, &sender.sign(1, to(0x33), &[], 1, 1_000_000_000)).await;
    assert_eq!(holders(&g, &hash).await, (false, true, false));

    // The conductor gone: b, the last leader named, keeps the submissions.
    g.conductor.stop();
    let before = misses(&g.metrics().await, "call");
    g.wait_metrics("rounds that reached no conductor", |text| {
        misses(text, "call") >= before + 2.0
    })
    .await;
    let hash = accepted(&g, &sender.sign(2, to(0x44), &[], 1, 1_000_000_000)).await;
    assert_eq!(holders(&g, &hash).await, (false, true, false));
    let text = g.metrics().await;
    assert_eq!(metric(&text, r#"txgate_upstream_leader{node="b"}"#), 1.0);
    assert_eq!(metric(&text, r#"txgate_upstream_leader{node="a"}"#), 0.0);
    assert_eq!(g.ready().await, 200);

    // Each change logged once, by node name; no URL in those lines.
    let logs = g
        .txgate
        .logs_until(Duration::from_secs(2), |lines| {
            lines
                .iter()
                .any(|l| l.contains("op-conductor named no sequencer"))
        })
        .await;
    let authority = g.conductor.url.trim_start_matches("http://").to_string();
    let changes: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("following op-conductor's leader"))
        .collect();
    assert_eq!(changes.len(), 2, "{changes:#?}");
    assert!(changes[0].contains(r#""node":"a""#), "{}", changes[0]);
    assert!(changes[1].contains(r#""node":"b""#), "{}", changes[1]);
    let unknown: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("no sequencer's conductor_id"))
        .collect();
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
    for line in logs.iter().filter(|l| l.contains("conductor")) {
        assert!(!line.contains(&authority), "a conductor URL logged: {line}");
    }
}
