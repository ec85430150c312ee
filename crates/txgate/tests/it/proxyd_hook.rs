//! proxyd's transaction validation hook (`POST /proxyd/validate` on the
//! Aeges listener), asked the way proxyd asks: go-ethereum's JSON of each
//! signed transaction plus the sender proxyd recovered, keyed by hash,
//! over one keep-alive HTTP/1.1 connection with Go's headers and Basic
//! auth from the endpoint URL's user-info. proxyd's Go module is not
//! served here: the client below speaks its exact wire format
//! (`txgate_proto::proxyd::encode` writes the body as proxyd's
//! `tx_validation_middleware.go` does). Real processes over loopback:
//! anvil, the example sidecar (posting failure reports like the production
//! sidecar), txgate.

use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::credible::{TIP, poke, world};
use crate::support::{Eoa, accepted, fund, metric, send_raw};

const TOKEN: &str = "hook-secret";

/// One keep-alive connection, as Go's `http.Transport` keeps it.
struct GoClient {
    stream: BufReader<TcpStream>,
    port: u16,
}

/// proxyd's host: in `aeges.proxyd_allow` alone (the sidecar reports
/// from 127.0.0.1).
const PROXYD_HOST: &str = "127.0.0.2";

impl GoClient {
    /// A connection from proxyd's host.
    async fn connect(port: u16) -> GoClient {
        GoClient::connect_from(PROXYD_HOST, port).await
    }

    async fn connect_from(from: &str, port: u16) -> GoClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let stream = socket
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        GoClient {
            stream: BufReader::new(stream),
            port,
        }
    }

    /// Whether the server closed the connection (no more bytes come).
    async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut byte)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    /// Posts `body` with Go's headers (Basic auth from `user:token` when
    /// given); the status and the parsed JSON answer.
    async fn post(&mut self, body: &[u8], token: Option<&str>) -> (u16, Value) {
        let mut head = format!(
            "POST /proxyd/validate HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\
             User-Agent: Go-http-client/1.1\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        if let Some(token) = token {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("proxyd:{token}"));
            head.push_str(&format!("Authorization: Basic {basic}\r\n"));
        }
        head.push_str("Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n");
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(body).await.unwrap();
        self.read_answer().await
    }

    async fn read_answer(&mut self) -> (u16, Value) {
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line).await.unwrap();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {status_line:?}"));
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.unwrap();
        let json = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {body:?}"));
        (status, json)
    }
}

/// proxyd's body for these signed transactions.
fn payload(raws: &[&str]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = raws
        .iter()
        .map(|r| txgate_screen::decode_hex(r).unwrap().to_vec())
        .collect();
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    txgate_proto::proxyd::encode::request(&slices).unwrap()
}

fn hash_of(raw: &str) -> String {
    let tx = txgate_screen::decode(&txgate_screen::decode_hex(raw).unwrap()).unwrap();
    format!("{:#x}", tx.hash)
}

/// The verdicts of an answer that has no error.
fn verdicts(answer: &Value) -> &serde_json::Map<String, Value> {
    assert_eq!(answer["errorCode"], "", "{answer}");
    assert_eq!(answer["errorMessage"], "", "{answer}");
    answer["unauthorized"].as_object().unwrap()
}

fn refused(answer: &Value, raw: &str) -> bool {
    verdicts(answer)[&hash_of(raw)].as_bool().unwrap()
}

/// The error code of an answer that is not a verdict; never a `true`
/// beside it.
fn error_code(answer: &Value) -> String {
    let code = answer["errorCode"].as_str().unwrap().to_string();
    assert!(
        !code.is_empty(),
        "a verdict where an error was due: {answer}"
    );
    assert!(
        answer["unauthorized"]
            .as_object()
            .is_none_or(|m| m.values().all(|v| v == false)),
        "{answer}"
    );
    code
}

/// The sidecar's failure report of a transaction that reached the node
/// without passing txgate: the hook answers `true` for it and for its
/// calldata from any sender, `false` for honest ones; one banned among 100
/// is the only `true`, and nothing of that request is remembered; what is
/// not a verdict is an `errorCode`.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_failure_report_the_hook_refuses_the_calldata() {
    let aeges = crate::support::free_port();
    let report_url = format!("http://127.0.0.1:{aeges}/");
    let w = world(
        &["--report-url", &report_url],
        &format!(
            "[aeges]\nlisten = \"127.0.0.1:{aeges}\"\nproxyd_token = \"{TOKEN}\"\n\
             report_allow = [\"127.0.0.1/32\"]\nverify_allow = [\"127.0.0.1/32\"]\n\
             proxyd_allow = [\"{PROXYD_HOST}/32\"]\n"
        ),
    )
    .await;
    let (honest, attacker, copycat) = (Eoa::new(51), Eoa::new(52), Eoa::new(53));
    fund(
        &w.anvil.url,
        &[honest.address, attacker.address, copycat.address],
    )
    .await;
    let mut hook = GoClient::connect(aeges).await;
    let attack = attacker.sign(0, w.contract, &poke(13), 0, TIP);
    // Not judged yet: allowed; it goes to the node directly (gossip).
    let (status, answer) = hook.post(&payload(&[&attack]), Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert!(!refused(&answer, &attack));
    accepted(&send_raw(&w.anvil.url, &attack).await);
    // The report arrives; the same connection is asked again.
    let mut learned = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        let (_, answer) = hook.post(&payload(&[&attack]), Some(TOKEN)).await;
        if refused(&answer, &attack) {
            learned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(learned, "the report never reached the hook's answers");
    // The same calldata from a fresh sender at a higher tip: refused.
    let copy = copycat.sign(0, w.contract, &poke(13), 0, 100 * TIP);
    let (_, answer) = hook.post(&payload(&[&copy]), Some(TOKEN)).await;
    assert!(refused(&answer, &copy));
    // Honest traffic to the same contract: allowed.
    let fine = honest.sign(0, w.contract, &poke(2), 0, TIP);
    let (_, answer) = hook.post(&payload(&[&fine]), Some(TOKEN)).await;
    assert!(!refused(&answer, &fine));

    // 100 transactions, the copycat's at index 57: it alone is refused,
    // and nothing of the request is remembered (proxyd forwards none).
    let honest_txs: Vec<String> = (1..=99)
        .map(|nonce| honest.sign(nonce, w.contract, &poke(100 + nonce), 0, TIP))
        .collect();
    let mut hundred: Vec<&str> = honest_txs.iter().map(String::as_str).collect();
    hundred.insert(57, &copy);
    let remembered = |m: &str| metric(m, "txgate_proxyd_hook_remembered_total");
    let before = remembered(&w.txgate.metrics().await);
    let (_, answer) = hook.post(&payload(&hundred), Some(TOKEN)).await;
    let all = verdicts(&answer);
    assert_eq!(all.len(), 100);
    let trues: Vec<&String> = all
        .iter()
        .filter(|(_, v)| **v == true)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(trues, vec![&hash_of(&copy)], "{answer}");
    assert_eq!(remembered(&w.txgate.metrics().await), before);
    // The 99 alone: all allowed, all remembered.
    let honest_refs: Vec<&str> = honest_txs.iter().map(String::as_str).collect();
    let (_, answer) = hook.post(&payload(&honest_refs), Some(TOKEN)).await;
    assert!(verdicts(&answer).values().all(|v| v == false));
    assert_eq!(remembered(&w.txgate.metrics().await), before + 99.0);

    // Unknown fields and explicit nulls are taken.
    let mut tx =
        txgate_proto::proxyd::encode::tx_json(&txgate_screen::decode_hex(&fine).unwrap()).unwrap();
    tx["blobs"] = Value::Null;
    tx["somethingNew"] = serde_json::json!({"a": [1, 2]});
    let key = hash_of(&fine);
    let body = serde_json::to_vec(&serde_json::json!({"txs": {&key: tx.clone()}})).unwrap();
    let (_, answer) = hook.post(&body, Some(TOKEN)).await;
    assert_eq!(verdicts(&answer)[&key], false);

    // Not verdicts: each an errorCode, counted by code.
    let mut flipped = tx.clone();
    let input = flipped["input"].as_str().unwrap().to_string();
    let last = if input.ends_with('0') { "1" } else { "0" };
    flipped["input"] = Value::String(format!("{}{last}", &input[..input.len() - 1]));
    let mut no_fee_cap = tx.clone();
    no_fee_cap.as_object_mut().unwrap().remove("maxFeePerGas");
    let mut deposit = tx.clone();
    deposit["type"] = Value::String("0x7e".into());
    let wrong_key = format!("0x{}", "ab".repeat(32));
    let many: Vec<String> = (1..=101)
        .map(|nonce| honest.sign(200 + nonce, w.contract, &poke(3), 0, TIP))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let one =
        |key: &str, tx: &Value| serde_json::to_vec(&serde_json::json!({"txs": {key: tx}})).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed", b"not json".to_vec()),
        ("malformed", br#"{"txs": []}"#.to_vec()),
        ("hash_mismatch", one(&key, &flipped)),
        ("hash_mismatch", one(&wrong_key, &tx)),
        ("malformed", one(&key, &no_fee_cap)),
        ("unsupported_type", one(&key, &deposit)),
        ("too_many_txs", payload(&many)),
    ];
    for (code, body) in &cases {
        let (status, answer) = hook.post(body, Some(TOKEN)).await;
        assert_eq!(error_code(&answer), *code, "status {status}: {answer}");
        assert!(status >= 400, "{status}");
    }
    // Every step above used one connection, as proxyd keeps it: it still
    // answers.
    let (_, answer) = hook.post(&payload(&[&fine]), Some(TOKEN)).await;
    assert!(!refused(&answer, &fine));

    // Over the body cap (2 MiB): refused on its declared size, before a
    // byte of it is read.
    let mut big = GoClient::connect(aeges).await;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("proxyd:{TOKEN}"));
    let head = format!(
        "POST /proxyd/validate HTTP/1.1\r\nHost: 127.0.0.1:{aeges}\r\n\
         Content-Length: 2097153\r\nAuthorization: Basic {basic}\r\n\
         Content-Type: application/json\r\n\r\n"
    );
    big.stream
        .get_mut()
        .write_all(head.as_bytes())
        .await
        .unwrap();
    let (status, answer) = big.read_answer().await;
    assert_eq!((status, error_code(&answer).as_str()), (413, "too_large"));

    // A wrong token, no token: refused, the connection closed.
    for token in [Some("wrong"), None] {
        let mut other = GoClient::connect(aeges).await;
        let (status, answer) = other.post(&payload(&[&fine]), token).await;
        assert_eq!(
            (status, error_code(&answer).as_str()),
            (401, "unauthorized")
        );
        assert!(other.closed().await, "a refused peer keeps no connection");
    }
    // The sidecar's host, admitted to the listener for its reports but not
    // in aeges.proxyd_allow: the hook's errorCode.
    let mut sidecar_host = GoClient::connect_from("127.0.0.1", aeges).await;
    let (status, answer) = sidecar_host.post(&payload(&[&fine]), Some(TOKEN)).await;
    assert_eq!(
        (status, error_code(&answer).as_str()),
        (403, "source_not_allowed")
    );
    // A host in no list: answered at accept, before it sends a byte, in
    // the same JSON form, and closed.
    let mut outsider = GoClient::connect_from("127.0.0.3", aeges).await;
    let (status, answer) = outsider.read_answer().await;
    assert_eq!(
        (status, error_code(&answer).as_str()),
        (403, "source_not_allowed")
    );

    let m = w.txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_aeges_reports_total{result=\"refused_source\"}"),
        1.0,
        "the host in no list"
    );
    assert!(metric(&m, "txgate_proxyd_hook_requests_total{result=\"refused\"}") >= 3.0);
    assert!(metric(&m, "txgate_proxyd_hook_requests_total{result=\"allowed\"}") >= 4.0);
    assert!(
        metric(
            &m,
            "txgate_proxyd_hook_refusals_total{reason=\"denied_fingerprint\"}"
        ) >= 2.0
    );
    for (code, n) in [
        ("malformed", 3.0),
        ("hash_mismatch", 2.0),
        ("unsupported_type", 1.0),
        ("too_many_txs", 1.0),
        ("too_large", 1.0),
        ("unauthorized", 2.0),
        ("source_not_allowed", 1.0),
    ] {
        assert_eq!(
            metric(
                &m,
                &format!("txgate_proxyd_hook_errors_total{{code=\"{code}\"}}")
            ),
            n,
            "{code}"
        );
    }
}
