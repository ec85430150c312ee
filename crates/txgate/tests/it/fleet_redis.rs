//! Per-client limits held for a fleet through a real redis-server (Debian's
//! package, on a free loopback port, stopped by PID): HAProxy in front of
//! three instances, anvil behind them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::balancer::{Backend, Haproxy, Send};
use crate::credible::{TIP, poke};
use crate::sidecar_loop::{a_ban_reaches_every_instance_within_100_ms, probe_until_denied};
use crate::support::{
    ADDR1, Eoa, KEY0, Node, NodeKind, Proc, Sidecar, TempFile, Txgate, cast_send, eventually,
    free_port, get, listening_to_refusal, metric, refused, rpc_from, send_raw,
};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// A redis-server with no persistence, in a directory of its own (a
/// replica writes the primary's data there; a server started in a shared
/// directory would load another's).
pub struct RedisServer {
    proc: Option<Proc>,
    port: u16,
    _dir: crate::support::TempDir,
}

impl RedisServer {
    pub fn start(port: u16) -> RedisServer {
        RedisServer::start_with(port, &[])
    }

    /// A redis-server with `extra` arguments after the launcher's own (a
    /// replica: `--replicaof 127.0.0.1 <port>`).
    pub fn start_with(port: u16, extra: &[&str]) -> RedisServer {
        let dir = crate::support::TempDir::new("redis");
        let child = Command::new("redis-server")
            .current_dir(&dir.path)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(&dir.path)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (Debian package redis-server; scripts/install-test-tools.sh)");
        let server = RedisServer {
            proc: Some(Proc::new(child)),
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.pong() {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn kill(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.kill();
        }
    }
}

/// The `/readyz` body's `redis.link` of the instance at `admin`.
async fn redis_link(admin: SocketAddr) -> String {
    let (_, _, body) = get(&format!("http://{admin}/readyz")).await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    body["redis"]["link"].as_str().unwrap_or("none").to_string()
}

pub(crate) async fn all_links(admins: &[SocketAddr], want: &str) -> bool {
    for admin in admins {
        if redis_link(*admin).await != want {
            return false;
        }
    }
    true
}

/// `n` calls from `from`, one every `every`: how many were answered 200
/// and how many 429 (nothing else is acceptable), and how long it took.
pub(crate) async fn paced(url: &str, from: &str, n: usize, every: Duration) -> (usize, usize, f64) {
    let (mut ok, mut limited) = (0, 0);
    let start = Instant::now();
    for i in 0..n {
        let (status, _, body) = rpc_from(url, from, &[], CHAIN_ID).await.unwrap();
        match status.as_u16() {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("{other}: {}", String::from_utf8_lossy(&body)),
        }
        let next = start + every * (i as u32 + 1);
        tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
    }
    (ok, limited, start.elapsed().as_secs_f64())
}

/// Failed syncs and connects to Redis, over the whole fleet. Each instance
/// counts a failure before it reports its link anything but up, so once
/// `/readyz` says up everywhere, every earlier failure is counted.
async fn redis_errors(fleet: &[Txgate]) -> f64 {
    let mut errors = 0.0;
    for t in fleet {
        let m = t.metrics().await;
        errors += metric(&m, "txgate_redis_syncs_total{result=\"error\"}")
            + metric(&m, "txgate_redis_connects_total{result=\"error\"}");
    }
    errors
}

/// What a limit of `rate`/s and `burst` lets through in `secs` at most
/// (the calls earned while the test ran count: a loaded machine is slow).
pub(crate) fn allowed(burst: usize, rate: f64, secs: f64) -> usize {
    burst + (rate * secs).ceil() as usize
}

/// The fleet as the issue draws it: HAProxy, three instances, anvil, the
/// example sidecar, redis-server; limits, bans, a late instance, and Redis
/// killed and back.
async fn a_fleet_holds_one_limit_through_redis_and_keeps_serving_when_redis_dies(kind: NodeKind) {
    let node = Node::start(kind).await;
    let mut redis = RedisServer::start(free_port());
    // 5 calls/s with a burst of 10 per client IP, for the whole fleet;
    // 127.0.0.1 (cast, the test's own checks) exempt. Redis down: each
    // instance allows half of that alone. A sync may take 2 s before
    // Redis counts as down: nothing here is about a slow Redis (the test
    // kills it, and a killed Redis refuses connections at once), and a
    // sync slowed by a loaded machine must not turn the fleet's limits
    // into local ones in the middle of a measurement.
    let config = TempFile::new(&format!(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"optional\"\n\
         [limits]\nexempt = [\"127.0.0.1\"]\nip = {{ calls_per_sec = 5, calls_burst = 10 }}\n\
         [redis]\nurl = \"{}\"\nsync_interval_ms = 20\ntimeout_ms = 2000\nlocal_share = 0.5\n\
         [upstream]\nhealth_interval_ms = 100\n",
        redis.url()
    ));
    let sidecar_config = TempFile::new(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config/example-sidecar.toml"),
        )
        .unwrap(),
    );
    let sidecar = Sidecar::start(&node.url, &sidecar_config, 0).await;
    let instance = || {
        Txgate::start(
            &node.url,
            &["-c", config.arg(), "--sidecar", &sidecar.grpc_url],
        )
    };
    let fleet: Vec<Txgate> = (0..3).map(|_| instance()).collect();
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
        eventually(Duration::from_secs(10), || all_links(&admins, "up")).await,
        "every instance syncs with Redis"
    );
    for admin in &admins {
        let linked = eventually(Duration::from_secs(10), || async {
            let (_, _, body) = get(&format!("http://{admin}/readyz")).await;
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()["sidecar"] == "up"
        })
        .await;
        assert!(linked, "{admin} never subscribed to the sidecar");
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            rpc_from(&haproxy.url, "127.0.0.1", &[], CHAIN_ID)
                .await
                .is_ok_and(|(status, _, _)| status == 200)
        })
        .await,
        "HAProxy sees the instances ready"
    );

    // A real wallet client through the balancer.
    cast_send(&haproxy.url, KEY0, &[ADDR1, "--value", "1gwei"]);

    // The sidecar bans a call: every instance refuses it within 100 ms
    // (measured as that function says: the instances' own lag histogram,
    // and probes of all instances at once).
    let target = alloy_primitives::Address::repeat_byte(0x77);
    let banned = Eoa::new(51).sign(0, target, &poke(91), 0, TIP);
    let probe = Eoa::new(52).sign(0, target, &poke(91), 0, TIP);
    a_ban_reaches_every_instance_within_100_ms(
        &sidecar,
        &fleet,
        serde_json::json!({"raw_tx": banned, "assertion_id": format!("0x{}", "e8".repeat(32)), "assertion_version": 1}),
        &probe,
    )
    .await;
    // A fourth instance, no snapshot: refuses it within 1 s of its start,
    // timed on its own clock from its "listening" line to its refusal line
    // for the probe (probed in a tight loop, so the refusal follows the
    // ban's arrival by at most one probe).
    let fourth = instance();
    probe_until_denied(
        std::slice::from_ref(&fourth.url),
        &probe,
        Instant::now(),
        Duration::from_secs(10),
    )
    .await;
    let took = listening_to_refusal(&fourth, &probe).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(fourth);

    // One client at 50 calls/s for 1.2 s, spread over the three instances
    // by round robin: the fleet lets through its one limit (10 + 5 × 1.2 =
    // 16), not three times it (each instance alone would pass 16 of its
    // 20). A little over for calls admitted between two syncs.
    let one_limit = |ok: usize, secs: f64| {
        let most = allowed(10, 5.0, secs);
        ok + 4 >= most && ok <= most + 6
    };
    // Redis up for the whole of what follows: not one sync or connect
    // fails until Redis is killed (checked there), so the limits measured
    // are the fleet's, never local shares.
    assert!(
        eventually(Duration::from_secs(10), || all_links(&admins, "up")).await,
        "every instance syncs with Redis"
    );
    let errors = redis_errors(&fleet).await;
    let (ok, limited, secs) = paced(&haproxy.url, "127.0.0.2", 60, Duration::from_millis(20)).await;
    assert!(
        one_limit(ok, secs),
        "passed {ok}, refused {limited} in {secs:.2} s"
    );
    // Over its limit on every instance, asked directly: of two calls in a
    // row, one at least is refused. Either may find a token: one earned
    // since the stream's last call, or one that falls due between the two
    // (one every 200 ms; on a loaded machine the calls can be tens of ms
    // apart); two tokens in that time would mean the limit did not hold.
    for t in &fleet {
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let (status, _, _) = rpc_from(&t.url, "127.0.0.2", &[], CHAIN_ID).await.unwrap();
            statuses.push(status.as_u16());
        }
        assert!(
            statuses.iter().all(|s| matches!(s, 200 | 429)) && statuses.contains(&429),
            "{statuses:?}"
        );
    }
    // Another client is untouched.
    let (ok, limited, _) = paced(&haproxy.url, "127.0.0.3", 9, Duration::ZERO).await;
    assert_eq!((ok, limited), (9, 0));
    assert_eq!(
        redis_errors(&fleet).await,
        errors,
        "a sync or connect failed while Redis was up"
    );
    let synced = eventually(Duration::from_secs(10), || async {
        let m = fleet[0].metrics().await;
        metric(&m, "txgate_redis_up") == 1.0
            && metric(&m, "txgate_redis_clients_synced_total") > 0.0
    })
    .await;
    assert!(synced, "{}", fleet[0].metrics().await);

    // Redis dies: every call still gets an answer, from local limits.
    redis.kill();
    assert!(
        eventually(Duration::from_secs(5), || all_links(&admins, "down")).await,
        "every instance notices Redis is gone"
    );
    let (ok, limited, _) = paced(&haproxy.url, "127.0.0.4", 6, Duration::ZERO).await;
    assert_eq!((ok, limited), (6, 0), "honest calls keep succeeding");
    for admin in &admins {
        let (status, _, body) = get(&format!("http://{admin}/readyz")).await;
        assert_eq!(status, 200, "Redis down never takes an instance out");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["redis"]["limits"], "local", "{body}");
    }
    // The local share of the limit holds on one instance: a burst of 5
    // (and 3/s).
    let (ok, limited, secs) = paced(&fleet[0].url, "127.0.0.5", 8, Duration::ZERO).await;
    assert!(
        (5..=allowed(5, 3.0, secs)).contains(&ok) && ok < 8,
        "passed {ok}, refused {limited} in {secs:.2} s"
    );
    let down = eventually(Duration::from_secs(10), || async {
        let m = fleet[0].metrics().await;
        metric(&m, "txgate_redis_up") == 0.0
            && metric(&m, "txgate_redis_syncs_total{result=\"error\"}")
                + metric(&m, "txgate_redis_connects_total{result=\"error\"}")
                > 0.0
    })
    .await;
    assert!(down, "{}", fleet[0].metrics().await);

    // Redis returns (empty: it kept nothing): the fleet's limits come back.
    let redis = RedisServer::start(redis.port);
    assert!(
        eventually(Duration::from_secs(15), || all_links(&admins, "up")).await,
        "every instance reconnects"
    );
    // Up again for the rest: not one sync or connect fails from here on.
    let errors = redis_errors(&fleet).await;
    // The whole burst of 10 again on one instance...
    let (ok, limited, secs) = paced(&fleet[0].url, "127.0.0.6", 13, Duration::ZERO).await;
    assert!(
        (10..=allowed(10, 5.0, secs)).contains(&ok) && ok < 13,
        "passed {ok}, refused {limited} in {secs:.2} s"
    );
    // ...and one limit for the fleet.
    let (ok, limited, secs) = paced(&haproxy.url, "127.0.0.7", 60, Duration::from_millis(20)).await;
    assert!(
        one_limit(ok, secs),
        "passed {ok}, refused {limited} in {secs:.2} s"
    );
    assert_eq!(
        redis_errors(&fleet).await,
        errors,
        "a sync or connect failed while Redis was up"
    );
    assert!(redis.pong());
}

/// A failure report reaches one instance; over Redis, every instance bans
/// it.
async fn a_reported_ban_reaches_every_instance_through_redis(kind: NodeKind) {
    let node = Node::start(kind).await;
    let redis = RedisServer::start(free_port());
    let aeges = free_port();
    let shared = format!("[redis]\nurl = \"{}\"\n", redis.url());
    let with_aeges = TempFile::new(&format!(
        "{shared}[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n"
    ));
    let plain = TempFile::new(&shared);
    let heard = Txgate::start(&node.url, &["-c", with_aeges.arg()]);
    let other = Txgate::start(&node.url, &["-c", plain.arg()]);
    // Both subscribed (each logs it once connected).
    for t in [&heard, &other] {
        let mut logs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !logs
            .iter()
            .any(|l: &String| l.contains("reading the fleet's ban log"))
        {
            assert!(Instant::now() < deadline, "never subscribed: {logs:?}");
            logs.extend(t.drain_logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let (attacker, copycat) = (Eoa::new(31), Eoa::new(32));
    let target = alloy_primitives::Address::repeat_byte(0x42);
    let report = crate::support::failure_report(
        &format!("0x{}", "cd".repeat(32)),
        attacker.address,
        target,
        &poke(77),
        0,
    );
    let started = Instant::now();
    crate::support::post_report(
        &format!("http://127.0.0.1:{aeges}/report?token=t0k"),
        report,
    )
    .await;
    // The same calldata from another EOA, on the instance that never got
    // the report, probed in a tight loop (no pause: a pause would be the
    // test's time, not the ban's): the answer of its first refusal, from
    // the moment the report was sent, bounds the time the ban took from
    // above. The slack in that bound is the report's own round trip and at
    // most two probe round trips: milliseconds beside the second.
    let copy = copycat.sign(0, target, &poke(77), 0, 50 * TIP);
    let landed = probe_until_denied(
        std::slice::from_ref(&other.url),
        &copy,
        started,
        Duration::from_secs(10),
    )
    .await;
    let took = landed[0].first_refused_answered;
    assert!(took < Duration::from_secs(1), "{:?}", landed[0]);
    refused(
        &send_raw(&heard.url, &copy).await,
        200,
        -32003,
        "denied_fingerprint",
    );
    // The appender counts its ban once Redis has answered the XADD, which
    // can be after the other instance has it: waited for. The reader
    // counts it before applying it, so before it refuses the copy: read at
    // once.
    let published = eventually(Duration::from_secs(5), || async {
        metric(
            &heard.metrics().await,
            "txgate_fleet_bans_total{event=\"appended\"}",
        ) == 1.0
    })
    .await;
    let (h, o) = (heard.metrics().await, other.metrics().await);
    assert!(published, "{h}");
    assert_eq!(
        metric(&h, "txgate_fleet_bans_total{event=\"appended\"}"),
        1.0,
        "{h}"
    );
    assert_eq!(
        metric(&o, "txgate_fleet_bans_total{event=\"received\"}"),
        1.0,
        "{o}"
    );
    // The appender skips its own entry.
    assert_eq!(
        metric(&h, "txgate_fleet_bans_total{event=\"received\"}"),
        0.0,
        "{h}"
    );
}

crate::support::on_each_node!(
    a_fleet_holds_one_limit_through_redis_and_keeps_serving_when_redis_dies,
    a_reported_ban_reaches_every_instance_through_redis,
);
