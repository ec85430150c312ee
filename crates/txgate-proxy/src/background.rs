//! [`Background`]: the one owner of txgate's background tasks.
//!
//! Each task is started with a name, a stop deadline and its own
//! cancellation token. [`Background::stop`] asks the tasks to stop one by
//! one, in the order they were started, and waits for each up to its
//! deadline; a task still running then is aborted, logged by name and
//! counted. Starting them in dependency order therefore stops them in
//! dependency order: the sidecar stream stops at a message boundary, then
//! the batch worker applies what was queued, then the snapshot task writes
//! the last snapshot, with everything learned until then.
//!
//! A task marked [`Role::Essential`] (the admin listener) that ends before
//! it was asked to, or panics, reports a [`Fatal`] failure: the proxy
//! drains and exits non-zero. Worker threads report the same way through
//! [`FatalGuard`]. Losing an optional task (the sidecar link, the probe,
//! snapshots) is never fatal: txgate fails open.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// A part txgate cannot serve without has failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part} failed: {error}")]
pub struct Fatal {
    /// The part (`worker-0`, `admin`...).
    pub part: String,
    /// What happened.
    pub error: String,
}

/// Where fatal failures are reported.
#[derive(Debug, Clone)]
pub struct FatalSender(UnboundedSender<Fatal>);

/// Where fatal failures arrive.
#[derive(Debug)]
pub struct FatalReceiver(UnboundedReceiver<Fatal>);

/// A channel for fatal failures.
pub fn fatal_channel() -> (FatalSender, FatalReceiver) {
    let (tx, rx) = unbounded_channel();
    (FatalSender(tx), FatalReceiver(rx))
}

impl FatalSender {
    /// Reports `part` as failed.
    pub fn report(&self, part: impl Into<String>, error: impl Into<String>) {
        let fatal = Fatal {
            part: part.into(),
            error: error.into(),
        };
        tracing::error!(part = %fatal.part, error = %fatal.error, "a part txgate cannot serve without failed");
        let _ = self.0.send(fatal);
    }
}

impl FatalReceiver {
    /// A failure already reported, if any.
    pub fn try_recv(&mut self) -> Option<Fatal> {
        self.0.try_recv().ok()
    }

    /// The next failure (pending forever once every sender is gone).
    pub async fn recv(&mut self) -> Fatal {
        match self.0.recv().await {
            Some(fatal) => fatal,
            None => std::future::pending().await,
        }
    }
}

/// Reports a fatal failure when dropped before `stop` is cancelled: held
/// by an essential task or thread for its whole life, it catches a normal
/// end, an error return and a panic (drop runs while unwinding) alike.
#[derive(Debug)]
pub struct FatalGuard {
    part: String,
    stop: CancellationToken,
    fatal: FatalSender,
    error: Option<String>,
    armed: bool,
}

impl FatalGuard {
    /// A guard for `part`, expected to run until `stop` is cancelled.
    pub fn new(part: impl Into<String>, stop: CancellationToken, fatal: FatalSender) -> Self {
        FatalGuard {
            part: part.into(),
            stop,
            fatal,
            error: None,
            armed: true,
        }
    }

    /// Records why the part is about to end, for the report.
    pub fn failed(&mut self, error: impl Into<String>) {
        self.error = Some(error.into());
    }

    /// The failure was reported already (as it happened, before the part
    /// drained): the guard reports nothing more.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for FatalGuard {
    fn drop(&mut self) {
        if self.stop.is_cancelled() || !self.armed {
            return;
        }
        let error = match (self.error.take(), std::thread::panicking()) {
            (Some(error), _) => error,
            (None, true) => "panicked".to_string(),
            (None, false) => "stopped unexpectedly".to_string(),
        };
        self.fatal.report(self.part.clone(), error);
    }
}

/// Whether a task's early end is fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// txgate cannot serve without it.
    Essential,
    /// txgate fails open without it (logged).
    Optional,
}

#[derive(Debug)]
struct Task {
    name: &'static str,
    stop: CancellationToken,
    deadline: Duration,
    handle: JoinHandle<()>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Background {
    tasks: Vec<Task>,
    /// Cancelled when [`Background::stop`] begins: a task that ends after
    /// that ended as part of the stop, even before its own token was
    /// cancelled (the invalidation worker ends once the tasks stopped
    /// before it have dropped its queue's senders).
    stopping: CancellationToken,
    fatal: FatalSender,
    metrics: Arc<Metrics>,
}

impl Background {
    /// No task yet; essential tasks report to `fatal`.
    pub fn new(fatal: FatalSender, metrics: Arc<Metrics>) -> Background {
        Background {
            tasks: Vec::new(),
            stopping: CancellationToken::new(),
            fatal,
            metrics,
        }
    }

    /// Starts `name`: `run` gets the token that is cancelled when the task
    /// is asked to stop, and must return soon after; past `deadline` it is
    /// aborted. Must run inside a tokio runtime.
    pub fn spawn<F>(
        &mut self,
        name: &'static str,
        role: Role,
        deadline: Duration,
        run: impl FnOnce(CancellationToken) -> F,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let future = run(stop.clone());
        let watch = match role {
            Role::Essential => Some(FatalGuard::new(name, stop.clone(), self.fatal.clone())),
            Role::Optional => None,
        };
        let (early, stopping) = (stop.clone(), self.stopping.clone());
        let handle = tokio::spawn(async move {
            let _watch = watch;
            future.await;
            if !early.is_cancelled() && !stopping.is_cancelled() && role == Role::Optional {
                tracing::warn!(task = name, "background task ended on its own");
            }
        });
        self.tasks.push(Task {
            name,
            stop,
            deadline,
            handle,
        });
    }

    /// Asks every task to stop, in the order they were started, waiting
    /// for each up to its deadline. Returns the names of the tasks that had
    /// to be aborted.
    pub async fn stop(self) -> Vec<&'static str> {
        self.stopping.cancel();
        let mut late = Vec::new();
        for task in self.tasks {
            task.stop.cancel();
            let mut handle = task.handle;
            match tokio::time::timeout(task.deadline, &mut handle).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_panic() => {
                    tracing::error!(task = task.name, "background task panicked");
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    handle.abort();
                    self.metrics.process.tasks_stopped_late.inc();
                    tracing::warn!(
                        task = task.name,
                        deadline_ms = task.deadline.as_millis() as u64,
                        "background task did not stop in time; aborted"
                    );
                    late.push(task.name);
                }
            }
        }
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn stops_in_start_order_and_aborts_the_late() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (fatal, _rx) = fatal_channel();
        let metrics = Arc::new(Metrics::new());
        let first_done = Arc::new(AtomicBool::new(false));
        let second_saw = Arc::new(Mutex::new(None));
        let mut background = Background::new(fatal, metrics.clone());
        let done = first_done.clone();
        background.spawn("first", Role::Optional, Duration::from_secs(5), |stop| {
            async move {
                stop.cancelled().await;
                // Takes a while to finish after being asked.
                tokio::time::sleep(Duration::from_millis(30)).await;
                done.store(true, Ordering::SeqCst);
            }
        });
        let (done, saw) = (first_done.clone(), second_saw.clone());
        background.spawn("second", Role::Optional, Duration::from_secs(5), |stop| {
            async move {
                stop.cancelled().await;
                // Asked only once the first has finished.
                *saw.lock().unwrap_or_else(|p| p.into_inner()) = Some(done.load(Ordering::SeqCst));
            }
        });
        background.spawn("stuck", Role::Optional, Duration::from_millis(50), |_| {
            std::future::pending::<()>()
        });
        assert_eq!(background.stop().await, vec!["stuck"]);
        assert_eq!(
            *second_saw.lock().unwrap_or_else(|p| p.into_inner()),
            Some(true),
            "the second task was asked to stop before the first had finished"
        );
        assert_eq!(metrics.process.tasks_stopped_late.get(), 1);
    }

    #[tokio::test]
    async fn an_essential_task_that_ends_early_is_fatal() {
        let (fatal, mut rx) = fatal_channel();
        let mut background = Background::new(fatal, Arc::new(Metrics::new()));
        background.spawn(
            "admin",
            Role::Essential,
            Duration::from_secs(1),
            |_| async {},
        );
        let failure = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no fatal report"));
        assert_eq!(failure.part, "admin");
        // Asked to stop: not fatal.
        background.spawn(
            "quiet",
            Role::Essential,
            Duration::from_secs(1),
            |stop| async move {
                stop.cancelled().await;
            },
        );
        background.stop().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), rx.recv())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_worker_thread_that_dies_is_fatal_unless_asked_to_stop() {
        let (fatal, mut rx) = fatal_channel();
        let stop = CancellationToken::new();
        let guard = FatalGuard::new("worker-0", stop.clone(), fatal.clone());
        let died = std::thread::spawn(move || {
            let _guard = guard;
            panic!("worker bug");
        });
        assert!(died.join().is_err());
        let failure = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no fatal report"));
        assert_eq!(
            (failure.part.as_str(), failure.error.as_str()),
            ("worker-0", "panicked")
        );
        // A worker that returns an error says which.
        let mut guard = FatalGuard::new("worker-1", stop.clone(), fatal.clone());
        guard.failed("cannot register the listener");
        drop(guard);
        assert_eq!(rx.recv().await.error, "cannot register the listener");
        // Asked to stop first: silent.
        stop.cancel();
        drop(FatalGuard::new("worker-2", stop, fatal));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), rx.recv())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_panicking_essential_task_is_fatal() {
        let (fatal, mut rx) = fatal_channel();
        let mut background = Background::new(fatal, Arc::new(Metrics::new()));
        background.spawn(
            "admin",
            Role::Essential,
            Duration::from_secs(1),
            |_| async {
                panic!("boom");
            },
        );
        let failure = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no fatal report"));
        assert_eq!(failure.error, "panicked");
    }
}
