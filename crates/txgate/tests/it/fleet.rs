//! txgate as a fleet member behind a real load balancer (HAProxy from
//! Debian's packages): the PROXY protocol and client identity.

use std::time::Duration;

use crate::balancer::{Haproxy, Send};
use crate::support::{SlowUpstream, TempFile, Txgate, metric, rpc, rpc_json};

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
