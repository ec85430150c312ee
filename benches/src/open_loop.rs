//! An open-loop load over HTTP/1.1 keep-alive connections, as the load
//! tools that ask one server at a fixed rate send it: a pacing thread hands
//! each request to the connections when it is due (checked every 50 µs),
//! each connection has one request in flight, and latency counts from when
//! a request was due, so that a queue in the client shows in it. Over the
//! load, the client's and the server's CPU (utime+stime from /proc).
//!
//! Every request is bounded ([`REQUEST_TIMEOUT`]); a connection that
//! breaks or times out is opened again for the next request, so a load
//! always ends, with what failed counted by kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::sync::Mutex;

use crate::procs::cpu_ms;
use crate::stats::Sample;

/// The longest a request may take before it counts as failed (above
/// txgate's default upstream call timeout, 10 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how fast a load is sent.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    /// The server's loopback port.
    pub port: u16,
    /// The requests' path.
    pub path: &'static str,
    /// Headers of every request besides `content-type: application/json`.
    pub headers: &'static [(&'static str, &'static str)],
    /// Keep-alive connections, one request in flight on each.
    pub connections: usize,
    /// Requests due a second.
    pub rate: u64,
    /// The server's process, whose CPU is measured.
    pub server_pid: u32,
}

/// What a load came to.
#[derive(Debug)]
pub struct Outcome<T> {
    /// Each answered request that passed the check: its latency from when
    /// it was due, in µs, and what the check made of it.
    pub answers: Vec<(u32, T)>,
    /// Requests that failed (no connection, a broken one, a timeout, or
    /// the check's error), counted by kind.
    pub errors: BTreeMap<String, usize>,
    /// Seconds from the first request due to the last answer.
    pub elapsed: f64,
    /// The load client's CPU over the load (this process), ms.
    pub client_cpu_ms: f64,
    /// The server's CPU over the load, ms.
    pub server_cpu_ms: f64,
}

impl<T> Outcome<T> {
    /// Requests sent.
    pub fn requests(&self) -> usize {
        self.answers.len() + self.failed()
    }

    /// Requests that failed.
    pub fn failed(&self) -> usize {
        self.errors.values().sum()
    }

    /// The answered requests' latencies, in ms.
    pub fn latencies_ms(&self) -> Sample {
        self.answers
            .iter()
            .map(|(us, _)| f64::from(*us) / 1000.0)
            .collect()
    }

    /// Requests a second, as sent.
    pub fn rate(&self) -> f64 {
        self.requests() as f64 / self.elapsed
    }

    /// The server's CPU per request, µs.
    pub fn server_us(&self) -> f64 {
        self.server_cpu_ms * 1000.0 / self.requests().max(1) as f64
    }

    /// The client's CPU per request, µs.
    pub fn client_us(&self) -> f64 {
        self.client_cpu_ms * 1000.0 / self.requests().max(1) as f64
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(port: u16) -> Result<Sender, String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(send)
}

/// One request: the status and the body.
async fn ask(send: &mut Sender, load: &OpenLoop, body: Bytes) -> Result<(u16, Bytes), String> {
    let mut request = hyper::Request::post(format!("http://127.0.0.1:{}{}", load.port, load.path))
        .header("content-type", "application/json");
    for (name, value) in load.headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
    send.ready().await.map_err(|e| e.to_string())?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// An error's kind, short enough to count by.
fn kind(error: &str) -> String {
    error.chars().take(120).collect()
}

impl OpenLoop {
    /// Sends `bodies`, in order, at [`OpenLoop::rate`]; `check` reads each
    /// answer (status, body) into a `T` or the kind of its failure.
    pub async fn run<T, F>(&self, bodies: Vec<Bytes>, check: F) -> Outcome<T>
    where
        T: Send + 'static,
        F: Fn(u16, &[u8]) -> Result<T, String> + Send + Sync + 'static,
    {
        let count = bodies.len();
        assert!(self.rate > 0 || count == 0, "an open loop needs a rate");
        let (due_tx, due_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Bytes)>();
        let due_rx = Arc::new(Mutex::new(due_rx));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let check = Arc::new(check);
        for _ in 0..self.connections {
            let mut send = connect(self.port).await.ok();
            let (due_rx, done_tx, check, load) =
                (due_rx.clone(), done_tx.clone(), check.clone(), *self);
            tokio::spawn(async move {
                loop {
                    let next = due_rx.lock().await.recv().await;
                    let Some((due, body)) = next else { return };
                    if send.is_none() {
                        send = connect(load.port).await.ok();
                    }
                    // A transport error or a timeout leaves the connection
                    // in no known state: the next request opens another.
                    let (answer, broken) = match send.as_mut() {
                        None => (Err("connect failed".to_string()), true),
                        Some(s) => {
                            match tokio::time::timeout(REQUEST_TIMEOUT, ask(s, &load, body)).await {
                                Ok(Ok((status, bytes))) => (check(status, &bytes), false),
                                Ok(Err(e)) => (Err(format!("transport: {e}")), true),
                                Err(_) => (
                                    Err(format!("timeout ({} s)", REQUEST_TIMEOUT.as_secs())),
                                    true,
                                ),
                            }
                        }
                    };
                    let _ = done_tx.send((due.elapsed().as_micros() as u32, answer));
                    if broken || send.as_ref().is_some_and(Sender::is_closed) {
                        send = None;
                    }
                }
            });
        }
        let (client0, server0) = (cpu_ms(std::process::id()), cpu_ms(self.server_pid));
        let started = Instant::now();
        let rate = self.rate;
        let pacer = std::thread::spawn(move || {
            let mut bodies = bodies.into_iter();
            let mut sent = 0usize;
            while sent < count {
                // Request k is due at k / rate: those due by now are the
                // first floor(elapsed × rate) + 1 (request 0 at once).
                let due = ((started.elapsed().as_secs_f64() * rate as f64) as usize)
                    .saturating_add(1)
                    .min(count);
                while sent < due {
                    let at = started + Duration::from_secs_f64(sent as f64 / rate as f64);
                    let Some(body) = bodies.next() else { return };
                    let _ = due_tx.send((at, body));
                    sent += 1;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        let mut outcome = Outcome {
            answers: Vec::with_capacity(count),
            errors: BTreeMap::new(),
            elapsed: 0.0,
            client_cpu_ms: 0.0,
            server_cpu_ms: 0.0,
        };
        while outcome.requests() < count {
            let Some((us, answer)) = done_rx.recv().await else {
                break;
            };
            match answer {
                Ok(value) => outcome.answers.push((us, value)),
                Err(e) => *outcome.errors.entry(kind(&e)).or_default() += 1,
            }
        }
        outcome.elapsed = started.elapsed().as_secs_f64();
        let _ = pacer.join();
        outcome.client_cpu_ms = cpu_ms(std::process::id()) - client0;
        outcome.server_cpu_ms = cpu_ms(self.server_pid) - server0;
        outcome
    }
}
