//! The configuration checked once, with every value that needs parsing
//! parsed: what the daemon starts from. [`Settings::new`] is the one
//! validation: each section's `validate` checks its keys and returns what
//! it parsed, then the rules between sections; after it nothing parses a
//! setting again or falls back to a default, because every parsed value is
//! here.

use std::net::SocketAddr;
use std::ops::Deref;

use crate::{Addresses, AegesAccess, Config, ConfigError, HttpUrl, IpNet, NodeSet, Source};

/// A config that passed validation, and what its strings mean.
#[derive(Debug, Clone)]
pub struct Settings {
    config: Config,
    nodes: NodeSet,
    /// Each node's WebSocket endpoint, in [`NodeSet::nodes`]' order.
    websocket_urls: Vec<HttpUrl>,
    sources: Vec<Source>,
    trusted_proxies: Vec<IpNet>,
    exempt: Vec<IpNet>,
    admin_token: Option<String>,
    aeges: AegesAccess,
    conditional: Addresses,
}

impl Settings {
    /// Validates `config`, parsing each value once; an error names the key
    /// at fault.
    pub fn new(config: Config) -> Result<Settings, ConfigError> {
        let trusted_proxies = config.server.validate()?;
        config.admission.validate()?;
        let exempt = config.limits.validate()?;
        config.rpc.validate()?;
        let nodes = config.upstream.validate()?;
        let admin_token = config.admin.validate()?;
        config.shutdown.validate()?;
        config.log.validate()?;
        config.screen.validate()?;
        let sources = config.sidecar.validate()?;
        let aeges = config.aeges.validate()?;
        config.redis.validate()?;
        let conditional = config.conditional.validate()?;
        let websocket_urls = match config.websocket.validate()? {
            // `websocket.upstream_url` names one node's endpoint: with a
            // group, each node says its own (`ws_url`, or derived).
            Some(_) if !nodes.is_short_form() => {
                return Err(ConfigError::new(
                    "websocket.upstream_url",
                    "names one node's endpoint: with [[upstream.nodes]], set each node's ws_url",
                ));
            }
            Some(url) => vec![url],
            None => nodes
                .nodes()
                .iter()
                .map(crate::node_websocket)
                .collect::<Result<_, _>>()?,
        };
        config.check_relations(aeges.listen)?;
        Ok(Settings {
            config,
            nodes,
            websocket_urls,
            sources,
            trusted_proxies,
            exempt,
            admin_token,
            aeges,
            conditional,
        })
    }

    /// The file's values, as validated.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The primary node's URL: `upstream.url`, or with `[[upstream.nodes]]`
    /// the first sequencer's ([`NodeSet::primary`]).
    pub fn upstream_url(&self) -> &HttpUrl {
        &self.nodes.primary().url
    }

    /// The nodes behind `[upstream]`: the short form's one, or
    /// `[[upstream.nodes]]`.
    pub fn nodes(&self) -> &NodeSet {
        &self.nodes
    }

    /// The primary node's WebSocket endpoint, set or derived
    /// ([`Config::websocket_upstream`]).
    pub fn websocket_url(&self) -> &HttpUrl {
        let primary = self.nodes.primary();
        let i = self
            .nodes
            .nodes()
            .iter()
            .position(|n| n == primary)
            .unwrap_or(0);
        &self.websocket_urls[i]
    }

    /// Each node's WebSocket endpoint, in [`NodeSet::nodes`]' order: the
    /// short form's `websocket.upstream_url` when set, else each node's
    /// `ws_url`, or derived from its URL.
    pub fn websocket_urls(&self) -> &[HttpUrl] {
        &self.websocket_urls
    }

    /// `sidecar.url` and `[[sidecar.sources]]`, checked.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// Whether calls are tracked hot: a source is asked ShouldForward,
    /// about hot calls only.
    pub fn tracks_hot_calls(&self) -> bool {
        self.config.sidecar.tracks_hot_calls(&self.sources)
    }

    /// `server.trusted_proxies`.
    pub fn trusted_proxies(&self) -> &[IpNet] {
        &self.trusted_proxies
    }

    /// `limits.exempt`.
    pub fn exempt(&self) -> &[IpNet] {
        &self.exempt
    }

    /// The admin listener's bearer token (`admin.token_file`), if set.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// The Aeges listener's address (`aeges.listen`; `None`: off).
    pub fn aeges_listen(&self) -> Option<SocketAddr> {
        self.aeges.listen
    }

    /// `aeges.report_allow`.
    pub fn aeges_report_allow(&self) -> &[IpNet] {
        &self.aeges.report_allow
    }

    /// `aeges.verify_allow`.
    pub fn aeges_verify_allow(&self) -> &[IpNet] {
        &self.aeges.verify_allow
    }

    /// `aeges.proxyd_allow`.
    pub fn aeges_proxyd_allow(&self) -> &[IpNet] {
        &self.aeges.proxyd_allow
    }

    /// `conditional.callers`, as addresses.
    pub fn conditional_callers(&self) -> &[[u8; 20]] {
        &self.conditional.callers
    }

    /// `conditional.targets`, as addresses.
    pub fn conditional_targets(&self) -> &[[u8; 20]] {
        &self.conditional.targets
    }
}

impl Deref for Settings {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_settle_and_parse() {
        let s = Settings::new(Config::default()).unwrap();
        assert_eq!(*s.upstream_url(), s.upstream.endpoint().unwrap());
        assert!(s.nodes().is_short_form());
        assert_eq!(s.nodes().nodes().len(), 1);
        assert_eq!(*s.websocket_url(), s.config().websocket_upstream().unwrap());
        assert_eq!(s.sources(), s.sidecar.sources().unwrap());
        assert_eq!(s.aeges_listen(), None);
        assert!(s.admin_token().is_none());
        assert!(!s.tracks_hot_calls());
    }

    #[test]
    fn a_value_that_does_not_parse_is_refused_naming_its_key() {
        let mut c = Config::default();
        c.conditional.targets = vec!["0x12".into()];
        let e = Settings::new(c).unwrap_err();
        assert!(e.to_string().contains("conditional.targets[0]"), "{e}");
    }

    #[test]
    fn the_websocket_endpoint_is_set_or_derived() {
        let mut c = Config::default();
        c.upstream.url = "https://node.internal:8545/rpc".into();
        let s = Settings::new(c.clone()).unwrap();
        let ws = s.websocket_url();
        assert!(ws.is_tls());
        assert_eq!((ws.authority(), ws.path()), ("node.internal:8545", "/rpc"));
        c.websocket.upstream_url = "ws://other:8546".into();
        let s = Settings::new(c).unwrap();
        assert_eq!(s.websocket_url().authority(), "other:8546");
        assert_eq!(s.websocket_urls().len(), 1);
    }

    #[test]
    fn each_node_of_a_group_has_its_websocket_endpoint() {
        let toml = r#"
            [[upstream.nodes]]
            name = "replica-a"
            url = "http://10.0.0.2:8545"
            role = "replica"
            [[upstream.nodes]]
            name = "seq"
            url = "https://10.0.0.1:8545/rpc"
            ws_url = "wss://10.0.0.1:8546/ws"
            role = "sequencer"
        "#;
        let c = Config::from_toml(toml).unwrap();
        let s = Settings::new(c.clone()).unwrap();
        let urls: Vec<String> = s
            .websocket_urls()
            .iter()
            .map(|u| format!("{}{}", u.authority(), u.path()))
            .collect();
        assert_eq!(urls, ["10.0.0.2:8545/", "10.0.0.1:8546/ws"]);
        assert!(!s.websocket_urls()[0].is_tls() && s.websocket_urls()[1].is_tls());
        // The primary (the first sequencer) is the second node.
        assert_eq!(s.websocket_url().authority(), "10.0.0.1:8546");
        // One endpoint for a whole group is refused, naming the key.
        let mut c = c;
        c.websocket.upstream_url = "ws://10.0.0.9:8546".into();
        assert_eq!(Settings::new(c).unwrap_err().key, "websocket.upstream_url");
    }
}
