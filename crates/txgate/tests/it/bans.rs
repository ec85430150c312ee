//! Ban inspection and control end to end: the sidecar bans a call, then
//! `txgate bans` (the real binary) looks it up, exports it from one
//! instance and imports it into another, and lifts it; the token is
//! asked for; malformed bodies get a 400. And the refusal log stays under
//! its rate through 10 000 refusals.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use serde_json::{Value, json};

use crate::support::{Anvil, Eoa, Sidecar, TempFile, Txgate, eventually, metric, post, send_raw};

const TARGET: Address = Address::repeat_byte(0x7e);
const TIP: u128 = 1_000_000_000;
const ASSERTION: &str = "0x00000000000000000000000000000000000000000000000000000000000000b7";

/// `txgate bans ARGS` against `admin`.
fn bans(admin: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txgate"))
        .arg("bans")
        .args(["--admin", admin])
        .args(args)
        .output()
        .expect("run txgate bans")
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn calldata(arg: u8) -> Vec<u8> {
    let mut input = vec![0x32, 0x14, 0x5f, 0x90];
    input.extend_from_slice(&[0u8; 31]);
    input.push(arg);
    input
}

async fn reason(url: &str, raw: &str) -> Value {
    let (_, body) = send_raw(url, raw).await;
    body["error"]["data"]["reason"].clone()
}

/// An instance subscribed to the sidecar with a token on its ban
/// endpoints, and one with neither; a call banned through the sidecar.
#[tokio::test(flavor = "multi_thread")]
async fn bans_are_looked_up_exported_imported_and_lifted() {
    let anvil = Anvil::start().await;
    let config = crate::support::example_sidecar_config();
    let sidecar = Sidecar::start(&anvil.url, &config, 0).await;
    let token = TempFile::new("t0ken-for-the-bans\n");
    let a = Txgate::start(
        &anvil.url,
        &[
            "--sidecar",
            &sidecar.grpc_url,
            "--admin-token-file",
            token.arg(),
        ],
    );
    let b = Txgate::start(&anvil.url, &[]);
    let (attacker, other) = (Eoa::new(71), Eoa::new(72));
    let banned = attacker.sign(0, TARGET, &calldata(9), 0, TIP);
    sidecar
        .inject(json!({"raw_tx": banned, "assertion_id": ASSERTION, "assertion_version": 2}))
        .await;
    let copy = other.sign(0, TARGET, &calldata(9), 0, TIP);
    let refused = eventually(Duration::from_secs(5), || async {
        reason(&a.url, &copy).await == "denied_fingerprint"
    })
    .await;
    assert!(refused, "the ban never reached txgate");

    // Why is the copy refused?
    let lookup = bans(
        &a.admin_url,
        &["--token-file", token.arg(), "lookup", "--raw", &copy],
    );
    let v = stdout_json(&lookup);
    assert_eq!(v["refused_by"], "denied_fingerprint", "{v}");
    assert_eq!(v["fingerprint"]["ban"]["state"], "denied");
    assert_eq!(v["fingerprint"]["ban"]["assertions"][0]["id"], ASSERTION);
    assert_eq!(v["fingerprint"]["ban"]["assertions"][0]["version"], 2);
    assert_eq!(v["sender"]["value"], other.address.to_string());
    let fingerprint = v["fingerprint"]["value"].as_str().unwrap().to_owned();
    // The banned transaction itself: its failed hash.
    let v = stdout_json(&bans(
        &a.admin_url,
        &["--token-file", token.arg(), "lookup", "--raw", &banned],
    ));
    assert_eq!(v["refused_by"], "recent_failure", "{v}");

    // No token, a wrong token: refused, and nothing learned.
    let wrong = TempFile::new("not-it");
    for args in [
        vec!["lookup", "--fingerprint", &fingerprint],
        vec![
            "--token-file",
            wrong.arg(),
            "lookup",
            "--fingerprint",
            &fingerprint,
        ],
    ] {
        let out = bans(&a.admin_url, &args);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("401") && err.contains("token"), "{err}");
        assert!(out.stdout.is_empty());
    }

    // Export from a, import into b: b refuses the copy too.
    let export = TempFile::new("");
    let out = bans(
        &a.admin_url,
        &["--token-file", token.arg(), "export", "-o", export.arg()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value =
        serde_json::from_slice(&std::fs::read(export.arg()).unwrap()).expect("export JSON");
    assert_eq!(list["bans"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["bans"][0]["fingerprint"], fingerprint.as_str());
    assert_ne!(reason(&b.url, &copy).await, "denied_fingerprint");
    let v = stdout_json(&bans(&b.admin_url, &["import", export.arg()]));
    assert_eq!(v["imported"], 1, "{v}");
    assert_eq!(reason(&b.url, &copy).await, "denied_fingerprint");

    // Lift it on a: the copy is forwarded again (the node answers).
    let v = stdout_json(&bans(
        &a.admin_url,
        &[
            "--token-file",
            token.arg(),
            "lift",
            "--fingerprint",
            &fingerprint,
        ],
    ));
    assert_eq!(v["fingerprint"]["lifted"], true, "{v}");
    assert_eq!(reason(&a.url, &copy).await, Value::Null);
    // The node's own answer (this sender has no funds), not txgate's.
    let (_, answer) = send_raw(&a.url, &copy).await;
    assert_eq!(answer["error"]["data"], Value::Null, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("funds")),
        "{answer}"
    );
    let logs = a
        .logs_until(Duration::from_secs(5), |lines| {
            lines
                .iter()
                .any(|l| l.contains("lifted by hand") && l.contains("lift_fingerprint"))
        })
        .await
        .join("\n");
    assert!(
        logs.contains("lifted by hand") && logs.contains("lift_fingerprint"),
        "{logs}"
    );

    // Without the token a body is never read: 401. Malformed bodies with
    // it: a clear 400, nothing changed.
    let auth = format!("{}/bans/lift", a.admin_url);
    let (status, _, body) = post(&auth, Some("application/json"), "{")
        .await
        .expect("post");
    assert_eq!(status, 401, "{body:?}");
    let lift = bans(
        &a.admin_url,
        &["--token-file", token.arg(), "lift", "--sender", "0x12"],
    );
    assert_eq!(lift.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&lift.stderr).contains("400 Bad Request: sender is not 20 bytes")
    );
    let (status, _, body) = post(
        &format!("{}/bans/import", b.admin_url),
        Some("application/json"),
        r#"{"format":"txgate-bans","version":1,"bans":[{"fingerprint":"0x1"}]}"#,
    )
    .await
    .expect("post");
    assert_eq!(status, 400);
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("bad JSON body"),
        "{error}"
    );

    let (ma, mb) = (a.metrics().await, b.metrics().await);
    assert_eq!(
        metric(
            &ma,
            "txgate_admin_ban_changes_total{action=\"lift_fingerprint\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&mb, "txgate_admin_ban_changes_total{action=\"import\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &ma,
            "txgate_admin_ban_requests_total{endpoint=\"lookup\",result=\"unauthorized\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &mb,
            "txgate_admin_ban_requests_total{endpoint=\"import\",result=\"bad_request\"}"
        ),
        1.0
    );
}

/// 10 000 refusals: the refusal log writes its burst and its rate, every
/// line names the refused call, and the rest are counted.
#[tokio::test(flavor = "multi_thread")]
async fn the_refusal_log_stays_under_its_rate() {
    let anvil = Anvil::start().await;
    let config = crate::support::example_sidecar_config();
    let sidecar = Sidecar::start(&anvil.url, &config, 0).await;
    // 10 000 refusals from one client: paced, each batch would wait 64 ms;
    // this test is about the log's rate under a flood.
    let a = Txgate::start(
        &anvil.url,
        &["--sidecar", &sidecar.grpc_url, "--pacing", "false"],
    );
    let (attacker, other) = (Eoa::new(81), Eoa::new(82));
    let banned = attacker.sign(0, TARGET, &calldata(5), 0, TIP);
    sidecar
        .inject(json!({"raw_tx": banned, "assertion_id": ASSERTION, "assertion_version": 1}))
        .await;
    let copy = other.sign(0, TARGET, &calldata(5), 0, TIP);
    let refused = eventually(Duration::from_secs(5), || async {
        reason(&a.url, &copy).await == "denied_fingerprint"
    })
    .await;
    assert!(refused, "the ban never reached txgate");
    // The flood sends another transaction of the same calldata (the next
    // nonce), so its lines are told apart from the probe's above, whose
    // line may still be on its way through the log pipe.
    let flood = other.sign(1, TARGET, &calldata(5), 0, TIP);
    let flood_hash =
        alloy_primitives::keccak256(alloy_primitives::hex::decode(&flood).expect("hex"))
            .to_string();
    let before = metric(
        &a.metrics().await,
        "txgate_refusal_log_suppressed_total{reason=\"denied_fingerprint\"}",
    );

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction",
        "params": [flood]});
    let batch = Value::Array(vec![call; 100]).to_string();
    let started = Instant::now();
    for _ in 0..100 {
        let (status, _, _) = post(&a.url, Some("application/json"), batch.clone())
            .await
            .expect("batch");
        assert_eq!(status, 200);
    }
    let elapsed = started.elapsed().as_secs_f64();
    // One more, after the rate let a line through again: that line
    // carries how many were left out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(reason(&a.url, &flood).await, "denied_fingerprint");

    // Every refusal is counted or logged by the time it is answered; the
    // lines reach the test through a pipe: read until they account for
    // all 10 001 (or 5 s pass, and the count below says what is missing).
    let m = a.metrics().await;
    let suppressed = metric(
        &m,
        "txgate_refusal_log_suppressed_total{reason=\"denied_fingerprint\"}",
    ) - before;
    let flood_lines = |lines: &[String]| -> Vec<Value> {
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "txgate::refusal" && v["tx_hash"] == flood_hash.as_str())
            .collect()
    };
    let logs = a
        .logs_until(Duration::from_secs(5), |lines| {
            suppressed + flood_lines(lines).len() as f64 >= 10_001.0
        })
        .await;
    let lines = flood_lines(&logs);
    // Burst 20, then 10 a second (and one for the clock's edge), and the
    // last one.
    let most = 20.0 + 10.0 * elapsed.ceil() + 2.0;
    assert!(!lines.is_empty());
    assert!(
        (lines.len() as f64) <= most,
        "{} lines in {elapsed:.1} s",
        lines.len()
    );
    for line in &lines {
        assert_eq!(line["reason"], "denied_fingerprint", "{line}");
        assert_eq!(line["sender"], other.address.to_string(), "{line}");
        assert_eq!(line["client"], "127.0.0.1", "{line}");
        assert_eq!(line["assertions"], ASSERTION, "{line}");
        assert!(line["fingerprint"].as_str().is_some_and(|f| f.len() == 66));
        assert!(line["tx_hash"].as_str().is_some_and(|h| h.len() == 66));
    }
    // Every refusal is a line or counted; the lines carry the count.
    assert_eq!(suppressed + lines.len() as f64, 10_001.0);
    let carried: u64 = lines.iter().filter_map(|l| l["suppressed"].as_u64()).sum();
    assert_eq!(
        carried, suppressed as u64,
        "every line left out is reported"
    );
}
