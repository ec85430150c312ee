//! The upstream node client.
//!
//! A lean HTTP/1.1 keep-alive client: the request future itself writes the
//! request and reads the answer on a pooled connection, with no connection
//! task, channel or shared pool lock in between (each worker thread has
//! its own pool). That is one `writev` and usually one `read` per call,
//! which is what lets txgate keep up with nginx as a plain proxy.
//!
//! A pooled connection the upstream closed while idle is detected on use
//! (write error, or EOF before any byte of the answer) and the call is
//! retried once on a fresh connection. Not a submission written whole:
//! the node may have taken it and then closed (a restart, a load balancer
//! dropping its backend) before answering, and the node's own answer to a
//! second copy ("already known", a nonce error) would tell the client its
//! transaction failed. So a submission's pooled connection is first
//! checked for a close already seen, and one written whole is never
//! written again: its failure is the answer.
//!
//! An `https://` node is reached over TLS ([`tls`]): the handshake is done
//! when a connection opens, and the pooled connection keeps its session
//! for every later call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::Write as _;

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use http::header::HeaderValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use txgate_config::{AdmissionConfig, HttpUrl, UpstreamConfig};

pub mod group;
pub(crate) mod h1;
pub(crate) mod tls;

use self::h1::{ReadError, ResponseReader};
use self::tls::{Conn, Connector};
use crate::metrics::{Metrics, UpstreamFailure};
use crate::timers::Timers;

/// An upstream answer read in full.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status the upstream sent.
    pub status: StatusCode,
    /// Its body.
    pub body: Bytes,
    /// The node that answered (its index in the group; 0 in the short
    /// form).
    pub node: usize,
}

impl Reply {
    /// Whether the body looks like JSON-RPC (an object or a batch), which is
    /// relayed as it is whatever the status.
    pub fn is_json_rpc(&self) -> bool {
        matches!(
            self.body.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        )
    }
}

#[derive(Debug)]
struct Idle {
    stream: Conn,
    since: Instant,
}

#[derive(Debug)]
struct Inner {
    /// Opens connections: TCP, and TLS for `https://`.
    connector: Connector,
    /// `POST <path> HTTP/1.1`, `Host`, `Content-Type` and the start of
    /// `Content-Length`, written once.
    head: Vec<u8>,
    call_timeout: Duration,
    max_response_bytes: usize,
    pool_max_idle: usize,
    pool_idle_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
    /// Call timers, kept for the next calls: one per pooled connection.
    timers: Timers,
    metrics: Arc<Metrics>,
}

/// A keep-alive client for one upstream URL. Clones share the pool.
#[derive(Clone, Debug)]
pub struct Upstream {
    inner: Arc<Inner>,
}

/// A failed call: why, and whether the request was written whole (the
/// node may have taken it).
#[derive(Debug, Clone, Copy)]
pub struct Failed {
    /// Why it failed.
    pub failure: UpstreamFailure,
    /// The request reached the node's socket whole (a timeout after that,
    /// or a broken connection, leaves unknown whether the node acted).
    pub written: bool,
}

/// What went wrong on one attempt, and whether a retry is safe.
struct Attempt {
    failure: UpstreamFailure,
    /// Nothing of an answer was received on a reused connection.
    stale: bool,
}

impl Upstream {
    /// Builds the client to `endpoint` (`upstream.url`, parsed) with the
    /// rest of `[upstream]`; its idle pool is sized against `admission`.
    pub fn new(
        endpoint: &HttpUrl,
        up: &UpstreamConfig,
        admission: &AdmissionConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let client_tls = match endpoint.is_tls() {
            true => Some(tls::client_config(&up.tls, &[b"http/1.1"])?),
            false => None,
        };
        let connector = Connector::new(endpoint, client_tls, up.connect_timeout, metrics.clone())?;
        let (authority, path) = (endpoint.authority(), endpoint.path());
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\ncontent-length: "
        )
        .into_bytes();
        let pool_max_idle = up.effective_pool_max_idle(admission);
        Ok(Upstream {
            inner: Arc::new(Inner {
                connector,
                head,
                call_timeout: up.call_timeout,
                max_response_bytes: up.max_response_bytes,
                pool_max_idle,
                pool_idle_timeout: up.pool_idle_timeout,
                idle: Mutex::new(Vec::new()),
                timers: Timers::new(pool_max_idle),
                metrics,
            }),
        })
    }

    /// Posts `body` and reads the whole answer within the call timeout.
    pub async fn call(&self, body: Bytes) -> Result<Reply, UpstreamFailure> {
        self.call_within(body, None).await
    }

    /// Posts `body` and reads the whole answer within `timeout` (`None`:
    /// the call timeout).
    pub async fn call_within(
        &self,
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Reply, UpstreamFailure> {
        self.exchange(body, timeout, true)
            .await
            .map_err(|f| f.failure)
    }

    /// [`Upstream::call_within`], saying on failure whether the request
    /// was written whole: one that was not cannot have been taken by the
    /// node, so it may go to another. `resend`: whether a request written
    /// whole on a pooled connection that then closed with no answer may be
    /// written again on a fresh one (a read; not a submission, see the
    /// module doc).
    pub async fn exchange(
        &self,
        body: Bytes,
        timeout: Option<Duration>,
        resend: bool,
    ) -> Result<Reply, Failed> {
        let inner = &self.inner;
        let started = Instant::now();
        let written = std::sync::atomic::AtomicBool::new(false);
        let exchange = async {
            match self.checkout(!resend) {
                Some(stream) => match self.attempt(stream, &body, false, &written).await {
                    Err(Attempt { stale: true, .. })
                        if resend || !written.load(std::sync::atomic::Ordering::Relaxed) =>
                    {
                        let stream = self.connect().await?;
                        self.attempt(stream, &body, true, &written)
                            .await
                            .map_err(|a| a.failure)
                    }
                    other => other.map_err(|a| a.failure),
                },
                None => {
                    let stream = self.connect().await?;
                    self.attempt(stream, &body, true, &written)
                        .await
                        .map_err(|a| a.failure)
                }
            }
        };
        let limit = timeout.unwrap_or(inner.call_timeout);
        let result = match inner.timers.within(limit, exchange).await {
            Some(result) => result,
            None => Err(UpstreamFailure::Timeout),
        };
        match &result {
            Ok(_) => inner
                .metrics
                .upstream
                .duration
                .observe(started.elapsed().as_secs_f64()),
            Err(kind) => inner.metrics.upstream.failure(*kind),
        }
        result.map_err(|failure| Failed {
            failure,
            written: written.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Most recently used idle connection that is not too old; with
    /// `checked`, not one the node is already known to have closed.
    fn checkout(&self, checked: bool) -> Option<Conn> {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(conn) = idle.pop() {
            if conn.since.elapsed() >= self.inner.pool_idle_timeout {
                continue;
            }
            if checked && closed_by_peer(&conn.stream) {
                continue;
            }
            return Some(conn.stream);
        }
        None
    }

    fn checkin(&self, stream: Conn) {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.inner.pool_max_idle {
            idle.push(Idle {
                stream,
                since: Instant::now(),
            });
        }
    }

    /// A new connection (its TLS handshake done, for `https://`).
    async fn connect(&self) -> Result<Conn, UpstreamFailure> {
        self.inner
            .connector
            .connect()
            .await
            .map_err(|e| e.failure())
    }

    /// One request on `stream` (`fresh`: a new connection, on its first
    /// request); returns it to the pool when reusable.
    async fn attempt(
        &self,
        mut stream: Conn,
        body: &Bytes,
        fresh: bool,
        written_whole: &std::sync::atomic::AtomicBool,
    ) -> Result<Reply, Attempt> {
        let inner = &self.inner;
        // Once a request was written whole it stays written, even when a
        // stale pooled connection is retried on a fresh one: the node may
        // have taken the first before closing.
        let written = if stream.is_tls() {
            // One buffer, one record and one syscall: TLS writes each
            // piece it is handed as its own record.
            let mut request = Vec::with_capacity(inner.head.len() + 24 + body.len());
            request.extend_from_slice(&inner.head);
            let _ = write!(request, "{}\r\n\r\n", body.len());
            request.extend_from_slice(body);
            match stream.write_all(&request).await {
                Ok(()) => stream.flush().await,
                Err(e) => Err(e),
            }
        } else {
            let mut head = Vec::with_capacity(inner.head.len() + 24);
            head.extend_from_slice(&inner.head);
            // Writing into a Vec cannot fail.
            let _ = write!(head, "{}\r\n\r\n", body.len());
            let mut request = Bytes::from(head).chain(body.clone());
            stream.write_all_buf(&mut request).await
        };
        if let Err(e) = written {
            tracing::debug!(error = %e, "upstream write failed");
            return Err(Attempt {
                failure: UpstreamFailure::Io,
                stale: true,
            });
        }
        written_whole.store(true, std::sync::atomic::Ordering::Relaxed);

        let mut reader = ResponseReader::new(inner.max_response_bytes);
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            let read = stream.read_buf(&mut buf).await;
            let eof = match read {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => {
                    let refused = (fresh && buf.is_empty())
                        .then(|| inner.connector.refused_after_handshake(&e))
                        .flatten();
                    let failure = refused.unwrap_or_else(|| {
                        tracing::debug!(error = %e, "upstream read failed");
                        UpstreamFailure::Io
                    });
                    return Err(Attempt {
                        failure,
                        stale: buf.is_empty(),
                    });
                }
            };
            if eof && buf.is_empty() {
                return Err(Attempt {
                    failure: UpstreamFailure::Io,
                    stale: true,
                });
            }
            match reader.advance(&buf, eof) {
                Ok(Some(response)) => {
                    if response.keep_alive {
                        self.checkin(stream);
                    }
                    return Ok(Reply {
                        status: response.status,
                        body: response.body,
                        node: 0,
                    });
                }
                Ok(None) => {
                    if buf.capacity() - buf.len() < 1024 {
                        buf.reserve(buf.len().max(4096));
                    }
                }
                Err(ReadError::TooLarge) => {
                    return Err(Attempt {
                        failure: UpstreamFailure::TooLarge,
                        stale: false,
                    });
                }
                Err(e) => {
                    tracing::debug!(error = ?e, started = reader.started(), "upstream answer unreadable");
                    return Err(Attempt {
                        failure: match e {
                            ReadError::Truncated => UpstreamFailure::Io,
                            _ => UpstreamFailure::Malformed,
                        },
                        stale: false,
                    });
                }
            }
        }
    }

    /// One health probe: `eth_chainId` answered with a JSON-RPC result.
    pub async fn probe(&self) -> bool {
        const PROBE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
        match self.call(Bytes::from_static(PROBE)).await {
            Ok(reply) => reply.status.is_success() && reply.is_json_rpc(),
            Err(_) => false,
        }
    }
}

/// Whether the node closed (or wrote unasked on) an idle pooled
/// connection, as far as the worker's poller has seen: a read is tried
/// only while the socket is marked readable (it still is after the last
/// answer was read, so usually once: one non-blocking `recv`, which
/// clears the mark when nothing is there). Anything read means the
/// connection is not fit for a request (an idle HTTP/1.1 connection has
/// nothing to say; a TLS alert or a late session ticket is read away here
/// too, so that connection is dropped as well).
fn closed_by_peer(conn: &Conn) -> bool {
    let tcp = match conn {
        Conn::Plain(tcp) => tcp,
        Conn::Tls(tls) => tls.get_ref().0,
    };
    let mut byte = [0u8; 1];
    !matches!(tcp.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Whether `value` is a JSON content type txgate accepts.
pub(crate) fn is_json_content_type(value: Option<&HeaderValue>) -> bool {
    let Some(value) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    [
        "application/json",
        "application/json-rpc",
        "application/jsonrequest",
    ]
    .iter()
    .any(|t| essence.eq_ignore_ascii_case(t))
}

#[cfg(test)]
mod tests;
