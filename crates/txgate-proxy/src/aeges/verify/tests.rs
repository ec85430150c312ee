#![allow(clippy::unwrap_used)]

use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use bytes::Bytes;
use http_body_util::BodyExt;
use tonic::Code as Status;
use txgate_proto::aeges_v1::aeges_service_client::AegesServiceClient;
use txgate_proto::aeges_v1::{Transaction, VerifyTransactionRequest};
use txgate_screen::{Invalidation, Reason};

use super::super::tests::{Fixture, Options};
use crate::metrics::verify::Framing;

const TARGET: Address = Address::repeat_byte(0x5f);

fn tx(seed: u8, sender: u8, payload: &[u8]) -> Transaction {
    let mut value = vec![0u8; 32];
    value[31] = 1;
    Transaction {
        hash: vec![seed; 32].into(),
        sender: vec![sender; 20].into(),
        to: Some(TARGET.to_vec().into()),
        value: value.into(),
        nonce: 0,
        r#type: 2,
        chain_id: Some(31337),
        payload: Bytes::copy_from_slice(payload),
        gas_limit: 90_000,
        max_fee_per_gas: Some(2_000_000_000),
        max_priority_fee_per_gas: Some(1),
        ..Transaction::default()
    }
}

fn attack() -> Vec<u8> {
    let mut p = vec![0xde, 0xad, 0xbe, 0xef];
    p.extend_from_slice(&[7; 96]);
    p
}

async fn client(f: &Fixture) -> AegesServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", f.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    AegesServiceClient::new(channel)
}

async fn ask(
    c: &mut AegesServiceClient<tonic::transport::Channel>,
    event_id: u64,
    tx: Transaction,
) -> Result<(u64, bool), tonic::Status> {
    let r = c
        .verify_transaction(VerifyTransactionRequest {
            event_id,
            transaction: Some(tx),
        })
        .await?
        .into_inner();
    Ok((r.event_id, r.denied))
}

/// The fingerprint ban learned from a failure answers `denied` for the
/// same calldata from any sender; other calldata is let in; every answer
/// echoes its event id; a transaction let in is remembered by its hash.
#[tokio::test]
async fn a_banned_fingerprint_is_denied_and_the_event_id_echoed() {
    let f = Fixture::start(Options::default()).await;
    let mut c = client(&f).await;
    assert_eq!(
        ask(&mut c, 1, tx(1, 0xa1, &attack())).await.unwrap(),
        (1, false)
    );
    // The sidecar judges it bad: the ban its invalidation makes.
    let bad = Invalidation {
        fingerprint: txgate_screen::Fingerprint::from_parts(
            TARGET,
            &attack(),
            U256::from(1),
            90_000,
        )
        .hash,
        target: TARGET,
        selector: [0xde, 0xad, 0xbe, 0xef],
        assertion: None,
        tx_hash: Some(B256::repeat_byte(1)),
        sender: Some(Address::repeat_byte(0xa1)),
        started: crate::screening::state::wall_now(),
    };
    f.screen.apply(
        &[bad],
        f.screen.millis(std::time::Instant::now()),
        bad.started,
    );
    assert_eq!(
        ask(&mut c, 2, tx(1, 0xa1, &attack())).await.unwrap(),
        (2, true)
    );
    assert_eq!(
        ask(&mut c, u64::MAX, tx(2, 0xb2, &attack())).await.unwrap(),
        (u64::MAX, true)
    );
    assert_eq!(
        ask(&mut c, 0, tx(3, 0xc3, &[0xa9, 0x05, 0x9c, 0xbb]))
            .await
            .unwrap(),
        (0, false)
    );
    let v = &f.metrics.verify;
    assert_eq!((v.allowed.get(), v.denied.get()), (2, 2));
    assert_eq!(v.denials(Reason::RecentFailure), 1);
    assert_eq!(v.denials(Reason::DeniedFingerprint), 1);
    assert_eq!(v.duration.get_sample_count(), 4);
    assert_eq!(v.in_flight.get(), 0);
    // Let in, then remembered: its hash names fingerprint and sender.
    let now = f.screen.millis(std::time::Instant::now());
    let remembered = f.screen.forwarded(&B256::repeat_byte(3), now).unwrap();
    assert_eq!(remembered.sender, Address::repeat_byte(0xc3));
}

#[tokio::test]
async fn monitor_only_answers_false_and_counts_what_it_would_deny() {
    let f = Fixture::start(Options {
        monitor_only: true,
        ..Options::default()
    })
    .await;
    let now = f.screen.millis(std::time::Instant::now());
    assert!(f.screen.fail_hash(B256::repeat_byte(9), now));
    let mut c = client(&f).await;
    assert_eq!(
        ask(&mut c, 5, tx(9, 0xa1, &attack())).await.unwrap(),
        (5, false)
    );
    let v = &f.metrics.verify;
    assert_eq!((v.would_deny.get(), v.denied.get()), (1, 0));
    assert_eq!(v.denials(Reason::RecentFailure), 1);
    // Answered `false`, it enters the pool: remembered like any other,
    // though the would-be denial (by hash) computed no fingerprint.
    let now = f.screen.millis(std::time::Instant::now());
    let remembered = f.screen.forwarded(&B256::repeat_byte(9), now).unwrap();
    assert_eq!(remembered.sender, Address::repeat_byte(0xa1));
}

/// gRPC needs HTTP/2: over HTTP/1.1 it is refused (505), and a request
/// that is not gRPC over HTTP/2 is not taken as a report (505 too).
#[tokio::test]
async fn grpc_over_http1_and_reports_over_http2_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = Fixture::start(Options::default()).await;
    let mut conn = super::super::tests::connect_from("127.0.0.1", f.addr).await;
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: x\r\ncontent-type: application/grpc\r\n\
         content-length: 0\r\n\r\n",
        txgate_proto::aeges::VERIFY_PATH
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = [0u8; 32];
    let n = conn.read(&mut answer).await.unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 505"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    let mut send = h2(&f, "127.0.0.1").await;
    let report = http::Request::post("http://aeges/report")
        .header("content-type", "application/json")
        .body(http_body_util::Empty::<Bytes>::new().boxed_unsync())
        .unwrap();
    let answer = send.send_request(report).await.unwrap();
    assert_eq!(
        answer.status(),
        http::StatusCode::HTTP_VERSION_NOT_SUPPORTED
    );
    assert_eq!(
        f.metrics.aeges.accepted.get() + f.metrics.aeges.malformed.get(),
        0
    );
}

/// A connection that never shows its protocol is closed after 5 s and
/// gives its slot back.
#[tokio::test]
async fn a_silent_connection_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = Fixture::start(Options::default()).await;
    let mut silent = super::super::tests::connect_from("127.0.0.1", f.addr).await;
    // Two bytes of the HTTP/2 preface, then nothing.
    silent.write_all(b"PR").await.unwrap();
    let mut buf = [0u8; 8];
    let closed = tokio::time::timeout(Duration::from_secs(8), silent.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "closed: {closed:?}"
    );
    assert_eq!(f.metrics.aeges.connections_idle.get(), 1);
}

/// Every malformed question is `INVALID_ARGUMENT` with a short message,
/// never a verdict, and counted by reason.
#[tokio::test]
async fn malformed_questions_are_invalid_argument() {
    let f = Fixture::start(Options {
        max_verify_bytes: 512,
        ..Options::default()
    })
    .await;
    let mut c = client(&f).await;
    type Change = fn(&mut Transaction);
    let cases: [(Change, &str); 5] = [
        (|t| t.hash = vec![1; 31].into(), "hash must be 32 bytes"),
        (|t| t.sender = vec![1; 32].into(), "sender must be 20 bytes"),
        (
            |t| t.to = Some(vec![1; 21].into()),
            "to must be 20 bytes when present",
        ),
        (
            |t| t.value = vec![1; 33].into(),
            "value must be at most 32 bytes",
        ),
        (
            |t| t.payload = vec![0; 600].into(),
            "message over aeges.max_verify_bytes",
        ),
    ];
    for (change, message) in cases {
        let mut t = tx(1, 2, &attack());
        change(&mut t);
        let e = ask(&mut c, 1, t).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Status::InvalidArgument, message));
    }
    let e = c
        .verify_transaction(VerifyTransactionRequest {
            event_id: 1,
            transaction: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Status::InvalidArgument);
    let v = &f.metrics.verify;
    assert_eq!(v.invalid.get(), 6);
    assert_eq!(v.framing_count(Framing::TooLarge), 1);
    assert_eq!(v.invalid_count(txgate_proto::aeges::Invalid::Hash), 1);
    assert_eq!(v.allowed.get() + v.denied.get(), 0, "no verdict");
    // The connection still answers.
    assert_eq!(
        ask(&mut c, 7, tx(1, 2, &attack())).await.unwrap(),
        (7, false)
    );
}

/// A raw HTTP/2 client, to send what a well-behaved gRPC client never
/// does.
async fn h2(
    f: &Fixture,
    from: &str,
) -> hyper::client::conn::http2::SendRequest<
    http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>,
> {
    let stream = super::super::tests::connect_from(from, f.addr).await;
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send
}

/// Waits up to 10 s for `check` to hold, looking every 10 ms; whether it
/// did.
async fn until<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn grpc_request<B>(path: &str, body: B) -> http::Request<B> {
    http::Request::post(format!("http://aeges{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap()
}

fn grpc_status<B>(r: &http::Response<B>) -> Option<&str> {
    r.headers().get("grpc-status").and_then(|v| v.to_str().ok())
}

/// Over the cap of calls in flight: `RESOURCE_EXHAUSTED` at once, while
/// the held call gets `DEADLINE_EXCEEDED` when its body does not come;
/// another method is `UNIMPLEMENTED`; a peer outside `verify_allow` (but
/// allowed to report) is `PERMISSION_DENIED`; the answers are counted.
#[tokio::test]
async fn limits_methods_and_sources() {
    let f = Fixture::start(Options {
        max_in_flight: 1,
        report_allow: "127.0.0.0/8",
        verify_allow: "127.0.0.1/32",
        ..Options::default()
    })
    .await;
    let mut send = h2(&f, "127.0.0.1").await;
    // A body that never ends holds the one slot.
    let never = futures_util::stream::pending::<
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >();
    let held = send.send_request(grpc_request(
        txgate_proto::aeges::VERIFY_PATH,
        http_body_util::StreamBody::new(never).boxed_unsync(),
    ));
    let held = tokio::spawn(held);
    assert!(
        until(|| async { f.metrics.verify.in_flight.get() == 1 }).await,
        "the held call never took the slot"
    );
    let empty = || http_body_util::Empty::<Bytes>::new().boxed_unsync();
    let over = send
        .send_request(grpc_request(txgate_proto::aeges::VERIFY_PATH, empty()))
        .await
        .unwrap();
    assert_eq!(grpc_status(&over), Some("8"));
    let held = tokio::time::timeout(super::BODY_TIMEOUT + Duration::from_secs(2), held)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(grpc_status(&held), Some("4"));
    let other = send
        .send_request(grpc_request("/aeges.v1.AegesService/Other", empty()))
        .await
        .unwrap();
    assert_eq!(grpc_status(&other), Some("12"));
    let mut outsider = h2(&f, "127.0.0.2").await;
    let refused = outsider
        .send_request(grpc_request(txgate_proto::aeges::VERIFY_PATH, empty()))
        .await
        .unwrap();
    assert_eq!(grpc_status(&refused), Some("7"));
    let v = &f.metrics.verify;
    assert_eq!(
        (
            v.exhausted.get(),
            v.timeout.get(),
            v.unimplemented.get(),
            v.refused_source.get()
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(v.in_flight.get(), 0);
}

/// A stop lets a call already in flight finish: its body, arriving after
/// the stop, is still judged and answered; a new connection is refused.
#[tokio::test]
async fn a_stop_answers_the_calls_in_flight() {
    use prost::Message;
    let f = Fixture::start(Options::default()).await;
    let mut send = h2(&f, "127.0.0.1").await;
    let (body_tx, body_rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let frames = futures_util::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|b| {
            (
                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b)),
                rx,
            )
        })
    });
    let pending = send.send_request(grpc_request(
        txgate_proto::aeges::VERIFY_PATH,
        http_body_util::StreamBody::new(frames).boxed_unsync(),
    ));
    let pending = tokio::spawn(pending);
    // In flight (its slot taken) before the stop.
    assert!(
        until(|| async { f.metrics.verify.in_flight.get() == 1 }).await,
        "the call never got in flight"
    );
    f.stop.cancel();
    // The listener is closed: a new connection is refused at once.
    assert!(
        until(|| async { tokio::net::TcpStream::connect(f.addr).await.is_err() }).await,
        "the listener still takes connections after the stop"
    );
    let message = VerifyTransactionRequest {
        event_id: 77,
        transaction: Some(tx(5, 6, &attack())),
    }
    .encode_to_vec();
    let mut framed = vec![0];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    body_tx.send(framed.into()).await.unwrap();
    drop(body_tx);
    let answer = tokio::time::timeout(Duration::from_secs(3), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let collected = answer.into_body().collect().await.unwrap();
    assert_eq!(
        collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.to_str().unwrap()),
        Some("0")
    );
    let bytes = collected.to_bytes();
    let response = txgate_proto::aeges_v1::VerifyTransactionResponse::decode(&bytes[5..]).unwrap();
    assert_eq!((response.event_id, response.denied), (77, false));
}
