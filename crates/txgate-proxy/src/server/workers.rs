//! The worker threads: one per client listener, each with its own
//! single-threaded runtime and upstream pool, like nginx's workers, so a
//! request never hops threads between the client socket and the upstream
//! socket. Shared state (the admission counter, metrics, screening) is
//! atomics and sharded locks.
//!
//! A worker that ends before it is asked to, or panics, is reported as a
//! fatal failure ([`FatalGuard`]): the proxy cannot serve its share of the
//! port without it.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::background::{Fatal, FatalGuard, FatalSender};
use crate::metrics::Metrics;
use crate::request::Body;
use crate::server::identity::Edge;
use crate::server::{self, Drained, ServerSettings};

/// What a worker serves: any tower service, built once on the worker's own
/// runtime (so its upstream pool and its sidecar connection are its own).
pub(crate) trait MakeService: Clone + Send + 'static {
    /// The service every connection of the worker clones.
    type Service: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static;

    /// Builds the worker's service, on its runtime.
    fn make(&self) -> io::Result<Self::Service>;

    /// Runs on the worker's runtime once its connections have drained.
    fn drained(&self) -> impl Future<Output = ()>;
}

/// What every worker shares, whatever it serves.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) settings: ServerSettings,
    /// Who the clients are (trusted proxies, PROXY protocol).
    pub(crate) edge: Arc<Edge>,
    /// Cancelled to drain the accept loops.
    pub(crate) stop: CancellationToken,
}

/// The running workers.
#[derive(Debug)]
pub(crate) struct Workers {
    threads: Vec<JoinHandle<io::Result<Drained>>>,
    stop: CancellationToken,
}

impl Workers {
    /// Starts one worker per listener.
    pub(crate) fn start<M: MakeService>(
        listeners: Vec<std::net::TcpListener>,
        shared: &Shared,
        make: &M,
        fatal: &FatalSender,
    ) -> io::Result<Workers>
    where
        <M::Service as Service<Request<Incoming>>>::Future: Send + 'static,
    {
        let stop = shared.stop.clone();
        let mut threads = Vec::with_capacity(listeners.len());
        for (index, listener) in listeners.into_iter().enumerate() {
            let (shared, make, stop) = (shared.clone(), make.clone(), stop.clone());
            let part = format!("worker-{index}");
            let guard = FatalGuard::new(part.clone(), stop.clone(), fatal.clone());
            let fatal = fatal.clone();
            let thread = std::thread::Builder::new()
                .name(format!("txgate-worker-{index}"))
                .spawn(move || {
                    let guard = std::cell::RefCell::new(guard);
                    // A broken listener is reported at once (unless the
                    // proxy is stopping anyway), so the proxy starts
                    // draining while this worker's connections finish
                    // their calls; the guard then has nothing left to say.
                    let watched = stop.clone();
                    let served = serve(listener, shared, make, stop, |e| {
                        if !watched.is_cancelled() {
                            fatal.report(part, format!("listener: {e}"));
                            guard.borrow_mut().disarm();
                        }
                    });
                    if let Err(e) = &served {
                        guard.borrow_mut().failed(e.to_string());
                    }
                    served
                })?;
            threads.push(thread);
        }
        Ok(Workers { threads, stop })
    }

    /// Stops accepting on every worker and waits for their connections to
    /// drain (each within the grace period). A worker that failed or
    /// panicked while draining is returned as a failure.
    pub(crate) async fn drain(self) -> (Drained, Option<Fatal>) {
        self.stop.cancel();
        let mut drained = Drained::Clean;
        let mut failure = None;
        for (index, thread) in self.threads.into_iter().enumerate() {
            let error = match tokio::task::spawn_blocking(move || thread.join()).await {
                Ok(Ok(Ok(Drained::Clean))) => continue,
                Ok(Ok(Ok(Drained::TimedOut))) => {
                    drained = Drained::TimedOut;
                    continue;
                }
                Ok(Ok(Err(e))) => e.to_string(),
                _ => "panicked".to_string(),
            };
            tracing::error!(worker = index, error = %error, "worker failed while draining");
            drained = Drained::TimedOut;
            failure.get_or_insert(Fatal {
                part: format!("worker-{index}"),
                error,
            });
        }
        (drained, failure)
    }
}

/// One worker thread's life: its runtime, its service, its share of the
/// port, until `stop`.
fn serve<M: MakeService>(
    listener: std::net::TcpListener,
    shared: Shared,
    make: M,
    stop: CancellationToken,
    broken: impl FnOnce(&io::Error),
) -> io::Result<Drained>
where
    <M::Service as Service<Request<Incoming>>>::Future: Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let Shared {
        metrics,
        settings,
        edge,
        stop: _,
    } = shared;
    let served = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        let service = make.make()?;
        let drained = server::serve(
            listener,
            service,
            edge,
            settings,
            metrics,
            stop.cancelled_owned(),
            broken,
        )
        .await;
        make.drained().await;
        drained
    });
    // Connections still open after the grace period are cut here, and
    // nothing (a name lookup on a blocking thread) holds the worker longer.
    runtime.shutdown_timeout(Duration::from_millis(50));
    served
}
