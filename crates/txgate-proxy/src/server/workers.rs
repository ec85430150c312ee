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
    /// A second descriptor of each worker's listening socket, so that the
    /// whole port stops listening the moment the proxy stops, not when
    /// each worker's runtime gets round to seeing the stop: a worker busy
    /// with its connections would otherwise keep its share of the port open
    /// after the other's had closed, and a client refused once could be
    /// accepted on its next try.
    listening: Vec<std::net::TcpListener>,
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
        let mut listening = Vec::with_capacity(listeners.len());
        for (index, listener) in listeners.into_iter().enumerate() {
            listening.push(listener.try_clone()?);
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
    /// Every listening socket is shut down here, at once, before any worker
    /// has seen the stop: from this moment every new connection to the port
    /// is refused (connections the kernel had queued but no worker had
    /// accepted are reset, as closing the listener does). A worker's
    /// `accept` then fails with EINVAL, which is not reported as a failure
    /// since the proxy is stopping.
    pub(crate) async fn drain(self) -> (Drained, Option<Fatal>) {
        self.stop.cancel();
        for listener in self.listening {
            stop_listening(&listener);
        }
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

/// Takes a listening socket out of its port's SO_REUSEPORT group: on Linux a
/// listening TCP socket shut down for reading stops listening (its queue is
/// reset and new connections are refused), even while another descriptor
/// of it is still open.
fn stop_listening(listener: &std::net::TcpListener) {
    if let Err(e) = socket2::SockRef::from(listener).shutdown(std::net::Shutdown::Read) {
        // Already not listening (a worker whose listener broke).
        tracing::debug!(error = %e, "listener was not listening");
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
    /// accepting after the idle one's refused.
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
            settings: ServerSettings {
                max_connections: 16,
                header_read_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(60),
                http2: false,
                grace_period: Duration::from_secs(30),
                tls: None,
            },
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
        let began = std::time::Instant::now();
        while !shared.stop.is_cancelled() {
            assert!(began.elapsed() < Duration::from_secs(10), "drain began");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The busy worker's runtime has not run since; its share of the
        // port must refuse anyway (the kernel spreads connects over the
        // shares, so forty tries reach both).
        for attempt in 0..40 {
            match std::net::TcpStream::connect(addr) {
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
                Ok(_) => panic!("connect {attempt} accepted after the drain began"),
            }
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
