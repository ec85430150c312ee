//! The ban snapshot on a filesystem that fills up, then turns read-only:
//! txgate keeps serving and refusing every ban it holds, keeps the last
//! good snapshot whole (no partial file left behind to hold the space),
//! counts each failed write, logs them at powers of two, writes again once
//! the disk is back, and a restart from that snapshot refuses every ban.
//!
//! Needs a size-limited tmpfs: run as root (as CI does). Elsewhere the
//! test says it is skipped; with `CI` set it fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hyper::StatusCode;

use crate::fault_servers::{import_bans, tx};
use crate::support::{RecordingUpstream, Txgate, eventually, metric, send_raw};

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(format!(
            "txgate-tmpfs-{}-{}",
            std::process::id(),
            crate::support::free_port()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs (root needed); CI must run this test"
            );
            eprintln!("skipped: cannot mount a tmpfs here (not root)");
            return None;
        }
        Some(Tmpfs { dir })
    }

    /// Remounts (retried: a remount read-only fails while a file is open
    /// for writing, as txgate's snapshot is for a moment each second).
    fn remount(&self, mode: &str) {
        for _ in 0..50 {
            let ok = Command::new("mount")
                .args(["-o", &format!("remount,{mode}")])
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("remount {mode}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Fills the filesystem of `dir` until a write fails with ENOSPC.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).expect("filler");
    let block = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = file.write_all(&block) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            break;
        }
    }
    // Small writes to the last byte.
    while file.write_all(&[0u8; 512]).is_ok() {}
    filler
}

async fn all_refused(txgate: &Txgate, raws: &[String]) -> bool {
    for raw in raws {
        let (status, v) = send_raw(&txgate.url, raw).await;
        if status != StatusCode::OK || v["error"]["code"] != -32003 {
            return false;
        }
    }
    true
}

async fn counter(txgate: &Txgate, series: &str) -> f64 {
    metric(&txgate.metrics().await, series)
}

const OK: &str = "txgate_ban_snapshots_total{result=\"ok\"}";
const FAILED: &str = "txgate_ban_snapshots_total{result=\"error\"}";

async fn wait_for(txgate: &Txgate, series: &str, at_least: f64) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            counter(txgate, series).await >= at_least
        })
        .await,
        "{series} did not reach {at_least}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_then_read_only_disk_loses_no_ban() {
    let Some(fs) = Tmpfs::mount("1m") else {
        return;
    };
    let path = fs.dir.join("bans.bin");
    let path_arg = path.to_str().unwrap().to_string();
    let config = crate::support::TempFile::new("[screen]\nsnapshot_interval_secs = 1\n");
    let upstream = RecordingUpstream::start().await;
    // Each check sends the banned transactions one after another: paced,
    // the checks would wait seconds for refusals they only count.
    let args = [
        "--ban-snapshot",
        &path_arg,
        "--config",
        config.arg(),
        "--pacing",
        "false",
    ];
    let mut txgate = Txgate::start(&upstream.url, &args);
    let batch = |from: u64| (from..from + 20).map(tx).collect::<Vec<_>>();
    let (first, second, third) = (batch(300), batch(400), batch(500));

    import_bans(&txgate.admin_url, &first).await;
    let ok = counter(&txgate, OK).await;
    wait_for(&txgate, OK, ok + 1.0).await;

    // Full disk: writes fail, the last good snapshot stays as it was (read
    // once a write has failed: every save rewrites it, remaining TTLs
    // change).
    let filler = fill(&fs.dir);
    let failed = counter(&txgate, FAILED).await;
    wait_for(&txgate, FAILED, failed + 1.0).await;
    let good = std::fs::read(&path).unwrap();
    import_bans(&txgate.admin_url, &second).await;
    wait_for(&txgate, FAILED, failed + 6.0).await;
    assert!(all_refused(&txgate, &first).await && all_refused(&txgate, &second).await);
    assert!(
        send_raw(&txgate.url, &tx(999))
            .await
            .1
            .get("result")
            .is_some()
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        good,
        "the good snapshot changed"
    );
    assert!(
        !fs.dir.join("bans.bin.tmp").exists(),
        "a partial snapshot is left holding the space"
    );

    // Space again: the next write succeeds and says so once.
    std::fs::remove_file(&filler).unwrap();
    let ok = counter(&txgate, OK).await;
    wait_for(&txgate, OK, ok + 1.0).await;

    // Read-only: the same.
    import_bans(&txgate.admin_url, &third).await;
    let ok = counter(&txgate, OK).await;
    wait_for(&txgate, OK, ok + 1.0).await;
    fs.remount("ro");
    let failed = counter(&txgate, FAILED).await;
    wait_for(&txgate, FAILED, failed + 2.0).await;
    assert!(all_refused(&txgate, &third).await);
    fs.remount("rw");
    let ok = counter(&txgate, OK).await;
    wait_for(&txgate, OK, ok + 1.0).await;

    // Logged without flooding: failures at powers of two in a row (1, 2
    // for each outage of 2-3 failures…), one line per recovery. The second
    // recovery's line is written after the write it reports was counted:
    // waited for, as the lines reach the test through a pipe.
    let recovered = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains("ban snapshot written again"))
            .count()
    };
    let logs = txgate
        .logs_until(Duration::from_secs(10), |lines| recovered(lines) >= 2)
        .await;
    let failures = logs
        .iter()
        .filter(|l| l.contains("cannot write the ban snapshot"))
        .count();
    let total = counter(&txgate, FAILED).await as usize;
    assert!(failures >= 2, "failures not logged");
    assert!(failures < total, "{failures} lines for {total} failures");
    assert_eq!(recovered(&logs), 2, "{logs:#?}");

    // Restart from the snapshot: every ban is refused at the first try.
    txgate.proc.signal(libc::SIGTERM);
    let status = txgate
        .proc
        .wait_timeout(Duration::from_secs(10))
        .expect("exit");
    assert!(status.success(), "{status:?}");
    let again = Txgate::start(&upstream.url, &args);
    for raws in [&first, &second, &third] {
        assert!(all_refused(&again, raws).await, "a ban was lost");
    }
}
