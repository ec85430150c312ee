//! `[[upstream.nodes]]`: the group of nodes behind `[upstream]`, each with
//! a [`Role`], and the `[upstream]` keys that say how the group is used.
//!
//! * a *sequencer* takes submissions (and serves reads when no replica
//!   can);
//! * a *replica* serves reads;
//! * a *builder* takes bundle methods.
//!
//! `upstream.url` is the short form of a group of one: a sequencer named
//! [`SHORT_FORM_NAME`] that serves everything. The two forms exclude each
//! other. [`UpstreamConfig::node_set`](crate::UpstreamConfig::node_set)
//! checks either into a [`NodeSet`], the one entry point for the proxy.
//!
//! This module knows nothing of [`UpstreamConfig`](crate::UpstreamConfig):
//! `upstream.rs` hands it the keys it checks ([`GroupKeys`]), so the
//! imports go one way, from `upstream` to `nodes`.
//!
//! A node's `name` labels its metrics and log lines; its URL never does,
//! since it may carry an API key.
//!
//! **op-conductor.** With `upstream.conductor_url` set, submissions follow
//! op-conductor's leader: each sequencer carries its `conductor_id`, the
//! raft server ID op-conductor knows it by (its `--raft.server.id`), every
//! sequencer has one and no two the same, so that the leader op-conductor
//! names maps to one node. `conductor_url` is one URL or a list: every
//! op-conductor instance answers for the whole cluster, so any one of them
//! will do, and a list keeps the leader known when the host of one goes
//! down (the proxy asks them in turn).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::ConfigError;
use crate::tls::UpstreamTlsConfig;
use crate::url::HttpUrl;

/// Default upstream node (`upstream.url`): the short form's one node.
pub const DEFAULT_UPSTREAM: &str = "http://127.0.0.1:8546";

/// Default probe deadline: half the default `health_interval_ms`, so a
/// probe ends before the next is due, and ample for a node's
/// `eth_blockNumber`, answered in milliseconds by a node that is well.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 1_000;
/// Default probes failed in a row that take a node out: one lost probe (a
/// pause, a dropped packet) does not; three (6 s at the default interval)
/// do.
pub const DEFAULT_FAIL_AFTER: u32 = 3;
/// Default good probes in a row that bring a node back: two, so that one
/// lucky answer from a flapping node does not.
pub const DEFAULT_RECOVER_AFTER: u32 = 2;
/// Default blocks a node's head may trail the best head and stay in:
/// proxyd's consensus default (`consensus_max_block_lag`), 16 s of 2 s OP
/// Stack blocks.
pub const DEFAULT_MAX_BLOCK_LAG: u64 = 8;
/// Default time a node's head may stand still while another node's
/// advances: 15 blocks of 2 s, far above a normal pause, and it takes out
/// a stalled node on a chain whose blocks are too slow for the lag rule to
/// do it soon.
pub const DEFAULT_MAX_HEAD_AGE_MS: u64 = 30_000;
/// Default time a client's reads of its own state go to the sequencer
/// after it submitted: a replica trails by a block or two (2 s blocks and
/// gossip), so 5 s covers it and a client sees its own nonce and receipt.
pub const DEFAULT_READ_YOUR_WRITES_MS: u64 = 5_000;
/// Default: no op-conductor; submissions go to the sequencers as listed.
pub const DEFAULT_CONDUCTOR_URL: &[&str] = &[];
/// Most `upstream.conductor_url` entries (op-conductor clusters hold three
/// or five).
pub const MAX_CONDUCTORS: usize = 16;
/// Longest `conductor_id`, in characters.
pub const MAX_CONDUCTOR_ID_CHARS: usize = 256;
/// Default weight of a node among those of its role.
pub const DEFAULT_NODE_WEIGHT: u32 = 1;
/// Largest node weight.
pub const MAX_NODE_WEIGHT: u32 = 1_000;
/// Most `[[upstream.nodes]]` entries.
pub const MAX_NODES: usize = 64;
/// Longest node name, in characters.
pub const MAX_NODE_NAME_CHARS: usize = 64;
/// The name of the short form's one node (`upstream.url`).
pub const SHORT_FORM_NAME: &str = "upstream";

/// What a node is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes submissions; serves reads when no replica can.
    Sequencer,
    /// Serves reads.
    Replica,
    /// Takes bundle methods.
    Builder,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Sequencer, Role::Replica, Role::Builder];

    /// The name written in the config file, also fit for a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Sequencer => "sequencer",
            Role::Replica => "replica",
            Role::Builder => "builder",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[upstream.nodes]]` entry, as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Its label in metrics and logs: 1 to [`MAX_NODE_NAME_CHARS`] of
    /// `A-Z a-z 0-9 _ . -`, unique.
    pub name: String,
    /// `http://` or `https://` endpoint, parsed like `upstream.url`.
    pub url: String,
    /// `ws://` or `wss://` endpoint; empty: none given.
    #[serde(default)]
    pub ws_url: String,
    /// What it is for.
    pub role: Role,
    /// Its share of its role's traffic, 1 to [`MAX_NODE_WEIGHT`].
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Its own `[upstream.nodes.tls]`; absent: `[upstream.tls]`.
    #[serde(default)]
    pub tls: Option<UpstreamTlsConfig>,
    /// A sequencer's raft server ID in op-conductor's cluster; empty:
    /// none. Needed by every sequencer when `upstream.conductor_url` is
    /// set, refused otherwise.
    #[serde(default)]
    pub conductor_id: String,
}

fn default_weight() -> u32 {
    DEFAULT_NODE_WEIGHT
}

/// A node, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    /// Its label in metrics and logs (never the URL).
    pub name: String,
    /// Its HTTP endpoint.
    pub url: HttpUrl,
    /// Its WebSocket endpoint, when given.
    pub ws_url: Option<HttpUrl>,
    /// What it is for.
    pub role: Role,
    /// Its share of its role's traffic (1 to [`MAX_NODE_WEIGHT`]).
    pub weight: u32,
    /// What it is trusted by: its own, or `[upstream.tls]`.
    pub tls: UpstreamTlsConfig,
    /// A sequencer's raft server ID in op-conductor's cluster, when
    /// `upstream.conductor_url` is set.
    pub conductor_id: Option<String>,
}

/// The nodes behind `[upstream]`, checked: what
/// [`UpstreamConfig::node_set`](crate::UpstreamConfig::node_set) gives.
/// Holds at least one sequencer.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSet {
    nodes: Vec<NodeSpec>,
    methods: BTreeMap<String, Role>,
    conductors: Vec<HttpUrl>,
    short_form: bool,
}

impl NodeSet {
    /// Every node, in the file's order.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    /// The nodes of `role`, in the file's order.
    pub fn with_role(&self, role: Role) -> impl Iterator<Item = &NodeSpec> {
        self.nodes.iter().filter(move |n| n.role == role)
    }

    /// Whether a node has `role`.
    pub fn has(&self, role: Role) -> bool {
        self.with_role(role).next().is_some()
    }

    /// The first sequencer: the short form's node, or the first
    /// `[[upstream.nodes]]` entry with role sequencer.
    pub fn primary(&self) -> &NodeSpec {
        match self.with_role(Role::Sequencer).next() {
            Some(node) => node,
            None => unreachable!("a NodeSet is checked to hold a sequencer"),
        }
    }

    /// The role `[upstream.methods]` sends `method` to (the name exactly as
    /// written); `None`: not overridden.
    pub fn role_of(&self, method: &str) -> Option<Role> {
        self.methods.get(method).copied()
    }

    /// `[upstream.methods]`.
    pub fn methods(&self) -> &BTreeMap<String, Role> {
        &self.methods
    }

    /// op-conductor's RPC endpoints (`upstream.conductor_url`), in the
    /// file's order; empty: none. When set, submissions follow its leader,
    /// and every sequencer has a distinct
    /// [`conductor_id`](NodeSpec::conductor_id).
    pub fn conductors(&self) -> &[HttpUrl] {
        &self.conductors
    }

    /// Whether the group is the short form, `upstream.url`.
    pub fn is_short_form(&self) -> bool {
        self.short_form
    }
}

/// The `[upstream]` keys a [`NodeSet`] is checked from, borrowed from
/// [`UpstreamConfig`](crate::UpstreamConfig).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupKeys<'a> {
    /// `upstream.url`.
    pub url: &'a str,
    /// `[[upstream.nodes]]`.
    pub nodes: &'a [NodeConfig],
    /// `[upstream.methods]`.
    pub methods: &'a BTreeMap<String, Role>,
    /// `upstream.conductor_url`.
    pub conductor_url: &'a [String],
    /// `[upstream.tls]`.
    pub tls: &'a UpstreamTlsConfig,
}

/// `upstream.url` parsed, the key named when it does not.
pub(crate) fn short_form_url(url: &str) -> Result<HttpUrl, ConfigError> {
    HttpUrl::parse_upstream(url).map_err(|e| ConfigError::new("upstream.url", e))
}

/// Checks `url`, `nodes`, `methods`, `conductor_url` and the TLS tables
/// into a [`NodeSet`].
pub(crate) fn node_set(up: GroupKeys<'_>) -> Result<NodeSet, ConfigError> {
    let conductors = conductors(up.conductor_url)?;
    let short_form = up.nodes.is_empty();
    let nodes = if short_form {
        vec![NodeSpec {
            name: SHORT_FORM_NAME.to_string(),
            url: short_form_url(up.url)?,
            ws_url: None,
            role: Role::Sequencer,
            weight: DEFAULT_NODE_WEIGHT,
            tls: up.tls.clone(),
            conductor_id: None,
        }]
    } else {
        group(up)?
    };
    up.tls.validate()?;
    for (method, &role) in up.methods {
        let key = method_key(method);
        if method.is_empty() {
            return Err(ConfigError::new(key, "a method name cannot be empty"));
        }
        if method.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::new(
                key,
                format!("{method:?} has whitespace: a method name is one word"),
            ));
        }
        if method.contains('*') {
            return Err(ConfigError::new(
                key,
                format!("`{method}`: methods are named exactly here; `*` is no wildcard"),
            ));
        }
        if role == Role::Builder && !nodes.iter().any(|n| n.role == Role::Builder) {
            return Err(ConfigError::new(
                key,
                "is sent to a builder, but no [[upstream.nodes]] entry has role builder",
            ));
        }
    }
    if short_form && !conductors.is_empty() {
        return Err(ConfigError::new(
            "upstream.conductor_url",
            "following op-conductor's leader needs [[upstream.nodes]], each sequencer with its \
             conductor_id; upstream.url is a single node",
        ));
    }
    Ok(NodeSet {
        nodes,
        methods: up.methods.clone(),
        conductors,
        short_form,
    })
}

/// The `[[upstream.nodes]]` entries, checked.
fn group(up: GroupKeys<'_>) -> Result<Vec<NodeSpec>, ConfigError> {
    if up.url != DEFAULT_UPSTREAM {
        return Err(ConfigError::new(
            "upstream.url",
            "set either upstream.url or [[upstream.nodes]]: with nodes, leave url out",
        ));
    }
    if up.nodes.len() > MAX_NODES {
        return Err(ConfigError::new(
            "upstream.nodes",
            format!("{} nodes; at most {MAX_NODES}", up.nodes.len()),
        ));
    }
    let following = !up.conductor_url.is_empty();
    let mut nodes: Vec<NodeSpec> = Vec::with_capacity(up.nodes.len());
    for (n, entry) in up.nodes.iter().enumerate() {
        let key = format!("upstream.nodes[{n}]");
        check_name(&format!("{key}.name"), &entry.name)?;
        let url = HttpUrl::parse_upstream(&entry.url)
            .map_err(|e| ConfigError::new(format!("{key}.url"), e))?;
        let ws_url = match entry.ws_url.as_str() {
            "" => None,
            ws => Some(
                HttpUrl::parse_ws(ws).map_err(|e| ConfigError::new(format!("{key}.ws_url"), e))?,
            ),
        };
        if !(1..=MAX_NODE_WEIGHT).contains(&entry.weight) {
            return Err(ConfigError::new(
                format!("{key}.weight"),
                format!("{} is not from 1 to {MAX_NODE_WEIGHT}", entry.weight),
            ));
        }
        let tls = match &entry.tls {
            Some(tls) => {
                tls.validate_at(&format!("{key}.tls"))?;
                tls.clone()
            }
            None => up.tls.clone(),
        };
        if let Some(i) = nodes
            .iter()
            .position(|o| o.name.eq_ignore_ascii_case(&entry.name))
        {
            return Err(ConfigError::new(
                format!("{key}.name"),
                format!(
                    "`{}` already names upstream.nodes[{i}] (names compare ignoring case)",
                    entry.name
                ),
            ));
        }
        // The URL may hold an API key: name the other entry, not the URL.
        if let Some(i) = nodes.iter().position(|o| same_endpoint(&o.url, &url)) {
            return Err(ConfigError::new(
                format!("{key}.url"),
                format!(
                    "the same endpoint as upstream.nodes[{i}] (`{}`): each node is listed once",
                    nodes[i].name
                ),
            ));
        }
        let conductor_id = conductor_id(&format!("{key}.conductor_id"), entry, following, &nodes)?;
        nodes.push(NodeSpec {
            name: entry.name.clone(),
            url,
            ws_url,
            role: entry.role,
            weight: entry.weight,
            tls,
            conductor_id,
        });
    }
    if !nodes.iter().any(|n| n.role == Role::Sequencer) {
        return Err(ConfigError::new(
            "upstream.nodes",
            "no node has role sequencer: submissions would have nowhere to go",
        ));
    }
    let unnamed = nodes
        .iter()
        .position(|n| n.role == Role::Sequencer && n.conductor_id.is_none());
    if let Some(i) = unnamed.filter(|_| following) {
        return Err(ConfigError::new(
            format!("upstream.nodes[{i}].conductor_id"),
            format!(
                "`{}` is a sequencer and upstream.conductor_url is set: give the raft server \
                 ID op-conductor knows it by (its --raft.server.id)",
                nodes[i].name
            ),
        ));
    }
    Ok(nodes)
}

/// `entry`'s `conductor_id`, checked at `key` against the nodes before it:
/// a sequencer's only, only while `following` op-conductor, 1 to
/// [`MAX_CONDUCTOR_ID_CHARS`] with no control character, and its own.
fn conductor_id(
    key: &str,
    entry: &NodeConfig,
    following: bool,
    before: &[NodeSpec],
) -> Result<Option<String>, ConfigError> {
    let id = entry.conductor_id.as_str();
    if id.is_empty() {
        return Ok(None);
    }
    if !following {
        return Err(ConfigError::new(
            key,
            "set upstream.conductor_url to follow op-conductor's leader, or leave conductor_id out",
        ));
    }
    if entry.role != Role::Sequencer {
        return Err(ConfigError::new(
            key,
            format!(
                "`{}` is a {}: only a sequencer has a conductor_id (op-conductor's leader is a \
                 sequencer)",
                entry.name, entry.role
            ),
        ));
    }
    if id.chars().count() > MAX_CONDUCTOR_ID_CHARS || id.chars().any(char::is_control) {
        return Err(ConfigError::new(
            key,
            format!(
                "{id:?}: a conductor_id is 1 to {MAX_CONDUCTOR_ID_CHARS} characters, none a \
                 control character"
            ),
        ));
    }
    // Raft compares server IDs as written: so does this.
    if let Some(i) = before
        .iter()
        .position(|o| o.conductor_id.as_deref() == Some(id))
    {
        return Err(ConfigError::new(
            key,
            format!(
                "`{id}` is already the conductor_id of upstream.nodes[{i}] (`{}`): each \
                 sequencer has its own",
                before[i].name
            ),
        ));
    }
    Ok(Some(id.to_string()))
}

/// `upstream.conductor_url`, checked: at most [`MAX_CONDUCTORS`] URLs,
/// each parsed like a node's and listed once.
fn conductors(urls: &[String]) -> Result<Vec<HttpUrl>, ConfigError> {
    if urls.len() > MAX_CONDUCTORS {
        return Err(ConfigError::new(
            "upstream.conductor_url",
            format!("{} URLs; at most {MAX_CONDUCTORS}", urls.len()),
        ));
    }
    let key = |n: usize| match urls.len() {
        1 => "upstream.conductor_url".to_string(),
        _ => format!("upstream.conductor_url[{n}]"),
    };
    let mut parsed: Vec<HttpUrl> = Vec::with_capacity(urls.len());
    for (n, url) in urls.iter().enumerate() {
        let url = HttpUrl::parse_upstream(url).map_err(|e| ConfigError::new(key(n), e))?;
        if let Some(i) = parsed.iter().position(|o| same_endpoint(o, &url)) {
            return Err(ConfigError::new(
                key(n),
                format!("the same endpoint as upstream.conductor_url[{i}]: each is listed once"),
            ));
        }
        parsed.push(url);
    }
    Ok(parsed)
}

/// Reads `upstream.conductor_url`: one URL (`""`: none) or a list of them.
pub(crate) fn conductor_urls<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Urls;
    impl<'de> Visitor<'de> for Urls {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a URL, or a list of URLs")
        }

        fn visit_str<E: serde::de::Error>(self, url: &str) -> Result<Vec<String>, E> {
            Ok(match url {
                "" => Vec::new(),
                url => vec![url.to_string()],
            })
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut urls = Vec::new();
            while let Some(url) = seq.next_element::<String>()? {
                urls.push(url);
            }
            Ok(urls)
        }
    }
    d.deserialize_any(Urls)
}

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let fits = (1..=MAX_NODE_NAME_CHARS).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if fits {
        return Ok(());
    }
    Err(ConfigError::new(
        key,
        format!(
            "{name:?}: a node name is 1 to {MAX_NODE_NAME_CHARS} of A-Z a-z 0-9 _ . - (it \
             labels metrics and logs)"
        ),
    ))
}

/// Same host (names compare ignoring case), port and path (query
/// included): the scheme is left out, as one port serves one of them.
fn same_endpoint(a: &HttpUrl, b: &HttpUrl) -> bool {
    a.port() == b.port() && a.host().eq_ignore_ascii_case(b.host()) && a.path() == b.path()
}

/// The dotted key of `method` in `[upstream.methods]`, quoted as TOML
/// quotes it when it is not a bare key.
fn method_key(method: &str) -> String {
    let bare = !method.is_empty()
        && method
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if bare {
        format!("upstream.methods.{method}")
    } else {
        format!("upstream.methods.{method:?}")
    }
}

#[cfg(test)]
mod tests;
