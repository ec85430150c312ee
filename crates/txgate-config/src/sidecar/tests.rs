use super::*;

type Change = fn(&mut SidecarConfig);

fn entry(url: &str, protocol: Protocol, should_forward: bool) -> SourceConfig {
    SourceConfig {
        url: url.into(),
        protocol,
        should_forward,
    }
}

fn refused(change: impl FnOnce(&mut SidecarConfig)) -> ConfigError {
    let mut c = SidecarConfig::default();
    change(&mut c);
    let e = c.validate().unwrap_err();
    assert_eq!(
        c.sources().err(),
        Some(e.clone()),
        "validate and sources agree"
    );
    e
}

#[test]
fn defaults_are_valid_and_name_no_sidecar() {
    let c = SidecarConfig::default();
    c.validate().unwrap();
    assert_eq!(c.sources().unwrap(), Vec::new());
}

#[test]
fn each_rule_names_its_key() {
    let cases: [(Change, &str); 23] = [
        (|c| c.url = "https://x".into(), "sidecar.url"),
        (|c| c.url = "http://".into(), "sidecar.url"),
        (
            |c| c.url = "http://127.0.0.1:notaport".into(),
            "sidecar.url",
        ),
        (|c| c.url = "http://h:1/judge".into(), "sidecar.url"),
        (|c| c.should_forward = true, "sidecar.should_forward"),
        (
            |c| c.sources = vec![entry("", Protocol::TxgateV1, false)],
            "sidecar.sources[0].url",
        ),
        (
            |c| {
                c.sources = vec![
                    entry("http://a:1", Protocol::TxgateV1, false),
                    entry("http://b:1/x", Protocol::RpcproxyV1, false),
                ]
            },
            "sidecar.sources[1].url",
        ),
        (
            |c| c.sources = vec![entry("http://a:1", Protocol::TransportV1, true)],
            "sidecar.sources[0].should_forward",
        ),
        (
            |c| {
                c.url = "http://a:1".into();
                c.should_forward = true;
                c.sources = vec![entry("http://b:1", Protocol::RpcproxyV1, true)];
            },
            "sidecar.sources[0].should_forward",
        ),
        (
            |c| {
                c.sources = vec![
                    entry("http://a:1", Protocol::RpcproxyV1, true),
                    entry("http://b:1", Protocol::TxgateV1, false),
                    entry("http://c:1", Protocol::TxgateV1, true),
                ]
            },
            "sidecar.sources[2].should_forward",
        ),
        (
            |c| {
                c.sources = vec![
                    entry("http://a:1", Protocol::RpcproxyV1, false),
                    entry("http://A:1/", Protocol::RpcproxyV1, false),
                ]
            },
            "sidecar.sources[1]",
        ),
        (
            |c| {
                c.url = "http://a:1".into();
                c.sources = vec![entry("http://a:1", Protocol::TxgateV1, false)];
            },
            "sidecar.sources[0]",
        ),
        (
            |c| c.connect_timeout = Duration::ZERO,
            "sidecar.connect_timeout_ms",
        ),
        (
            |c| c.reconnect_initial = Duration::ZERO,
            "sidecar.reconnect_initial_ms",
        ),
        (|c| c.max_message_bytes = 0, "sidecar.max_message_bytes"),
        (|c| c.channel_capacity = 0, "sidecar.channel_capacity"),
        (|c| c.batch_max = 0, "sidecar.batch_max"),
        (
            |c| c.should_forward_timeout = Duration::ZERO,
            "sidecar.should_forward_timeout_ms",
        ),
        (|c| c.max_verdicts = 0, "sidecar.max_verdicts"),
        (|c| c.hot_window = Duration::ZERO, "sidecar.hot_window_ms"),
        (|c| c.max_hot_calls = 0, "sidecar.max_hot_calls"),
        (
            |c| c.max_probes_in_flight = 0,
            "sidecar.max_probes_in_flight",
        ),
        (
            |c| c.reconnect_max = Duration::from_millis(1),
            "sidecar.reconnect_max_ms",
        ),
    ];
    for (change, key) in cases {
        let mut c = SidecarConfig::default();
        change(&mut c);
        assert_eq!(c.validate().unwrap_err().key, key, "{c:?}");
    }
}

#[test]
fn url_is_parsed_like_the_upstream() {
    for url in ["http://127.0.0.1:50051", "http://sidecar:50051/"] {
        let c = SidecarConfig {
            url: url.into(),
            ..SidecarConfig::default()
        };
        c.validate().unwrap();
        let sources = c.sources().unwrap();
        assert_eq!(sources.len(), 1, "{url}");
        assert_eq!(sources[0].url.port(), 50051, "{url}");
        assert_eq!(sources[0].protocol, Protocol::TxgateV1);
        assert!(!sources[0].should_forward);
    }
}

#[test]
fn short_form_first_then_entries_in_order() {
    let c = SidecarConfig {
        url: "http://short:1".into(),
        should_forward: true,
        sources: vec![
            entry("http://b:2", Protocol::TransportV1, false),
            entry("http://a:3", Protocol::RpcproxyV1, false),
            entry("http://c:4", Protocol::TxgateV1, false),
        ],
        ..SidecarConfig::default()
    };
    c.validate().unwrap();
    let got: Vec<_> = c
        .sources()
        .unwrap()
        .into_iter()
        .map(|s| (s.url.host().to_string(), s.protocol, s.should_forward))
        .collect();
    assert_eq!(
        got,
        [
            ("short".to_string(), Protocol::TxgateV1, true),
            ("b".to_string(), Protocol::TransportV1, false),
            ("a".to_string(), Protocol::RpcproxyV1, false),
            ("c".to_string(), Protocol::TxgateV1, false),
        ]
    );
    // Without the short form, the entries alone.
    let c = SidecarConfig {
        sources: vec![entry("http://a:3", Protocol::RpcproxyV1, true)],
        ..SidecarConfig::default()
    };
    let sources = c.sources().unwrap();
    assert_eq!(sources.len(), 1);
    assert!(sources[0].should_forward);
}

#[test]
fn several_sidecars_of_one_protocol_are_fine() {
    let c = SidecarConfig {
        url: "http://a:1".into(),
        sources: vec![
            entry("http://b:1", Protocol::TxgateV1, false),
            entry("http://a:2", Protocol::TxgateV1, false),
            // Same address, another protocol: another service.
            entry("http://a:1", Protocol::RpcproxyV1, false),
            entry("http://t1:1", Protocol::TransportV1, false),
            entry("http://t2:1", Protocol::TransportV1, false),
        ],
        ..SidecarConfig::default()
    };
    c.validate().unwrap();
    assert_eq!(c.sources().unwrap().len(), 6);
}

#[test]
fn refusals_say_why() {
    let e = refused(|c| c.should_forward = true);
    assert!(e.message.contains("[[sidecar.sources]]"), "{e}");
    let e = refused(|c| {
        c.sources = vec![entry("http://a:1", Protocol::TransportV1, true)];
    });
    assert!(
        e.message.contains("sidecar.transport.v1") && e.message.contains("no ShouldForward"),
        "{e}"
    );
    let e = refused(|c| {
        c.url = "http://a:1".into();
        c.should_forward = true;
        c.sources = vec![entry("http://b:1", Protocol::RpcproxyV1, true)];
    });
    assert!(
        e.message.contains("sidecar.should_forward") && e.message.contains("one sidecar"),
        "{e}"
    );
    let e = refused(|c| {
        c.sources = vec![
            entry("http://a:1", Protocol::RpcproxyV1, true),
            entry("http://b:1", Protocol::TxgateV1, true),
        ];
    });
    assert!(
        e.message.contains("sidecar.sources[0].should_forward"),
        "{e}"
    );
    let e = refused(|c| {
        c.url = "http://a:1".into();
        c.sources = vec![entry("http://a:1/", Protocol::TxgateV1, false)];
    });
    assert!(e.message.contains("sidecar.url"), "{e}");
    let e = refused(|c| c.sources = vec![entry("http://a:1/x", Protocol::TxgateV1, false)]);
    assert!(e.message.contains("path"), "{e}");
}

#[test]
fn protocols_are_read_by_name() {
    for p in Protocol::ALL {
        let entry: SourceConfig =
            toml::from_str(&format!("url = \"http://h:1\"\nprotocol = \"{p}\"\n")).unwrap();
        assert_eq!(entry.protocol, p);
        assert!(!entry.should_forward, "should_forward defaults to false");
        assert_eq!(Protocol::ALL[p.index()], p);
        assert_eq!(p.to_string(), p.as_str());
    }
    let should_forward: Vec<_> = Protocol::ALL
        .iter()
        .map(|p| p.has_should_forward())
        .collect();
    assert_eq!(should_forward, [true, true, false]);
    assert!(toml::from_str::<SourceConfig>("url = \"http://h:1\"\nprotocol = \"grpc\"\n").is_err());
    assert!(toml::from_str::<SourceConfig>("url = \"http://h:1\"\n").is_err());
}

#[test]
fn keepalive_pings_may_be_turned_off_but_their_timeout_is_positive() {
    let mut c = SidecarConfig::default();
    assert_eq!(c.keepalive, Duration::from_millis(1_000));
    assert_eq!(c.keepalive_timeout, Duration::from_millis(3_000));
    c.keepalive = Duration::ZERO;
    c.validate().unwrap();
    c.keepalive_timeout = Duration::ZERO;
    let e = c.validate().unwrap_err();
    assert!(
        e.to_string().contains("sidecar.keepalive_timeout_ms"),
        "{e}"
    );
}
