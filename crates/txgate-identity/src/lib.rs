//! Who is calling txgate, with no I/O.
//!
//! Behind a load balancer every TCP peer is the balancer. The client is
//! learned from what the balancer adds, and only from a peer the operator
//! trusts ([`TrustedProxies`]):
//!
//! - [`proxy_protocol`]: the PROXY protocol header (v1 text, v2 binary) at
//!   the start of a connection, framed here so that a header split across
//!   TCP segments is waited for and a malformed one is refused at once;
//! - [`forwarded`]: `X-Forwarded-For` or RFC 7239 `Forwarded`, read right
//!   to left: the client is the first address, from the right, that is not
//!   itself a trusted proxy. The leftmost entry, which proxyd and other
//!   RPC proxies take, is whatever the client chose to send.
//!
//! ```
//! use std::net::IpAddr;
//! use txgate_identity::{TrustedProxies, forwarded::{Header, resolve}};
//! let trusted = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
//! let peer: IpAddr = "10.0.0.5".parse().unwrap();
//! // A client forged "6.6.6.6"; the balancer appended the address it saw.
//! let found = resolve(peer, &trusted, Header::XForwardedFor, [&b"6.6.6.6, 203.0.113.7"[..]]);
//! assert_eq!(found.ip, "203.0.113.7".parse::<IpAddr>().unwrap());
//! ```

pub mod forwarded;
pub mod proxy_protocol;

use std::net::IpAddr;

use ipnet::IpNet;

/// The networks whose connections may speak for someone else (PROXY
/// protocol, forwarding headers). Empty: nobody; every client is its TCP
/// peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Trusts `nets` (each truncated to its prefix).
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies {
            nets: nets.into_iter().map(|n| n.trunc()).collect(),
        }
    }

    /// Whether no network is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy (an IPv4 address seen through an
    /// IPv6 socket is checked as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv4 address written as IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as the
/// IPv4 address it is, so that limits and allow-lists see one client.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_by_network_and_sees_mapped_ipv4() {
        let t = TrustedProxies::new(vec![
            "10.1.2.3/8".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ]);
        assert!(t.contains("10.200.0.1".parse().unwrap()));
        assert!(t.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(t.contains("fd12::1".parse().unwrap()));
        assert!(!t.contains("11.0.0.1".parse().unwrap()));
        assert!(!t.contains("::ffff:11.0.0.1".parse().unwrap()));
        assert!(!TrustedProxies::default().contains("127.0.0.1".parse().unwrap()));
        assert!(TrustedProxies::default().is_empty());
    }
}
