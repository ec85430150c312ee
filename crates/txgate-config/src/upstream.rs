//! `[upstream]`: the node txgate forwards to, or the group of nodes
//! (`[[upstream.nodes]]`, see [`crate::nodes`]) it is an endpoint over.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::admission::AdmissionConfig;
use crate::error::{ConfigError, require_positive};
use crate::nodes::{
    DEFAULT_CONDUCTOR_URL, DEFAULT_FAIL_AFTER, DEFAULT_MAX_BLOCK_LAG, DEFAULT_MAX_HEAD_AGE_MS,
    DEFAULT_PROBE_TIMEOUT_MS, DEFAULT_READ_YOUR_WRITES_MS, DEFAULT_RECOVER_AFTER, GroupKeys,
    NodeConfig, NodeSet, Role,
};
use crate::tls::UpstreamTlsConfig;
use crate::url::HttpUrl;

/// Default upstream node: the short form's, defined with the group.
pub use crate::nodes::DEFAULT_UPSTREAM;
/// Default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Default upstream call timeout (headers and body).
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
/// Default upstream timeout of an `eth_sendRawTransactionSync` call: above
/// the longest wait a node grants one (go-ethereum's and op-geth's
/// `--rpc.txsync.maxtimeout`, 1 min; reth's 30 s), so the node's own
/// timeout answer (code 4) arrives first.
pub const DEFAULT_SYNC_CALL_TIMEOUT_MS: u64 = 65_000;
/// Default cap on an upstream response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;
/// Default idle keep-alive connections kept to the upstream (0: same as
/// `admission.max_in_flight`).
pub const DEFAULT_POOL_MAX_IDLE: usize = 0;
/// Default idle time before a pooled upstream connection is closed: below
/// the idle timeouts of what commonly stands on the other side (an AWS
/// load balancer's 60 s, nginx's 75 s, geth's 120 s), so that txgate
/// drops an idle connection before the other side closes it under a
/// submission (which is not written twice).
pub const DEFAULT_POOL_IDLE_TIMEOUT_MS: u64 = 30_000;
/// Default interval of the upstream health probe behind `/readyz` (with
/// `[[upstream.nodes]]`, of each node's probe).
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 2_000;

/// The upstream node, or group of nodes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// `http://host[:port][/path]` or `https://...` of the node (see
    /// [`HttpUrl`] for what is accepted): the short form of a group of one
    /// sequencer. Left at [`DEFAULT_UPSTREAM`] when `nodes` is set.
    pub url: String,
    /// The group of nodes (`[[upstream.nodes]]`); empty: the short form,
    /// `url`.
    pub nodes: Vec<NodeConfig>,
    /// Method name (exact) to the role it is sent to
    /// (`[upstream.methods]`), over the proxy's own choice.
    pub methods: BTreeMap<String, Role>,
    /// Deadline of one node probe.
    #[serde(
        rename = "probe_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub probe_timeout: Duration,
    /// Probes failed in a row that take a node out.
    pub fail_after: u32,
    /// Good probes in a row that bring a node back.
    pub recover_after: u32,
    /// Blocks a node's head may trail the best head and stay in (0: it
    /// must be at the best head).
    pub max_block_lag: u64,
    /// Time a node's head may stand still while another node's advances.
    #[serde(
        rename = "max_head_age_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub max_head_age: Duration,
    /// How long after a client's own submission its
    /// `eth_getTransactionCount`, `eth_getTransactionReceipt` and
    /// `eth_call` go to the sequencer; `None` (0 in the file): off.
    #[serde(
        rename = "read_your_writes_ms",
        deserialize_with = "crate::duration::millis_or_off"
    )]
    pub read_your_writes: Option<Duration>,
    /// op-conductor's RPC endpoints (`http://` or `https://`), one URL or
    /// a list in the file (`""`: none): when set, submissions follow its
    /// leader, each sequencer known by its `conductor_id`; empty: none.
    #[serde(deserialize_with = "crate::nodes::conductor_urls")]
    pub conductor_url: Vec<String>,
    /// Connect timeout: TCP, and the TLS handshake for `https://` (the
    /// WebSocket handshake gets as long again).
    #[serde(
        rename = "connect_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub connect_timeout: Duration,
    /// Whole-call timeout: request sent, response headers and body read.
    #[serde(
        rename = "call_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub call_timeout: Duration,
    /// The same for a call (or a batch) that holds an
    /// `eth_sendRawTransactionSync`, which the node answers once the
    /// transaction is in a block or its own timeout passes.
    #[serde(
        rename = "sync_call_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub sync_call_timeout: Duration,
    /// Upstream response body cap.
    pub max_response_bytes: usize,
    /// Idle keep-alive connections kept; 0 means `admission.max_in_flight`.
    pub pool_max_idle: usize,
    /// Idle time before a pooled connection is closed.
    #[serde(
        rename = "pool_idle_timeout_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub pool_idle_timeout: Duration,
    /// Interval of the health probe (`eth_chainId`) behind `/readyz`.
    #[serde(
        rename = "health_interval_ms",
        deserialize_with = "crate::duration::millis"
    )]
    pub health_interval: Duration,
    /// What an `https://` node is trusted by (`[upstream.tls]`).
    pub tls: UpstreamTlsConfig,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            url: DEFAULT_UPSTREAM.to_string(),
            nodes: Vec::new(),
            methods: BTreeMap::new(),
            probe_timeout: Duration::from_millis(DEFAULT_PROBE_TIMEOUT_MS),
            fail_after: DEFAULT_FAIL_AFTER,
            recover_after: DEFAULT_RECOVER_AFTER,
            max_block_lag: DEFAULT_MAX_BLOCK_LAG,
            max_head_age: Duration::from_millis(DEFAULT_MAX_HEAD_AGE_MS),
            read_your_writes: crate::duration::ms_or_off(DEFAULT_READ_YOUR_WRITES_MS),
            conductor_url: DEFAULT_CONDUCTOR_URL
                .iter()
                .map(|u| u.to_string())
                .collect(),
            connect_timeout: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            call_timeout: Duration::from_millis(DEFAULT_CALL_TIMEOUT_MS),
            sync_call_timeout: Duration::from_millis(DEFAULT_SYNC_CALL_TIMEOUT_MS),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            pool_max_idle: DEFAULT_POOL_MAX_IDLE,
            pool_idle_timeout: Duration::from_millis(DEFAULT_POOL_IDLE_TIMEOUT_MS),
            health_interval: Duration::from_millis(DEFAULT_HEALTH_INTERVAL_MS),
            tls: UpstreamTlsConfig::default(),
        }
    }
}

impl UpstreamConfig {
    /// `upstream.url` parsed: the one parser both `check-config` and the
    /// upstream client use. The short form's node; with
    /// `[[upstream.nodes]]`, see [`UpstreamConfig::node_set`].
    pub fn endpoint(&self) -> Result<HttpUrl, ConfigError> {
        crate::nodes::short_form_url(&self.url)
    }

    /// The nodes, checked: the short form (`url`, one sequencer named
    /// `upstream`) or the `[[upstream.nodes]]` entries, with
    /// `[upstream.methods]`, `conductor_url` and the TLS tables.
    ///
    /// Refused, naming the key: `url` set beside `nodes`; a URL that does
    /// not parse; a bad name or weight; a name or endpoint listed twice; no
    /// sequencer; more than [`MAX_NODES`](crate::nodes::MAX_NODES) nodes; a
    /// method name that is empty, has whitespace or `*`; a method sent to
    /// a builder when no node is one; with `conductor_url`, a sequencer
    /// without a `conductor_id`, two with the same one, or the short form;
    /// a `conductor_id` on a node that is no sequencer, or without
    /// `conductor_url`.
    pub fn node_set(&self) -> Result<NodeSet, ConfigError> {
        crate::nodes::node_set(GroupKeys {
            url: &self.url,
            nodes: &self.nodes,
            methods: &self.methods,
            conductor_url: &self.conductor_url,
            tls: &self.tls,
        })
    }

    /// The idle pool size to use, never below the in-flight cap.
    pub fn effective_pool_max_idle(&self, admission: &AdmissionConfig) -> usize {
        if self.pool_max_idle == 0 {
            admission.max_in_flight
        } else {
            self.pool_max_idle
        }
    }

    /// Checks the `upstream.*` keys on their own (`upstream.pool_max_idle`
    /// is checked against `admission.max_in_flight` by
    /// [`Config::validate`](crate::Config::validate)).
    /// Returns the nodes ([`UpstreamConfig::node_set`]).
    pub fn validate(&self) -> Result<NodeSet, ConfigError> {
        let nodes = self.node_set()?;
        require_positive(&[
            ("upstream.connect_timeout_ms", &self.connect_timeout),
            ("upstream.call_timeout_ms", &self.call_timeout),
            ("upstream.sync_call_timeout_ms", &self.sync_call_timeout),
            ("upstream.max_response_bytes", &self.max_response_bytes),
            ("upstream.pool_idle_timeout_ms", &self.pool_idle_timeout),
            ("upstream.health_interval_ms", &self.health_interval),
            ("upstream.probe_timeout_ms", &self.probe_timeout),
            ("upstream.fail_after", &self.fail_after),
            ("upstream.recover_after", &self.recover_after),
            ("upstream.max_head_age_ms", &self.max_head_age),
        ])?;
        Ok(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&mut UpstreamConfig);

    fn refused(change: impl FnOnce(&mut UpstreamConfig)) -> ConfigError {
        let mut c = UpstreamConfig::default();
        change(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn defaults_are_valid() {
        UpstreamConfig::default().validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: [(Change, &str); 7] = [
            (
                |c| c.connect_timeout = Duration::ZERO,
                "upstream.connect_timeout_ms",
            ),
            (
                |c| c.call_timeout = Duration::ZERO,
                "upstream.call_timeout_ms",
            ),
            (
                |c| c.sync_call_timeout = Duration::ZERO,
                "upstream.sync_call_timeout_ms",
            ),
            (|c| c.max_response_bytes = 0, "upstream.max_response_bytes"),
            (
                |c| c.pool_idle_timeout = Duration::ZERO,
                "upstream.pool_idle_timeout_ms",
            ),
            (
                |c| c.health_interval = Duration::ZERO,
                "upstream.health_interval_ms",
            ),
            (|c| c.url = "ftp://x".into(), "upstream.url"),
        ];
        for (change, key) in cases {
            assert_eq!(refused(change).key, key);
        }
    }

    #[test]
    fn unusable_urls_are_refused_naming_the_key() {
        for url in [
            "http://127.0.0.1:notaport",
            "http://h:0",
            "http://h:65536",
            "http://",
            "http:///x",
            "ws://x",
            "http://user@h:1",
            "http://h:1/a b",
        ] {
            let e = refused(|c| c.url = url.into());
            assert_eq!(e.key, "upstream.url", "{url}: {e}");
            assert!(e.message.contains(&format!("`{url}`")), "{url}: {e}");
            assert!(e.to_string().starts_with("`upstream.url`: "), "{e}");
        }
    }

    #[test]
    fn usable_urls_are_parsed() {
        for (url, host, port, path) in [
            ("http://127.0.0.1:8546", "127.0.0.1", 8546, "/"),
            (
                "http://node.internal/rpc/v1",
                "node.internal",
                80,
                "/rpc/v1",
            ),
            ("http://[::1]:9000/x", "::1", 9000, "/x"),
        ] {
            let c = UpstreamConfig {
                url: url.into(),
                ..UpstreamConfig::default()
            };
            c.validate().unwrap();
            let e = c.endpoint().unwrap();
            assert_eq!((e.host(), e.port(), e.path()), (host, port, path), "{url}");
        }
    }

    #[test]
    fn pool_defaults_to_in_flight_cap() {
        let admission = AdmissionConfig::default();
        let c = UpstreamConfig::default();
        assert_eq!(
            c.effective_pool_max_idle(&admission),
            admission.max_in_flight
        );
        let c = UpstreamConfig {
            pool_max_idle: 5_000,
            ..UpstreamConfig::default()
        };
        assert_eq!(c.effective_pool_max_idle(&admission), 5_000);
    }
}
