//! Ban snapshots on disk: written periodically and at shutdown, read at
//! start (format in [`txgate_screen::snapshot`]).
//!
//! Written to a temporary file beside the target, synced, then renamed over
//! it, so a crash mid-write leaves the previous snapshot. A missing file is
//! a first start; a corrupt or truncated one is reported and skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use txgate_screen::Screen;
use txgate_screen::snapshot::{decode, encode};

use crate::metrics::Metrics;

/// Loads `path` into `screen`; returns the bans restored.
pub fn load(path: &Path, screen: &Screen) -> usize {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(path = %path.display(), "no ban snapshot yet");
            return 0;
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read the ban snapshot; starting without it");
            return 0;
        }
    };
    match decode(&bytes) {
        Ok(records) => {
            let now = screen.millis(tokio::time::Instant::now().into_std());
            let restored = screen.import_bans(&records, now);
            tracing::info!(path = %path.display(), restored, "ban snapshot loaded");
            restored
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "ban snapshot unusable; starting without it");
            0
        }
    }
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes the current bans to `path` atomically; returns the bans written.
pub fn save(path: &Path, screen: &Screen) -> std::io::Result<usize> {
    let now = screen.millis(tokio::time::Instant::now().into_std());
    let records = screen.export_bans(now);
    let bytes = encode(&records);
    let tmp = temporary(path);
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(records.len())
}

/// Saves and counts the result.
pub fn save_counted(path: &Path, screen: &Screen, metrics: &Metrics) {
    match save(path, screen) {
        Ok(written) => {
            metrics.sidecar.snapshots[0].inc();
            tracing::debug!(path = %path.display(), written, "ban snapshot written");
        }
        Err(e) => {
            metrics.sidecar.snapshots[1].inc();
            tracing::error!(path = %path.display(), error = %e, "cannot write the ban snapshot");
        }
    }
}

/// Writes a snapshot every `interval`, forever.
pub async fn periodic(
    path: PathBuf,
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (path, screen, metrics) = (path.clone(), screen.clone(), metrics.clone());
        // Encoding a million bans takes a while: off the async threads.
        let _ = tokio::task::spawn_blocking(move || save_counted(&path, &screen, &metrics)).await;
    }
}
