//! `[server]`: the client-facing listener.

use std::net::SocketAddr;

use ipnet::IpNet;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};
use crate::net::nets;
use crate::tls::ServerTlsConfig;

/// Default RPC listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8545";
/// Default worker threads (0: one per available core).
pub const DEFAULT_WORKERS: usize = 0;
/// Default cap on open client connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time a client has to send its request headers.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 5_000;
/// Default time a client has to send its request body.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Default time a connection may go without starting a request.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default: serve HTTP/2 cleartext (h2c, prior knowledge) beside HTTP/1.1.
pub const DEFAULT_HTTP2: bool = true;
/// Default: no trusted proxy; every client is its TCP peer.
pub const DEFAULT_TRUSTED_PROXIES: [&str; 0] = [];
/// Default: no PROXY protocol header expected.
pub const DEFAULT_PROXY_PROTOCOL: ProxyProtocol = ProxyProtocol::Off;
/// Default: trusted proxies write `X-Forwarded-For`.
pub const DEFAULT_FORWARDED_HEADER: ForwardedHeader = ForwardedHeader::XForwardedFor;

/// Whether connections to the client listener start with a PROXY protocol
/// header (HAProxy's `send-proxy` / `send-proxy-v2`, cloud network load
/// balancers).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// No header; one would be read as HTTP and refused.
    Off,
    /// Every connection from a trusted proxy starts with a v1 (text) header.
    V1,
    /// Every connection from a trusted proxy starts with a v2 (binary) header.
    V2,
    /// A trusted proxy's connection may start with a v1 or v2 header, or
    /// with HTTP (for a migration, or balancers that differ).
    Optional,
}

/// Which header the trusted proxies write the client into. Only one is
/// read: a client could forge the other, which its proxy passes through.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`, read right to left.
    XForwardedFor,
    /// RFC 7239 `Forwarded` (`for=`), read right to left.
    Forwarded,
    /// Neither: the client is the TCP peer or the PROXY protocol source.
    None,
}

/// Client-facing server settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address for JSON-RPC clients.
    pub listen: SocketAddr,
    /// Worker threads, each with its own listener (`SO_REUSEPORT`), runtime
    /// and upstream pool; 0 means one per available core.
    pub workers: usize,
    /// Open connections at most; further clients wait in the accept queue.
    pub max_connections: usize,
    /// Time a client has to send its request headers (HTTP/1.1).
    #[serde(
        rename = "header_read_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub header_read_timeout: Duration,
    /// Time a client has to send its request body.
    #[serde(
        rename = "body_read_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub body_read_timeout: Duration,
    /// A connection that starts no request for this long (between once
    /// and twice it) is closed gracefully: calls under way finish, no new
    /// one starts. HTTP/1.1 waits at most `header_read_timeout_ms` for its
    /// next request anyway; this bounds HTTP/2, whose clients answer the
    /// keep-alive pings while idle.
    #[serde(
        rename = "idle_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub idle_timeout: Duration,
    /// Serve h2c (HTTP/2 with prior knowledge) beside HTTP/1.1.
    pub http2: bool,
    /// Networks (CIDR or bare addresses) of the load balancers and proxies
    /// whose PROXY protocol header and forwarding header are believed.
    /// Empty: none; every client is its TCP peer.
    pub trusted_proxies: Vec<String>,
    /// PROXY protocol on the client listener: `off`, `v1`, `v2` or
    /// `optional`. Only a trusted peer's header is read; a peer that is not
    /// trusted is closed on a listener that requires one.
    pub proxy_protocol: ProxyProtocol,
    /// The header trusted proxies write the client into:
    /// `x-forwarded-for`, `forwarded` or `none`.
    pub forwarded_header: ForwardedHeader,
    /// TLS on the client port (`[server.tls]`); off by default.
    pub tls: ServerTlsConfig,
}

impl ServerConfig {
    /// Worker threads to run.
    pub fn effective_workers(&self) -> usize {
        if self.workers == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            self.workers
        }
    }

    /// `server.trusted_proxies` parsed, each network truncated to its
    /// prefix.
    pub fn trusted_proxies(&self) -> Result<Vec<IpNet>, ConfigError> {
        nets("server.trusted_proxies", &self.trusted_proxies)
    }

    /// Checks the `server.*` keys; `server.trusted_proxies` parsed.
    pub fn validate(&self) -> Result<Vec<IpNet>, ConfigError> {
        require_positive(&[
            ("server.max_connections", &self.max_connections),
            ("server.header_read_timeout_ms", &self.header_read_timeout),
            ("server.body_read_timeout_ms", &self.body_read_timeout),
            ("server.idle_timeout_ms", &self.idle_timeout),
        ])?;
        self.tls.validate()?;
        let trusted = self.trusted_proxies()?;
        if self.proxy_protocol != ProxyProtocol::Off && trusted.is_empty() {
            return Err(ConfigError::new(
                "server.proxy_protocol",
                "is on but server.trusted_proxies is empty: a PROXY header is believed \
                 only from a trusted peer, so no connection could be served; list the \
                 load balancers' networks",
            ));
        }
        Ok(trusted)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: crate::parse_addr(DEFAULT_LISTEN),
            workers: DEFAULT_WORKERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS),
            body_read_timeout: Duration::from_millis(DEFAULT_BODY_READ_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            http2: DEFAULT_HTTP2,
            trusted_proxies: DEFAULT_TRUSTED_PROXIES.map(String::from).to_vec(),
            proxy_protocol: DEFAULT_PROXY_PROTOCOL,
            forwarded_header: DEFAULT_FORWARDED_HEADER,
            tls: ServerTlsConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(change: impl FnOnce(&mut ServerConfig)) -> String {
        let mut c = ServerConfig::default();
        change(&mut c);
        c.validate().unwrap_err().key
    }

    #[test]
    fn defaults_are_valid() {
        ServerConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        assert_eq!(refused(|c| c.max_connections = 0), "server.max_connections");
        assert_eq!(
            refused(|c| c.header_read_timeout = Duration::ZERO),
            "server.header_read_timeout_ms"
        );
        assert_eq!(
            refused(|c| c.body_read_timeout = Duration::ZERO),
            "server.body_read_timeout_ms"
        );
        assert_eq!(
            refused(|c| c.idle_timeout = Duration::ZERO),
            "server.idle_timeout_ms"
        );
        assert_eq!(
            refused(|c| c.trusted_proxies = vec!["10.0.0.0/33".into()]),
            "server.trusted_proxies"
        );
        assert_eq!(
            refused(|c| c.proxy_protocol = ProxyProtocol::V2),
            "server.proxy_protocol"
        );
    }

    #[test]
    fn proxy_settings_parse() {
        let c: ServerConfig = toml::from_str(
            "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nproxy_protocol = \"optional\"\n\
             forwarded_header = \"forwarded\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.proxy_protocol, ProxyProtocol::Optional);
        assert_eq!(c.forwarded_header, ForwardedHeader::Forwarded);
        assert_eq!(c.trusted_proxies().unwrap().len(), 2);
        for bad in [
            "proxy_protocol = \"v3\"",
            "forwarded_header = \"x-real-ip\"",
        ] {
            assert!(toml::from_str::<ServerConfig>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_workers_means_one_per_core() {
        assert!(ServerConfig::default().effective_workers() >= 1);
        let c = ServerConfig {
            workers: 3,
            ..ServerConfig::default()
        };
        assert_eq!(c.effective_workers(), 3);
    }
}
