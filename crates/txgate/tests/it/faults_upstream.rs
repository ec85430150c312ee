//! An upstream that breaks HTTP/1.1 in every way the response reader must
//! survive: each fault gets the right JSON-RPC error within the call
//! timeout, is counted by kind, is not logged per call, leaves memory
//! bounded, and the next call on the same txgate is served.

use std::time::Duration;

use hyper::StatusCode;

use crate::fault_servers::FaultyUpstream;
use crate::support::{TempFile, Txgate, eventually, metric, rpc_json};

/// What txgate must answer to each fault: HTTP status, message, and the
/// `txgate_upstream_errors_total` kind it is counted under.
fn expected(fault: &str) -> (StatusCode, &'static str, &'static str) {
    const BAD: StatusCode = StatusCode::BAD_GATEWAY;
    const SLOW: StatusCode = StatusCode::GATEWAY_TIMEOUT;
    match fault {
        "reset" | "truncated_chunked" => (BAD, "upstream unavailable", "io"),
        "garbage_status" | "endless_headers" => (BAD, "upstream unavailable", "malformed"),
        "endless_chunked_body" | "endless_close_delimited_body" | "huge_content_length" => {
            (BAD, "upstream unavailable", "too_large")
        }
        "slow_headers" | "silent" => (SLOW, "upstream timed out", "timeout"),
        other => panic!("no expectation for {other}"),
    }
}

fn call(id: &str, fault: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"eth_chainId","params":["fault:{fault}"]}}"#)
}

const HONEST: &str = r#"{"jsonrpc":"2.0","id":"honest","method":"eth_chainId","params":[]}"#;

async fn honest_call_is_served(txgate: &Txgate, after: &str) {
    let (status, v) = rpc_json(&txgate.url, HONEST).await;
    assert_eq!(status, StatusCode::OK, "after {after}: {v}");
    assert_eq!(v["result"], "0x1", "after {after}: {v}");
    assert_eq!(v["id"], "honest");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_upstream_fault_gets_its_error_and_txgate_keeps_serving() {
    let upstream = FaultyUpstream::start().await;
    let config =
        TempFile::new("[upstream]\ncall_timeout_ms = 1000\nmax_response_bytes = 1048576\n");
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    honest_call_is_served(&txgate, "start").await;
    let _ = txgate.drain_logs();

    const TIMEOUTS: &str = "txgate_upstream_errors_total{kind=\"timeout\"}";
    for fault in FaultyUpstream::MODES {
        let (want_status, want_message, kind) = expected(fault);
        let series = format!("txgate_upstream_errors_total{{kind=\"{kind}\"}}");
        let m = txgate.metrics().await;
        let (before, timeouts_before) = (metric(&m, &series), metric(&m, TIMEOUTS));
        let (status, v) = tokio::time::timeout(
            Duration::from_secs(10),
            rpc_json(&txgate.url, &call(fault, fault)),
        )
        .await
        .unwrap_or_else(|_| panic!("{fault}: no answer within 10 s"));
        assert_eq!(status, want_status, "{fault}: {v}");
        assert_eq!(v["id"], fault, "{fault}: {v}");
        assert_eq!(v["error"]["code"], -32603, "{fault}: {v}");
        assert_eq!(v["error"]["message"], want_message, "{fault}: {v}");
        assert!(
            v["error"].get("data").is_none(),
            "{fault}: nothing internal in the answer: {v}"
        );
        // Within the call timeout (1 s), shown by what ended the call
        // rather than by a wall clock: a fault that is not a timeout was
        // answered before the call timer fired (it would have counted a
        // timeout); the two that are hold far longer than the 10 s above
        // (30 s silent, headers without end), so only that timer ended them.
        let m = txgate.metrics().await;
        assert!(
            metric(&m, &series) > before,
            "{fault}: not counted as {kind}"
        );
        if kind != "timeout" {
            assert_eq!(
                metric(&m, TIMEOUTS),
                timeouts_before,
                "{fault}: the call timer ran out first"
            );
        }
        honest_call_is_served(&txgate, fault).await;
    }

    // A batch through a fault: every id gets the error.
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["fault:garbage_status"]},{"jsonrpc":"2.0","id":"two","method":"eth_blockNumber"}]"#;
    let (status, v) = rpc_json(&txgate.url, batch).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(
        (v[0]["id"].clone(), v[1]["id"].clone()),
        (1.into(), "two".into())
    );
    assert_eq!(v[1]["error"]["code"], -32603, "{v}");

    // Logged without flooding: upstream faults are counted, not logged per
    // call (they would be as many lines as calls under a broken node).
    let loud: Vec<String> = txgate
        .drain_logs()
        .into_iter()
        .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
        .collect();
    assert!(loud.len() < 3, "{loud:#?}");
}

/// The response cap holds against answers that never end, whatever their
/// framing: twenty at once cannot make txgate read past the cap, and a
/// second burst leaves its memory where the first did.
#[tokio::test(flavor = "multi_thread")]
async fn endless_answers_cannot_grow_memory() {
    let upstream = FaultyUpstream::start().await;
    let config =
        TempFile::new("[upstream]\ncall_timeout_ms = 5000\nmax_response_bytes = 4194304\n");
    let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
    honest_call_is_served(&txgate, "start").await;
    // Warm up the allocator with one of each before measuring.
    let faults = [
        "endless_chunked_body",
        "endless_close_delimited_body",
        "endless_headers",
    ];
    for fault in faults {
        let _ = rpc_json(&txgate.url, &call("warm", fault)).await;
    }
    // Two bursts of twenty at once: the first may leave what the
    // allocator keeps (each call holds up to the cap while it reads); the
    // second must not add to it, and neither may read past the cap (an
    // uncapped reader would be gigabytes in, at loopback speed).
    //
    // "Does not add" is read from what txgate holds (jemalloc's allocated
    // bytes), not from RSS: how much RSS a burst leaves depends on how many
    // of its calls overlapped, which a loaded machine decides.
    let allocated = || async {
        metric(
            &txgate.metrics().await,
            "txgate_allocator_bytes{kind=\"allocated\"}",
        )
    };
    let start = txgate.proc.rss_bytes();
    let burst = || async {
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let (url, body) = (txgate.url.clone(), call(&format!("c{i}"), faults[i % 3]));
                tokio::spawn(async move { rpc_json(&url, &body).await })
            })
            .collect();
        for c in calls {
            let (status, v) = c.await.unwrap();
            assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
        }
        txgate.proc.rss_bytes()
    };
    let first = burst().await;
    // What the first burst left held once its calls' last buffers are
    // freed: the least over a second of reads, so that buffers still on
    // their way out do not loosen the limit below.
    let mut held = f64::MAX;
    for _ in 0..10 {
        held = held.min(allocated().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held > 0.0, "no allocator statistics");
    let second = burst().await;
    assert!(
        first < start + 256 * 1024 * 1024,
        "RSS grew from {start} to {first} bytes in one burst"
    );
    assert!(
        second < start + 256 * 1024 * 1024,
        "RSS grew from {start} to {second} bytes in two bursts"
    );
    // What the second burst's calls held is let go once they are answered
    // (a connection's last buffers may be freed a moment later).
    let limit = held + 32.0 * 1024.0 * 1024.0;
    assert!(
        eventually(Duration::from_secs(10), || async {
            allocated().await < limit
        })
        .await,
        "held memory kept growing: {held} → {} bytes",
        allocated().await
    );
    let metrics = txgate.metrics().await;
    assert!(metric(&metrics, "txgate_upstream_errors_total{kind=\"too_large\"}") >= 26.0);
    honest_call_is_served(&txgate, "endless answers").await;
}
