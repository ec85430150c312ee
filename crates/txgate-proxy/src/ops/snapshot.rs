//! Ban snapshots on disk: written periodically and at shutdown by one
//! task, the only writer; read at start (format in
//! [`txgate_screen::snapshot`]).
//!
//! A save writes a temporary file beside the target and syncs it, keeps
//! the current snapshot as `<path>.prev`, then renames the new file over
//! the target and syncs the directory. So a crash at any point leaves a
//! good snapshot at `<path>`, and a snapshot that is damaged later (disk,
//! operator) still has the generation before it: a start reads `<path>`,
//! and falls back to `<path>.prev` when it is missing or unusable. A first
//! start (neither file) is not an error. A file refused at start is moved
//! aside to `<file>.unusable` (for the operator to look at), so that no
//! later save rotates it over a good generation or replaces it unseen.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use txgate_fleet::LogPosition;
use txgate_screen::Screen;
use txgate_screen::snapshot::{SnapshotError, decode, encode_with};

use crate::metrics::Metrics;
use crate::ops::health::{Readiness, SnapshotState};

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// The previous generation of the snapshot at `path`.
pub fn previous(path: &Path) -> PathBuf {
    sibling(path, ".prev")
}

/// Why one snapshot file could not be used.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("cannot read it: {0}")]
    Unreadable(std::io::Error),
    #[error("{0}")]
    Unusable(SnapshotError),
}

fn read(
    path: &Path,
    screen: &Screen,
    metrics: &Metrics,
    position: &LogPosition,
) -> Result<Option<usize>, LoadError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LoadError::Unreadable(e)),
    };
    let decoded = decode(&bytes).map_err(LoadError::Unusable)?;
    let now = screen.millis(tokio::time::Instant::now().into_std());
    let restored = screen.import_bans(&decoded.records, now);
    if let Some(mark) = decoded.log_mark {
        // The bans include the fleet's ban log up to here: read on after it.
        position.set(mark.into());
    }
    // Format 1 is the older fingerprint rule (formats 2 and 3 share the
    // current one; 3 adds the ban log's position).
    if decoded.format < 2 {
        // See txgate_screen::snapshot: kept, not dropped; the ones the new
        // fingerprint rule no longer produces lapse with their time.
        metrics.snapshot.restored_old_format.set(restored as i64);
        tracing::warn!(path = %path.display(), format = decoded.format, restored,
            "ban snapshot of an older fingerprint rule: bans of calls with 4 bytes of calldata \
             or fewer (or 2^32*50000 gas and more) can no longer match and lapse with their time");
    }
    Ok(Some(restored))
}

/// Loads the snapshot at `path` (else its previous generation) into
/// `screen`, counts what happened and reports it to `/readyz`; returns the
/// bans restored.
pub fn load(
    path: &Path,
    screen: &Screen,
    metrics: &Metrics,
    readiness: &Readiness,
    position: &LogPosition,
) -> usize {
    let m = &metrics.snapshot;
    let mut failed = false;
    for (file, fallback) in [(path.to_path_buf(), false), (previous(path), true)] {
        match read(&file, screen, metrics, position) {
            Ok(Some(restored)) => {
                tracing::info!(path = %file.display(), restored, "ban snapshot loaded");
                m.restored.set(restored as i64);
                if fallback {
                    m.load_fallback.inc();
                    tracing::warn!(path = %file.display(), "restored the previous ban snapshot");
                }
                readiness.set_snapshot(if fallback {
                    SnapshotState::RestoredPrevious
                } else {
                    SnapshotState::Restored
                });
                return restored;
            }
            Ok(None) => {}
            Err(e) => {
                failed = true;
                match e {
                    LoadError::Unreadable(_) => m.load_unreadable.inc(),
                    LoadError::Unusable(_) => m.load_unusable.inc(),
                }
                let aside = sibling(&file, ".unusable");
                let moved = std::fs::rename(&file, &aside).is_ok();
                tracing::error!(path = %file.display(), error = %e,
                    kept_as = %if moved { aside.display().to_string() } else { "(not moved)".into() },
                    "ban snapshot refused");
            }
        }
    }
    if failed {
        tracing::error!(path = %path.display(), "no usable ban snapshot; starting without bans");
        readiness.set_snapshot(SnapshotState::Failed);
    } else {
        tracing::info!(path = %path.display(), "no ban snapshot yet");
        readiness.set_snapshot(SnapshotState::Empty);
    }
    0
}

/// Writes the current bans to `path`, with how far the fleet's ban log is
/// read; returns the bans written. Only the snapshot task calls this while
/// txgate runs.
pub fn save(path: &Path, screen: &Screen, position: &LogPosition) -> std::io::Result<usize> {
    // The position first: the bans taken after it include every one up to
    // it (the reader applies an entry's bans before it moves past it).
    let mark = position.get().map(Into::into);
    let now = screen.millis(tokio::time::Instant::now().into_std());
    let records = screen.export_bans(now);
    let bytes = encode_with(&records, mark);
    let tmp = sibling(path, ".tmp");
    let prev_tmp = sibling(path, ".prev.tmp");
    let steps = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        // Keep the current generation as `.prev` (replaced atomically), so
        // the target is never missing and a damaged newest file has a
        // fallback.
        if path.exists() {
            let _ = std::fs::remove_file(&prev_tmp);
            if std::fs::hard_link(path, &prev_tmp).is_err() {
                std::fs::copy(path, &prev_tmp)?;
            }
            std::fs::rename(&prev_tmp, previous(path))?;
        }
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The renames are durable once the directory is synced.
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    if let Err(e) = steps() {
        // A full disk: a partial or leftover file would only hold on to
        // the space (once renamed, these names no longer exist).
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&prev_tmp);
        return Err(e);
    }
    Ok(records.len())
}

/// Saves on the blocking pool (encoding a million bans takes a while) and
/// counts the result. Awaited: never two saves at once. `failing` is the
/// number of failed writes in a row before this one; returns it after.
/// A failure is logged the 1st, 2nd, 4th, 8th… time in a row (a full disk
/// with a one-second interval must not flood the log), the recovery once.
async fn save_counted(
    path: &Path,
    screen: &Arc<Screen>,
    metrics: &Arc<Metrics>,
    position: &LogPosition,
    failing: u64,
) -> u64 {
    let (path, screen, m) = (path.to_path_buf(), screen.clone(), metrics.clone());
    let position = position.clone();
    let saved = tokio::task::spawn_blocking(move || {
        let result = save(&path, &screen, &position);
        (path, result)
    })
    .await;
    let Ok((path, result)) = saved else {
        m.snapshot.write_failed.inc();
        tracing::error!("the ban snapshot writer panicked; the previous snapshot is kept");
        return failing + 1;
    };
    match result {
        // Logged before counted: whoever sees the count sees the line.
        Ok(written) => {
            if failing > 0 {
                tracing::info!(path = %path.display(), written, after_failures = failing, "ban snapshot written again");
            } else {
                tracing::debug!(path = %path.display(), written, "ban snapshot written");
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            m.snapshot.last_success.set(now as i64);
            m.snapshot.written.inc();
            0
        }
        Err(e) => {
            let failing = failing + 1;
            if failing.is_power_of_two() {
                tracing::error!(path = %path.display(), error = %e, in_a_row = failing,
                    "cannot write the ban snapshot; the previous one is kept and bans stay in memory (logged at the 1st, 2nd, 4th… failure in a row)");
            }
            m.snapshot.write_failed.inc();
            failing
        }
    }
}

/// The snapshot task, the one writer: a snapshot every `interval`, and a
/// last one when `stop` is cancelled (the daemon stops this task after the
/// invalidation queue is drained, so the last one has everything).
pub async fn run(
    path: PathBuf,
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
    interval: Duration,
    position: LogPosition,
    stop: CancellationToken,
) {
    metrics.snapshot.interval.set(interval.as_secs() as i64);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut failing = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => failing = save_counted(&path, &screen, &metrics, &position, failing).await,
        }
    }
    save_counted(&path, &screen, &metrics, &position, failing).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use txgate_screen::{AssertionKey, Invalidation, ScreenSettings};

    fn screen_with_bans(n: u64) -> Arc<Screen> {
        let screen = Arc::new(Screen::new(
            ScreenSettings::default(),
            tokio::time::Instant::now().into_std(),
        ));
        let started = crate::screening::state::wall_now();
        let batch: Vec<Invalidation> = (0..n)
            .map(|i| Invalidation {
                fingerprint: alloy_primitives::keccak256(i.to_be_bytes()),
                target: alloy_primitives::Address::ZERO,
                selector: [0; 4],
                assertion: Some(AssertionKey {
                    id: alloy_primitives::B256::repeat_byte(1),
                    version: 1,
                }),
                tx_hash: None,
                sender: None,
                started,
            })
            .collect();
        screen.apply(&batch, 0, started);
        screen
    }

    fn fresh() -> (Arc<Screen>, Metrics, Readiness) {
        let metrics = Metrics::new();
        let readiness = Readiness::new(Arc::new(Metrics::new()));
        (screen_with_bans(0), metrics, readiness)
    }

    /// A restart reads the fleet's ban log on from where the snapshot's
    /// bans end; a snapshot written before any read leaves it unread.
    #[test]
    fn the_log_position_is_saved_and_restored_with_the_bans() {
        let dir = std::env::temp_dir().join(format!("txgate-snap-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("bans.bin");
        let read = LogPosition::default();
        read.set("1764000000000-4".parse().unwrap());
        assert_eq!(save(&path, &screen_with_bans(10), &read).unwrap_or(0), 10);
        let (target, metrics, readiness) = fresh();
        let restored = LogPosition::default();
        assert_eq!(load(&path, &target, &metrics, &readiness, &restored), 10);
        assert_eq!(restored.get(), read.get());
        save(&path, &screen_with_bans(1), &LogPosition::default()).unwrap();
        let none = LogPosition::default();
        load(&path, &fresh().0, &metrics, &readiness, &none);
        assert_eq!(none.get(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Defect: a corrupt newest snapshot lost every learned ban; now the
    /// previous generation is restored, counted and reported.
    #[test]
    fn a_damaged_snapshot_falls_back_to_the_previous_one() {
        let dir = std::env::temp_dir().join(format!("txgate-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("bans.bin");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(previous(&path));
        let screen = screen_with_bans(100);
        assert_eq!(
            save(&path, &screen, &LogPosition::default()).unwrap_or(0),
            100
        );
        assert!(!previous(&path).exists(), "a first save has no previous");
        let more = screen_with_bans(150);
        assert_eq!(
            save(&path, &more, &LogPosition::default()).unwrap_or(0),
            150
        );
        // The newest is damaged; the generation before it is whole.
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap_or_default();
        let (target, metrics, readiness) = fresh();
        assert_eq!(
            load(
                &path,
                &target,
                &metrics,
                &readiness,
                &LogPosition::default()
            ),
            100
        );
        assert_eq!(metrics.snapshot.load_unusable.get(), 1);
        assert_eq!(metrics.snapshot.load_fallback.get(), 1);
        assert_eq!(metrics.snapshot.restored.get(), 100);
        assert_eq!(readiness.snapshot(), SnapshotState::RestoredPrevious);
        // The damaged file is set aside: the next save does not rotate it
        // over the good previous generation.
        assert!(!path.exists());
        assert!(dir.join("bans.bin.unusable").exists());
        assert_eq!(
            save(&path, &screen_with_bans(120), &LogPosition::default()).unwrap_or(0),
            120
        );
        let (target, metrics, readiness) = fresh();
        assert_eq!(
            load(
                &previous(&path),
                &target,
                &metrics,
                &readiness,
                &LogPosition::default()
            ),
            100
        );
        // Both damaged: nothing restored, said so, both set aside, and the
        // saves that follow start afresh.
        std::fs::write(&path, b"junk").unwrap_or_default();
        std::fs::write(previous(&path), b"junk").unwrap_or_default();
        let (target, metrics, readiness) = fresh();
        assert_eq!(
            load(
                &path,
                &target,
                &metrics,
                &readiness,
                &LogPosition::default()
            ),
            0
        );
        assert_eq!(metrics.snapshot.load_unusable.get(), 2);
        assert_eq!(readiness.snapshot(), SnapshotState::Failed);
        assert!(!path.exists() && !previous(&path).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Defect: the periodic save could still be running when the final one
    /// started on the same temporary file. One task now does both; the
    /// file it leaves is whole and holds the last state.
    #[tokio::test]
    async fn the_snapshot_task_is_the_only_writer() {
        let dir = std::env::temp_dir().join(format!("txgate-snap-task-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("bans.bin");
        let screen = screen_with_bans(50_000);
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            path.clone(),
            screen.clone(),
            metrics.clone(),
            Duration::from_millis(1),
            LogPosition::default(),
            stop.clone(),
        ));
        // Stop while periodic saves of 50k bans run back to back.
        tokio::time::sleep(Duration::from_millis(30)).await;
        stop.cancel();
        task.await
            .unwrap_or_else(|e| panic!("snapshot task failed: {e}"));
        assert_eq!(metrics.snapshot.write_failed.get(), 0);
        assert!(metrics.snapshot.written.get() >= 1);
        assert!(!dir.join("bans.bin.tmp").exists());
        let (target, m, readiness) = fresh();
        assert_eq!(
            load(&path, &target, &m, &readiness, &LogPosition::default()),
            50_000
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
