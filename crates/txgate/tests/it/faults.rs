//! Upstream failures, overload and shutdown: a clear answer, never a hang.

use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::support::{Anvil, SlowUpstream, TempFile, Txgate, metric, rpc, rpc_json};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":"c1","method":"eth_chainId","params":[]}"#;

#[tokio::test(flavor = "multi_thread")]
async fn upstream_killed_mid_test_gives_502() {
    let mut anvil = Anvil::start().await;
    let txgate = Txgate::start(&anvil.url, &[]);
    let (status, v) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    anvil.proc.kill();
    let started = Instant::now();
    let (status, v) = tokio::time::timeout(Duration::from_secs(5), rpc_json(&txgate.url, CHAIN_ID))
        .await
        .expect("hung after the upstream died");
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v["id"], "c1");
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], "upstream unavailable");
    assert!(started.elapsed() < Duration::from_secs(3));

    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId"},{"jsonrpc":"2.0","id":"two","method":"eth_blockNumber"}]"#;
    let (status, v) = rpc_json(&txgate.url, batch).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v[0]["id"], 1);
    assert_eq!(v[1]["id"], "two");
    assert_eq!(v[1]["error"]["code"], -32603);

    // The health probe notices too.
    let mut not_ready = false;
    for _ in 0..60 {
        let (status, _, _) = crate::support::get(&format!("{}/readyz", txgate.admin_url)).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            not_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(not_ready, "/readyz still ready with the upstream dead");
    let metrics = txgate.metrics().await;
    assert!(
        metric(&metrics, "txgate_upstream_errors_total{kind=\"connect\"}") >= 2.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_upstream_gives_504() {
    let upstream = SlowUpstream::start(Duration::from_secs(3)).await;
    let config = TempFile::new("[upstream]\ncall_timeout_ms = 300\n");
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    let started = Instant::now();
    let (status, v) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(v["id"], "c1");
    assert_eq!(v["error"]["message"], "upstream timed out");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_in_flight_cap_is_429() {
    let upstream = SlowUpstream::start(Duration::from_millis(800)).await;
    let txgate = Txgate::start(&upstream.url, &["--max-in-flight", "2"]);
    let url = txgate.url.clone();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { rpc(&url, CHAIN_ID).await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..3 {
        let (status, headers, body) = rpc(&url, CHAIN_ID).await.unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers["retry-after"], "1");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], -32005);
    }
    for task in slow {
        let (status, _, _) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK);
    }
    // Slots are released: the next call is admitted.
    assert_eq!(rpc(&url, CHAIN_ID).await.unwrap().0, StatusCode::OK);
    let metrics = txgate.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "txgate_http_responses_total{outcome=\"overloaded\"}"
        ),
        3.0
    );
    assert_eq!(metric(&metrics, "txgate_in_flight_requests"), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_calls_in_flight_then_exits_0() {
    let upstream = SlowUpstream::start(Duration::from_millis(1000)).await;
    let mut txgate = Txgate::start(&upstream.url, &[]);
    let url = txgate.url.clone();
    let in_flight: Vec<_> = (0..5)
        .map(|i| {
            let url = url.clone();
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_chainId"}}"#);
            tokio::spawn(async move { rpc(&url, &body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    txgate.proc.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // No new connections once draining began.
    assert!(
        tokio::net::TcpStream::connect(txgate.rpc_addr)
            .await
            .is_err(),
        "still accepting"
    );

    for (i, call) in in_flight.into_iter().enumerate() {
        let (status, _, body) = call.await.unwrap().expect("call in flight was dropped");
        assert_eq!(status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], i);
        assert_eq!(v["result"], "0x1");
    }
    let status = txgate
        .proc
        .wait_timeout(Duration::from_secs(5))
        .expect("did not exit after draining");
    assert_eq!(status.code(), Some(0));
    let logs = txgate.drain_logs().join("\n");
    assert!(logs.contains("drained; exiting"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grace_period_bounds_the_drain() {
    let upstream = SlowUpstream::start(Duration::from_secs(20)).await;
    let mut txgate = Txgate::start(&upstream.url, &["--grace-period-ms", "300"]);
    let url = txgate.url.clone();
    let stuck = tokio::spawn(async move { rpc(&url, CHAIN_ID).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    txgate.proc.signal(libc::SIGTERM);
    let status = txgate
        .proc
        .wait_timeout(Duration::from_secs(5))
        .expect("did not exit within the grace period");
    assert_eq!(status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    stuck.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_the_connection_cap_clients_wait_instead_of_failing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let anvil = Anvil::start().await;
    let config = TempFile::new("[server]\nworkers = 1\nmax_connections = 1\n");
    let txgate = Txgate::start(&anvil.url, &["--config", config.arg()]);
    let request = format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{CHAIN_ID}",
        CHAIN_ID.len()
    );
    // The first client holds the only slot with a keep-alive connection.
    let mut first = tokio::net::TcpStream::connect(txgate.rpc_addr)
        .await
        .unwrap();
    first.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    let n = first.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    // The second waits in the accept queue: no answer, but no error either.
    let mut second = tokio::net::TcpStream::connect(txgate.rpc_addr)
        .await
        .unwrap();
    second.write_all(request.as_bytes()).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(400), second.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the connection cap");

    // Once the first leaves, the second is served.
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
        .await
        .expect("never served after a slot freed")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let metrics = txgate.metrics().await;
    assert_eq!(metric(&metrics, "txgate_open_connections"), 1.0);
}
