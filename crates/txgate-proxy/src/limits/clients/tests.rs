use std::net::IpAddr;

use http::HeaderMap;

use super::limits as limits_of;
use super::*;

fn config(toml: &str) -> LimitsConfig {
    let c: LimitsConfig = toml_from(toml);
    c.validate().unwrap();
    c
}

fn toml_from(s: &str) -> LimitsConfig {
    // The config crate parses the whole file; a section alone parses the
    // same way under `[limits]`.
    let whole = txgate_config::Config::from_toml(&format!("[limits]\n{s}")).unwrap();
    whole.limits
}

fn limits(toml: &str) -> ClientLimits {
    let config = config(toml);
    ClientLimits::new(
        &config,
        config.exempt().unwrap(),
        &RedisConfig::default(),
        None,
        Arc::new(Metrics::new()),
    )
    .unwrap()
}

/// `l` on a clock stopped at zero: `now()` is the time elapsed since the
/// epoch, and from an epoch an hour ahead that is none (it saturates), so
/// the buckets are charged at one fixed instant and a stall of the test
/// thread refills nothing.
fn stopped(mut l: ClientLimits) -> ClientLimits {
    l.epoch = Instant::now() + std::time::Duration::from_secs(3600);
    assert_eq!(l.now(), 0);
    l
}

fn client(ip: &str) -> Client {
    let ip: IpAddr = ip.parse().unwrap();
    Client { ip, peer: ip }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, value.parse().unwrap());
    }
    map
}

const KEYS: &str = "ip = { calls_per_sec = 2, calls_burst = 2 }\n\
    exempt = [\"10.0.0.0/8\"]\n\
    [limits.tiers.partner]\ncalls_per_sec = 100\n\
    [limits.tiers.ops]\nexempt = true\n\
    [limits.keys]\n\"p-key\" = \"partner\"\n\"o-key\" = \"ops\"\n";

#[test]
fn nothing_configured_is_no_stage() {
    assert!(
        ClientLimits::new(
            &LimitsConfig::default(),
            Vec::new(),
            &RedisConfig::default(),
            None,
            Arc::new(Metrics::new())
        )
        .is_none()
    );
}

#[test]
fn the_subject_is_the_key_else_the_ip_and_exemptions_are_nobody() {
    let l = limits(KEYS);
    let c = client("203.0.113.7");
    let none = HeaderMap::new();
    assert_eq!(l.subject(&c, &none).unwrap(), Subject::Ip(ip_key(c.ip, 64)));
    let partner = l.subject(&c, &headers(&[("x-api-key", "p-key")])).unwrap();
    assert!(
        matches!(partner, Subject::Key { tier: 1, .. }),
        "{partner:?}"
    );
    assert_eq!(
        l.subject(&c, &headers(&[("authorization", "Bearer p-key")]))
            .unwrap(),
        partner
    );
    assert_eq!(
        l.subject(&c, &headers(&[("authorization", "bearer  p-key ")]))
            .unwrap(),
        partner
    );
    assert_eq!(
        l.subject(&c, &headers(&[("x-api-key", "o-key")])).unwrap(),
        Subject::Exempt
    );
    assert_eq!(
        l.subject(&client("10.1.2.3"), &none).unwrap(),
        Subject::Exempt
    );
    // Basic auth is not a key: the IP.
    assert_eq!(
        l.subject(&c, &headers(&[("authorization", "Basic dXNlcg==")]))
            .unwrap(),
        Subject::Ip(ip_key(c.ip, 64))
    );
}

#[test]
fn an_unknown_key_is_refused_or_anonymous_as_configured() {
    let l = limits(KEYS);
    let c = client("203.0.113.7");
    let bad = headers(&[("x-api-key", "guess")]);
    assert!(matches!(
        l.subject(&c, &bad),
        Err(ClientRefusal::UnknownKey)
    ));
    let l = limits(&format!("unknown_key = \"anonymous\"\n{KEYS}"));
    assert_eq!(l.subject(&c, &bad).unwrap(), Subject::Ip(ip_key(c.ip, 64)));
}

#[test]
fn an_ip_over_its_rate_is_refused_with_the_limit_and_a_wait() {
    let l = stopped(limits(KEYS));
    let a = l
        .subject(&client("203.0.113.7"), &HeaderMap::new())
        .unwrap();
    let b = l
        .subject(&client("203.0.113.8"), &HeaderMap::new())
        .unwrap();
    l.charge(a, 1, 0).unwrap();
    l.charge(a, 1, 0).unwrap();
    let Err(ClientRefusal::RateLimited {
        limit,
        retry_after_ms,
    }) = l.charge(a, 1, 0)
    else {
        panic!("not refused")
    };
    assert_eq!(limit, Limit::IpCalls);
    assert!((1..=500).contains(&retry_after_ms), "{retry_after_ms}");
    l.charge(b, 1, 0).unwrap();
    assert_eq!(l.metrics.limits.refused(Limit::IpCalls).get(), 1);
    // The table's size, for the dashboard: two clients by IP, none by key.
    l.update_gauges();
    let tracked = &l.metrics.limits.tracked;
    assert_eq!(tracked.with_label_values(&["ip"]).get(), 2);
    assert_eq!(tracked.with_label_values(&["key"]).get(), 0);
}

#[test]
fn a_batch_counts_every_call_and_submissions_their_own_rate() {
    let l = Arc::new(stopped(limits(
        "ip = { calls_per_sec = 10, calls_burst = 10, tx_per_sec = 1, tx_burst = 2 }",
    )));
    let subject = l
        .subject(&client("203.0.113.7"), &HeaderMap::new())
        .unwrap();
    l.charge(subject, 1, 0).unwrap();
    let charged = Charged {
        subject,
        limits: l.clone(),
    };
    // A batch of 3 with 2 submissions: 2 more calls, 2 submissions.
    charged.rest(3, 2).unwrap();
    let Err(ClientRefusal::RateLimited { limit, .. }) = charged.rest(2, 1) else {
        panic!("third submission passed")
    };
    assert_eq!(limit, Limit::IpTxs);
    // 7 calls left of the burst of 10: a batch of 8 (7 beyond the first
    // charged at the door) fits, one more does not.
    l.charge(subject, 1, 0).unwrap();
    charged.rest(7, 0).unwrap();
    assert!(l.charge(subject, 1, 0).is_err());
}

#[test]
fn keys_have_their_tier_rate_apart_from_the_ip() {
    let l = limits(KEYS);
    let c = client("203.0.113.7");
    let partner = l.subject(&c, &headers(&[("x-api-key", "p-key")])).unwrap();
    let ip = l.subject(&c, &HeaderMap::new()).unwrap();
    for _ in 0..50 {
        l.charge(partner, 1, 0).unwrap();
    }
    l.charge(ip, 1, 0).unwrap();
}

#[test]
fn a_reload_replaces_the_keys_and_a_bad_file_keeps_the_old_ones() {
    let path = std::env::temp_dir().join(format!("txgate-proxy-keys-{}.toml", std::process::id()));
    std::fs::write(&path, "[keys]\n\"file-key\" = \"partner\"\n").unwrap();
    let mut c = config(KEYS);
    c.keys_file = path.display().to_string();
    let l = ClientLimits::new(
        &c,
        c.exempt().unwrap(),
        &RedisConfig::default(),
        None,
        Arc::new(Metrics::new()),
    )
    .unwrap();
    let ip = client("203.0.113.7");
    let with = |key: &str| headers(&[("x-api-key", key)]);
    assert!(matches!(
        l.subject(&ip, &with("file-key")),
        Ok(Subject::Key { .. })
    ));
    assert_eq!(l.metrics.limits.keys.get(), 3);
    // Rotated: the old key is gone, the new one works, config keys stay.
    std::fs::write(&path, "[keys]\n\"new-key\" = \"partner\"\n").unwrap();
    assert_eq!(l.reload(&c).unwrap(), 3);
    assert!(matches!(
        l.subject(&ip, &with("file-key")),
        Err(ClientRefusal::UnknownKey)
    ));
    assert!(matches!(
        l.subject(&ip, &with("new-key")),
        Ok(Subject::Key { .. })
    ));
    assert!(matches!(
        l.subject(&ip, &with("p-key")),
        Ok(Subject::Key { .. })
    ));
    // A broken file: refused, the set in force stays.
    std::fs::write(&path, "[keys]\n\"x\" = \"no-such-tier\"\n").unwrap();
    assert!(l.reload(&c).is_err());
    assert!(matches!(
        l.subject(&ip, &with("new-key")),
        Ok(Subject::Key { .. })
    ));
    assert_eq!(l.metrics.limits.keys_reload_failed.get(), 1);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_key_is_the_same_client_on_every_instance_and_never_its_text() {
    let (a, b) = (limits(KEYS), limits(KEYS));
    let subject = |l: &ClientLimits| {
        l.subject(&client("203.0.113.1"), &headers(&[("x-api-key", "p-key")]))
            .unwrap()
    };
    let (Subject::Key { key: ka, .. }, Subject::Key { key: kb, .. }) = (subject(&a), subject(&b))
    else {
        panic!("a listed key is its subject");
    };
    assert_eq!(ka, kb, "two instances name a key alike for the fleet");
    assert_ne!(ka.to_be_bytes()[..5], *b"p-key");
}

#[test]
fn while_the_fleet_is_unreachable_each_instance_holds_its_local_share() {
    let link = Arc::new(FleetLink::default());
    let redis = RedisConfig {
        url: "redis://127.0.0.1:1".into(),
        local_share: 0.3,
        ..RedisConfig::default()
    };
    let l = stopped(
        ClientLimits::new(
            &config("ip = { calls_per_sec = 10, calls_burst = 10 }\n"),
            Vec::new(),
            &redis,
            Some(link.clone()),
            Arc::new(Metrics::new()),
        )
        .unwrap(),
    );
    // Not connected: 30% of a burst of 10 is 3.
    let ip = Subject::Ip(ip_key("203.0.113.9".parse().unwrap(), 64));
    for _ in 0..3 {
        l.charge(ip, 1, 0).unwrap();
    }
    assert!(l.charge(ip, 1, 0).is_err());
    // The usage is kept for the fleet sync.
    let mut out = Vec::new();
    l.drain_unsynced(&mut out, 10);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, Kind::Ip);
}

#[test]
fn a_share_never_rounds_a_limit_away() {
    let rates = RateConfig {
        calls_per_sec: 1,
        calls_burst: 3,
        tx_per_sec: 0,
        tx_burst: 0,
    };
    assert_eq!(limits_of(&rates, 0.1).calls, Rate::new(1, 1));
    assert_eq!(limits_of(&rates, 0.5).calls, Rate::new(1, 2));
    assert_eq!(limits_of(&rates, 1.0).calls, Rate::new(1, 3));
    assert_eq!(limits_of(&rates, 0.5).txs, None, "no limit stays none");
}
