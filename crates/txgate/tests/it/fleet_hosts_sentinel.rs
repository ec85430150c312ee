//! The Redis failover on separate network hosts: one primary and two
//! replicas, each on a host of its own with a redis-sentinel beside it;
//! the node, HAProxy and three instances on hosts of their own
//! (support/hosts.rs). The primary is killed under 2,000 honest calls a
//! second through HAProxy: no call fails, the fleet's limits are one again
//! within 10 s of the promotion, and a ban reported during the failover
//! reaches every instance.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use alloy_primitives::Address;

use crate::credible::{TIP, poke};
use crate::fleet_redis::{allowed, paced};
use crate::fleet_sentinel::honest_load;
use crate::sidecar_loop::probe_until_denied;
use crate::support::{Eoa, Hosts, Proc, TempDir, TempFile, Txgate, eventually, fund, get};

const MASTER: &str = "txgate";
const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// `redis-cli -h <ip> -p <port> args…`, stdout; empty on any failure.
fn cli(ip: impl std::fmt::Display, port: u16, args: &[&str]) -> String {
    Command::new("timeout")
        .args(["5", "redis-cli", "--raw", "-h", &ip.to_string()])
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

async fn all_up(fleet: &[Txgate]) -> bool {
    for t in fleet {
        let (_, _, body) = get(&format!("{}/readyz", t.admin_url)).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if v["redis"]["link"] != "up" {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn the_primary_killed_on_its_own_host_costs_no_call_and_the_fleet_follows() {
    let names = ["node", "r1", "r2", "r3", "lb", "a", "b", "c"];
    let Some(hosts) = Hosts::new(&names) else {
        return;
    };
    let (_anvil, node_url) = hosts.anvil("node");
    // Redis: r1 the primary, r2 and r3 its replicas; a sentinel on each.
    let primary = hosts.addr("r1");
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("hosts-sentinel")).collect();
    let mut redis: Vec<Option<Proc>> = Vec::new();
    let mut sentinels = Vec::new();
    for (i, host) in ["r1", "r2", "r3"].iter().enumerate() {
        let dir = dirs[i].path.to_str().unwrap().to_string();
        let primary_ip = primary.to_string();
        let replica: &[&str] = if i > 0 {
            &["--replicaof", &primary_ip, "6379"]
        } else {
            &[]
        };
        redis.push(Some(hosts.redis(host, &dirs[i].path, replica)));
        let conf = dirs[i].path.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port 26379\nbind 0.0.0.0\nprotected-mode no\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {MASTER} {primary} 6379 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n"
            ),
        )
        .unwrap();
        sentinels.push(hosts.spawn(host, "redis-sentinel", &[conf.to_str().unwrap()]));
    }
    let sentinel_ips: Vec<_> = ["r1", "r2", "r3"].iter().map(|h| hosts.addr(h)).collect();
    let ready = eventually(Duration::from_secs(40), || async {
        let synced = cli(primary, 6379, &["INFO", "replication"])
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count();
        synced == 2
            && sentinel_ips.iter().all(|ip| {
                let replicas = cli(ip, 26379, &["SENTINEL", "replicas", MASTER]);
                let peers = cli(ip, 26379, &["SENTINEL", "sentinels", MASTER]);
                replicas.lines().filter(|l| *l == "ip").count() == 2
                    && peers.lines().filter(|l| *l == "name").count() == 2
            })
    })
    .await;
    assert!(ready, "the replicas or the sentinels never came together");

    // The instances: limits of 20/s, burst 20 per client for the fleet;
    // the test's own bridge address (the honest load) exempt.
    let list = sentinel_ips
        .iter()
        .map(|ip| format!("\"{ip}:26379\""))
        .collect::<Vec<_>>()
        .join(", ");
    let shared = format!(
        "[server]\ntrusted_proxies = [\"{lb}\"]\nproxy_protocol = \"v2\"\n\
         [limits]\nexempt = [\"{me}\"]\nip = {{ calls_per_sec = 20, calls_burst = 20 }}\n\
         [redis]\nsentinels = [{list}]\nmaster_name = \"{MASTER}\"\nsync_interval_ms = 20\n\
         timeout_ms = 1000\nlocal_share = 0.5\n[upstream]\nhealth_interval_ms = 100\n",
        lb = hosts.addr("lb"),
        me = hosts.bridge_addr(),
    );
    let reported = TempFile::new(&format!(
        "{shared}[aeges]\nlisten = \"0.0.0.0:9600\"\nreport_token = \"t0k\"\n\
         report_allow = [\"10.77.0.0/16\"]\n"
    ));
    let plain = TempFile::new(&shared);
    let fleet = vec![
        hosts.txgate("a", &node_url, &reported),
        hosts.txgate("b", &node_url, &plain),
        hosts.txgate("c", &node_url, &plain),
    ];
    assert!(
        eventually(Duration::from_secs(20), || all_up(&fleet)).await,
        "the instances never synced with the primary the sentinels name"
    );
    let lb_addr = SocketAddr::from((hosts.addr("lb"), 8545));
    let servers: String = fleet
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "  server t{i} {} send-proxy-v2 check port 9545 inter 100 fall 2 rise 1\n",
                t.rpc_addr
            )
        })
        .collect();
    let config = TempFile::new(&format!(
        "global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 2s\n  \
         timeout client 30s\n  timeout server 30s\n  option http-keep-alive\n\
         frontend rpc\n  bind {lb_addr}\n  default_backend txgate\n\
         backend txgate\n  balance roundrobin\n  retries 3\n  option redispatch\n  \
         option httpchk GET /readyz\n  http-check expect status 200\n{servers}"
    ));
    let _haproxy = hosts.spawn("lb", "haproxy", &["-db", "-f", config.arg()]);
    let lb_url = format!("http://{lb_addr}");
    let served = eventually(Duration::from_secs(20), || async {
        crate::support::rpc(&lb_url, CHAIN_ID)
            .await
            .is_ok_and(|(s, _, _)| s == 200)
    })
    .await;
    assert!(served, "HAProxy never served on its host");

    let one_limit = |ok: usize, secs: f64| {
        let most = allowed(20, 20.0, secs) as f64;
        (ok as f64) >= most * 0.9 && (ok as f64) <= most * 1.1
    };
    let client = hosts.client_addr(201).to_string();
    let (ok, limited, secs) = paced(&lb_url, &client, 200, Duration::from_millis(10)).await;
    assert!(
        one_limit(ok, secs),
        "before: passed {ok}, refused {limited} in {secs:.2} s"
    );

    let done = Arc::new(AtomicBool::new(false));
    let me: IpAddr = hosts.bridge_addr().into();
    let load = honest_load(me, lb_url.clone(), 2_000, 16, done.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    if let Some(mut p) = redis[0].take() {
        p.kill();
    }
    let (attacker, copycat) = (Eoa::new(95), Eoa::new(96));
    fund(&node_url, &[copycat.address]).await;
    let target = Address::repeat_byte(0x48);
    let report = crate::support::failure_report(
        &format!("0x{}", "bc".repeat(32)),
        attacker.address,
        target,
        &poke(99),
        0,
    );
    crate::support::post_report(
        &format!("http://{}:9600/report?token=t0k", hosts.addr("a")),
        report,
    )
    .await;
    let promoted = eventually(Duration::from_secs(30), || async {
        sentinel_ips.iter().skip(1).all(|ip| {
            let named = cli(ip, 26379, &["SENTINEL", "get-master-addr-by-name", MASTER]);
            named
                .lines()
                .next()
                .is_some_and(|a| a != primary.to_string())
        })
    })
    .await;
    assert!(promoted, "Sentinel never promoted a replica");
    let promoted_at = Instant::now();
    eprintln!("promoted {:?} after the kill", killed.elapsed());
    assert!(
        eventually(Duration::from_secs(10), || all_up(&fleet)).await,
        "the instances never followed the new primary"
    );
    let followed = promoted_at.elapsed();
    eprintln!("every instance synced with the new primary {followed:?} after the promotion");
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::SeqCst);
    let (ok, failed, failures) = load.await.unwrap();
    eprintln!("honest load: {ok} answered, {failed} failed");
    assert_eq!(
        failed, 0,
        "honest calls failed during the failover: {failures:?}"
    );
    assert!(ok > 4_000, "too little load: {ok} calls");
    let client = hosts.client_addr(202).to_string();
    let (ok, limited, secs) = paced(&lb_url, &client, 200, Duration::from_millis(10)).await;
    eprintln!("after: passed {ok}, refused {limited} in {secs:.2} s");
    assert!(
        one_limit(ok, secs),
        "after: passed {ok}, refused {limited} in {secs:.2} s"
    );
    assert!(
        followed < Duration::from_secs(10),
        "the limits were shared again only {followed:?} after the promotion"
    );
    let copy = copycat.sign(0, target, &poke(99), 0, 50 * TIP);
    let landed = probe_until_denied(
        std::slice::from_ref(&lb_url),
        &copy,
        promoted_at,
        Duration::from_secs(15),
    )
    .await;
    eprintln!("the reported ban refused through HAProxy: {landed:?} after the promotion");
    for t in &fleet {
        let m = t.metrics().await;
        assert!(
            crate::support::metric(&m, "txgate_fleet_bans_total{event=\"received\"}")
                + crate::support::metric(&m, "txgate_fleet_bans_total{event=\"appended\"}")
                >= 1.0,
            "an instance never learned the ban: {m}"
        );
    }
    drop(sentinels);
}
