//! Learning from the Credible Layer as deployed, each interface proved
//! against a peer that speaks its exact wire format, with real processes
//! over loopback: anvil, the example sidecar (serving `txgate.sidecar.v1`,
//! `rpcproxy.v1` and `sidecar.transport.v1` on one port, and posting
//! failure reports like the production sidecar), and txgate.
//!
//! In each: an attacker's call reverts on chain (it breaks the example
//! sidecar's `no_revert` assertion); txgate learns it through the interface
//! under test; the same raw transaction and the same calldata from another
//! funded EOA at a higher tip are refused (-32003); an honest call passes.

use std::time::Duration;

use alloy_primitives::Address;
use serde_json::json;

use crate::support::{
    Anvil, Eoa, Sidecar, TempFile, Txgate, accepted, eventually, fund, get, metric, refused,
    send_raw,
};

pub(crate) const TIP: u128 = 1_000_000_000;
const TOKEN: &str = "report-token-7f3a";

pub(crate) fn poke(x: u64) -> Vec<u8> {
    let mut input = vec![0x32, 0x14, 0x5f, 0x90];
    input.extend_from_slice(&[0u8; 24]);
    input.extend_from_slice(&x.to_be_bytes());
    input
}

pub(crate) struct World {
    pub(crate) anvil: Anvil,
    pub(crate) _sidecar: Sidecar,
    _sidecar_config: TempFile,
    pub(crate) txgate: Txgate,
    _config: TempFile,
    pub(crate) contract: Address,
}

/// anvil, the example sidecar (`sidecar_args` added), txgate with
/// `txgate_config` (`{grpc}` replaced by the sidecar's gRPC URL), and the
/// Guarded contract deployed through txgate.
pub(crate) async fn world(sidecar_args: &[&str], txgate_config: &str) -> World {
    let anvil = Anvil::start().await;
    let sidecar_config = crate::support::example_sidecar_config();
    let sidecar = Sidecar::start_with(&anvil.url, &sidecar_config, 0, sidecar_args).await;
    let config = TempFile::new(&format!(
        "[sidecar]\nreconnect_initial_ms = 50\nreconnect_max_ms = 200\n{}",
        txgate_config.replace("{grpc}", &sidecar.grpc_url)
    ));
    let txgate = Txgate::start(&anvil.url, &["--config", config.arg()]);
    let bytecode = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contracts/Guarded.bin"),
    )
    .expect("contracts/Guarded.bin");
    let contract = crate::support::deploy(&txgate.url, bytecode.trim());
    World {
        anvil,
        _sidecar: sidecar,
        _sidecar_config: sidecar_config,
        txgate,
        _config: config,
        contract,
    }
}

async fn readyz(txgate: &Txgate) -> serde_json::Value {
    let (_, _, body) = get(&format!("{}/readyz", txgate.admin_url)).await;
    serde_json::from_slice(&body).unwrap_or_default()
}

pub(crate) async fn wait_linked(txgate: &Txgate) {
    let up = eventually(Duration::from_secs(10), || async {
        readyz(txgate).await["sidecar"] == "up"
    })
    .await;
    assert!(up, "txgate never subscribed: {}", readyz(txgate).await);
}

/// The story every interface must tell; returns the attacker's raw tx.
async fn attack_is_learned_and_refused(w: &World, learned_as: &str) {
    let (honest, attacker, copycat) = (Eoa::new(11), Eoa::new(12), Eoa::new(13));
    fund(
        &w.anvil.url,
        &[honest.address, attacker.address, copycat.address],
    )
    .await;
    accepted(&send_raw(&w.txgate.url, &honest.sign(0, w.contract, &poke(1), 0, TIP)).await);
    let attack = attacker.sign(0, w.contract, &poke(13), 0, TIP);
    accepted(&send_raw(&w.txgate.url, &attack).await);
    // The same raw tx is refused once txgate has learned the failure.
    let refused_in_time = eventually(Duration::from_secs(10), || async {
        let (_, body) = send_raw(&w.txgate.url, &attack).await;
        body["error"]["data"]["reason"] == "recent_failure"
    })
    .await;
    assert!(
        refused_in_time,
        "txgate never learned the failure through {learned_as}"
    );
    // The same calldata from another funded EOA at a much higher tip.
    let copy = copycat.sign(0, w.contract, &poke(13), 0, 100 * TIP);
    refused(
        &send_raw(&w.txgate.url, &copy).await,
        200,
        -32003,
        "denied_fingerprint",
    );
    // Honest traffic to the same contract still passes.
    accepted(&send_raw(&w.txgate.url, &honest.sign(1, w.contract, &poke(2), 0, TIP)).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reference_protocol_rpcproxy_v1_bans_what_it_invalidates() {
    let w = world(
        &[],
        "[[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"rpcproxy.v1\"\n",
    )
    .await;
    wait_linked(&w.txgate).await;
    attack_is_learned_and_refused(&w, "rpcproxy.v1").await;
    let m = w.txgate.metrics().await;
    assert!(metric(&m, "txgate_sidecar_invalidations_received_total") >= 1.0);
    assert_eq!(
        metric(
            &m,
            "txgate_sidecar_source_up{protocol=\"rpcproxy.v1\",url=\"{}\"}"
                .replace("{}", &w._sidecar.grpc_url)
                .as_str()
        ),
        1.0
    );
    // rpcproxy.v1 names no sender: the charge came from what was forwarded.
    assert!(metric(&m, "txgate_invalidations_total{result=\"sender_charged\"}") >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_result_stream_bans_what_this_instance_forwarded() {
    let w = world(
        &[],
        "[[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"sidecar.transport.v1\"\n",
    )
    .await;
    wait_linked(&w.txgate).await;
    attack_is_learned_and_refused(&w, "sidecar.transport.v1").await;
    let m = w.txgate.metrics().await;
    let results = |status: &str| {
        metric(
            &m,
            &format!("txgate_sidecar_results_total{{status=\"{status}\"}}"),
        )
    };
    assert!(results("success") >= 2.0, "every executed tx has a result");
    assert!(results("assertion_failed") >= 1.0);
    assert!(
        metric(
            &m,
            "txgate_sidecar_result_failures_total{hash=\"forwarded\"}"
        ) >= 1.0
    );
    assert!(metric(&m, "txgate_invalidations_total{result=\"sender_charged\"}") >= 1.0);
}

/// The production sidecar's reports: its `aeges_url` carries the token in
/// the query, as an operator would configure it.
#[tokio::test(flavor = "multi_thread")]
async fn failure_reports_posted_to_the_aeges_listener_ban_and_outsiders_change_nothing() {
    let aeges = crate::support::free_port();
    let report_url = format!("http://127.0.0.1:{aeges}/?token={TOKEN}");
    let w = world(
        &["--report-url", &report_url],
        &format!(
            "[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nreport_token = \"{TOKEN}\"\n\
             report_allow = [\"127.0.0.1/32\"]\n"
        ),
    )
    .await;
    // A report that would ban an honest call, without the token and from
    // outside the allow-list: refused, and the call still passes.
    let (victim, honest2) = (Eoa::new(21), Eoa::new(22));
    fund(&w.anvil.url, &[victim.address, honest2.address]).await;
    let body = |from: &Eoa| {
        json!([format!("0x{}", "ab".repeat(32)), {
            "tx_type": 2, "caller": format!("{}", from.address), "gas_limit": 100000,
            "gas_price": 2000000000u64, "kind": format!("{}", w.contract), "value": "0x0",
            "data": format!("0x{}", alloy_primitives::hex::encode(poke(5))), "nonce": 0,
            "chain_id": 31337, "access_list": [], "gas_priority_fee": 1000000000u64,
            "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
        }])
        .to_string()
    };
    let url = format!("http://127.0.0.1:{aeges}/report");
    let (status, _, _) = crate::support::post(&url, Some("application/json"), body(&victim))
        .await
        .unwrap();
    assert_eq!(status, 401, "no token");
    let (status, _) = post_from(
        "127.0.0.2",
        aeges,
        &format!("/report?token={TOKEN}"),
        &body(&victim),
    )
    .await;
    assert_eq!(status, 403, "outside the allow-list, even with the token");
    accepted(
        &send_raw(
            &w.txgate.url,
            &honest2.sign(0, w.contract, &poke(5), 0, TIP),
        )
        .await,
    );
    let m = w.txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_aeges_reports_total{result=\"refused_token\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_aeges_reports_total{result=\"refused_source\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_aeges_reports_total{result=\"accepted\"}"),
        0.0
    );

    // The sidecar's own reports, with the token from its URL: learned.
    attack_is_learned_and_refused(&w, "the aeges listener").await;
    let m = w.txgate.metrics().await;
    assert!(metric(&m, "txgate_aeges_reports_total{result=\"accepted\"}") >= 1.0);
    assert!(metric(&m, "txgate_invalidations_total{result=\"sender_charged\"}") >= 1.0);
}

/// An HTTP/1.1 POST from a chosen loopback address; returns the status
/// and the body.
async fn post_from(local: &str, port: u16, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    let mut stream = socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// One failure from three interfaces at once (txgate.v1, rpcproxy.v1 and
/// the result stream, all from the same sidecar): banned once, the sender
/// charged once, the other two counted as duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn one_failure_from_three_sources_is_charged_once() {
    let w = world(
        &[],
        "[[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"txgate.v1\"\n\
         [[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"rpcproxy.v1\"\n\
         [[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"sidecar.transport.v1\"\n",
    )
    .await;
    wait_linked(&w.txgate).await;
    assert_eq!(
        readyz(&w.txgate).await["sidecars"].as_array().map(Vec::len),
        Some(3)
    );
    attack_is_learned_and_refused(&w, "three sources").await;
    let settled = eventually(Duration::from_secs(5), || async {
        let m = w.txgate.metrics().await;
        metric(&m, "txgate_invalidations_total{result=\"duplicate\"}") >= 2.0
    })
    .await;
    let m = w.txgate.metrics().await;
    assert!(
        settled,
        "{}",
        m.lines()
            .filter(|l| l.starts_with("txgate_invalidations_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(&m, "txgate_invalidations_total{result=\"sender_charged\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_invalidations_total{result=\"banned\"}"),
        1.0
    );
}

/// txgate configured for one protocol against a server that serves
/// another: it forwards (fail open), marks the source down with the reason
/// in `/readyz`, and says why in one log line.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_of_another_protocol_forwards_and_says_why() {
    let w = world(
        &["--protocols", "rpcproxy.v1"],
        "[[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"sidecar.transport.v1\"\n",
    )
    .await;
    let diagnosed = eventually(Duration::from_secs(10), || async {
        readyz(&w.txgate).await["sidecars"][0]["error"] == "unimplemented"
    })
    .await;
    let ready = readyz(&w.txgate).await;
    assert!(diagnosed, "{ready}");
    assert_eq!(ready["sidecar"], "down");
    assert_eq!(ready["ready"], true, "fail open: still ready");
    let user = Eoa::new(31);
    fund(&w.anvil.url, &[user.address]).await;
    accepted(&send_raw(&w.txgate.url, &user.sign(0, w.contract, &poke(1), 0, TIP)).await);
    // The line, once it has come through the log pipe; then at least two
    // more retries (each counted before it would log), and still the one
    // line.
    let said = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.contains("does not serve this protocol"))
            .cloned()
            .collect()
    };
    let mut logs = w
        .txgate
        .logs_until(Duration::from_secs(10), |lines| !said(lines).is_empty())
        .await;
    assert!(!said(&logs).is_empty(), "not said: {logs:#?}");
    let retries = |m: &str| metric(m, "txgate_sidecar_reconnects_total");
    let base = retries(&w.txgate.metrics().await);
    assert!(
        eventually(Duration::from_secs(10), || async {
            retries(&w.txgate.metrics().await) >= base + 2.0
        })
        .await,
        "no more retries"
    );
    // A retry's line would be written right after its count; one more
    // moment for it to come through the pipe (returns at once if it does).
    logs.extend(
        w.txgate
            .logs_until(Duration::from_millis(500), |lines| !said(lines).is_empty())
            .await,
    );
    let said = said(&logs);
    assert_eq!(said.len(), 1, "one line, not one per retry: {said:?}");
    assert!(said[0].contains("sidecar.transport.v1"), "{}", said[0]);
    let m = w.txgate.metrics().await;
    assert_eq!(metric(&m, "txgate_sidecar_up"), 0.0);
}

/// ShouldForward in the reference protocol: DENY bans and refuses at once
/// (a forbidden selector), UNKNOWN forwards and is counted (a call to a
/// contract the sidecar could only judge by simulating), ALLOW forwards
/// and is cached (a call to an unprotected target).
#[tokio::test(flavor = "multi_thread")]
async fn should_forward_in_rpcproxy_v1_denies_allows_and_forwards_unknowns() {
    let w = world(
        &[],
        // A deadline a loaded CI machine always meets: this test is about
        // the verdicts, not the deadline (a late answer forwards).
        "should_forward_timeout_ms = 2000\nshould_forward_scope = \"all\"\n\
         [[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"rpcproxy.v1\"\nshould_forward = true\n",
    )
    .await;
    wait_linked(&w.txgate).await;
    let (a, b) = (Eoa::new(41), Eoa::new(42));
    fund(&w.anvil.url, &[a.address, b.address]).await;
    // sweep(uint256) is forbidden by an assertion: DENY, refused, banned.
    let mut sweep = vec![0xaa, 0x60, 0xe7, 0x33];
    sweep.extend_from_slice(&[0u8; 32]);
    let data = refused(
        &send_raw(&w.txgate.url, &a.sign(0, w.contract, &sweep, 0, TIP)).await,
        200,
        -32003,
        "denied_fingerprint",
    );
    assert_eq!(
        data["assertion_ids"][0],
        "0x00000000000000000000000000000000000000000000000000000000000000a2"
    );
    // poke(1) to the protected contract: UNKNOWN, forwarded.
    accepted(&send_raw(&w.txgate.url, &b.sign(0, w.contract, &poke(1), 0, TIP)).await);
    // A transfer to an unprotected address: ALLOW, forwarded, cached.
    let elsewhere = Address::repeat_byte(0x77);
    accepted(&send_raw(&w.txgate.url, &b.sign(1, elsewhere, &[], 1, TIP)).await);
    let m = w.txgate.metrics().await;
    let probe = |r: &str| {
        metric(
            &m,
            &format!("txgate_should_forward_total{{result=\"{r}\"}}"),
        )
    };
    assert_eq!(
        (probe("deny"), probe("unknown"), probe("forward")),
        (1.0, 1.0, 1.0)
    );
    // The same calldata from another account is refused by the ban alone.
    refused(
        &send_raw(&w.txgate.url, &b.sign(2, w.contract, &sweep, 0, TIP)).await,
        200,
        -32003,
        "denied_fingerprint",
    );
}
