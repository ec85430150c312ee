//! The fleet's ban log through a real redis-server: a ban reported to one
//! instance while another's link to Redis is down (or while it restarts)
//! reaches it when the link returns, its sender charged once; a fresh
//! instance learns every live ban from the log alone; an instance whose
//! Redis user may not trim the log nor ask about replicas appends each ban
//! once.
//!
//! An instance's link to Redis is cut by a gate of the test's own: a TCP
//! relay in front of redis-server that, closed, cuts what it carries and
//! closes every new connection at once (what a partition does to a client
//! whose connections reset).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::credible::{TIP, poke};
use crate::fleet_redis::RedisServer;
use crate::fleet_sentinel::{MASTER, Sentinel};
use crate::sidecar_loop::probe_until_denied;
use crate::support::{
    Anvil, Eoa, TempDir, TempFile, Txgate, eventually, free_port, fund, metric, post, rpc_json,
};

/// A relay to `upstream` on a port of its own that the test opens and
/// closes.
struct Gate {
    port: u16,
    open: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    async fn start(upstream: u16) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (is_open, cuts) = (open.clone(), cut.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                // Subscribed before the gate is looked at: a close between
                // the two still cuts this one.
                let mut cut = cuts.subscribe();
                if !is_open.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Gate {
            port,
            open,
            cut,
            task,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Cuts every connection through it and refuses new ones.
    fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
        self.cut.send_modify(|n| *n += 1);
    }
}

/// A failure report of `caller`'s call `poke(arg)` to `target`, as the
/// Credible Layer sidecar posts it.
fn report(caller: Address, target: Address, arg: u64, hash_byte: u8, nonce: u64) -> String {
    crate::support::failure_report(
        &format!("0x{}", hex_byte(hash_byte).repeat(32)),
        caller,
        target,
        &poke(arg),
        nonce,
    )
}

fn hex_byte(b: u8) -> String {
    format!("{b:02x}")
}

async fn post_report(aeges: u16, body: String) {
    let (status, _, answer) = post(
        &format!("http://127.0.0.1:{aeges}/report?token=t0k"),
        Some("application/json"),
        body,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
}

/// Waits until `txgate` logs that it reads the log.
async fn reading(txgate: &Txgate) {
    txgate.assert_reads_ban_log(Duration::from_secs(10)).await;
}

async fn counted(txgate: &Txgate, series: &str) -> f64 {
    metric(&txgate.metrics().await, series)
}

const CHARGED: &str = "txgate_invalidations_total{result=\"sender_charged\"}";
const RECEIVED: &str = "txgate_fleet_bans_total{event=\"received\"}";
const APPENDED: &str = "txgate_fleet_bans_total{event=\"appended\"}";

/// A report posted to A while B's link to Redis is down for 10 s (B
/// restarted meanwhile when `restart`): B refuses the reported calldata
/// within 2 s of its link coming back, and neither charges the sender
/// twice, however often the link drops after.
async fn a_ban_reported_during_an_outage_reaches_the_instance_when_its_link_returns(restart: bool) {
    let anvil = Anvil::start().await;
    let redis = RedisServer::start(free_port());
    let gate = Gate::start(redis.port()).await;
    let aeges = free_port();
    let a_config = TempFile::new(&format!(
        "[redis]\nurl = \"{}\"\n[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n",
        redis.url()
    ));
    let dir = TempDir::new("ban-log");
    let snapshot = dir.path.join("bans.bin");
    let b_config = TempFile::new(&format!(
        "[redis]\nurl = \"{}\"\n[screen]\nsnapshot_path = \"{}\"\n",
        gate.url(),
        snapshot.display()
    ));
    let a = Txgate::start(&anvil.url, &["-c", a_config.arg()]);
    let mut b = Txgate::start(&anvil.url, &["-c", b_config.arg()]);
    reading(&a).await;
    reading(&b).await;
    // A first ban, read by B before the outage: B has a place in the log
    // (saved in its snapshot at a restart) to read on from.
    let first = Eoa::new(50);
    post_report(
        aeges,
        report(first.address, Address::repeat_byte(0x41), 90, 0xaa, 0),
    )
    .await;
    let read_first = eventually(Duration::from_secs(5), || async {
        counted(&b, RECEIVED).await == 1.0
    })
    .await;
    assert!(read_first, "B never read the first ban");

    let outage = Instant::now();
    gate.close();
    let (attacker, copycat) = (Eoa::new(51), Eoa::new(52));
    fund(&anvil.url, &[copycat.address]).await;
    let target = Address::repeat_byte(0x42);
    post_report(aeges, report(attacker.address, target, 91, 0xab, 0)).await;
    let appended = eventually(Duration::from_secs(5), || async {
        counted(&a, APPENDED).await == 2.0
    })
    .await;
    assert!(appended, "A never appended the ban");
    let copy = copycat.sign(0, target, &poke(91), 0, 50 * TIP);
    if restart {
        // B stops (its snapshot saved with its place in the log) and starts
        // again while its link is still down.
        b.proc.signal(libc::SIGTERM);
        assert!(b.proc.wait_timeout(Duration::from_secs(15)).is_some());
        b = Txgate::start(&anvil.url, &["-c", b_config.arg()]);
    }
    // Still cut off: B lets the copy through to its node.
    let (_, answer) = crate::support::send_raw(&b.url, &copy).await;
    assert!(answer["result"].is_string(), "{answer}");
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(outage.elapsed())).await;

    let back = Instant::now();
    gate.open();
    let fresh = copycat.sign(1, target, &poke(91), 0, 50 * TIP);
    let landed = probe_until_denied(
        std::slice::from_ref(&b.url),
        &fresh,
        back,
        Duration::from_secs(10),
    )
    .await;
    let took = landed[0].first_refused_answered;
    assert!(
        took < Duration::from_secs(2),
        "B refused the ban {took:?} after its link came back"
    );
    // Its link drops and returns again: B reads on from where it was.
    b.drain_logs();
    gate.close();
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate.open();
    reading(&b).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Two bans, two senders: each charged once on each instance (B
    // restarted has charged only the one it read since).
    assert_eq!(counted(&a, CHARGED).await, 2.0, "A charged a sender twice");
    let b_charged = if restart { 1.0 } else { 2.0 };
    assert_eq!(
        counted(&b, CHARGED).await,
        b_charged,
        "B charged a sender twice"
    );
    assert_eq!(counted(&b, RECEIVED).await, b_charged);
    assert_eq!(counted(&a, RECEIVED).await, 0.0, "A read its own entry");
    let m = b.metrics().await;
    assert_eq!(metric(&m, "txgate_fleet_bans_total{event=\"gap\"}"), 0.0);
    assert_eq!(metric(&m, "txgate_fleet_ban_log_lag_seconds"), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ban_reported_while_an_instance_is_cut_off_reaches_it_when_its_link_returns() {
    a_ban_reported_during_an_outage_reaches_the_instance_when_its_link_returns(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ban_reported_while_an_instance_restarts_cut_off_reaches_it_when_its_link_returns() {
    a_ban_reported_during_an_outage_reaches_the_instance_when_its_link_returns(true).await;
}

/// An instance that finds its Redis through `sentinel` (`user`: the
/// `[redis]` lines of its ACL user, if any), and one report posted to it,
/// of attacker `seed`'s call, appended to the log.
async fn one_ban_appended_through(
    sentinel: &Sentinel,
    user: &str,
    anvil: &Anvil,
    seed: u64,
) -> (Txgate, TempFile) {
    let aeges = free_port();
    let config = TempFile::new(&format!(
        "[redis]\nsentinels = [\"127.0.0.1:{}\"]\nmaster_name = \"{MASTER}\"\n{user}\
         [aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n",
        sentinel.port()
    ));
    let a = Txgate::start(&anvil.url, &["-c", config.arg()]);
    reading(&a).await;
    let attacker = Eoa::new(seed);
    let arg = seed;
    let hash = u8::try_from(seed).unwrap();
    post_report(
        aeges,
        report(attacker.address, Address::repeat_byte(0x44), arg, hash, 0),
    )
    .await;
    let appended = eventually(Duration::from_secs(10), || async {
        counted(&a, APPENDED).await == 1.0
    })
    .await;
    assert!(appended, "{}", a.metrics().await);
    (a, config)
}

/// An ACL user allowed everything but `XTRIM` and `WAIT`, behind a
/// sentinel: each append stands on the primary alone and the trim is
/// counted as refused. A refused trim used to fail the whole append (a
/// pipeline's answer fails on any of its commands' errors) and a refused
/// `WAIT` to read as a failed primary: either way the same bans were
/// appended again every few hundred milliseconds and never confirmed.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_refused_the_trim_and_the_replica_wait_appends_each_ban_once() {
    let anvil = Anvil::start().await;
    let redis = RedisServer::start_with(
        free_port(),
        &[
            "--user", "appender", "on", ">s3cret", "~*", "&*", "+@all", "-xtrim", "-wait",
        ],
    );
    let sentinel = Sentinel::start(redis.port());
    let (a, _config) = one_ban_appended_through(
        &sentinel,
        "username = \"appender\"\npassword = \"s3cret\"\n",
        &anvil,
        63,
    )
    .await;
    // Long enough for a few more appends of the same ban, had it failed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let m = a.metrics().await;
    assert_eq!(metric(&m, APPENDED), 1.0, "{m}");
    assert_eq!(
        metric(&m, "txgate_fleet_bans_total{event=\"append_failed\"}"),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "txgate_fleet_bans_total{event=\"trim_failed\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "txgate_fleet_bans_total{event=\"unreplicated\"}"),
        1.0,
        "{m}"
    );
}

/// `redis-cli` on `port`, its answer.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--raw"])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A primary with no replica, behind a sentinel: an append no replica has
/// is kept, and once the primary drops the appender's connection (as a
/// failover, or a split brain healing, ends the old primary's) it is
/// appended again on the next one, without waiting for another ban. It
/// used to be forgotten once confirmed on the primary alone: the new
/// primary of a failover, or of a healed split brain, never had it.
#[tokio::test(flavor = "multi_thread")]
async fn an_append_no_replica_had_is_appended_again_on_the_next_connection() {
    let anvil = Anvil::start().await;
    let redis = RedisServer::start(free_port());
    let sentinel = Sentinel::start(redis.port());
    // Confirmed on the primary alone, 2 s after the append.
    let (a, _config) = one_ban_appended_through(&sentinel, "", &anvil, 64).await;
    let log = "txgate:bans:log";
    assert_eq!(redis_cli(redis.port(), &["XLEN", log]), "1");
    // Every client connection of the primary dropped.
    redis_cli(redis.port(), &["CLIENT", "KILL", "TYPE", "normal"]);
    let again = eventually(Duration::from_secs(10), || async {
        redis_cli(redis.port(), &["XLEN", log]) == "2"
    })
    .await;
    assert!(again, "not appended again: {}", a.metrics().await);
}

/// The primary replaced by one on another history (here a restart with a
/// fresh data set; in production a failover, or the other side of a
/// healed split brain) that holds an entry of another instance behind
/// this one's position and a later one: the reader reads the whole log
/// again and applies it. It used to read on after its own id, past an
/// entry it never had.
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_on_another_history_has_its_log_read_whole_again() {
    let anvil = Anvil::start().await;
    let port = free_port();
    let mut redis = RedisServer::start(port);
    // Closed while the new primary is filled: the reader first meets it
    // with both entries in.
    let gate = Gate::start(port).await;
    let aeges = free_port();
    let config = TempFile::new(&format!(
        "[redis]\nurl = \"{}\"\n[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n",
        gate.url()
    ));
    let a = Txgate::start(&anvil.url, &["-c", config.arg()]);
    reading(&a).await;
    // Its own ban: its position moves to that entry.
    let attacker = Eoa::new(65);
    post_report(
        aeges,
        report(attacker.address, Address::repeat_byte(0x46), 9, 0xa9, 0),
    )
    .await;
    let appended = eventually(Duration::from_secs(10), || async {
        counted(&a, APPENDED).await == 1.0
    })
    .await;
    assert!(appended, "{}", a.metrics().await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = "txgate:bans:log";
    let own = redis_cli(port, &["XRANGE", log, "-", "+"]);
    let read_to: u64 = own
        .lines()
        .next()
        .and_then(|id| id.split('-').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no entry: {own}"));
    gate.close();
    redis.kill();
    let _redis = RedisServer::start(port);
    // Another instance's entry just behind the position, and a later one.
    let ban = txgate_screen::Invalidation {
        fingerprint: alloy_primitives::B256::repeat_byte(0x5a),
        target: Address::repeat_byte(0x47),
        selector: [1, 2, 3, 4],
        assertion: None,
        tx_hash: None,
        sender: None,
        started: read_to - 1,
    };
    let bans = txgate_fleet::entry::encode(&[ban]);
    let behind = format!("{}-0", read_to - 1);
    redis_cli(
        port,
        &["XADD", log, &behind, "origin", "elsewhere", "bans", &bans],
    );
    redis_cli(
        port,
        &["XADD", log, "*", "origin", "elsewhere", "bans", "[]"],
    );
    gate.open();
    let learned = eventually(Duration::from_secs(10), || async {
        counted(&a, RECEIVED).await == 1.0
    })
    .await;
    assert!(learned, "{}", a.metrics().await);
    let m = a.metrics().await;
    assert!(
        metric(&m, "txgate_fleet_bans_total{event=\"reset\"}") >= 1.0,
        "{m}"
    );
}

/// 1,000 reports to one instance; a fresh instance (no snapshot, no
/// sidecar) refuses every one of them within 2 s of starting, from the
/// log alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_instance_learns_every_live_ban_from_the_log_within_2_s() {
    const REPORTS: u64 = 1_000;
    let anvil = Anvil::start().await;
    let redis = RedisServer::start(free_port());
    let aeges = free_port();
    let a_config = TempFile::new(&format!(
        "[redis]\nurl = \"{}\"\n[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n",
        redis.url()
    ));
    let a = Txgate::start(&anvil.url, &["-c", a_config.arg()]);
    reading(&a).await;
    let target = Address::repeat_byte(0x43);
    let attacker = Eoa::new(61);
    for i in 0..REPORTS {
        let hash = u8::try_from(i % 250).unwrap();
        let mut body = report(attacker.address, target, 1_000 + i, hash, i);
        // Distinct hashes: the low bytes carry the index.
        body = body.replacen(
            &format!("0x{}", hex_byte(hash).repeat(32)),
            &format!("0x{}{:016x}", "ee".repeat(24), i),
            1,
        );
        post_report(aeges, body).await;
    }
    let appended = eventually(Duration::from_secs(10), || async {
        counted(&a, APPENDED).await == REPORTS as f64
    })
    .await;
    assert!(appended, "{}", a.metrics().await);

    let c_config = TempFile::new(&format!("[redis]\nurl = \"{}\"\n", redis.url()));
    let started = Instant::now();
    let c = Txgate::start(&anvil.url, &["-c", c_config.arg()]);
    let learned = eventually(Duration::from_secs(10), || async {
        counted(&c, RECEIVED).await == REPORTS as f64
    })
    .await;
    let took = started.elapsed();
    assert!(learned, "{}", c.metrics().await);
    // Every one refused: the same calldata from another sender, in batches.
    let copycat = Eoa::new(62);
    let refused = refuses_every_copy(&c.url, &copycat, target, 1_000, REPORTS).await;
    assert_eq!(refused, REPORTS);
    assert!(
        took < Duration::from_secs(2),
        "the fresh instance took {took:?} to learn {REPORTS} bans"
    );
    let m = c.metrics().await;
    assert_eq!(
        metric(&m, "txgate_fleet_bans_total{event=\"replayed\"}"),
        REPORTS as f64
    );
}

/// Sends `copycat`'s copies of the `n` reported calls `poke(first + i)` to
/// `target` through `url` in batches of 100, and asserts each is refused
/// by fingerprint; returns how many were.
pub(crate) async fn refuses_every_copy(
    url: &str,
    copycat: &Eoa,
    target: Address,
    first: u64,
    n: u64,
) -> u64 {
    let mut refused = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let calls: Vec<serde_json::Value> = chunk
            .iter()
            .map(|i| {
                let raw = copycat.sign(*i, target, &poke(first + i), 0, 50 * TIP);
                serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "eth_sendRawTransaction",
                    "params": [raw]})
            })
            .collect();
        let (_, answers) = rpc_json(url, &serde_json::Value::Array(calls).to_string()).await;
        for answer in answers.as_array().expect("a batch answer") {
            assert_eq!(
                answer["error"]["data"]["reason"], "denied_fingerprint",
                "{answer}"
            );
            refused += 1;
        }
    }
    refused
}
