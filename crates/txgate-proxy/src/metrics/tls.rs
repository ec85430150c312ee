//! TLS metrics: client handshakes by version, group and outcome, their
//! duration, the certificate's expiry and reloads, and the handshakes with
//! an `https://` node.

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};

use super::registrar::Registrar;

/// How a client handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// A full handshake.
    Full,
    /// A full handshake after a HelloRetryRequest (the client sent no key
    /// share for a group txgate prefers).
    FullRetry,
    /// A resumed session (ticket or session id).
    Resumed,
    /// Not finished within `server.tls.handshake_timeout_ms`.
    Timeout,
    /// The client closed or reset the connection mid-handshake.
    Eof,
    /// The bytes were not TLS (plain HTTP on the TLS port, a scanner).
    NotTls,
    /// No key-exchange group in common.
    NoSharedGroup,
    /// No cipher suite in common.
    NoSharedCipher,
    /// No protocol version in common (TLS 1.2 only, with
    /// `server.tls.min_version = "1.3"`).
    NoSharedVersion,
    /// Incompatible otherwise (signature schemes, ALPN, extensions).
    Incompatible,
    /// The client sent an alert (it did not trust the certificate).
    AlertReceived,
    /// Anything else.
    Other,
}

impl Handshake {
    /// Every outcome, in declaration order.
    pub const ALL: [Handshake; 12] = [
        Handshake::Full,
        Handshake::FullRetry,
        Handshake::Resumed,
        Handshake::Timeout,
        Handshake::Eof,
        Handshake::NotTls,
        Handshake::NoSharedGroup,
        Handshake::NoSharedCipher,
        Handshake::NoSharedVersion,
        Handshake::Incompatible,
        Handshake::AlertReceived,
        Handshake::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Handshake::Full => "full",
            Handshake::FullRetry => "full_retry",
            Handshake::Resumed => "resumed",
            Handshake::Timeout => "timeout",
            Handshake::Eof => "eof",
            Handshake::NotTls => "not_tls",
            Handshake::NoSharedGroup => "no_shared_group",
            Handshake::NoSharedCipher => "no_shared_cipher",
            Handshake::NoSharedVersion => "no_shared_version",
            Handshake::Incompatible => "incompatible",
            Handshake::AlertReceived => "alert_received",
            Handshake::Other => "other",
        }
    }
}

/// How a handshake with the node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamHandshake {
    /// Done: the connection joins the pool.
    Ok,
    /// The node's certificate has expired (or is not valid yet).
    Expired,
    /// The node's certificate does not name the URL's host.
    NameMismatch,
    /// The node's certificate does not chain to a trusted CA.
    UnknownIssuer,
    /// The node's certificate is unusable otherwise.
    BadCertificate,
    /// The node sent an alert (it refused txgate's client certificate).
    Alert,
    /// Not finished within `upstream.connect_timeout_ms`.
    Timeout,
    /// The connection broke.
    Io,
    /// Anything else (protocol, no shared parameters).
    Other,
}

impl UpstreamHandshake {
    /// Every outcome, in declaration order.
    pub const ALL: [UpstreamHandshake; 9] = [
        UpstreamHandshake::Ok,
        UpstreamHandshake::Expired,
        UpstreamHandshake::NameMismatch,
        UpstreamHandshake::UnknownIssuer,
        UpstreamHandshake::BadCertificate,
        UpstreamHandshake::Alert,
        UpstreamHandshake::Timeout,
        UpstreamHandshake::Io,
        UpstreamHandshake::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamHandshake::Ok => "ok",
            UpstreamHandshake::Expired => "expired",
            UpstreamHandshake::NameMismatch => "name_mismatch",
            UpstreamHandshake::UnknownIssuer => "unknown_issuer",
            UpstreamHandshake::BadCertificate => "bad_certificate",
            UpstreamHandshake::Alert => "alert",
            UpstreamHandshake::Timeout => "timeout",
            UpstreamHandshake::Io => "io",
            UpstreamHandshake::Other => "other",
        }
    }

    /// What a failed handshake's error says.
    pub fn of(e: &std::io::Error) -> UpstreamHandshake {
        use rustls::CertificateError as C;
        let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        else {
            return UpstreamHandshake::Io;
        };
        match tls {
            rustls::Error::InvalidCertificate(cert) => match cert {
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. } => UpstreamHandshake::Expired,
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    UpstreamHandshake::NameMismatch
                }
                C::UnknownIssuer => UpstreamHandshake::UnknownIssuer,
                _ => UpstreamHandshake::BadCertificate,
            },
            rustls::Error::AlertReceived(_) => UpstreamHandshake::Alert,
            _ => UpstreamHandshake::Other,
        }
    }
}

/// The `txgate_tls_*` and `txgate_upstream_tls_*` series.
pub struct TlsMetrics {
    handshakes: IntCounterVec,
    /// Time from the first byte to a finished handshake.
    pub handshake_duration: Histogram,
    /// When the served certificate expires (Unix seconds; 0: no TLS).
    pub certificate_expiry: IntGauge,
    reloads: IntCounterVec,
    upstream: Vec<IntCounter>,
}

impl std::fmt::Debug for TlsMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMetrics").finish_non_exhaustive()
    }
}

/// Handshake buckets: a resumption takes tens of microseconds, a full
/// post-quantum handshake a millisecond or two, a slow client seconds.
const HANDSHAKE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];

impl TlsMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> TlsMetrics {
        let upstream = r.counter_vec(
            "upstream_tls_handshakes_total",
            "TLS handshakes with the node, by outcome (ok: one per pooled connection)",
            &["outcome"],
        );
        let reloads = r.counter_vec(
            "tls_certificate_reloads_total",
            "Certificate reloads by result (loaded, unchanged, refused: the old one stays)",
            &["result"],
        );
        for result in ["loaded", "unchanged", "refused"] {
            reloads.with_label_values(&[result]);
        }
        let handshakes = r.counter_vec(
            "tls_handshakes_total",
            "Client TLS handshakes by protocol version, key-exchange group and outcome \
             (full, full_retry, resumed, or why it failed)",
            &["version", "group", "outcome"],
        );
        // The failures (agreed on nothing) exist from the start, so a
        // dashboard or an alert on them reads 0, not nothing.
        for outcome in &Handshake::ALL[3..] {
            handshakes.with_label_values(&["none", "none", outcome.as_str()]);
        }
        TlsMetrics {
            handshakes,
            handshake_duration: r.histogram(
                "tls_handshake_duration_seconds",
                "Client TLS handshakes that finished, first byte to done",
                HANDSHAKE_BUCKETS,
            ),
            certificate_expiry: r.gauge(
                "tls_certificate_expiry_timestamp_seconds",
                "When the certificate served on the client port expires (Unix time)",
            ),
            reloads,
            upstream: UpstreamHandshake::ALL
                .iter()
                .map(|o| upstream.with_label_values(&[o.as_str()]))
                .collect(),
        }
    }

    /// Counts one client handshake; `version` and `group` are "none" when
    /// it failed before they were agreed. The label sets are bounded: a
    /// few versions, groups and outcomes.
    pub fn handshake(&self, version: &str, group: &str, outcome: Handshake) {
        self.handshakes
            .with_label_values(&[version, group, outcome.as_str()])
            .inc();
    }

    /// Counts one certificate reload by result.
    pub fn reload(&self, result: &str) {
        self.reloads.with_label_values(&[result]).inc();
    }

    /// Counts one handshake with the node.
    pub fn upstream_handshake(&self, outcome: UpstreamHandshake) {
        self.upstream[outcome as usize].inc();
    }
}
