//! Who each request comes from, decided once and carried in the request.
//!
//! Per connection ([`Edge::open`]): the TCP peer, or, when the peer is a
//! trusted proxy and `server.proxy_protocol` is on, the PROXY header's
//! source. Per request ([`Identified`]): when that address is itself a
//! trusted proxy, the configured forwarding header read right to left
//! (`txgate_identity::forwarded`). The result is a [`Client`] in the
//! request's extensions, where limits, logs and attribution read it; none
//! of them parses a header or an address again.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tower::Service;
use txgate_config::{ForwardedHeader, IpNet, ProxyProtocol, ServerConfig};
use txgate_identity::forwarded::{self, How};
use txgate_identity::{TrustedProxies, canonical};

use super::proxy_protocol::{self, Prefixed};
use crate::metrics::Metrics;
use crate::request::{Client, ConnectionSlot, InFlight};

/// How the client listener learns who its clients are; one per process.
#[derive(Debug)]
pub struct Edge {
    trusted: TrustedProxies,
    proxy_protocol: ProxyProtocol,
    header: Option<forwarded::Header>,
    header_timeout: Duration,
    metrics: Arc<Metrics>,
}

/// One connection's identity, fixed at accept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Connection {
    /// The TCP peer.
    peer: IpAddr,
    /// The PROXY header's source, or the peer.
    source: IpAddr,
    /// Whether `source` is a trusted proxy, whose forwarding header is
    /// read.
    reads_header: bool,
}

impl Edge {
    /// From the `[server]` section and its parsed `trusted_proxies`.
    pub fn new(server: &ServerConfig, trusted: Vec<IpNet>, metrics: Arc<Metrics>) -> Edge {
        let trusted = TrustedProxies::new(trusted);
        let header = match server.forwarded_header {
            ForwardedHeader::XForwardedFor => Some(forwarded::Header::XForwardedFor),
            ForwardedHeader::Forwarded => Some(forwarded::Header::Forwarded),
            ForwardedHeader::None => None,
        };
        Edge {
            trusted,
            proxy_protocol: server.proxy_protocol,
            header,
            header_timeout: server.header_read_timeout,
            metrics,
        }
    }

    /// Learns who a new connection is: reads its PROXY header when one is
    /// expected from this peer. `None`: the connection is closed (counted).
    pub(crate) async fn open(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
    ) -> Option<(Prefixed<TcpStream>, Connection)> {
        // One deadline for the PROXY header and the first bytes together.
        let deadline = tokio::time::Instant::now() + self.header_timeout;
        let peer = canonical(peer.ip());
        let trusted = self.trusted.contains(peer);
        let (source, rest) = match (self.proxy_protocol, trusted) {
            (ProxyProtocol::Off, _) | (ProxyProtocol::Optional, false) => {
                (None, Default::default())
            }
            (ProxyProtocol::V1 | ProxyProtocol::V2, false) => {
                self.metrics.client.untrusted.inc();
                return None;
            }
            (mode, true) => {
                let opened = proxy_protocol::read_header(
                    &mut stream,
                    mode,
                    self.header_timeout,
                    &self.metrics.client,
                )
                .await
                .ok()?;
                (opened.source, opened.rest)
            }
        };
        let Some(rest) = first_bytes(&mut stream, rest, deadline).await else {
            self.metrics.http.silent_closed.inc();
            return None;
        };
        let source = source.map_or(peer, |s| canonical(s.ip()));
        let reads_header = self.header.is_some() && self.trusted.contains(source);
        Some((
            Prefixed::new(rest, stream),
            Connection {
                peer,
                source,
                reads_header,
            },
        ))
    }

    /// After a TLS handshake: the first bytes of HTTP inside it, read as
    /// [`Edge::open`] reads them on a cleartext connection (within
    /// `server.header_read_timeout_ms`), so that a client that finishes its
    /// handshake and then says nothing cannot hold its slot. `None`: closed
    /// (counted as silent).
    pub(crate) async fn first_request<IO>(&self, mut io: IO) -> Option<Prefixed<IO>>
    where
        IO: AsyncRead + Unpin,
    {
        let deadline = tokio::time::Instant::now() + self.header_timeout;
        let Some(rest) = first_bytes(&mut io, Bytes::new(), deadline).await else {
            self.metrics.http.silent_closed.inc();
            return None;
        };
        Some(Prefixed::new(rest, io))
    }

    /// The client of a request on `connection`.
    pub(crate) fn client(&self, connection: Connection, headers: &http::HeaderMap) -> Client {
        let found = match self.header {
            Some(header) if connection.reads_header => forwarded::resolve(
                connection.source,
                &self.trusted,
                header,
                headers.get_all(header.name()).iter().map(|v| v.as_bytes()),
            ),
            _ => forwarded::Found {
                ip: connection.source,
                how: How::Peer,
            },
        };
        self.metrics.client.found(found.how).inc();
        Client {
            ip: found.ip,
            peer: connection.peer,
        }
    }
}

/// Reads, until `deadline`, the client's first bytes until they say which
/// protocol it speaks (HTTP/1.1, or the h2c preface); returns them after
/// `rest` (handed to hyper in front of the stream), or `None` when they do
/// not arrive in time. hyper's header timeout starts only once the
/// protocol is known, so without this a connection that sends nothing (or
/// the start of the h2c preface, then nothing) would hold its slot of
/// `server.max_connections` for ever. Waits on readiness, never polls; an
/// end of stream hands what came to hyper, which closes.
async fn first_bytes<IO: AsyncRead + Unpin>(
    stream: &mut IO,
    rest: Bytes,
    deadline: tokio::time::Instant,
) -> Option<Bytes> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let decided = |seen: &[u8]| seen.len() >= PREFACE.len() || !PREFACE.starts_with(seen);
    if decided(&rest) {
        return Some(rest);
    }
    let mut seen = rest.to_vec();
    let read = async {
        let mut buf = [0u8; PREFACE.len()];
        while !decided(&seen) {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout_at(deadline, read).await.ok()?;
    Some(Bytes::from(seen))
}

/// The client-facing service of one connection: puts each request's
/// [`Client`] in its extensions, then calls the stack.
#[derive(Debug, Clone)]
pub(crate) struct Identified<S> {
    inner: S,
    edge: Arc<Edge>,
    connection: Connection,
    slot: Arc<ConnectionSlot>,
}

impl<S> Identified<S> {
    pub(crate) fn new(
        inner: S,
        edge: Arc<Edge>,
        connection: Connection,
        slot: Arc<ConnectionSlot>,
    ) -> Identified<S> {
        Identified {
            inner,
            edge,
            connection,
            slot,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's future, counted in flight on its connection until it is
    /// done or dropped.
    pub(crate) struct Tracked<F> {
        #[pin]
        inner: F,
        _in_flight: InFlight,
    }
}

impl<F: Future> Future for Tracked<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<S, B> Service<Request<B>> for Identified<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Tracked<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let in_flight = self.slot.start_request();
        let client = self.edge.client(self.connection, req.headers());
        // An upgrade takes the connection's slot with it.
        if req.headers().contains_key(http::header::UPGRADE) {
            req.extensions_mut().insert(self.slot.clone());
        }
        req.extensions_mut().insert(client);
        Tracked {
            inner: self.inner.call(req),
            _in_flight: in_flight,
        }
    }
}

#[cfg(test)]
mod tests;
