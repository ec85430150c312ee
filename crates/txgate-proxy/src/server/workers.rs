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
    /// Each worker's listening socket, so that the whole port stops
    /// listening the moment the proxy stops, not when each worker's runtime
    /// gets round to seeing the stop (see [`Workers::drain`]).
    listening: Vec<Listening>,
}

/// A second descriptor of a worker's listening socket that takes the socket
/// out of the port when dropped, whoever still holds the other: on Linux a
/// listening TCP socket shut down for reading stops listening at once (it
/// leaves the port's SO_REUSEPORT group, its queue is reset, and a worker's
/// `accept` on it fails with EINVAL).
#[derive(Debug)]
struct Listening(std::net::TcpListener);

impl Listening {
    /// A second descriptor of `listener`; none where a shut-down listening
    /// socket would keep listening (elsewhere than Linux), since there an
    /// extra descriptor would only keep the socket open longer.
    fn of(listener: &std::net::TcpListener) -> io::Result<Option<Listening>> {
        if cfg!(target_os = "linux") {
            listener.try_clone().map(|dup| Some(Listening(dup)))
        } else {
            Ok(None)
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Err(e) = socket2::SockRef::from(&self.0).shutdown(std::net::Shutdown::Read) {
            // Already shut down (by the worker's own exit, or the other
            // descriptor of the pair).
            tracing::debug!(error = %e, "listener was not listening");
        }
    }
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
        // Every descriptor first, so that a failure here leaves no worker
        // running: one pair per listener, one for `drain`, one for the
        // worker's own exit (a failed start or a panic included), so that a
        // worker that is gone never leaves its share of the port listening
        // with nobody accepting.
        let mut listening = Vec::with_capacity(listeners.len());
        let mut own = Vec::with_capacity(listeners.len());
        for listener in &listeners {
            listening.extend(Listening::of(listener)?);
            own.push(Listening::of(listener)?);
        }
        let mut threads = Vec::with_capacity(listeners.len());
        for ((index, listener), own) in listeners.into_iter().enumerate().zip(own) {
            let stop_all = stop.clone();
            let (shared, make, stop) = (shared.clone(), make.clone(), stop.clone());
            let part = format!("worker-{index}");
            let guard = FatalGuard::new(part.clone(), stop.clone(), fatal.clone());
            let fatal = fatal.clone();
            let thread = std::thread::Builder::new()
                .name(format!("txgate-worker-{index}"))
                .spawn(move || {
                    let _own = own;
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
                });
            match thread {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    // The workers already running stop quietly: their
                    // shares of the port close as this returns.
                    stop_all.cancel();
                    return Err(e);
                }
            }
        }
        Ok(Workers {
            threads,
            stop,
            listening,
        })
    }

    /// Stops accepting on every worker and waits for their connections to
    /// drain (each within the grace period). A worker that failed or
    /// panicked while draining is returned as a failure.
    ///
    /// Every listening socket is shut down here, one right after the other,
    /// whether or not its worker has seen the stop yet. Each worker used to
    /// close its own share of the port when its runtime saw the stop, so a
    /// worker busy with its connections kept its share accepting for a
    /// while after the other's had closed; a connect that met the first
    /// share in the instant it closed failed, and the next one was
    /// accepted by the busy share. Now the port stops listening as a whole
    /// (connections the kernel had queued but no worker had accepted are
    /// reset, as closing a listener does). The stop is cancelled first, so a
    /// worker whose `accept` then fails with EINVAL knows the proxy is
    /// stopping and does not report it as a failure.
    pub(crate) async fn drain(self) -> (Drained, Option<Fatal>) {
        self.stop.cancel();
        drop(self.listening);
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::mpsc;

    use super::*;
    use crate::background::fatal_channel;
    use crate::server::listeners::Listeners;

    /// A worker whose only call blocks its runtime (so it cannot see the
    /// stop), beside one that is idle.
    #[derive(Clone)]
    struct Blocking {
        arrived: mpsc::Sender<()>,
        release: Arc<Mutex<mpsc::Receiver<()>>>,
    }

    type Answer =
        std::pin::Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    impl MakeService for Blocking {
        type Service = tower::util::BoxCloneService<Request<Incoming>, Response<Body>, Infallible>;

        fn make(&self) -> io::Result<Self::Service> {
            let this = self.clone();
            Ok(tower::util::BoxCloneService::new(tower::service_fn(
                move |_: Request<Incoming>| -> Answer {
                    let this = this.clone();
                    Box::pin(async move {
                        let _ = this.arrived.send(());
                        // Blocks the worker's one thread, as a long
                        // stretch of CPU work would.
                        let _ = this
                            .release
                            .lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(30));
                        Ok(Response::new(Body::from("answered")))
                    })
                },
            )))
        }

        async fn drained(&self) {}
    }

    /// The port stops listening the moment the workers are told to drain,
    /// even while one worker is too busy to see the stop: every connect
    /// after that is refused. Each worker used to close only its own share
    /// of the port when it saw the stop, so the busy worker's share kept
    /// accepting after the idle one's had closed.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_whole_port_stops_listening_at_once_when_a_worker_is_busy() {
        use std::io::{Read, Write};

        let listeners = Listeners::bind(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            2,
        )
        .unwrap();
        let addr = listeners.rpc_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        let config = txgate_config::ServerConfig::default();
        let shared = Shared {
            edge: Arc::new(Edge::new(&config, Vec::new(), metrics.clone())),
            metrics,
            settings: ServerSettings::for_tests(),
            stop: CancellationToken::new(),
        };
        let (arrived, calls) = mpsc::channel();
        let (release, held) = mpsc::channel();
        let make = Blocking {
            arrived,
            release: Arc::new(Mutex::new(held)),
        };
        let (fatal, mut failures) = fatal_channel();
        let workers = Workers::start(listeners.rpc, &shared, &make, &fatal).unwrap();

        // One call, on whichever worker the kernel picks: that worker is
        // now stuck until the call is released.
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
        calls
            .recv_timeout(Duration::from_secs(10))
            .expect("the call reaches a worker");

        let drained = tokio::spawn(workers.drain());
        // The busy worker's runtime cannot run until its call is released,
        // so it never closes its share itself: the port refuses only if
        // `drain` shut that share down. Wait for the first refusal: that
        // normally means no share listens any more, but a connect that met
        // one share in the instant it closed can be refused too, before
        // `drain` has reached the other (one system call later); after a
        // pause for that, every connect must be refused.
        // (A connect the busy share queues but never accepts would wait
        // for the kernel's SYN retries once its queue is full: each try
        // is bounded.)
        let refused = |addr| {
            matches!(
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
            )
        };
        let began = std::time::Instant::now();
        while !refused(addr) {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "the busy worker's share of the port still accepts 10 s after the drain began"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        for attempt in 0..40 {
            assert!(
                refused(addr),
                "connect {attempt} not refused after the port refused one"
            );
        }

        // The call under way still gets its answer, then all drains.
        release.send(()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reply = Vec::new();
        let _ = client.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let (drained, failure) = tokio::time::timeout(Duration::from_secs(10), drained)
            .await
            .expect("the workers drain")
            .unwrap();
        assert_eq!(drained, Drained::Clean);
        assert!(failure.is_none(), "{failure:?}");
        // A listener shut down while its worker was stopping is no failure.
        assert!(failures.try_recv().is_none());
    }
}
