//! The connection to the node: cleartext TCP, or TLS over it for an
//! `https://` (or `wss://`) URL.
//!
//! The TLS handshake happens once, when a connection is opened; the
//! connection then goes back to the pool with its session state and carries
//! every later call (each handshake is counted in
//! `txgate_upstream_tls_handshakes_total`). The client config is built once
//! per pool: roots from `upstream.tls.ca_path` or the system, an optional
//! client certificate (mTLS), ALPN `http/1.1`, session resumption for the
//! next connection.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use txgate_config::{HttpUrl, UpstreamTlsConfig};

use crate::metrics::{Metrics, UpstreamFailure, UpstreamHandshake};

/// The crypto provider: aws-lc-rs, with the post-quantum hybrid offered
/// first.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The client config for a TLS node, from `[upstream.tls]`. An error says
/// which file is at fault and why.
pub(crate) fn client_config(
    tls: &UpstreamTlsConfig,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    if tls.ca_path.is_empty() {
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err(
                "upstream.tls.ca_path is empty and the system has no CA certificates".into(),
            );
        }
    } else {
        for cert in read_certs(&tls.ca_path, "upstream.tls.ca_path")? {
            roots
                .add(cert)
                .map_err(|e| format!("upstream.tls.ca_path `{}`: {e}", tls.ca_path))?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = if tls.has_client_cert() {
        let chain = read_certs(&tls.client_cert_path, "upstream.tls.client_cert_path")?;
        let key = read_key(&tls.client_key_path, "upstream.tls.client_key_path")?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("upstream.tls client certificate: {e}"))?
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// Every certificate of a PEM file; an error names `key` and the file.
pub(crate) fn read_certs(path: &str, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{key} `{path}`: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} `{path}`: no certificate in the file"));
    }
    Ok(certs)
}

/// The private key of a PEM file; an error names `key` and the file.
pub(crate) fn read_key(path: &str, key: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{key} `{path}`: {e}"))
}

/// A connection to the node.
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// Whether writes go through TLS (and are best handed over whole:
    /// each write is a record and a syscall).
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How a connection failed to open.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// TCP refused, unreachable, or too slow.
    Tcp(String),
    /// The TLS handshake failed (certificate, protocol, peer gone).
    Tls(String),
}

impl ConnectError {
    /// The upstream failure it counts as.
    pub(crate) fn failure(&self) -> UpstreamFailure {
        match self {
            ConnectError::Tcp(_) => UpstreamFailure::Connect,
            ConnectError::Tls(_) => UpstreamFailure::Tls,
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Tcp(e) => write!(f, "connect: {e}"),
            ConnectError::Tls(e) => write!(f, "TLS handshake: {e}"),
        }
    }
}

/// Opens connections to one endpoint, with TLS when its URL says so.
pub(crate) struct Connector {
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// When a failed handshake was last logged: one line per interval,
    /// not one per attempt (every call tries while the node's certificate
    /// is bad).
    logged: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// One log line per this interval about failed upstream handshakes.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Connector {
    /// For `url`; `tls` is the client config, needed when the URL is TLS.
    pub(crate) fn new(
        url: &HttpUrl,
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Connector, String> {
        let tls = match (url.is_tls(), tls) {
            (false, _) => None,
            (true, Some(config)) => Some((TlsConnector::from(config), server_name(url)?)),
            (true, None) => return Err("a TLS endpoint needs a TLS client config".into()),
        };
        Ok(Connector {
            host: url.host().to_string(),
            port: url.port(),
            tls,
            timeout,
            metrics,
            logged: Mutex::new(None),
        })
    }

    /// Opens a connection (TCP, then TLS if asked), both within the
    /// connect timeout; each phase's failure is counted as its own.
    pub(crate) async fn connect(&self) -> Result<Conn, ConnectError> {
        let result = self.open().await;
        if let Err(e) = &result {
            self.log(e);
        }
        result
    }

    async fn open(&self) -> Result<Conn, ConnectError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let tcp = match tokio::time::timeout_at(
            deadline,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(ConnectError::Tcp(e.to_string())),
            Err(_) => return Err(ConnectError::Tcp("timed out".into())),
        };
        let _ = tcp.set_nodelay(true);
        let Some((connector, name)) = &self.tls else {
            return Ok(Conn::Plain(tcp));
        };
        let tls = &self.metrics.tls;
        match tokio::time::timeout_at(deadline, connector.connect(name.clone(), tcp)).await {
            Ok(Ok(stream)) => {
                tls.upstream_handshake(UpstreamHandshake::Ok);
                Ok(Conn::Tls(Box::new(stream)))
            }
            Ok(Err(e)) => {
                tls.upstream_handshake(UpstreamHandshake::of(&e));
                Err(ConnectError::Tls(tls_error_text(&e)))
            }
            Err(_) => {
                tls.upstream_handshake(UpstreamHandshake::Timeout);
                Err(ConnectError::Tls("handshake timed out".into()))
            }
        }
    }

    /// A TLS error the node sent on the first read of a new connection,
    /// right after the handshake: in TLS 1.3 a node that refuses txgate's
    /// client certificate (none, or from a CA it does not trust) says so
    /// with an alert once the client considers the handshake done (which
    /// `txgate_upstream_tls_handshakes_total` counted `ok`). Counted as a
    /// TLS failure and logged as a refusal, not as a broken connection;
    /// `None` for any other I/O error. Callers ask only about a fresh
    /// connection's first read: a TLS error later on is the connection's.
    pub(crate) fn refused_after_handshake(&self, e: &io::Error) -> Option<UpstreamFailure> {
        e.get_ref()?.downcast_ref::<rustls::Error>()?;
        if self.may_log() {
            tracing::warn!(host = %self.host, port = self.port, error = %tls_error_text(e), "upstream refused txgate right after the TLS handshake (its client certificate?) (logged once per 10 s; counted in txgate_upstream_errors_total{{kind=\"tls\"}})");
        }
        Some(UpstreamFailure::Tls)
    }

    fn log(&self, e: &ConnectError) {
        let ConnectError::Tls(_) = e else {
            tracing::debug!(host = %self.host, port = self.port, error = %e, "upstream connect failed");
            return;
        };
        if self.may_log() {
            tracing::warn!(host = %self.host, port = self.port, error = %e, "upstream TLS handshake failed (logged once per 10 s; counted in txgate_upstream_tls_handshakes_total)");
        }
    }

    /// Whether a TLS failure may be logged now: once per [`LOG_EVERY`].
    fn may_log(&self) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return false;
        }
        *logged = Some(Instant::now());
        true
    }
}

/// The name a TLS node's certificate must carry: the URL's host (a DNS
/// name or an IP address).
pub(crate) fn server_name(url: &HttpUrl) -> Result<ServerName<'static>, String> {
    ServerName::try_from(url.host().to_string())
        .map_err(|e| format!("`{}` is not a TLS server name: {e}", url.host()))
}

/// The rustls error inside an I/O error, as text (the certificate
/// problem, the alert), else the I/O error.
fn tls_error_text(e: &io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls.to_string(),
        None => e.to_string(),
    }
}
