//! `[server]`: the client-facing listener.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::error::{ConfigError, require_positive};

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
/// Default: serve HTTP/2 cleartext (h2c, prior knowledge) beside HTTP/1.1.
pub const DEFAULT_HTTP2: bool = true;

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
    pub header_read_timeout_ms: u64,
    /// Time a client has to send its request body.
    pub body_read_timeout_ms: u64,
    /// Serve h2c (HTTP/2 with prior knowledge) beside HTTP/1.1.
    pub http2: bool,
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

    /// Checks the `server.*` keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("server.max_connections", self.max_connections as u64),
            ("server.header_read_timeout_ms", self.header_read_timeout_ms),
            ("server.body_read_timeout_ms", self.body_read_timeout_ms),
        ])
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: crate::parse_addr(DEFAULT_LISTEN),
            workers: DEFAULT_WORKERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            body_read_timeout_ms: DEFAULT_BODY_READ_TIMEOUT_MS,
            http2: DEFAULT_HTTP2,
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
            refused(|c| c.header_read_timeout_ms = 0),
            "server.header_read_timeout_ms"
        );
        assert_eq!(
            refused(|c| c.body_read_timeout_ms = 0),
            "server.body_read_timeout_ms"
        );
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
