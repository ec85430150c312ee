//! The fleet over TLS to Redis: Debian's redis-server serving TLS only
//! (its certificate from a test CA, which txgate trusts through
//! `redis.tls_ca_file`), reached by a `rediss://` URL, and through a
//! redis-sentinel that also speaks TLS only. Two instances share their
//! limits (the sync's link is up) and a reported ban.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy_primitives::Address;

use crate::credible::{TIP, poke};
use crate::fleet_redis::all_links;
use crate::sidecar_loop::probe_until_denied;
use crate::support::{Anvil, Eoa, Proc, TempFile, Txgate, free_port, fund};
use crate::tls_pki::{Ca, TempDir};

/// A TLS-only redis-server or redis-sentinel, with its files.
struct TlsRedis {
    _proc: Proc,
    port: u16,
}

/// The TLS settings every server here uses: its certificate and key, the
/// CA, no client certificates.
fn tls_args(dir: &TempDir, port: u16) -> Vec<String> {
    [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &dir.file("redis.pem"),
        "--tls-key-file",
        &dir.file("redis.key"),
        "--tls-ca-cert-file",
        &dir.file("ca.pem"),
        "--tls-auth-clients",
        "no",
        "--tls-replication",
        "yes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl TlsRedis {
    /// `program` (redis-server, or redis-sentinel with `config`), TLS only
    /// on a free port; waits until it answers a PING over TLS.
    fn start(dir: &TempDir, program: &str, config: Option<String>) -> TlsRedis {
        let port = free_port();
        let mut command = Command::new(program);
        command.current_dir(&dir.path);
        if let Some(config) = config {
            let path = dir.file(&format!("sentinel-{port}.conf"));
            std::fs::write(&path, config).unwrap();
            command.arg(path);
        } else {
            command.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
            command.arg("--dir").arg(&dir.path);
        }
        command.args(tls_args(dir, port));
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server / redis-sentinel (scripts/install-test-tools.sh)");
        let server = TlsRedis {
            _proc: Proc::new(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.pong(dir) {
            assert!(
                Instant::now() < deadline,
                "{program} did not answer over TLS"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn pong(&self, dir: &TempDir) -> bool {
        Command::new("redis-cli")
            .args(["--tls", "--cacert", &dir.file("ca.pem"), "-h", "127.0.0.1"])
            .args(["-p", &self.port.to_string(), "PING"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
    }
}

/// Two instances on `redis` (a `[redis]` body): both link up, and a ban
/// reported to one is refused by the other.
async fn two_instances_share_a_ban(anvil: &Anvil, redis: &str) {
    let aeges = free_port();
    let reported = TempFile::new(&format!(
        "{redis}[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"t0k\"\n"
    ));
    let plain = TempFile::new(redis);
    let a = Txgate::start(&anvil.url, &["-c", reported.arg()]);
    let b = Txgate::start(&anvil.url, &["-c", plain.arg()]);
    let admins: Vec<std::net::SocketAddr> = [&a, &b]
        .iter()
        .map(|t| t.admin_url.trim_start_matches("http://").parse().unwrap())
        .collect();
    assert!(
        crate::support::eventually(Duration::from_secs(15), || all_links(&admins, "up")).await,
        "the instances never linked to Redis over TLS: {:?}",
        b.drain_logs()
    );
    let (attacker, copycat) = (Eoa::new(81), Eoa::new(82));
    fund(&anvil.url, &[copycat.address]).await;
    let target = Address::repeat_byte(0x45);
    let report = crate::support::failure_report(
        &format!("0x{}", "cd".repeat(32)),
        attacker.address,
        target,
        &poke(95),
        0,
    );
    let sent = Instant::now();
    crate::support::post_report(
        &format!("http://127.0.0.1:{aeges}/report?token=t0k"),
        report,
    )
    .await;
    let copy = copycat.sign(0, target, &poke(95), 0, 50 * TIP);
    let landed = probe_until_denied(
        std::slice::from_ref(&b.url),
        &copy,
        sent,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        landed[0].first_refused_answered < Duration::from_secs(2),
        "{:?}",
        landed[0]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_shares_limits_and_bans_over_tls_directly_and_through_sentinel() {
    let anvil = Anvil::start().await;
    let dir = TempDir::new("redis-tls");
    let ca = Ca::new();
    std::fs::write(dir.file("ca.pem"), &ca.pem).unwrap();
    ca.leaf(&["127.0.0.1", "localhost"], 30)
        .write(&dir, "redis");
    let primary = TlsRedis::start(&dir, "redis-server", None);
    let ca_file = dir.file("ca.pem");

    // A rediss:// URL.
    two_instances_share_a_ban(
        &anvil,
        &format!(
            "[redis]\nurl = \"rediss://127.0.0.1:{}\"\ntls_ca_file = \"{ca_file}\"\nkey_prefix = \"direct\"\ntimeout_ms = 1000\n",
            primary.port
        ),
    )
    .await;

    // A sentinel over TLS naming the same primary.
    let sentinel_config = format!(
        "bind 127.0.0.1\ndaemonize no\n\
         sentinel monitor txgate 127.0.0.1 {} 1\n\
         sentinel down-after-milliseconds txgate 1000\n",
        primary.port
    );
    let sentinel = TlsRedis::start(&dir, "redis-sentinel", Some(sentinel_config));
    two_instances_share_a_ban(
        &anvil,
        &format!(
            "[redis]\nsentinels = [\"127.0.0.1:{}\"]\nmaster_name = \"txgate\"\ntls = true\n\
             tls_ca_file = \"{ca_file}\"\nkey_prefix = \"sentinel\"\ntimeout_ms = 1000\n",
            sentinel.port
        ),
    )
    .await;
}
