//! `eth_sendRawTransactionConditional` checked before it costs anything,
//! with op-geth's and op-txproxy's codes, against an upstream that records
//! what reaches it (anvil does not implement the method).

use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};

use crate::support::{Eoa, RecordingUpstream, TempFile, Txgate, eventually, metric, post};

const ENTRY_POINT: &str = "0x0000000071727De22E5E9d8BAf0edAc6f37da032";
const ROOT: &str = "0x00000000000000000000000000000000000000000000000000000000000000aa";

pub(crate) fn entry_point() -> Address {
    ENTRY_POINT.parse().unwrap()
}

pub(crate) fn call(id: Value, raw: &str, condition: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "eth_sendRawTransactionConditional",
        "params": [raw, condition]})
    .to_string()
}

/// What reached the node of the conditional method (the health probe's
/// calls left out).
pub(crate) fn conditional_calls(node: &RecordingUpstream) -> Vec<bytes::Bytes> {
    node.received()
        .into_iter()
        .filter(|b| {
            b.windows(33)
                .any(|w| w == b"eth_sendRawTransactionConditional")
        })
        .collect()
}

async fn send(url: &str, body: &str) -> (u16, Value) {
    let (status, _, bytes) = post(url, Some("application/json"), body.to_owned())
        .await
        .expect("post");
    (
        status.as_u16(),
        serde_json::from_slice(&bytes).unwrap_or_default(),
    )
}

/// Every rule, screening on: each refusal with its code and message and
/// nothing at the node; a valid condition forwarded byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn each_rule_refuses_with_its_code_and_a_valid_call_passes_untouched() {
    let node = RecordingUpstream::start().await;
    let config = TempFile::new("[conditional]\nmax_cost = 3\n");
    let txgate = Txgate::start(&node.url, &["--config", config.arg()]);
    let bundler = Eoa::new(501);
    let to_entry = bundler.sign(
        0,
        entry_point(),
        &[0x1f, 0xad, 0x94, 0x8c],
        0,
        1_000_000_000,
    );
    let condition = json!({"knownAccounts": {"0x000000000000000000000000000000000000abcd": ROOT},
        "blockNumberMax": "0x1000"});

    // Valid: the caller's bytes reach the node, and the id comes back.
    let body = call(json!("bundle-7"), &to_entry, condition.clone());
    let (status, answer) = send(&txgate.url, &body).await;
    assert_eq!(
        (status, &answer["id"]),
        (200, &json!("bundle-7")),
        "{answer}"
    );
    assert_eq!(answer["result"], "0x01");
    let received = conditional_calls(&node);
    assert_eq!(
        received,
        vec![bytes::Bytes::from(body.clone())],
        "not byte for byte"
    );
    let before = received.len();

    let elsewhere = bundler.sign(1, Address::repeat_byte(0x42), &[1], 0, 1_000_000_000);
    let too_costly = json!({"knownAccounts": {
        "0x000000000000000000000000000000000000abcd": ROOT,
        "0x000000000000000000000000000000000000abce": ROOT}});
    let cases = [
        (
            call(
                json!(1),
                &to_entry,
                json!({"blockNumberMin": 9, "blockNumberMax": 8}),
            ),
            -32003,
            "failed conditional validation: block number minimum constraint must be less than the maximum",
        ),
        (
            call(
                json!(2),
                &to_entry,
                json!({"knownAccounts": {"0x12": ROOT}}),
            ),
            // A value op-geth's RPC layer cannot decode: its code.
            -32602,
            "invalid argument 1: an account key is not a 0x-prefixed 20-byte address",
        ),
        (
            call(json!(3), &to_entry, json!({"extra": true})),
            -32003,
            "failed conditional validation: unknown field",
        ),
        (
            call(json!(4), &to_entry, too_costly),
            -32005,
            "conditional cost, 4, exceeded max: 3",
        ),
        (
            call(json!(5), &elsewhere, json!({})),
            -32003,
            "only 4337 Entrypoint contract support",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 6, "method": "eth_sendRawTransactionConditional",
                "params": [to_entry]})
            .to_string(),
            -32602,
            "invalid params: expected [raw transaction, condition]",
        ),
    ];
    for (body, code, message) in &cases {
        let (status, answer) = send(&txgate.url, body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["error"]["code"], *code, "{body}: {answer}");
        let text = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(text.starts_with(message), "{body}: {text}");
        let sent: Value = serde_json::from_str(body).unwrap();
        assert_eq!(answer["id"], sent["id"], "the caller's id comes back");
        let reason = answer["error"]["data"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(reason.starts_with("conditional_"), "{answer}");
    }
    // In a batch: the refused call answered in place, the other forwarded.
    let batch = format!(
        "[{},{}]",
        call(json!("a"), &to_entry, json!({"timestampMin": "x"})),
        call(json!("b"), &to_entry, condition.clone())
    );
    let (_, answers) = send(&txgate.url, &batch).await;
    assert_eq!(answers[0]["id"], "a");
    // A timestamp that is not a number: op-geth's RPC layer's code.
    assert_eq!(answers[0]["error"]["code"], -32602);
    assert_eq!(answers[1]["result"], "0x01", "{answers}");
    // Nothing refused reached the node: one batch of one call since.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = conditional_calls(&node);
    assert_eq!(after.len(), before + 1);
    let upstream_batch: Value = serde_json::from_slice(&after[before]).unwrap();
    assert_eq!(
        upstream_batch.as_array().map(Vec::len),
        Some(1),
        "{upstream_batch}"
    );

    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"accepted\"}"),
        2.0
    );
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"invalid\"}"),
        4.0
    );
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"cost_exceeded\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"target\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"missing\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "txgate_conditional_invalid_total{reason=\"block_range\"}"
        ),
        1.0
    );
}

/// Screening off, the checks still run; the method switched off refuses
/// everything; monitor-only counts and forwards.
#[tokio::test(flavor = "multi_thread")]
async fn the_checks_run_with_screening_off_and_the_switch_and_monitor_only() {
    let node = RecordingUpstream::start().await;
    let bundler = Eoa::new(502);
    let to_entry = bundler.sign(0, entry_point(), &[1, 2, 3, 4], 0, 1_000_000_000);
    let bad = call(
        json!(1),
        &to_entry,
        json!({"timestampMin": 2, "timestampMax": 1}),
    );

    let off = TempFile::new("[screen]\nenabled = false\n");
    let txgate = Txgate::start(&node.url, &["--config", off.arg()]);
    let (_, answer) = send(&txgate.url, &bad).await;
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    drop(txgate);

    let disabled = TempFile::new("[conditional]\nenabled = false\n");
    let txgate = Txgate::start(&node.url, &["--config", disabled.arg()]);
    let good = call(json!(2), &to_entry, json!({}));
    let (_, answer) = send(&txgate.url, &good).await;
    assert_eq!(answer["error"]["message"], "endpoint disabled", "{answer}");
    assert_eq!(answer["error"]["code"], -32003);
    drop(txgate);

    assert!(conditional_calls(&node).is_empty());
    let txgate = Txgate::start(&node.url, &["--monitor-only"]);
    let (_, answer) = send(&txgate.url, &bad).await;
    assert_eq!(answer["result"], "0x01", "{answer}");
    assert_eq!(conditional_calls(&node).len(), 1);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"would_refuse\"}"),
        1.0
    );
}

/// Over the instance's lookups a second: 429, Retry-After, -32005 "rate
/// limited" at once, and nothing at the node.
///
/// The bucket refills as the calls go (one lookup a second): what it holds
/// at the third call depends on the time between the first and the third
/// as txgate saw them, which lies between the third's start less the
/// first's end and the third's end less the first's start. Under 2 s the
/// third must be refused, with a wait that follows from that bracket. A
/// machine so loaded that the three calls spanned 2 s or more decides
/// nothing: that attempt is made again on a fresh instance (at most five
/// times, and the test fails if none was quick enough).
#[tokio::test(flavor = "multi_thread")]
async fn over_the_rate_a_call_is_refused_at_once_with_a_wait() {
    let mut attempts = 0;
    let (node, txgate, status, headers, answer, least, most) = loop {
        attempts += 1;
        assert!(attempts <= 5, "three calls never fitted in 2 s");
        let node = RecordingUpstream::start().await;
        let config = TempFile::new("[conditional]\nrate_per_sec = 1\nburst = 4\n");
        let txgate = Txgate::start(&node.url, &["--config", config.arg()]);
        let to_entry = Eoa::new(503).sign(0, entry_point(), &[1, 2, 3, 4], 0, 1_000_000_000);
        // One account with a root: 2 lookups a call; the burst holds two.
        let condition =
            json!({"knownAccounts": {"0x000000000000000000000000000000000000abcd": ROOT}});
        let first = Instant::now();
        let mut first_end = None;
        for id in 1..=2 {
            let (status, answer) =
                send(&txgate.url, &call(json!(id), &to_entry, condition.clone())).await;
            first_end.get_or_insert_with(Instant::now);
            assert_eq!(
                (status, &answer["result"]),
                (200, &json!("0x01")),
                "{answer}"
            );
        }
        let third = Instant::now();
        let (status, headers, bytes) = post(
            &txgate.url,
            Some("application/json"),
            call(json!(3), &to_entry, condition),
        )
        .await
        .expect("post");
        let third_end = Instant::now();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        // Refill between the first call's charge and the third's, in
        // lookups.
        let (least, most) = (
            third.saturating_duration_since(first_end.expect("first call")),
            third_end.duration_since(first),
        );
        if most < Duration::from_secs(2) {
            break (node, txgate, status, headers, answer, least, most);
        }
        eprintln!("attempt {attempts}: the calls spanned {most:?}; again");
    };
    assert_eq!(status, 429, "refilled in {least:?}..{most:?}: {answer}");
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["error"]["code"], -32005);
    assert_eq!(answer["error"]["message"], "rate limited");
    assert_eq!(
        answer["error"]["data"]["reason"],
        "conditional_rate_limited"
    );
    // Two lookups at one a second, less what refilled: about 2 s to wait.
    let wait = answer["error"]["data"]["retry_after_ms"].as_u64().unwrap();
    if most < Duration::from_secs(1) {
        assert!((1_000..=2_000).contains(&wait), "{wait}");
        assert_eq!(headers["retry-after"], "2");
    } else {
        // 2 s less the refill, in whole milliseconds rounded up.
        let range = (2_000u64.saturating_sub(most.as_millis() as u64 + 1))
            ..=(2_000u64.saturating_sub(least.as_millis() as u64));
        assert!(
            range.contains(&wait),
            "{wait} ms to wait after {least:?}..{most:?}"
        );
        assert_eq!(
            headers["retry-after"],
            wait.div_ceil(1_000).max(1).to_string().as_str()
        );
    }
    assert_eq!(conditional_calls(&node).len(), 2);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"rate_limited\"}"),
        1.0
    );
}

/// One HTTP/1.1 exchange on a connection kept open across calls.
pub(crate) async fn exchange(stream: &mut tokio::net::TcpStream, body: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "POST / HTTP/1.1\r\nhost: txgate\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the connection was closed");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("content-length");
        if buf.len() >= end + 4 + length {
            return serde_json::from_slice(&buf[end + 4..end + 4 + length]).expect("JSON");
        }
    }
}

/// The switch is read again on SIGHUP and flips for every worker, on a
/// connection that stays open; a config file that does not load changes
/// nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_switch_flips_on_sighup_without_dropping_a_connection() {
    let node = RecordingUpstream::start().await;
    let config = TempFile::new("[conditional]\nenabled = true\n");
    let txgate = Txgate::start(&node.url, &["--config", config.arg()]);
    let raw = Eoa::new(504).sign(0, entry_point(), &[1, 2, 3, 4], 0, 1_000_000_000);
    let body = call(json!(1), &raw, json!({}));
    let mut stream = tokio::net::TcpStream::connect(txgate.rpc_addr)
        .await
        .expect("connect");
    assert_eq!(exchange(&mut stream, &body).await["result"], "0x01");

    let enabled = |on: bool| {
        let txgate = &txgate;
        async move {
            eventually(Duration::from_secs(5), || async {
                let want = if on { 1.0 } else { 0.0 };
                metric(&txgate.metrics().await, "txgate_conditional_enabled") == want
            })
            .await
        }
    };
    std::fs::write(&config.path, "[conditional]\nenabled = false\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    assert!(enabled(false).await, "the switch never flipped off");
    let answer = exchange(&mut stream, &body).await;
    assert_eq!(answer["error"]["message"], "endpoint disabled", "{answer}");

    // A file that does not load: logged, the switch stays off.
    std::fs::write(&config.path, "[conditional]\nenabled = \"maybe\"\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let logged = eventually(Duration::from_secs(5), || async {
        txgate
            .drain_logs()
            .iter()
            .any(|l| l.contains("config not read again on SIGHUP"))
    })
    .await;
    assert!(logged);
    let answer = exchange(&mut stream, &body).await;
    assert_eq!(answer["error"]["message"], "endpoint disabled", "{answer}");

    std::fs::write(&config.path, "[conditional]\nenabled = true\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    assert!(enabled(true).await, "the switch never flipped on");
    assert_eq!(exchange(&mut stream, &body).await["result"], "0x01");
    let m = txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_conditional_switches_total"), 2.0);
    assert_eq!(
        metric(&m, "txgate_conditional_total{result=\"disabled\"}"),
        2.0
    );
}

/// Defect found in review: SIGHUP read the file alone, without the flags
/// and environment the process started with, so a file valid only with
/// them (here: listeners the flags move apart) was refused on every
/// SIGHUP and the switch never flipped. It is read as at the start now.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_reads_the_file_with_the_flags_it_started_with() {
    let node = RecordingUpstream::start().await;
    // Alone, this file is refused: both listeners on one port. The test
    // harness's --listen and --admin-listen flags move them apart.
    let clash = "[server]\nlisten = \"127.0.0.1:9\"\n[admin]\nlisten = \"127.0.0.1:9\"\n";
    let config = TempFile::new(&format!("{clash}[conditional]\nenabled = true\n"));
    let txgate = Txgate::start(&node.url, &["--config", config.arg()]);
    std::fs::write(
        &config.path,
        format!("{clash}[conditional]\nenabled = false\n"),
    )
    .unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let flipped = eventually(Duration::from_secs(5), || async {
        metric(&txgate.metrics().await, "txgate_conditional_enabled") == 0.0
    })
    .await;
    assert!(
        flipped,
        "the switch never flipped: {:?}",
        txgate.drain_logs()
    );
}
