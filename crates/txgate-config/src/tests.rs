use std::time::Duration;

use super::*;

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
    Config::default().validate().unwrap();
}

#[test]
fn shipped_file_matches_the_defaults() {
    let text = include_str!("../../../config/txgate.toml");
    let config = Config::from_toml(text).unwrap();
    assert_eq!(
        config,
        Config::default(),
        "config/txgate.toml drifted from the DEFAULT_* constants"
    );
}

/// The commented-out `[[sidecar.sources]]` example works as written
/// once uncommented, where it stands.
#[test]
fn shipped_sources_example_parses_when_uncommented() {
    let text = include_str!("../../../config/txgate.toml");
    let mut in_example = false;
    let uncommented: String = text
        .lines()
        .map(|line| {
            let bare = line.strip_prefix("# ").unwrap_or(line);
            if bare == "[[sidecar.sources]]" {
                in_example = true;
            } else if line.starts_with('[') {
                in_example = false;
            }
            if in_example { bare } else { line }
        })
        .fold(String::new(), |text, line| text + line + "\n");
    let config = Config::from_toml(&uncommented).unwrap();
    config.validate().unwrap();
    let sources = config.sidecar.sources().unwrap();
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert_eq!(sources[0].protocol, Protocol::RpcproxyV1);
    assert!(sources[0].should_forward);
    assert_eq!(sources[1].protocol, Protocol::TransportV1);
}

/// The commented-out `[upstream.methods]` and `[[upstream.nodes]]`
/// example works as written once uncommented, where it stands.
#[test]
fn shipped_nodes_example_parses_when_uncommented() {
    let text = include_str!("../../../config/txgate.toml");
    let mut in_example = false;
    let uncommented: String = text
        .lines()
        .map(|line| {
            let bare = line.strip_prefix("# ").unwrap_or(line);
            if bare == "[upstream.methods]" {
                in_example = true;
            } else if line.starts_with('[') {
                in_example = false;
            }
            if in_example { bare } else { line }
        })
        .fold(String::new(), |text, line| text + line + "\n");
    let settings = Settings::new(Config::from_toml(&uncommented).unwrap()).unwrap();
    let nodes = settings.nodes();
    assert!(!nodes.is_short_form());
    let roles: Vec<(&str, Role)> = nodes
        .nodes()
        .iter()
        .map(|n| (n.name.as_str(), n.role))
        .collect();
    assert_eq!(
        roles,
        [
            ("sequencer", Role::Sequencer),
            ("replica-a", Role::Replica),
            ("replica-b", Role::Replica),
            ("builder", Role::Builder),
        ]
    );
    assert_eq!(nodes.nodes()[1].weight, 2);
    assert_eq!(nodes.nodes()[2].tls.ca_path, "replica-b-ca.pem");
    assert_eq!(nodes.role_of("eth_sendBundle"), Some(Role::Builder));
    assert_eq!(settings.upstream_url().authority(), "10.0.0.1:8545");
}

#[test]
fn unknown_keys_name_the_key() {
    let e = Config::from_toml("[server]\nlisten_addr = \"1.2.3.4:1\"\n").unwrap_err();
    assert!(e.message.contains("listen_addr"), "{e}");
    let e = Config::from_toml("[nope]\n").unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn bad_values_name_the_key() {
    let e = Config::from_toml("[server]\nlisten = \"not an address\"\n").unwrap_err();
    assert_eq!(e.key, "server.listen", "{e}");
    let e = Config::from_toml("[rpc]\nmax_batch_size = -1\n").unwrap_err();
    assert_eq!(e.key, "rpc.max_batch_size", "{e}");
    let e = Config::from_toml("[rpc]\npolicy = \"maybe\"\n").unwrap_err();
    assert_eq!(e.key, "rpc.policy", "{e}");
    let e = Config::from_toml("[log]\nformat = \"xml\"\n").unwrap_err();
    assert_eq!(e.key, "log.format", "{e}");
    let e = Config::from_toml("[screen.cooldown]\nduration_secs = \"long\"\n").unwrap_err();
    assert_eq!(e.key, "screen.cooldown.duration_secs", "{e}");
    let e = Config::from_toml("[sidecar]\nmax_verdicts = -1\n").unwrap_err();
    assert_eq!(e.key, "sidecar.max_verdicts", "{e}");
    let e = Config::from_toml("[sidecar]\nshould_forward_scope = \"cold\"\n").unwrap_err();
    assert_eq!(e.key, "sidecar.should_forward_scope", "{e}");
    let e = Config::from_toml(
        "[[sidecar.sources]]\nurl = \"http://h:1\"\nprotocol = \"txgate.v1\"\n\
         [[sidecar.sources]]\nurl = \"http://h:2\"\nprotocol = \"grpc\"\n",
    )
    .unwrap_err();
    assert_eq!(e.key, "sidecar.sources[1].protocol", "{e}");
    let e = Config::from_toml("[[sidecar.sources]]\nurl = \"http://h:1\"\n").unwrap_err();
    assert!(e.key.starts_with("sidecar.sources[0]"), "{e}");
    assert!(e.message.contains("protocol"), "{e}");
    let e = Config::from_toml(
        "[[sidecar.sources]]\nurl = \"http://h:1\"\nprotocol = \"txgate.v1\"\nforward = 1\n",
    )
    .unwrap_err();
    assert!(e.message.contains("forward"), "{e}");
    let e = Config::from_toml("[aeges]\nreport_allow = \"127.0.0.1\"\n").unwrap_err();
    assert_eq!(e.key, "aeges.report_allow", "{e}");
}

#[test]
fn new_settings_are_read() {
    let c = Config::from_toml(
        "[screen]\nbatch_concurrency = 4\n[screen.cooldown]\nassertion_idle_secs = 60\n\
         [sidecar]\nmax_verdicts = 10\n",
    )
    .unwrap();
    assert_eq!(c.screen.batch_concurrency, 4);
    assert_eq!(c.screen.cooldown.assertion_idle, Duration::from_secs(60));
    assert_eq!(c.sidecar.max_verdicts, 10);
}

#[test]
fn should_forward_asks_about_hot_calls_unless_told_otherwise() {
    let c = Config::from_toml(
        "[sidecar]\nurl = \"http://h:1\"\nshould_forward = true\nhot_window_ms = 60000\n",
    )
    .unwrap();
    assert_eq!(c.sidecar.should_forward_scope, ShouldForwardScope::Hot);
    assert_eq!(c.sidecar.hot_window, Duration::from_secs(60));
    assert!(Settings::new(c.clone()).unwrap().tracks_hot_calls());
    let all = Config::from_toml(
        "[sidecar]\nurl = \"http://h:1\"\nshould_forward = true\n\
         should_forward_scope = \"all\"\n",
    )
    .unwrap();
    assert!(!Settings::new(all.clone()).unwrap().tracks_hot_calls());
    // Nobody asked: nothing to track.
    let none = Config::from_toml("[sidecar]\nurl = \"http://h:1\"\n").unwrap();
    assert!(!Settings::new(none.clone()).unwrap().tracks_hot_calls());
}

#[test]
fn sources_and_aeges_are_read() {
    let c = Config::from_toml(
        "[screen]\nforwarded_ttl_secs = 30\nmax_forwarded = 1000\n\
         [sidecar]\nurl = \"\"\n\
         [[sidecar.sources]]\nurl = \"http://127.0.0.1:50051\"\n\
         protocol = \"rpcproxy.v1\"\nshould_forward = true\n\
         [[sidecar.sources]]\nurl = \"http://127.0.0.1:50052\"\n\
         protocol = \"sidecar.transport.v1\"\n\
         [aeges]\nlisten = \"127.0.0.1:9546\"\nreport_token = \"s3cret\"\n\
         report_allow = [\"10.0.0.0/8\", \"::1\"]\nmax_report_bytes = 4096\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.screen.forwarded_ttl, Duration::from_secs(30));
    assert_eq!(c.screen.max_forwarded, 1000);
    let sources = c.sidecar.sources().unwrap();
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0].protocol, Protocol::RpcproxyV1);
    assert!(sources[0].should_forward);
    assert_eq!(sources[1].protocol, Protocol::TransportV1);
    assert!(!sources[1].should_forward);
    assert_eq!(
        c.aeges.listen_addr().unwrap(),
        Some(parse_addr("127.0.0.1:9546"))
    );
    assert_eq!(c.aeges.allow().unwrap().len(), 2);
    assert_eq!(c.aeges.max_report_bytes, 4096);
}

#[test]
fn validation_names_the_key() {
    let mut c = Config::default();
    c.upstream.url = "ftp://x".into();
    assert_eq!(c.validate().unwrap_err().key, "upstream.url");
    let mut c = Config::default();
    c.upstream.url = "http://127.0.0.1:notaport".into();
    assert_eq!(c.validate().unwrap_err().key, "upstream.url");
    let mut c = Config::default();
    c.admission.max_in_flight = 0;
    assert_eq!(c.validate().unwrap_err().key, "admission.max_in_flight");
    let mut c = Config::default();
    c.upstream.pool_max_idle = 10;
    assert_eq!(c.validate().unwrap_err().key, "upstream.pool_max_idle");
    let mut c = Config::default();
    c.rpc.methods = vec!["eth_*call".into()];
    assert_eq!(c.validate().unwrap_err().key, "rpc.methods[0]");
    let mut c = Config::default();
    c.admin.listen = c.server.listen;
    assert_eq!(c.validate().unwrap_err().key, "admin.listen");
    let mut c = Config::default();
    c.screen.denied_ttl = Duration::ZERO;
    assert_eq!(c.validate().unwrap_err().key, "screen.denied_ttl_secs");
    let mut c = Config::default();
    c.screen.backpressure.refill_per_sec = f64::NAN;
    assert_eq!(
        c.validate().unwrap_err().key,
        "screen.backpressure.refill_per_sec"
    );
    let mut c = Config::default();
    c.screen.backpressure.backoff_max = Duration::from_millis(1);
    assert_eq!(
        c.validate().unwrap_err().key,
        "screen.backpressure.backoff_max_ms"
    );
    let mut c = Config::default();
    c.server.max_connections = 0;
    assert_eq!(c.validate().unwrap_err().key, "server.max_connections");
    let mut c = Config::default();
    c.sidecar.url = "http://h:0".into();
    assert_eq!(c.validate().unwrap_err().key, "sidecar.url");
    let mut c = Config::default();
    c.sidecar.should_forward = true;
    assert_eq!(c.validate().unwrap_err().key, "sidecar.should_forward");
    let mut c = Config::default();
    c.sidecar.sources = vec![SourceConfig {
        url: "http://h:1".into(),
        protocol: Protocol::TransportV1,
        should_forward: true,
    }];
    assert_eq!(
        c.validate().unwrap_err().key,
        "sidecar.sources[0].should_forward"
    );
    let mut c = Config::default();
    c.screen.forwarded_ttl = Duration::ZERO;
    assert_eq!(c.validate().unwrap_err().key, "screen.forwarded_ttl_secs");
    let mut c = Config::default();
    c.screen.max_forwarded = 0;
    assert_eq!(c.validate().unwrap_err().key, "screen.max_forwarded");
    let mut c = Config::default();
    c.aeges.listen = "anywhere".into();
    assert_eq!(c.validate().unwrap_err().key, "aeges.listen");
    let mut c = Config::default();
    c.aeges.report_allow = vec!["10.0.0.0/40".into()];
    assert_eq!(c.validate().unwrap_err().key, "aeges.report_allow");
    let mut c = Config::default();
    c.aeges.report_token = "two words".into();
    assert_eq!(c.validate().unwrap_err().key, "aeges.report_token");
    let mut c = Config::default();
    c.aeges.max_report_bytes = 0;
    assert_eq!(c.validate().unwrap_err().key, "aeges.max_report_bytes");
    for other in [DEFAULT_LISTEN, DEFAULT_ADMIN_LISTEN] {
        let mut c = Config::default();
        c.aeges.listen = other.into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "aeges.listen", "{other}");
    }
}

#[test]
fn relations_between_sections() {
    // A pool at least the in-flight cap is fine, and so is 0 (= the cap).
    let mut c = Config::default();
    c.upstream.pool_max_idle = c.admission.max_in_flight;
    c.validate().unwrap();
    // Both listeners on port 0 (tests) get different ports from the OS.
    let mut c = Config::default();
    c.server.listen = parse_addr("127.0.0.1:0");
    c.admin.listen = c.server.listen;
    c.aeges.listen = "127.0.0.1:0".into();
    c.validate().unwrap();
    // The Aeges listener on its own port.
    let mut c = Config::default();
    c.aeges.listen = "127.0.0.1:9546".into();
    c.validate().unwrap();
}

#[test]
fn websocket_upstream_is_set_or_derived_from_upstream_url() {
    let c = Config::default();
    let u = c.websocket_upstream().unwrap();
    assert_eq!(
        (u.host(), u.port(), u.authority(), u.path()),
        ("127.0.0.1", 8546, "127.0.0.1:8546", "/")
    );
    let mut c = Config::default();
    c.upstream.url = "http://[::1]:9000/rpc?key=a".into();
    let u = c.websocket_upstream().unwrap();
    assert_eq!(
        (u.host(), u.port(), u.authority(), u.path()),
        ("::1", 9000, "[::1]:9000", "/rpc?key=a")
    );
    c.upstream.url = "HTTP://node.internal".into();
    let u = c.websocket_upstream().unwrap();
    assert_eq!((u.host(), u.port(), u.path()), ("node.internal", 80, "/"));
    assert!(!u.is_tls());
    // An https:// node gives wss://, on its port.
    c.upstream.url = "https://node.internal/rpc".into();
    let u = c.websocket_upstream().unwrap();
    assert_eq!((u.port(), u.path(), u.is_tls()), (443, "/rpc", true));
    // Set, it wins over upstream.url.
    c.websocket.upstream_url = "ws://10.0.0.2:8547/ws".into();
    c.validate().unwrap();
    let u = c.websocket_upstream().unwrap();
    assert_eq!((u.host(), u.port(), u.path()), ("10.0.0.2", 8547, "/ws"));
    // Errors name the key they come from.
    let mut c = Config::default();
    c.websocket.upstream_url = "http://10.0.0.2:8547".into();
    assert_eq!(
        c.websocket_upstream().unwrap_err().key,
        "websocket.upstream_url"
    );
    assert_eq!(c.validate().unwrap_err().key, "websocket.upstream_url");
    let mut c = Config::default();
    c.upstream.url = "ftp://node".into();
    assert_eq!(c.websocket_upstream().unwrap_err().key, "upstream.url");
}

#[test]
fn websocket_section_is_read_and_checked() {
    let c = Config::from_toml(
        "[websocket]\nenabled = false\nupstream_url = \"ws://127.0.0.1:8547\"\n\
         max_subscriptions = 5\nping_interval_ms = 0\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert!(!c.websocket.enabled);
    assert_eq!(c.websocket.max_subscriptions, 5);
    assert_eq!(c.websocket.ping_interval, None);
    assert_eq!(
        c.websocket.max_frames_per_sec,
        DEFAULT_WEBSOCKET_MAX_FRAMES_PER_SEC
    );
    let e = Config::from_toml("[websocket]\nmax_frame_size = 1\n").unwrap_err();
    assert!(e.message.contains("max_frame_size"), "{e}");
    let e = Config::from_toml("[websocket]\nframe_burst = -1\n").unwrap_err();
    assert_eq!(e.key, "websocket.frame_burst", "{e}");
    let mut c = Config::default();
    c.websocket.max_frame_bytes = c.websocket.max_message_bytes + 1;
    assert_eq!(c.validate().unwrap_err().key, "websocket.max_frame_bytes");
    let mut c = Config::default();
    c.websocket.max_subscriptions = 0;
    assert_eq!(c.validate().unwrap_err().key, "websocket.max_subscriptions");
}

#[test]
fn pool_defaults_to_in_flight_cap() {
    let c = Config::default();
    assert_eq!(
        c.upstream.effective_pool_max_idle(&c.admission),
        DEFAULT_MAX_IN_FLIGHT
    );
}
