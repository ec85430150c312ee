//! The fleet on a Redis that fails over: Debian's redis-server as one
//! primary and two replicas, three redis-sentinels watching them, three
//! instances behind HAProxy that find the primary through the sentinels.
//! The primary is killed under load: no honest call fails, the fleet's
//! limits hold again within 10 s of the promotion, and a ban reported
//! during the failover reaches every instance.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::balancer::{Backend, Haproxy, Send};
use crate::credible::{TIP, poke};
use crate::fleet_redis::{RedisServer, all_links, allowed, paced};
use crate::sidecar_loop::probe_until_denied;
use crate::support::{
    Anvil, Eoa, Proc, TempDir, TempFile, Txgate, eventually, free_port, fund, rpc_from,
};

pub(crate) const MASTER: &str = "txgate";
const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// A redis-sentinel watching the primary on `primary`.
pub(crate) struct Sentinel {
    _proc: Proc,
    port: u16,
    _dir: TempDir,
}

impl Sentinel {
    pub(crate) fn start(primary: u16) -> Sentinel {
        let port = free_port();
        let dir = TempDir::new("sentinel");
        let conf = dir.path.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n\
                 sentinel parallel-syncs {MASTER} 1\n"
            ),
        )
        .unwrap();
        let child = Command::new("redis-sentinel")
            .current_dir(&dir.path)
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-sentinel (Debian package redis-sentinel; scripts/install-test-tools.sh)",
            );
        let sentinel = Sentinel {
            _proc: Proc::new(child),
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.primary().is_none() {
            assert!(Instant::now() < deadline, "redis-sentinel did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel
    }

    /// Its port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The primary's port this sentinel names.
    fn primary(&self) -> Option<u16> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--raw"])
            .args(["SENTINEL", "get-master-addr-by-name", MASTER])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().nth(1)?.trim().parse().ok()
    }

    /// How many other sentinels this one knows.
    fn peers(&self) -> usize {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--raw"])
            .args(["SENTINEL", "sentinels", MASTER])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| *l == "name")
            .count()
    }

    /// How many replicas this sentinel knows of the primary.
    fn replicas(&self) -> usize {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--raw"])
            .args(["SENTINEL", "replicas", MASTER])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| *l == "ip")
            .count()
    }
}

/// One keep-alive client from `from` (a load that opened a connection per
/// call would run the host out of ports, not test the fleet).
fn lane_client(
    from: std::net::IpAddr,
) -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
> {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_local_address(Some(from));
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector)
}

/// One call on `client`: the status and body, or the error.
async fn call(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    url: &str,
) -> Result<(u16, bytes::Bytes), String> {
    use http_body_util::BodyExt;
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            CHAIN_ID.as_bytes(),
        )))
        .map_err(|e| e.to_string())?;
    let response = client.request(req).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// Honest calls from the exempt address `from` at about `per_sec`, spread
/// over `lanes` clients, until `done`: (answered 200, anything else).
pub(crate) fn honest_load(
    from: std::net::IpAddr,
    url: String,
    per_sec: u64,
    lanes: u64,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64, Vec<String>)> {
    tokio::spawn(async move {
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let every = Duration::from_micros(1_000_000 * lanes / per_sec);
        let tasks: Vec<_> = (0..lanes)
            .map(|_| {
                let (url, done) = (url.clone(), done.clone());
                let (ok, failed, failures) = (ok.clone(), failed.clone(), failures.clone());
                tokio::spawn(async move {
                    let client = lane_client(from);
                    let mut next = tokio::time::Instant::now();
                    while !done.load(Ordering::SeqCst) {
                        match call(&client, &url).await {
                            Ok((200, body)) => {
                                let v: serde_json::Value =
                                    serde_json::from_slice(&body).unwrap_or_default();
                                if v["result"] == "0x7a69" {
                                    ok.fetch_add(1, Ordering::Relaxed);
                                    next += every;
                                    tokio::time::sleep_until(next).await;
                                    continue;
                                }
                                failures.lock().unwrap().push(format!("{v}"));
                            }
                            Ok((status, body)) => failures
                                .lock()
                                .unwrap()
                                .push(format!("{status}: {}", String::from_utf8_lossy(&body))),
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                        failed.fetch_add(1, Ordering::Relaxed);
                        next += every;
                        tokio::time::sleep_until(next).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let failures = failures.lock().unwrap().iter().take(5).cloned().collect();
        (
            ok.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            failures,
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_primary_killed_under_load_costs_no_call_and_the_fleet_follows_the_new_one() {
    let anvil = Anvil::start().await;
    let primary_port = free_port();
    let mut primary = RedisServer::start(primary_port);
    let replica_of = primary_port.to_string();
    let _replicas: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_with(free_port(), &["--replicaof", "127.0.0.1", &replica_of]))
        .collect();
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(primary_port)).collect();
    // Before the failover can work: both replicas in sync with the
    // primary, every sentinel knowing both replicas and both other
    // sentinels.
    let in_sync = || {
        let out = Command::new("redis-cli")
            .args(["-p", &primary_port.to_string(), "INFO", "replication"])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            in_sync() == 2
                && sentinels
                    .iter()
                    .all(|s| s.replicas() == 2 && s.peers() == 2)
        })
        .await,
        "the replicas never synced, or the sentinels never saw each other and both replicas"
    );
    let list = sentinels
        .iter()
        .map(|s| format!("\"127.0.0.1:{}\"", s.port))
        .collect::<Vec<_>>()
        .join(", ");
    // 20 calls/s with a burst of 20 per client IP for the whole fleet;
    // 127.0.0.1 (the honest load, the test's own checks) exempt.
    let redis = format!(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"optional\"\n\
         [limits]\nexempt = [\"127.0.0.1\"]\nip = {{ calls_per_sec = 20, calls_burst = 20 }}\n\
         [redis]\nsentinels = [{list}]\nmaster_name = \"{MASTER}\"\nsync_interval_ms = 20\n\
         timeout_ms = 1000\nlocal_share = 0.5\n[upstream]\nhealth_interval_ms = 100\n"
    );
    let aeges = free_port();
    let reported = TempFile::new(&format!(
        "{redis}[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n"
    ));
    let plain = TempFile::new(&redis);
    let fleet = vec![
        Txgate::start(&anvil.url, &["-c", reported.arg()]),
        Txgate::start(&anvil.url, &["-c", plain.arg()]),
        Txgate::start(&anvil.url, &["-c", plain.arg()]),
    ];
    let admins: Vec<SocketAddr> = fleet
        .iter()
        .map(|t| t.admin_url.trim_start_matches("http://").parse().unwrap())
        .collect();
    let backends: Vec<Backend> = fleet
        .iter()
        .zip(&admins)
        .map(|(t, admin)| Backend {
            rpc: t.rpc_addr,
            admin: Some(*admin),
        })
        .collect();
    let haproxy = Haproxy::start_with(&backends, Send::ProxyV2);
    assert!(
        eventually(Duration::from_secs(15), || all_links(&admins, "up")).await,
        "every instance syncs with the primary the sentinels name"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            rpc_from(&haproxy.url, "127.0.0.1", &[], CHAIN_ID)
                .await
                .is_ok_and(|(status, _, _)| status == 200)
        })
        .await,
        "HAProxy sees the instances ready"
    );
    // One client at 100 calls/s for 2 s over the three instances: the
    // fleet's one limit (20 + 20/s), within 10%.
    let one_limit = |ok: usize, secs: f64| {
        let most = allowed(20, 20.0, secs) as f64;
        (ok as f64) >= most * 0.9 && (ok as f64) <= most * 1.1
    };
    let (ok, limited, secs) =
        paced(&haproxy.url, "127.0.0.2", 200, Duration::from_millis(10)).await;
    assert!(
        one_limit(ok, secs),
        "before: passed {ok}, refused {limited} in {secs:.2} s"
    );

    // 2,000 honest calls a second through HAProxy while the primary dies.
    let done = Arc::new(AtomicBool::new(false));
    let load = honest_load(
        "127.0.0.1".parse().unwrap(),
        haproxy.url.clone(),
        2_000,
        16,
        done.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    primary.kill();
    // A report during the failover, to the one instance with the listener.
    let (attacker, copycat) = (Eoa::new(71), Eoa::new(72));
    fund(&anvil.url, &[copycat.address]).await;
    let target = alloy_primitives::Address::repeat_byte(0x44);
    let report = crate::support::failure_report(
        &format!("0x{}", "ab".repeat(32)),
        attacker.address,
        target,
        &poke(93),
        0,
    );
    crate::support::post_report(
        &format!("http://127.0.0.1:{aeges}/report?token=t0k"),
        report,
    )
    .await;
    let promoted = eventually(Duration::from_secs(30), || async {
        sentinels
            .iter()
            .all(|s| s.primary().is_some_and(|p| p != primary_port))
    })
    .await;
    assert!(promoted, "Sentinel never promoted a replica");
    let promoted_at = Instant::now();
    eprintln!("promoted {:?} after the kill", killed.elapsed());
    // The fleet's limits are shared again (every instance syncing with
    // the new primary) within 10 s of the promotion...
    assert!(
        eventually(Duration::from_secs(10), || all_links(&admins, "up")).await,
        "the instances never followed the new primary"
    );
    let followed = promoted_at.elapsed();
    eprintln!("every instance synced with the new primary {followed:?} after the promotion");
    // ...with the honest load running through all of it, not one call
    // failed; the load stops a second after (it would only slow the
    // measurements below).
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::SeqCst);
    let (ok, failed, failures) = load.await.unwrap();
    eprintln!("honest load: {ok} answered, {failed} failed");
    assert_eq!(
        failed, 0,
        "honest calls failed during the failover: {failures:?}"
    );
    assert!(ok > 4_000, "too little load: {ok} calls");
    // ...and what they hold is one limit, within 10%.
    let (ok, limited, secs) =
        paced(&haproxy.url, "127.0.0.3", 200, Duration::from_millis(10)).await;
    eprintln!("after: passed {ok}, refused {limited} in {secs:.2} s");
    assert!(
        one_limit(ok, secs),
        "after: passed {ok}, refused {limited} in {secs:.2} s"
    );
    assert!(
        followed < Duration::from_secs(10),
        "the limits were shared again only {followed:?} after the promotion"
    );
    // The ban reported during the failover: every instance refuses it.
    let copy = copycat.sign(0, target, &poke(93), 0, 50 * TIP);
    let urls: Vec<String> = fleet.iter().map(|t| t.url.clone()).collect();
    let landed = probe_until_denied(&urls, &copy, promoted_at, Duration::from_secs(15)).await;
    eprintln!("the reported ban refused everywhere: {landed:?} after the promotion");
    for t in &fleet {
        let m = t.metrics().await;
        assert_eq!(
            crate::support::metric(&m, "txgate_fleet_bans_total{event=\"gap\"}"),
            0.0,
            "{m}"
        );
    }
}
