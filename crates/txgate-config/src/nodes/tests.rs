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
        }]
    );
    assert_eq!(set.primary().url, c.endpoint().unwrap());
    assert!(set.has(Role::Sequencer) && !set.has(Role::Replica) && !set.has(Role::Builder));
    assert_eq!(set.role_of("eth_call"), None);
    assert_eq!(set.conductor(), None);
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
    assert_eq!(c.conductor_url, "");
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
            |c| c.conductor_url = "ws://conductor:8547".into(),
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
    c.conductor_url = "http://conductor:8547".into();
    let set = c.validate().unwrap();
    assert!(!set.is_short_form() && !set.has(Role::Replica));
    assert_eq!(set.role_of("eth_getLogs"), Some(Role::Replica));
    assert_eq!(set.role_of("eth_sendbundle"), None, "names are exact");
    assert_eq!(set.conductor(), Some(&url("http://conductor:8547")));
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
    };
    let expected = NodeSet {
        nodes: vec![
            NodeSpec {
                ws_url: Some(HttpUrl::parse_ws("ws://10.0.0.1:8546").unwrap()),
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
        conductor: Some(url("http://conductor:8547")),
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
