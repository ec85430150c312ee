//! txgate as a fleet member behind a real load balancer (HAProxy from
//! Debian's packages): the PROXY protocol, client identity, per-client
//! limits.

use std::time::{Duration, Instant};

use crate::balancer::{Haproxy, Send};
use crate::support::{SlowUpstream, TempFile, Txgate, metric, rpc, rpc_from, rpc_json};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

fn behind_balancer(mode: &str) -> TempFile {
    TempFile::new(&format!(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"{mode}\"\n"
    ))
}

#[tokio::test]
async fn haproxy_send_proxy_v2_reaches_txgate_and_a_direct_client_is_closed() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = behind_balancer("v2");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV2);

    for _ in 0..5 {
        let (status, answer) = rpc_json(&haproxy.url, CHAIN_ID).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"], "0x1", "{answer}");
    }
    let m = txgate.metrics().await;
    assert!(
        metric(&m, "txgate_proxy_protocol_total{result=\"v2\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "txgate_client_identity_total{source=\"peer\"}") >= 5.0,
        "{m}"
    );

    // The balancer's address is trusted, but a connection without the
    // header is not HTTP to a v2 listener: closed, counted, no answer.
    let direct = rpc(&txgate.url, CHAIN_ID).await;
    assert!(direct.is_err(), "{direct:?}");
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_proxy_protocol_total{result=\"missing\"}"),
        1.0,
        "{m}"
    );
    drop(haproxy);
}

#[tokio::test]
async fn haproxy_send_proxy_v1_reaches_txgate() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = behind_balancer("v1");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV1);
    let (status, answer) = rpc_json(&haproxy.url, CHAIN_ID).await;
    assert_eq!(
        (status.as_u16(), &answer["result"]),
        (200, &"0x1".into()),
        "{answer}"
    );
    let m = txgate.metrics().await;
    assert!(
        metric(&m, "txgate_proxy_protocol_total{result=\"v1\"}") >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn haproxy_forwardfor_is_read_from_the_trusted_balancer_only() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = TempFile::new("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ForwardedFor);
    let (status, _) = rpc_json(&haproxy.url, CHAIN_ID).await;
    assert_eq!(status, 200);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(
            &m,
            "txgate_client_identity_total{source=\"forwarded_header\"}"
        ),
        1.0,
        "{m}"
    );
    // Straight to txgate from 127.0.0.1 without the header: the peer.
    let (status, _) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, 200);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_client_identity_total{source=\"peer\"}"),
        1.0,
        "{m}"
    );
}

/// Sends `n` calls from `from`; the statuses.
async fn burst(url: &str, from: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, _, _) = rpc_from(url, from, headers, CHAIN_ID)
            .await
            .expect("transport");
        statuses.push(status.as_u16());
    }
    statuses
}

#[tokio::test]
async fn per_ip_limits_behind_haproxy_refuse_only_the_client_over_its_rate() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    // 1 call/s with a burst of 5: a quick burst of 8 sees 3 refusals.
    let config = TempFile::new(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"v2\"\n\
         [limits]\nip = { calls_per_sec = 1, calls_burst = 5 }\n",
    );
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV2);

    let started = Instant::now();
    let noisy = burst(&haproxy.url, "127.0.0.2", &[], 8).await;
    // At 1 call/s, a burst slower than a second earns one more call.
    let earned = started.elapsed().as_secs() as usize;
    assert_eq!(noisy[..5], [200; 5], "{noisy:?}");
    assert_eq!(
        noisy.iter().filter(|s| **s == 429).count(),
        3 - earned.min(3),
        "{noisy:?}"
    );
    // Another client behind the same balancer is untouched.
    let quiet = burst(&haproxy.url, "127.0.0.3", &[], 5).await;
    assert!(quiet.iter().all(|s| *s == 200), "{quiet:?}");

    // The refusal: 429, Retry-After, -32005 naming the limit.
    let (status, headers, body) = rpc_from(&haproxy.url, "127.0.0.2", &[], CHAIN_ID)
        .await
        .unwrap();
    assert_eq!(status, 429);
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "ip_rate", "{answer}");
    // Refused before the body is read: the id is not known (null, as for
    // the global in-flight cap).
    assert_eq!(answer["id"], serde_json::Value::Null, "{answer}");
    let m = txgate.metrics().await;
    let refused = noisy.iter().filter(|s| **s == 429).count() as f64 + 1.0;
    assert_eq!(
        metric(&m, "txgate_limit_refusals_total{limit=\"ip_rate\"}"),
        refused,
        "{m}"
    );
    assert_eq!(
        metric(&m, "txgate_http_responses_total{outcome=\"rate_limited\"}"),
        refused,
        "{m}"
    );
}

#[tokio::test]
async fn api_keys_get_their_tier_and_unknown_keys_are_refused() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = TempFile::new(
        "[limits]\nip = { calls_per_sec = 1, calls_burst = 2 }\n\
         [limits.tiers.partner]\ncalls_per_sec = 1000\n\
         [limits.keys]\n\"partner-key-1\" = \"partner\"\n",
    );
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let keyed = burst(
        &txgate.url,
        "127.0.0.2",
        &[("x-api-key", "partner-key-1")],
        20,
    )
    .await;
    assert!(keyed.iter().all(|s| *s == 200), "{keyed:?}");
    let bearer = burst(
        &txgate.url,
        "127.0.0.2",
        &[("authorization", "Bearer partner-key-1")],
        5,
    )
    .await;
    assert!(bearer.iter().all(|s| *s == 200), "{bearer:?}");
    // The same address without the key: its own IP rate.
    let started = Instant::now();
    let anonymous = burst(&txgate.url, "127.0.0.2", &[], 4).await;
    assert_eq!(anonymous[..2], [200, 200]);
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(anonymous[2..], [429, 429]);
    }
    let (status, _, body) = rpc_from(
        &txgate.url,
        "127.0.0.4",
        &[("x-api-key", "guess")],
        CHAIN_ID,
    )
    .await
    .unwrap();
    assert_eq!(status, 401);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "invalid request: unknown API key"
    );
}

#[tokio::test]
async fn the_keys_file_is_read_again_on_sighup() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let keys = TempFile::new("[keys]\n\"first-key\" = \"partner\"\n");
    let config = TempFile::new(&format!(
        "[limits]\nkeys_file = \"{}\"\n[limits.tiers.partner]\ncalls_per_sec = 1000\n",
        keys.arg()
    ));
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let status = |key: &'static str| {
        let url = txgate.url.clone();
        async move {
            rpc_from(&url, "127.0.0.2", &[("x-api-key", key)], CHAIN_ID)
                .await
                .unwrap()
                .0
                .as_u16()
        }
    };
    assert_eq!(status("first-key").await, 200);
    assert_eq!(status("second-key").await, 401);
    std::fs::write(&keys.path, "[keys]\n\"second-key\" = \"partner\"\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let rotated = crate::support::eventually(Duration::from_secs(5), || async {
        status("second-key").await == 200
    })
    .await;
    assert!(rotated, "the new key was not taken");
    assert_eq!(status("first-key").await, 401);
    // A broken file keeps the keys in force, and txgate keeps running.
    std::fs::write(&keys.path, "[keys]\n\"x\" = \"gold\"\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let failed = crate::support::eventually(Duration::from_secs(5), || async {
        metric(
            &txgate.metrics().await,
            "txgate_limit_api_keys_reload_failures_total",
        ) == 1.0
    })
    .await;
    assert!(failed);
    assert_eq!(status("second-key").await, 200);
}
