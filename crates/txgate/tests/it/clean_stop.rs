//! A clean stop is quiet: SIGTERM with every background task running (the
//! sidecar stream, the fleet's Redis links, the Aeges listener, snapshots,
//! the invalidation worker) exits 0 and logs no warning or error, so an
//! operator's alert on WARN lines does not fire on every deploy.

use std::time::Duration;

use crate::fleet_redis::RedisServer;
use crate::support::{
    Anvil, Sidecar, TempFile, Txgate, eventually, example_sidecar_config, free_port, get,
};

async fn ready(txgate: &Txgate) -> bool {
    let (_, _, body) = get(&format!("{}/readyz", txgate.admin_url)).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    v["sidecar"] == "up"
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_every_background_task_running_logs_no_warning() {
    let anvil = Anvil::start().await;
    let sidecar_config = example_sidecar_config();
    let sidecar = Sidecar::start(&anvil.url, &sidecar_config, 0).await;
    let redis = RedisServer::start(free_port());
    let dir = tempfile_dir();
    let snapshot = dir.join("bans.bin");
    let config = TempFile::new(&format!(
        "[redis]\nurl = \"{}\"\n[aeges]\nlisten = \"127.0.0.1:{}\"\n\
         [screen]\nsnapshot_path = \"{}\"\nsnapshot_interval_secs = 1\n",
        redis.url(),
        free_port(),
        snapshot.display()
    ));
    let mut txgate = Txgate::start(
        &anvil.url,
        &["--config", config.arg(), "--sidecar", &sidecar.grpc_url],
    );
    // Every task is up: the sidecar stream subscribed, the ban channel
    // joined, a snapshot written.
    assert!(
        eventually(Duration::from_secs(15), || ready(&txgate)).await,
        "never subscribed to the sidecar"
    );
    let started = txgate
        .logs_until(Duration::from_secs(15), |lines| {
            lines
                .iter()
                .any(|l| l.contains("reading the fleet's ban log"))
        })
        .await;
    assert!(
        started
            .iter()
            .any(|l| l.contains("reading the fleet's ban log")),
        "never joined the fleet's ban channel: {started:?}"
    );
    assert!(
        eventually(Duration::from_secs(15), || async { snapshot.exists() }).await,
        "no snapshot written"
    );

    txgate.proc.signal(libc::SIGTERM);
    let status = txgate.proc.wait_timeout(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "exit: {status:?}");
    // "drained; exiting" is the last line, after every task has stopped.
    let mut lines = started;
    lines.extend(
        txgate
            .logs_until(Duration::from_secs(5), |lines| {
                lines.iter().any(|l| l.contains("drained; exiting"))
            })
            .await,
    );
    assert!(
        lines.iter().any(|l| l.contains("drained; exiting")),
        "{lines:#?}"
    );
    let loud: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
        .collect();
    assert!(loud.is_empty(), "a clean stop logged: {loud:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("txgate-clean-stop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
