//! Client identity metrics: PROXY protocol headers and how each request's
//! client was found.

use prometheus::IntCounter;
use txgate_identity::forwarded::How;
use txgate_identity::proxy_protocol::Malformed;

use super::registrar::Registrar;

/// `txgate_proxy_protocol_total{result}` and
/// `txgate_client_identity_total{source}`.
pub struct ClientMetrics {
    /// A v1 header named the client.
    pub v1: IntCounter,
    /// A v2 header named the client.
    pub v2: IntCounter,
    /// A header for a connection the balancer opened itself (v2 `LOCAL`,
    /// v1 `UNKNOWN`): its peer speaks for itself.
    pub local: IntCounter,
    /// `optional` listener: a trusted peer sent plain HTTP.
    pub absent: IntCounter,
    /// Closed: a trusted peer sent no header where one is required.
    pub missing: IntCounter,
    /// Closed: a header longer than txgate reads.
    pub too_long: IntCounter,
    /// Closed: a v1 header that does not parse.
    pub invalid_v1: IntCounter,
    /// Closed: a v2 header that does not parse.
    pub invalid_v2: IntCounter,
    /// Closed: the other version than the listener requires.
    pub wrong_version: IntCounter,
    /// Closed: the header did not arrive within the header-read timeout.
    pub timeout: IntCounter,
    /// Closed: the peer closed or failed before its header was whole.
    pub closed: IntCounter,
    /// Closed: a peer outside `server.trusted_proxies` on a listener that
    /// requires a header.
    pub untrusted: IntCounter,
    /// Requests whose client is the connection's peer (or PROXY source).
    pub from_peer: IntCounter,
    /// Requests whose client came from the forwarding header.
    pub from_header: IntCounter,
    /// Requests whose forwarding header held an entry that is not an
    /// address: charged to the last trusted proxy reached.
    pub header_stopped: IntCounter,
}

impl std::fmt::Debug for ClientMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientMetrics").finish_non_exhaustive()
    }
}

impl ClientMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> ClientMetrics {
        let header = r.counter_vec(
            "proxy_protocol_total",
            "Connections to the client listener by their PROXY protocol header, by result \
             (v1, v2, local, absent are served; the others are closed)",
            &["result"],
        );
        let result = |name: &str| header.with_label_values(&[name]);
        let identity = r.counter_vec(
            "client_identity_total",
            "Requests by where their client address came from",
            &["source"],
        );
        let source = |name: &str| identity.with_label_values(&[name]);
        ClientMetrics {
            v1: result("v1"),
            v2: result("v2"),
            local: result("local"),
            absent: result("absent"),
            missing: result("missing"),
            too_long: result("too_long"),
            invalid_v1: result("invalid_v1"),
            invalid_v2: result("invalid_v2"),
            wrong_version: result("wrong_version"),
            timeout: result("timeout"),
            closed: result("closed"),
            untrusted: result("untrusted"),
            from_peer: source("peer"),
            from_header: source("forwarded_header"),
            header_stopped: source("forwarded_header_stopped"),
        }
    }

    /// Counts a header refused as malformed.
    pub fn malformed(&self, why: Malformed) -> &IntCounter {
        match why {
            Malformed::Missing => &self.missing,
            Malformed::TooLong => &self.too_long,
            Malformed::Invalid(txgate_identity::proxy_protocol::Version::V1) => &self.invalid_v1,
            Malformed::Invalid(txgate_identity::proxy_protocol::Version::V2) => &self.invalid_v2,
        }
    }

    /// The counter of a request's client source.
    pub fn found(&self, how: How) -> &IntCounter {
        match how {
            How::Peer => &self.from_peer,
            How::Header => &self.from_header,
            How::Stopped => &self.header_stopped,
        }
    }
}
