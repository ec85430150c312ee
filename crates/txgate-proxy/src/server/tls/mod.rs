//! TLS on the client port (`[server.tls]`): rustls on aws-lc-rs.
//!
//! One server config for the whole process (every worker resumes every
//! other's sessions): TLS 1.3, and 1.2 unless `min_version = "1.3"`; the
//! operator's key-exchange groups, X25519MLKEM768 (the post-quantum hybrid)
//! among them by default (rustls takes the client's first choice among
//! them, which saves a HelloRetryRequest); ALPN `h2` (when HTTP/2 is on)
//! and `http/1.1`; session tickets. The certificate comes from [`Certs`],
//! which reloads it on SIGHUP or a file change.
//!
//! A handshake runs after the PROXY header (if any) and before HTTP, within
//! `handshake_timeout_ms`. Each one is counted by version, group and
//! outcome; a failure is counted by its reason and logged at debug only: a
//! scanner must not fill the log.

pub(crate) mod certs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::aws_lc_rs::kx_group;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::server::ServerConnection;
use rustls::{HandshakeKind, NamedGroup, ProtocolVersion};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use txgate_config::ServerTlsConfig;

use self::certs::Certs;
pub use self::certs::Reload;
use crate::metrics::{Handshake, Metrics};

/// The client port's TLS: the acceptor and the certificate behind it.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    certs: Arc<Certs>,
    handshake_timeout: Duration,
    reload_interval: Option<Duration>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

/// The group of a name from `server.tls.groups` (checked by the config).
fn group(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    Some(match name {
        "X25519MLKEM768" => kx_group::X25519MLKEM768,
        "X25519" => kx_group::X25519,
        "secp256r1" => kx_group::SECP256R1,
        "secp384r1" => kx_group::SECP384R1,
        _ => return None,
    })
}

impl Tls {
    /// From `[server.tls]`; `None` when it is off. An error (a file that
    /// cannot be read or parsed, a key that does not match) names the
    /// setting.
    pub fn new(
        config: &ServerTlsConfig,
        http2: bool,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Tls>, String> {
        if !config.enabled() {
            return Ok(None);
        }
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.kx_groups = config
            .groups
            .iter()
            .map(|name| {
                group(name).ok_or_else(|| format!("server.tls.groups: unknown group `{name}`"))
            })
            .collect::<Result<_, _>>()?;
        let provider = Arc::new(provider);
        let certs = Arc::new(Certs::load(config, provider.clone(), metrics.clone())?);
        let server = server_config(config, http2, provider, certs.clone())?;
        Ok(Some(Tls {
            acceptor: TlsAcceptor::from(server),
            certs,
            handshake_timeout: config.handshake_timeout,
            reload_interval: config.reload_interval,
            metrics,
        }))
    }

    /// Reads the certificate and key again (SIGHUP); a bad pair is refused
    /// and the one in force stays.
    pub fn reload(&self) -> Reload {
        self.certs.reload(true)
    }

    /// The interval of the file watch, if any.
    pub(crate) fn reload_interval(&self) -> Option<Duration> {
        self.reload_interval
    }

    /// The file watch: reloads a change every `reload_interval`.
    pub(crate) fn watch(
        &self,
        interval: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        certs::watch(self.certs.clone(), interval, stop)
    }

    /// Runs the handshake on `io` within the handshake timeout, counting
    /// its outcome; `None` when it failed (the connection is dropped).
    pub(crate) async fn handshake<IO>(&self, io: IO) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let started = Instant::now();
        let tls = &self.metrics.tls;
        match tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(io)).await {
            Ok(Ok(stream)) => {
                let (_, connection) = stream.get_ref();
                let (version, group, outcome) = agreed(connection);
                tls.handshake(version, group, outcome);
                tls.handshake_duration
                    .observe(started.elapsed().as_secs_f64());
                Some(stream)
            }
            Ok(Err(e)) => {
                let outcome = failure(&e);
                tracing::debug!(error = %e, outcome = outcome.as_str(), "TLS handshake failed");
                tls.handshake("none", "none", outcome);
                None
            }
            Err(_) => {
                tls.handshake("none", "none", Handshake::Timeout);
                None
            }
        }
    }
}

/// The server config: versions, groups (in `provider`), ALPN, tickets.
fn server_config(
    config: &ServerTlsConfig,
    http2: bool,
    provider: Arc<CryptoProvider>,
    certs: Arc<Certs>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let versions: &[&'static rustls::SupportedProtocolVersion] = if config.allows_tls12() {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13]
    };
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("server.tls: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    server.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    if config.session_tickets {
        server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("server.tls.session_tickets: {e}"))?;
    } else {
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
    }
    Ok(Arc::new(server))
}

/// Version, group and kind of a finished handshake, as label values.
fn agreed(connection: &ServerConnection) -> (&'static str, &'static str, Handshake) {
    let version = match connection.protocol_version() {
        Some(ProtocolVersion::TLSv1_3) => "1.3",
        Some(ProtocolVersion::TLSv1_2) => "1.2",
        _ => "other",
    };
    let group = match connection.negotiated_key_exchange_group().map(|g| g.name()) {
        Some(NamedGroup::X25519MLKEM768) => "X25519MLKEM768",
        Some(NamedGroup::X25519) => "X25519",
        Some(NamedGroup::secp256r1) => "secp256r1",
        Some(NamedGroup::secp384r1) => "secp384r1",
        Some(_) => "other",
        None => "none",
    };
    let outcome = match connection.handshake_kind() {
        Some(HandshakeKind::Resumed) => Handshake::Resumed,
        Some(HandshakeKind::FullWithHelloRetryRequest) => Handshake::FullRetry,
        _ => Handshake::Full,
    };
    (version, group, outcome)
}

/// Why a handshake failed, from the error tokio-rustls returns.
fn failure(e: &std::io::Error) -> Handshake {
    use rustls::PeerIncompatible as P;
    use std::io::ErrorKind;
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => Handshake::Eof,
            _ => Handshake::Other,
        };
    };
    match tls {
        rustls::Error::InvalidMessage(_) => Handshake::NotTls,
        rustls::Error::PeerIncompatible(why) => match why {
            P::NoKxGroupsInCommon => Handshake::NoSharedGroup,
            P::NoCipherSuitesInCommon => Handshake::NoSharedCipher,
            P::SupportedVersionsExtensionRequired
            | P::Tls12NotOffered
            | P::Tls12NotOfferedOrEnabled => Handshake::NoSharedVersion,
            _ => Handshake::Incompatible,
        },
        rustls::Error::NoApplicationProtocol => Handshake::Incompatible,
        rustls::Error::AlertReceived(_) => Handshake::AlertReceived,
        _ => Handshake::Other,
    }
}
