//! Upstream failures, overload and shutdown: a clear answer, never a hang.

use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::fault_servers::HeldUpstream;
use crate::support::{Anvil, SlowUpstream, TempFile, Txgate, eventually, metric, rpc, rpc_json};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":"c1","method":"eth_chainId","params":[]}"#;

/// Waits until txgate has admitted `calls` calls that are still in flight.
async fn wait_in_flight(txgate: &Txgate, calls: f64) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            metric(&txgate.metrics().await, "txgate_in_flight_requests") == calls
        })
        .await,
        "never {calls} calls in flight: {}",
        txgate.metrics().await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_killed_mid_test_gives_502() {
    let mut anvil = Anvil::start().await;
    let txgate = Txgate::start(&anvil.url, &[]);
    let (status, v) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    anvil.proc.kill();
    let (status, v) = tokio::time::timeout(Duration::from_secs(5), rpc_json(&txgate.url, CHAIN_ID))
        .await
        .expect("hung after the upstream died");
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v["id"], "c1");
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], "upstream unavailable");
    // Answered from the refused connection, not after a timer ran out (a
    // wall-clock bound here would measure the machine's load instead).
    let metrics = txgate.metrics().await;
    assert!(
        metric(&metrics, "txgate_upstream_errors_total{kind=\"connect\"}") >= 1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "txgate_upstream_errors_total{kind=\"timeout\"}"),
        0.0,
        "{metrics}"
    );

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
    // The upstream answers after 8 s, before the default call timeout
    // (10 s): a 504 shows the configured 300 ms cut the call, and that it
    // did so before the answer came, however late its timer fired on a
    // loaded machine (a wall-clock bound here would measure the load).
    let upstream = SlowUpstream::start(Duration::from_secs(8)).await;
    let config = TempFile::new("[upstream]\ncall_timeout_ms = 300\n");
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    let started = Instant::now();
    let (status, v) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(v["id"], "c1");
    assert_eq!(v["error"]["message"], "upstream timed out");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_in_flight_cap_is_429() {
    // The two slow calls hold both slots until the probes are done.
    let upstream = HeldUpstream::start().await;
    let txgate = Txgate::start(&upstream.url, &["--max-in-flight", "2"]);
    let url = txgate.url.clone();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { rpc(&url, CHAIN_ID).await.unwrap() })
        })
        .collect();
    wait_in_flight(&txgate, 2.0).await;
    for _ in 0..3 {
        let (status, headers, body) = rpc(&url, CHAIN_ID).await.unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers["retry-after"], "1");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], -32005);
    }
    upstream.release();
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
    // The calls are held at the upstream until the listeners are seen
    // closed: they are in flight through the whole drain.
    let upstream = HeldUpstream::start().await;
    let mut txgate = Txgate::start(&upstream.url, &[]);
    let url = txgate.url.clone();
    let in_flight: Vec<_> = (0..5)
        .map(|i| {
            let url = url.clone();
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_chainId"}}"#);
            tokio::spawn(async move { rpc(&url, &body).await })
        })
        .collect();
    wait_in_flight(&txgate, 5.0).await;
    txgate.proc.signal(libc::SIGTERM);

    // No new connections once draining began: every worker has closed its
    // listener when it says it is draining.
    let draining = |lines: &[String]| {
        let workers = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["message"] == "listening")
            .and_then(|v| v["workers"].as_u64())
            .expect("the listening line names its workers");
        let said = lines
            .iter()
            .filter(|l| l.contains("draining connections"))
            .count() as u64;
        (said, workers)
    };
    let logs = txgate
        .logs_until(Duration::from_secs(10), |lines| {
            let (said, workers) = draining(lines);
            said >= workers
        })
        .await;
    let (said, workers) = draining(&logs);
    assert!(
        said >= workers,
        "{said} of {workers} workers draining: {logs:#?}"
    );
    assert!(
        tokio::net::TcpStream::connect(txgate.rpc_addr)
            .await
            .is_err(),
        "still accepting"
    );

    upstream.release();
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
    let logs = txgate
        .logs_until(Duration::from_secs(5), |lines| {
            lines.iter().any(|l| l.contains("drained; exiting"))
        })
        .await
        .join("\n");
    assert!(logs.contains("drained; exiting"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grace_period_bounds_the_drain() {
    // The upstream never answers (it is not released): txgate exiting at
    // all shows the drain did not wait for the call, and its last line
    // shows it was the grace period that ended it.
    let upstream = HeldUpstream::start().await;
    let mut txgate = Txgate::start(&upstream.url, &["--grace-period-ms", "300"]);
    let url = txgate.url.clone();
    let stuck = tokio::spawn(async move { rpc(&url, CHAIN_ID).await });
    wait_in_flight(&txgate, 1.0).await;
    txgate.proc.signal(libc::SIGTERM);
    let status = txgate
        .proc
        .wait_timeout(Duration::from_secs(10))
        .expect("did not exit while the call was stuck");
    assert_eq!(status.code(), Some(0));
    let logs = txgate
        .logs_until(Duration::from_secs(5), |lines| {
            lines.iter().any(|l| l.contains("grace period over"))
        })
        .await
        .join("\n");
    assert!(logs.contains("grace period over"), "{logs}");
    assert!(!logs.contains("drained; exiting"), "{logs}");
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
