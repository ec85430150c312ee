//! The shipped deployment files, run as shipped: deploy/haproxy/haproxy.cfg
//! (addresses from the environment) in front of three real instances.
//! The Kubernetes manifests are checked by scripts/check-deploy.sh.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{Anvil, Proc, TempFile, Txgate, free_port, rpc_from};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

fn shipped() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/haproxy/haproxy.cfg")
}

/// The environment the shipped config reads.
fn env(
    bind: SocketAddr,
    stats: &str,
    instances: &[(SocketAddr, SocketAddr)],
) -> Vec<(String, String)> {
    let mut vars = vec![
        ("TXGATE_LB_BIND".to_string(), bind.to_string()),
        ("TXGATE_LB_STATS".to_string(), stats.to_string()),
    ];
    for (n, (rpc, admin)) in instances.iter().enumerate() {
        vars.push((format!("TXGATE_{}", n + 1), rpc.to_string()));
        vars.push((format!("TXGATE_{}_ADMIN", n + 1), admin.port().to_string()));
    }
    vars
}

fn addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

#[test]
fn the_shipped_haproxy_config_is_valid_and_refuses_a_missing_address() {
    let stats = TempFile::new("");
    let instances = [(addr(), addr()), (addr(), addr()), (addr(), addr())];
    let vars = env(addr(), stats.arg(), &instances);
    let check = |without: &str| {
        Command::new("haproxy")
            .args(["-c", "-f"])
            .arg(shipped())
            .envs(vars.iter().cloned())
            .env_remove(without)
            .output()
            .expect("haproxy is installed (scripts/install-test-tools.sh)")
    };
    let ok = check("TXGATE_NOTHING");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // An instance's address missing from the environment is an error,
    // not a server with no address.
    assert!(!check("TXGATE_3").status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_haproxy_config_serves_a_fleet_and_drains_an_instance_without_a_failed_call() {
    let anvil = Anvil::start().await;
    // As the config's header asks: PROXY v2 from the balancer, a drain
    // delay above its detection time (2 checks at 1 s).
    let config = TempFile::new(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"v2\"\n\
         [shutdown]\ndrain_delay_ms = 3000\ngrace_period_ms = 5000\n\
         [upstream]\nhealth_interval_ms = 200\n",
    );
    let ports: Vec<(SocketAddr, SocketAddr)> = (0..3).map(|_| (addr(), addr())).collect();
    let fleet: Vec<Txgate> = ports
        .iter()
        .map(|(rpc, admin)| {
            Txgate::spawn(&[
                "--listen",
                &rpc.to_string(),
                "--admin-listen",
                &admin.to_string(),
                "--upstream",
                &anvil.url,
                "--log-format",
                "json",
                "-c",
                config.arg(),
            ])
        })
        .collect();
    for (_, admin) in &ports {
        let ready = crate::support::eventually(Duration::from_secs(10), || async {
            matches!(crate::support::try_get(&format!("http://{admin}/readyz")).await,
                Ok((status, _, _)) if status == 200)
        })
        .await;
        assert!(ready, "instance at {admin} never ready");
    }
    let bind = addr();
    let stats_dir = tempdir();
    let stats = stats_dir.join("haproxy.sock");
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(shipped())
        .envs(env(bind, stats.to_str().unwrap(), &ports))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn haproxy");
    let _haproxy = Proc::new(child);
    let url = format!("http://{bind}");
    let up = crate::support::eventually(Duration::from_secs(10), || async {
        rpc_from(&url, "127.0.0.2", &[], CHAIN_ID)
            .await
            .is_ok_and(|(status, _, _)| status == 200)
    })
    .await;
    assert!(up, "no answer through the shipped config");

    // Calls one after another while instance 1 is stopped: the shipped
    // timings take it out before it stops accepting. Counted by phase, not
    // over a fixed time (a loaded machine makes fewer calls in it): 50
    // before SIGTERM, every call until the instance has exited (its drain
    // lasts the 3 s drain delay at least), and 50 after.
    let mut fleet = fleet;
    let first = fleet.remove(0);
    let mut failed = Vec::new();
    let mut call = async || {
        let answered = match rpc_from(&url, "127.0.0.2", &[], CHAIN_ID).await {
            Ok((status, _, _)) if status == 200 => true,
            other => {
                failed.push(format!("{other:?}"));
                false
            }
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        answered
    };
    let mut before = 0;
    for _ in 0..50 {
        before += usize::from(call().await);
    }
    first.proc.signal(libc::SIGTERM);
    // Waited for on a thread of its own, so that the calls go on meanwhile.
    let exit = tokio::task::spawn_blocking(move || {
        let mut first = first;
        first.proc.wait_timeout(Duration::from_secs(15))
    });
    let mut draining = 0;
    while !exit.is_finished() {
        draining += usize::from(call().await);
    }
    let mut after = 0;
    for _ in 0..50 {
        after += usize::from(call().await);
    }
    let ok = before + draining + after;
    assert!(
        failed.is_empty(),
        "{} failed of {}: {failed:?}",
        failed.len(),
        ok + failed.len()
    );
    assert!(draining > 0, "no call answered while the instance drained");
    assert!(ok > 100, "{ok}");
    let exited = exit.await.unwrap();
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    let _ = std::fs::remove_dir_all(stats_dir);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "txgate-deploy-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
