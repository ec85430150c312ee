use std::time::Duration;

use super::*;
use crate::{Config, Settings, UpstreamConfig};

type Change = fn(&mut UpstreamConfig);

fn node(name: &str, url: &str, role: Role) -> NodeConfig {
    NodeConfig {
        name: name.into(),
        url: url.into(),
        ws_url: String::new(),
        role,
        weight: DEFAULT_NODE_WEIGHT,
        tls: None,
        conductor_id: String::new(),
    }
}

/// A sequencer, a replica and a builder.
fn group() -> UpstreamConfig {
    UpstreamConfig {
        nodes: vec![
            node("seq", "http://seq:8545", Role::Sequencer),
            node("rep", "http://rep:8545", Role::Replica),
            node("bld", "http://bld:8545", Role::Builder),
        ],
        ..UpstreamConfig::default()
    }
}

fn url(url: &str) -> HttpUrl {
    HttpUrl::parse_upstream(url).unwrap()
}

fn refused(change: impl FnOnce(&mut UpstreamConfig)) -> ConfigError {
    let mut c = group();
    change(&mut c);
    c.validate().unwrap_err()
}

#[test]
fn the_short_form_is_one_sequencer_named_upstream() {
    let mut c = UpstreamConfig::default();
    c.tls.ca_path = "ca.pem".into();
    let set = c.validate().unwrap();
    assert!(set.is_short_form());
    assert_eq!(
        set.nodes(),
        [NodeSpec {
            name: SHORT_FORM_NAME.into(),
            url: url(DEFAULT_UPSTREAM),
            ws_url: None,
            role: Role::Sequencer,
            weight: 1,
            tls: c.tls.clone(),
            conductor_id: None,
        }]
    );
    assert_eq!(set.primary().url, c.endpoint().unwrap());
    assert!(set.has(Role::Sequencer) && !set.has(Role::Replica) && !set.has(Role::Builder));
    assert_eq!(set.role_of("eth_call"), None);
    assert!(set.conductors().is_empty());
    // Reads may be sent to replicas that are not there: they fall back.
    c.methods.insert("eth_call".into(), Role::Replica);
    assert_eq!(
        c.validate().unwrap().role_of("eth_call"),
        Some(Role::Replica)
    );
}

#[test]
fn the_defaults_of_the_group_keys() {
    let c = UpstreamConfig::default();
    assert_eq!(c.probe_timeout, Duration::from_millis(1_000));
    assert_eq!((c.fail_after, c.recover_after, c.max_block_lag), (3, 2, 8));
    assert_eq!(c.max_head_age, Duration::from_secs(30));
    assert_eq!(c.read_your_writes, Some(Duration::from_secs(5)));
    assert!(c.conductor_url.is_empty());
    assert!(c.nodes.is_empty() && c.methods.is_empty());
}

#[test]
fn each_rule_names_its_key() {
    let cases: [(Change, &str); 28] = [
        (|c| c.url = "http://other:8545".into(), "upstream.url"),
        (
            |c| c.nodes.retain(|n| n.role != Role::Sequencer),
            "upstream.nodes",
        ),
        (|c| c.nodes[2].name = "SEQ".into(), "upstream.nodes[2].name"),
        (
            |c| c.nodes[1].url = "http://SEQ:8545/".into(),
            "upstream.nodes[1].url",
        ),
        (
            |c| c.nodes[1].url = "https://seq:8545".into(),
            "upstream.nodes[1].url",
        ),
        (
            |c| c.nodes[0].name = String::new(),
            "upstream.nodes[0].name",
        ),
        (|c| c.nodes[0].name = "a b".into(), "upstream.nodes[0].name"),
        (|c| c.nodes[0].name = "a/b".into(), "upstream.nodes[0].name"),
        (
            |c| c.nodes[0].name = "n\u{e9}".into(),
            "upstream.nodes[0].name",
        ),
        (
            |c| c.nodes[0].name = "x".repeat(65),
            "upstream.nodes[0].name",
        ),
        (|c| c.nodes[1].weight = 0, "upstream.nodes[1].weight"),
        (|c| c.nodes[1].weight = 1_001, "upstream.nodes[1].weight"),
        (
            |c| c.nodes[2].url = "ws://bld:8546".into(),
            "upstream.nodes[2].url",
        ),
        (
            |c| c.nodes[2].url = "http://bld:0".into(),
            "upstream.nodes[2].url",
        ),
        (
            |c| c.nodes[0].ws_url = "http://seq:8546".into(),
            "upstream.nodes[0].ws_url",
        ),
        (
            |c| {
                c.nodes[1].tls = Some(UpstreamTlsConfig {
                    client_cert_path: "c.pem".into(),
                    ..UpstreamTlsConfig::default()
                })
            },
            "upstream.nodes[1].tls.client_key_path",
        ),
        (
            |c| c.tls.client_key_path = "k.pem".into(),
            "upstream.tls.client_cert_path",
        ),
        (
            |c| {
                c.methods.insert(String::new(), Role::Replica);
            },
            "upstream.methods.\"\"",
        ),
        (
            |c| {
                c.methods.insert("eth call".into(), Role::Replica);
            },
            "upstream.methods.\"eth call\"",
        ),
        (
            |c| {
                c.methods.insert("eth_*".into(), Role::Replica);
            },
            "upstream.methods.\"eth_*\"",
        ),
        (
            |c| {
                c.nodes.retain(|n| n.role != Role::Builder);
                c.methods.insert("eth_sendBundle".into(), Role::Builder);
            },
            "upstream.methods.eth_sendBundle",
        ),
        (|c| c.fail_after = 0, "upstream.fail_after"),
        (|c| c.recover_after = 0, "upstream.recover_after"),
        (
            |c| c.probe_timeout = Duration::ZERO,
            "upstream.probe_timeout_ms",
        ),
        (
            |c| c.max_head_age = Duration::ZERO,
            "upstream.max_head_age_ms",
        ),
        (
            |c| c.conductor_url = vec!["ws://conductor:8547".into()],
            "upstream.conductor_url",
        ),
        (
            |c| {
                c.nodes = (0..=MAX_NODES)
                    .map(|n| node(&format!("n{n}"), &format!("http://n{n}:1"), Role::Sequencer))
                    .collect()
            },
            "upstream.nodes",
        ),
        (
            |c| c.nodes.push(node("seq", "http://seq2:1", Role::Replica)),
            "upstream.nodes[3].name",
        ),
    ];
    for (change, key) in cases {
        let e = refused(change);
        assert_eq!(e.key, key, "{e}");
        let mut c = group();
        change(&mut c);
        assert_eq!(c.node_set().err().or(Some(e.clone())), Some(e), "agree");
    }
}

#[test]
fn refusals_say_why_without_quoting_a_urls_secret() {
    let e = refused(|c| c.url = "http://other:8545".into());
    assert!(
        e.message
            .contains("either upstream.url or [[upstream.nodes]]"),
        "{e}"
    );
    let e = refused(|c| {
        c.nodes[0].url = "http://seq:8545/?key=s3cret".into();
        c.nodes[1].url = "http://SEQ:8545?key=s3cret".into();
    });
    assert_eq!(e.key, "upstream.nodes[1].url");
    assert!(
        e.message.contains("`seq`") && !e.message.contains("s3cret"),
        "{e}"
    );
    let e = refused(|c| c.nodes.retain(|n| n.role != Role::Sequencer));
    assert!(e.message.contains("sequencer"), "{e}");
    let e = refused(|c| c.nodes[1].weight = 0);
    assert!(e.message.contains("1 to 1000"), "{e}");
}

#[test]
fn what_is_allowed_at_the_edges() {
    let mut c = group();
    c.max_block_lag = 0;
    c.read_your_writes = None;
    c.url = DEFAULT_UPSTREAM.into();
    c.nodes[0].name = "A-z_0.9".into();
    c.nodes[1].name = "x".repeat(MAX_NODE_NAME_CHARS);
    c.nodes[1].weight = MAX_NODE_WEIGHT;
    // Same host and port, another path: another endpoint.
    c.nodes[2].url = "http://seq:8545/builder".into();
    c.nodes.retain(|n| n.role != Role::Replica);
    c.methods.insert("eth_getLogs".into(), Role::Replica);
    c.methods.insert("eth_sendBundle".into(), Role::Builder);
    c.conductor_url = vec!["http://conductor:8547".into()];
    c.nodes[0].conductor_id = "seq-0".into();
    let set = c.validate().unwrap();
    assert!(!set.is_short_form() && !set.has(Role::Replica));
    assert_eq!(set.role_of("eth_getLogs"), Some(Role::Replica));
    assert_eq!(set.role_of("eth_sendbundle"), None, "names are exact");
    assert_eq!(set.conductors(), [url("http://conductor:8547")]);
    assert_eq!(set.nodes()[0].conductor_id.as_deref(), Some("seq-0"));
    c.conductor_url.clear();
    c.nodes = (0..MAX_NODES)
        .map(|n| node(&format!("n{n}"), &format!("http://n{n}:1"), Role::Sequencer))
        .collect();
    c.methods.clear();
    assert_eq!(c.validate().unwrap().nodes().len(), MAX_NODES);
}

const FULL: &str = r#"
[upstream]
probe_timeout_ms = 500
fail_after = 5
recover_after = 1
max_block_lag = 0
max_head_age_ms = 12000
read_your_writes_ms = 0
conductor_url = "http://conductor:8547"

[upstream.tls]
ca_path = "group-ca.pem"

[upstream.methods]
eth_sendBundle = "builder"
eth_getLogs = "replica"
eth_call = "sequencer"

[[upstream.nodes]]
name = "seq-0"
url = "http://10.0.0.1:8545"
ws_url = "ws://10.0.0.1:8546"
role = "sequencer"
conductor_id = "sequencer-0"

[[upstream.nodes]]
name = "replica-a"
url = "https://replica-a.internal/rpc"
role = "replica"
weight = 3

[upstream.nodes.tls]
ca_path = "replica-a-ca.pem"
client_cert_path = "txgate.pem"
client_key_path = "txgate-key.pem"

[[upstream.nodes]]
name = "replica-b"
url = "https://replica-b.internal/rpc"
role = "replica"

[[upstream.nodes]]
name = "builder"
url = "http://10.0.0.4:8545"
role = "builder"
"#;

#[test]
fn a_full_group_reads_into_its_node_set() {
    let config = Config::from_toml(FULL).unwrap();
    let up = &config.upstream;
    assert_eq!(up.probe_timeout, Duration::from_millis(500));
    assert_eq!(
        (up.fail_after, up.recover_after, up.max_block_lag),
        (5, 1, 0)
    );
    assert_eq!(up.max_head_age, Duration::from_secs(12));
    assert_eq!(up.read_your_writes, None);
    let group_tls = UpstreamTlsConfig {
        ca_path: "group-ca.pem".into(),
        ..UpstreamTlsConfig::default()
    };
    let own_tls = UpstreamTlsConfig {
        ca_path: "replica-a-ca.pem".into(),
        client_cert_path: "txgate.pem".into(),
        client_key_path: "txgate-key.pem".into(),
    };
    let spec = |name: &str, u: &str, role, weight, tls: &UpstreamTlsConfig| NodeSpec {
        name: name.into(),
        url: url(u),
        ws_url: None,
        role,
        weight,
        tls: tls.clone(),
        conductor_id: None,
    };
    let expected = NodeSet {
        nodes: vec![
            NodeSpec {
                ws_url: Some(HttpUrl::parse_ws("ws://10.0.0.1:8546").unwrap()),
                conductor_id: Some("sequencer-0".into()),
                ..spec(
                    "seq-0",
                    "http://10.0.0.1:8545",
                    Role::Sequencer,
                    1,
                    &group_tls,
                )
            },
            spec(
                "replica-a",
                "https://replica-a.internal/rpc",
                Role::Replica,
                3,
                &own_tls,
            ),
            spec(
                "replica-b",
                "https://replica-b.internal/rpc",
                Role::Replica,
                1,
                &group_tls,
            ),
            spec(
                "builder",
                "http://10.0.0.4:8545",
                Role::Builder,
                1,
                &group_tls,
            ),
        ],
        methods: BTreeMap::from([
            ("eth_call".into(), Role::Sequencer),
            ("eth_getLogs".into(), Role::Replica),
            ("eth_sendBundle".into(), Role::Builder),
        ]),
        conductors: vec![url("http://conductor:8547")],
        short_form: false,
    };
    let settings = Settings::new(config).unwrap();
    assert_eq!(*settings.nodes(), expected);
    assert_eq!(settings.nodes().primary().name, "seq-0");
    assert_eq!(*settings.upstream_url(), url("http://10.0.0.1:8545"));
    // The sequencer's own ws_url is the WebSocket endpoint.
    assert_eq!(settings.websocket_url().authority(), "10.0.0.1:8546");
    assert_eq!(
        settings
            .nodes()
            .with_role(Role::Replica)
            .map(|n| n.weight)
            .sum::<u32>(),
        4
    );
}

#[test]
fn toml_mistakes_name_their_key() {
    let e =
        Config::from_toml(&FULL.replace("role = \"builder\"", "role = \"leader\"")).unwrap_err();
    assert_eq!(e.key, "upstream.nodes[3].role", "{e}");
    assert!(e.message.contains("leader"), "{e}");
    let e =
        Config::from_toml(&FULL.replace("eth_getLogs = \"replica\"", "eth_getLogs = \"reader\""))
            .unwrap_err();
    assert_eq!(e.key, "upstream.methods.eth_getLogs", "{e}");
    let e = Config::from_toml(&FULL.replace("weight = 3", "weight = -3")).unwrap_err();
    assert_eq!(e.key, "upstream.nodes[1].weight", "{e}");
    let e = Config::from_toml(&FULL.replace("weight = 3", "priority = 3")).unwrap_err();
    assert!(e.key.starts_with("upstream.nodes[1]"), "{e}");
    assert!(e.message.contains("priority"), "{e}");
    let e = Config::from_toml("[[upstream.nodes]]\nurl = \"http://h:1\"\nrole = \"replica\"\n")
        .unwrap_err();
    assert!(
        e.key.starts_with("upstream.nodes[0]") && e.message.contains("name"),
        "{e}"
    );
    let e =
        Config::from_toml("[[upstream.nodes]]\nname = \"a\"\nurl = \"http://h:1\"\n").unwrap_err();
    assert!(e.message.contains("role"), "{e}");
    // Read, then refused by validation, naming the key.
    let c = Config::from_toml(&FULL.replace("[upstream]\n", "[upstream]\nurl = \"http://h:1\"\n"))
        .unwrap();
    assert_eq!(c.validate().unwrap_err().key, "upstream.url");
}

#[test]
fn roles_are_named_as_written() {
    for role in Role::ALL {
        let parsed: BTreeMap<String, Role> =
            toml::from_str(&format!("m = \"{}\"", role.as_str())).unwrap();
        assert_eq!(parsed["m"], role);
        assert_eq!(role.to_string(), role.as_str());
    }
    assert!(toml::from_str::<BTreeMap<String, Role>>("m = \"Sequencer\"").is_err());
}

/// [`group`] following op-conductor: two sequencers, each with its raft
/// server ID, and a replica.
fn conducted() -> UpstreamConfig {
    let mut c = group();
    c.conductor_url = vec![
        "http://conductor-0:8547".into(),
        "http://conductor-1:8547".into(),
    ];
    c.nodes[0].conductor_id = "sequencer-0".into();
    let mut other = node("seq-b", "http://seq-b:8545", Role::Sequencer);
    other.conductor_id = "sequencer-1".into();
    c.nodes.push(other);
    c
}

#[test]
fn a_conducted_group_maps_each_sequencer_to_its_raft_id() {
    let set = conducted().validate().unwrap();
    assert_eq!(
        set.conductors(),
        [
            url("http://conductor-0:8547"),
            url("http://conductor-1:8547")
        ]
    );
    let ids: Vec<(&str, Option<&str>)> = set
        .nodes()
        .iter()
        .map(|n| (n.name.as_str(), n.conductor_id.as_deref()))
        .collect();
    assert_eq!(
        ids,
        [
            ("seq", Some("sequencer-0")),
            ("rep", None),
            ("bld", None),
            ("seq-b", Some("sequencer-1")),
        ]
    );
    // Raft compares IDs as written: these two are two IDs.
    let mut c = conducted();
    c.nodes[3].conductor_id = "SEQUENCER-0".into();
    c.validate().unwrap();
}

#[test]
fn each_conductor_rule_names_its_key() {
    let cases: [(Change, &str, &str); 12] = [
        (
            |c| c.nodes[3].conductor_id.clear(),
            "upstream.nodes[3].conductor_id",
            "`seq-b` is a sequencer and upstream.conductor_url is set",
        ),
        (
            |c| c.nodes[1].conductor_id = "sequencer-2".into(),
            "upstream.nodes[1].conductor_id",
            "`rep` is a replica: only a sequencer has a conductor_id",
        ),
        (
            |c| c.nodes[2].conductor_id = "sequencer-2".into(),
            "upstream.nodes[2].conductor_id",
            "`bld` is a builder",
        ),
        (
            |c| c.conductor_url.clear(),
            "upstream.nodes[0].conductor_id",
            "set upstream.conductor_url",
        ),
        (
            |c| c.nodes[3].conductor_id = "sequencer-0".into(),
            "upstream.nodes[3].conductor_id",
            "already the conductor_id of upstream.nodes[0] (`seq`)",
        ),
        (
            |c| c.nodes[0].conductor_id = "seq\n0".into(),
            "upstream.nodes[0].conductor_id",
            "control character",
        ),
        (
            |c| c.nodes[0].conductor_id = "x".repeat(MAX_CONDUCTOR_ID_CHARS + 1),
            "upstream.nodes[0].conductor_id",
            "1 to 256 characters",
        ),
        (
            |c| c.nodes.clear(),
            "upstream.conductor_url",
            "needs [[upstream.nodes]]",
        ),
        (
            |c| c.conductor_url[1] = "ws://conductor-1:8547".into(),
            "upstream.conductor_url[1]",
            "ws://conductor-1:8547",
        ),
        (
            |c| c.conductor_url[1] = "http://CONDUCTOR-0:8547/".into(),
            "upstream.conductor_url[1]",
            "the same endpoint as upstream.conductor_url[0]",
        ),
        (
            |c| c.conductor_url[0] = String::new(),
            "upstream.conductor_url[0]",
            "",
        ),
        (
            |c| {
                c.conductor_url = (0..=MAX_CONDUCTORS)
                    .map(|n| format!("http://conductor-{n}:8547"))
                    .collect()
            },
            "upstream.conductor_url",
            "17 URLs; at most 16",
        ),
    ];
    for (change, key, says) in cases {
        let mut c = conducted();
        change(&mut c);
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    // One URL is named without an index.
    let mut c = conducted();
    c.conductor_url = vec!["ftp://conductor".into()];
    assert_eq!(c.validate().unwrap_err().key, "upstream.conductor_url");
}

#[test]
fn conductor_url_is_one_url_or_a_list() {
    let read = |value: &str| {
        Config::from_toml(&format!("[upstream]\nconductor_url = {value}\n"))
            .map(|c| c.upstream.conductor_url)
    };
    assert_eq!(read("\"\"").unwrap(), Vec::<String>::new());
    assert_eq!(read("[]").unwrap(), Vec::<String>::new());
    assert_eq!(read("\"http://c:8547\"").unwrap(), ["http://c:8547"]);
    assert_eq!(
        read("[\"http://c0:8547\", \"http://c1:8547\"]").unwrap(),
        ["http://c0:8547", "http://c1:8547"]
    );
    for bad in ["8547", "[8547]", "{ url = \"http://c:8547\" }"] {
        let e = read(bad).unwrap_err();
        assert!(e.key.starts_with("upstream.conductor_url"), "{bad}: {e}");
    }
    let e = read("true").unwrap_err();
    assert!(e.message.contains("a URL, or a list of URLs"), "{e}");
    // The file's form, checked whole: conductor_id is read per node.
    let config = Config::from_toml(
        "[upstream]\nconductor_url = \"http://c:8547\"\n\n[[upstream.nodes]]\nname = \"a\"\n\
         url = \"http://a:1\"\nrole = \"sequencer\"\nconductor_id = \"op-a\"\n",
    )
    .unwrap();
    let set = config.upstream.validate().unwrap();
    assert_eq!(set.primary().conductor_id.as_deref(), Some("op-a"));
    assert_eq!(set.conductors(), [url("http://c:8547")]);
}
