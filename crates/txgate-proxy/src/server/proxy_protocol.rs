//! The PROXY protocol header at the start of a client connection: read
//! (in as many TCP segments as it takes, within the header-read timeout),
//! checked against `server.proxy_protocol`, and the bytes read past it
//! handed back to HTTP through [`Prefixed`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use txgate_config::ProxyProtocol;
use txgate_identity::proxy_protocol::{self, Malformed, Version};

use crate::metrics::ClientMetrics;

/// What the start of a connection said.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The client the balancer names; `None`: the peer speaks for itself.
    pub(crate) source: Option<SocketAddr>,
    /// Bytes read past the header: the start of the HTTP stream.
    pub(crate) rest: Bytes,
}

/// Reads the header a trusted peer must (or may) send. `Err` means the
/// connection is to be closed; the reason is counted here.
pub(crate) async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    mode: ProxyProtocol,
    timeout: Duration,
    metrics: &ClientMetrics,
) -> Result<Opened, ()> {
    let read = async {
        let mut buf = BytesMut::with_capacity(512);
        loop {
            match proxy_protocol::parse(&buf) {
                Ok(Some(header)) => return Ok((Some(header), buf)),
                Ok(None) => {}
                Err(Malformed::Missing) if mode == ProxyProtocol::Optional => {
                    return Ok((None, buf));
                }
                Err(why) => return Err(metrics.malformed(why)),
            }
            // The buffer stays within a header (2 KiB at most, refused
            // beyond) and one read ahead.
            buf.reserve(512);
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return Err(&metrics.closed),
                Ok(_) => {}
            }
        }
    };
    let (header, mut buf) = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(counter)) => {
            counter.inc();
            return Err(());
        }
        Err(_) => {
            metrics.timeout.inc();
            return Err(());
        }
    };
    let Some(header) = header else {
        metrics.absent.inc();
        return Ok(Opened {
            source: None,
            rest: buf.freeze(),
        });
    };
    let wanted = match mode {
        ProxyProtocol::V1 => Some(Version::V1),
        ProxyProtocol::V2 => Some(Version::V2),
        ProxyProtocol::Optional | ProxyProtocol::Off => None,
    };
    if wanted.is_some_and(|v| v != header.version) {
        metrics.wrong_version.inc();
        return Err(());
    }
    match (header.source, header.version) {
        (None, _) => metrics.local.inc(),
        (Some(_), Version::V1) => metrics.v1.inc(),
        (Some(_), Version::V2) => metrics.v2.inc(),
    }
    buf.advance(header.len);
    Ok(Opened {
        source: header.source,
        rest: buf.freeze(),
    })
}

pin_project! {
    /// A stream with bytes already read from it put back in front.
    #[derive(Debug)]
    pub(crate) struct Prefixed<S> {
        rest: Bytes,
        #[pin]
        stream: S,
    }
}

impl<S> Prefixed<S> {
    /// `stream`, read from `rest` first.
    pub(crate) fn new(rest: Bytes, stream: S) -> Prefixed<S> {
        Prefixed { rest, stream }
    }
}

impl<S: AsyncRead> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if !this.rest.is_empty() {
            let n = this.rest.len().min(buf.remaining());
            buf.put_slice(&this.rest[..n]);
            this.rest.advance(n);
            return Poll::Ready(Ok(()));
        }
        this.stream.poll_read(cx, buf)
    }
}

impl<S: AsyncWrite> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().stream.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().stream.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().stream.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().stream.poll_shutdown(cx)
    }
}
