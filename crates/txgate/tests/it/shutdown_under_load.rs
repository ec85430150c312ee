//! SIGTERM under load: every call txgate accepted gets a complete 2xx
//! answer, counted on both sides; new connections are refused once the
//! listener closes; exit 0 within the grace period. Then a restart from
//! the snapshot while an attack runs: no live ban is lost, not even for
//! the first attempt after the restart.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use tokio::net::TcpStream;

use crate::fault_servers::{import_bans, tx};
use crate::support::{RecordingUpstream, TempFile, Txgate, eventually, send_raw};

/// What the load saw.
#[derive(Debug, Default)]
struct Seen {
    /// Ids answered 2xx with a whole JSON-RPC body.
    answered: BTreeSet<u64>,
    /// Answers that were not 2xx, or not whole.
    bad: Vec<String>,
    /// Requests sent whose connection then closed without an answer.
    unanswered: u64,
}

/// One kept-alive connection sending `eth_chainId` calls with unique ids
/// until it cannot connect any more.
async fn connection(
    addr: std::net::SocketAddr,
    next: Arc<AtomicU64>,
    seen: Arc<std::sync::Mutex<Seen>>,
) {
    loop {
        let Ok(tcp) = TcpStream::connect(addr).await else {
            return;
        };
        let Ok((mut send, conn)) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await
        else {
            continue;
        };
        tokio::spawn(conn);
        loop {
            if send.ready().await.is_err() {
                break;
            }
            let id = next.fetch_add(1, Ordering::SeqCst);
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_chainId"}}"#);
            let request = hyper::Request::post("/")
                .header("host", "txgate")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let response = match send.send_request(request).await {
                Ok(response) => response,
                Err(_) => {
                    seen.lock().unwrap().unanswered += 1;
                    break;
                }
            };
            let status = response.status();
            let body = response.into_body().collect().await.map(|b| b.to_bytes());
            let mut s = seen.lock().unwrap();
            match body {
                Ok(body) if status == StatusCode::OK => {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    if v["id"] == id && v["result"].is_string() {
                        s.answered.insert(id);
                    } else {
                        s.bad.push(format!("{id}: {v}"));
                    }
                }
                Ok(body) => s
                    .bad
                    .push(format!("{id}: {status} {}", String::from_utf8_lossy(&body))),
                Err(e) => s.bad.push(format!("{id}: body cut: {e}")),
            }
        }
    }
}

/// The ids of the load's calls that reached the node.
fn forwarded_ids(upstream: &RecordingUpstream) -> BTreeSet<u64> {
    upstream
        .received()
        .iter()
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .filter(|v| v["params"].is_null())
        .filter_map(|v| v["id"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_under_load_answers_every_accepted_call() {
    let upstream = RecordingUpstream::start().await;
    let mut txgate = Txgate::start(&upstream.url, &["--grace-period-ms", "5000"]);
    let (next, seen) = (
        Arc::new(AtomicU64::new(1_000)),
        Arc::new(std::sync::Mutex::new(Seen::default())),
    );
    let load: Vec<_> = (0..50)
        .map(|_| tokio::spawn(connection(txgate.rpc_addr, next.clone(), seen.clone())))
        .collect();
    // Load flows until more than 500 calls were answered (the count the
    // end asserts on), however long a loaded machine takes to get there.
    let loaded = eventually(Duration::from_secs(30), || async {
        seen.lock().unwrap().answered.len() > 500
    })
    .await;
    assert!(
        loaded,
        "too little load before SIGTERM: {}",
        seen.lock().unwrap().answered.len()
    );
    let signalled = Instant::now();
    txgate.proc.signal(libc::SIGTERM);

    // The listener closes: new connections are refused from then on (a
    // refusal, not any failed connect: each try is bounded, and what it
    // got is shown if it was not refused).
    let addr = txgate.rpc_addr;
    let connect = || async move {
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
            Ok(Err(e)) => Err(format!("connect failed otherwise: {e}")),
            Ok(Ok(_)) => Err("accepted".to_string()),
            Err(_) => Err("no answer to the connect within 2 s".to_string()),
        }
    };
    let mut refused_at = None;
    while signalled.elapsed() < Duration::from_secs(3) {
        if connect().await.is_ok() {
            refused_at = Some(signalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused_at = refused_at.expect("still accepting 3 s after SIGTERM");
    for attempt in 0..5 {
        if let Err(got) = connect().await {
            panic!("connect {attempt} after the first refusal was not refused: {got}");
        }
    }
    let status = txgate
        .proc
        .wait_timeout(Duration::from_secs(7))
        .expect("no exit within the 5 s grace period");
    let exited = signalled.elapsed();
    assert_eq!(status.code(), Some(0));
    for task in load {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("a load connection hung")
            .unwrap();
    }

    let seen = seen.lock().unwrap();
    let forwarded = forwarded_ids(&upstream);
    assert!(
        seen.bad.is_empty(),
        "{:?}",
        &seen.bad[..seen.bad.len().min(10)]
    );
    assert!(
        seen.answered.len() > 500,
        "too little load: {}",
        seen.answered.len()
    );
    let lost: Vec<_> = forwarded.difference(&seen.answered).collect();
    assert!(
        lost.is_empty(),
        "accepted and forwarded, never answered: {lost:?}"
    );
    let phantom: Vec<_> = seen.answered.difference(&forwarded).collect();
    assert!(
        phantom.is_empty(),
        "answered without reaching the node: {phantom:?}"
    );
    eprintln!(
        "SIGTERM under load: {} calls accepted and forwarded, {} answered 2xx, 0 lost; \
         {} sent on a closing connection and not accepted (retryable); listener refused \
         {refused_at:?} after SIGTERM; exit 0 after {exited:?}",
        forwarded.len(),
        seen.answered.len(),
        seen.unanswered
    );
}

/// How long one call of the restart test may wait for its answer: txgate
/// refuses a banned call in about a millisecond, and a port nothing listens
/// on refuses the connection at once; the rest is room for a loaded machine.
const ATTACK_CALL_LIMIT: Duration = Duration::from_secs(15);

/// The sockets on `port` but those in TIME-WAIT (the attack leaves
/// thousands): a listener's Recv-Q is connections nobody accepted, and a
/// SYN-SENT one a connect nobody answered.
fn sockets(port: u16) -> String {
    let filter = format!("( sport = :{port} or dport = :{port} )");
    match std::process::Command::new("ss")
        .args(["-tanp", "exclude", "time-wait", &filter])
        .output()
    {
        Ok(out) => format!(
            "{}{}(ss: {})",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .take(60)
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            String::from_utf8_lossy(&out.stderr),
            out.status
        ),
        Err(e) => format!("ss: {e}"),
    }
}

/// What a hung call of the restart test leaves to read: the sockets on
/// `port` when the first call stuck (`at_first`) and now, and each
/// instance's last log lines.
fn diagnose(port: u16, at_first: Option<String>, instances: &[&Txgate]) -> String {
    let mut out = String::new();
    if let Some(then) = at_first {
        out.push_str(&format!(
            "sockets on port {port} when a call first stuck:\n{then}\n"
        ));
    }
    out.push_str(&format!("sockets on port {port} now:\n{}\n", sockets(port)));
    for (n, txgate) in instances.iter().enumerate() {
        let logs = txgate.drain_logs();
        let tail = &logs[logs.len().saturating_sub(40)..];
        out.push_str(&format!(
            "instance {}'s last log lines:\n{}\n",
            n + 1,
            tail.join("\n")
        ));
    }
    out
}

/// An attacker resends 200 banned transactions in a loop from 8
/// connections while txgate stops (snapshot written at exit) and starts
/// again from the snapshot on the same port: not one of them reaches the
/// node, before, during or after the restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_from_the_snapshot_under_attack_loses_no_ban() {
    let upstream = RecordingUpstream::start().await;
    let dir = std::env::temp_dir().join(format!("txgate-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bans.bin");
    let path = path.to_str().unwrap().to_string();
    let port = crate::support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let config = TempFile::new("[screen]\nsnapshot_interval_secs = 3600\n");
    let args = [
        "--listen",
        &listen,
        "--admin-listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream.url,
        "--log-format",
        "json",
        "--ban-snapshot",
        &path,
        "--config",
        config.arg(),
        // The attack loops and the probes are refused over and over: paced,
        // they would send a few calls a second, and the restart would be
        // tested under a trickle, not a flood.
        "--pacing",
        "false",
    ];
    let mut first = Txgate::spawn(&args);
    let banned: Vec<String> = (0..200).map(|n| tx(600 + n)).collect();
    import_bans(&first.admin_url, &banned).await;

    let url = first.url.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU64::new(0));
    // Calls that got no answer within ATTACK_CALL_LIMIT: there should be
    // none. Each is counted and abandoned rather than holding its loop, and
    // the sockets on the port are kept as the first one found them, so
    // that the test reports what held it instead of hanging.
    let stuck = Arc::new(AtomicU64::new(0));
    let first_stuck = Arc::new(std::sync::Mutex::new(None::<String>));
    let attack: Vec<_> = (0..8)
        .map(|k| {
            let (url, banned, stop, attempts, stuck, first_stuck) = (
                url.clone(),
                banned.clone(),
                stop.clone(),
                attempts.clone(),
                stuck.clone(),
                first_stuck.clone(),
            );
            tokio::spawn(async move {
                let mut i = k;
                while !stop.load(Ordering::SeqCst) {
                    // Refused connections while no instance listens are
                    // expected: the attack goes on.
                    let body = serde_json::json!({"jsonrpc": "2.0", "id": i,
                        "method": "eth_sendRawTransaction", "params": [banned[i % banned.len()]]})
                    .to_string();
                    let call = crate::support::rpc(&url, &body);
                    match tokio::time::timeout(ATTACK_CALL_LIMIT, call).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
                        Err(_) => {
                            if stuck.fetch_add(1, Ordering::SeqCst) == 0 {
                                *first_stuck.lock().unwrap() = Some(sockets(port));
                            }
                        }
                    }
                    attempts.fetch_add(1, Ordering::SeqCst);
                    i += 8;
                }
            })
        })
        .collect();
    // What a failure below prints: the sockets as the first stuck call
    // found them and now, and the instances' last log lines.
    let report =
        |instances: &[&Txgate]| diagnose(port, first_stuck.lock().unwrap().take(), instances);
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.proc.signal(libc::SIGTERM);
    let status = first
        .proc
        .wait_timeout(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit 10 s after SIGTERM\n{}", report(&[&first])));
    assert_eq!(status.code(), Some(0));
    let second = Txgate::spawn(&args);
    // Every banned transaction, once, first thing on the new instance.
    for raw in &banned {
        let (status, v) = tokio::time::timeout(ATTACK_CALL_LIMIT, send_raw(&second.url, raw))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no answer from the restarted instance\n{}",
                    report(&[&first, &second])
                )
            });
        assert_eq!(
            (status, v["error"]["code"].clone()),
            (StatusCode::OK, (-32003).into()),
            "{v}"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for a in attack {
        tokio::time::timeout(ATTACK_CALL_LIMIT * 2, a)
            .await
            .unwrap_or_else(|_| panic!("an attack loop hung\n{}", report(&[&first, &second])))
            .unwrap();
    }
    let stuck = stuck.load(Ordering::SeqCst);
    assert_eq!(
        stuck,
        0,
        "{stuck} attack calls got no answer within {ATTACK_CALL_LIMIT:?}\n{}",
        report(&[&first, &second])
    );
    assert!(attempts.load(Ordering::SeqCst) > 200);
    let reached: Vec<String> = upstream
        .received()
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .filter(|b| b.contains("eth_sendRawTransaction"))
        .collect();
    assert!(
        reached.is_empty(),
        "{} banned calls reached the node",
        reached.len()
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
