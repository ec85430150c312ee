use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use alloy_primitives::{Address, B256, U256};
use base64::Engine;
use http::header::AUTHORIZATION;
use http_body_util::Full;
use txgate_screen::{Fingerprint, ScreenSettings};

use super::*;

const TOKEN: &str = "s3cret-token";

fn reports(token: Option<&str>, max_bytes: usize) -> (Reports, mpsc::Receiver<Invalidation>) {
    let (queue, rx) = mpsc::channel(16);
    let allow = vec!["127.0.0.0/8".parse().unwrap_or_else(|e| panic!("{e}"))];
    let screen = Arc::new(Screen::new(
        ScreenSettings::default(),
        std::time::Instant::now(),
    ));
    let metrics = Arc::new(Metrics::new());
    (
        Reports::new(
            allow,
            token.map(String::from),
            max_bytes,
            queue,
            screen,
            metrics,
        ),
        rx,
    )
}

fn body(kind: &str) -> String {
    format!(
        r#"["0x{}", {{"tx_type":2,"caller":"0x{}","gas_limit":100000,"gas_price":2000000000,"kind":{kind},"value":"0x1","data":"0xa9059cbb00","nonce":7,"chain_id":31337,"access_list":[],"gas_priority_fee":1000000000,"blob_hashes":[],"max_fee_per_blob_gas":0,"authorization_list":[]}}]"#,
        "11".repeat(32),
        "70".repeat(20),
    )
}

fn post(uri: &str, body: String) -> http::request::Builder {
    let _ = body;
    Request::post(uri)
}

async fn send(r: &Reports, peer: IpAddr, req: http::request::Builder, body: String) -> StatusCode {
    let req = req
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|e| panic!("{e}"));
    r.handle(peer, req).await.status()
}

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[tokio::test]
async fn a_report_is_queued_as_an_invalidation_of_its_fingerprint() {
    let (r, mut rx) = reports(None, 4096);
    let target = format!("\"0x{}\"", "de".repeat(20));
    let b = body(&target);
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b).await,
        StatusCode::OK
    );
    let inv = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
    let fp = Fingerprint::from_parts(
        Address::repeat_byte(0xde),
        &[0xa9, 0x05, 0x9c, 0xbb, 0x00],
        U256::ONE,
        100_000,
    );
    assert_eq!(inv.fingerprint, fp.hash);
    assert_eq!(inv.tx_hash, Some(B256::repeat_byte(0x11)));
    assert_eq!(inv.sender, Some(Address::repeat_byte(0x70)));
    assert_eq!(inv.assertion, None);
    assert_eq!(r.metrics.aeges.accepted.get(), 1);
}

#[tokio::test]
async fn a_creation_refuses_its_hash_and_bans_nothing() {
    let (r, mut rx) = reports(None, 4096);
    let b = body("null");
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b).await,
        StatusCode::OK
    );
    assert!(rx.try_recv().is_err());
    assert!(
        !r.screen.fail_hash(B256::repeat_byte(0x11), 0),
        "already refused"
    );
    assert_eq!(r.metrics.aeges.creation.get(), 1);
}

#[tokio::test]
async fn outsiders_and_wrong_tokens_change_nothing() {
    let (r, mut rx) = reports(Some(TOKEN), 4096);
    let b = body(&format!("\"0x{}\"", "de".repeat(20)));
    let outside = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
    assert_eq!(
        send(&r, outside, post("/report", b.clone()), b.clone()).await,
        StatusCode::FORBIDDEN
    );
    // Even with the token, from outside the allow-list.
    let with_token = post(&format!("/report?token={TOKEN}"), b.clone());
    assert_eq!(
        send(&r, outside, with_token, b.clone()).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    let wrong = post("/report?token=s3cret-tokem", b.clone());
    assert_eq!(
        send(&r, LOCAL, wrong, b.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    let bearer_wrong = post("/report", b.clone()).header(AUTHORIZATION, "Bearer nope");
    assert_eq!(
        send(&r, LOCAL, bearer_wrong, b.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    // Only the first `token` of a query counts: no guessing many at once.
    let many = post(&format!("/report?token=guess&token={TOKEN}"), b.clone());
    assert_eq!(
        send(&r, LOCAL, many, b.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(rx.try_recv().is_err(), "nothing queued");
    assert_eq!(r.metrics.aeges.refused_source.get(), 2);
    assert_eq!(r.metrics.aeges.refused_token.get(), 4);
}

#[tokio::test]
async fn the_token_is_taken_from_the_query_basic_auth_or_bearer() {
    let (r, mut rx) = reports(Some(TOKEN), 4096);
    let b = body(&format!("\"0x{}\"", "de".repeat(20)));
    let basic = |user: &str, pass: &str| {
        let creds = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        format!("Basic {creds}")
    };
    let forms = [
        post(&format!("/report?x=1&token={TOKEN}"), b.clone()),
        post("/report", b.clone()).header(AUTHORIZATION, basic("report", TOKEN)),
        post("/report", b.clone()).header(AUTHORIZATION, basic(TOKEN, "")),
        post("/report", b.clone()).header(AUTHORIZATION, format!("Bearer {TOKEN}")),
    ];
    for form in forms {
        assert_eq!(send(&r, LOCAL, form, b.clone()).await, StatusCode::OK);
        assert!(rx.try_recv().is_ok());
    }
    // An IPv4 peer on an IPv6 socket is checked as IPv4.
    let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
    let form = post(&format!("/report?token={TOKEN}"), b.clone());
    assert_eq!(send(&r, mapped, form, b.clone()).await, StatusCode::OK);
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let form = post(&format!("/report?token={TOKEN}"), b.clone());
    assert_eq!(
        send(&r, v6, form, b).await,
        StatusCode::FORBIDDEN,
        "::1 is not in 127.0.0.0/8"
    );
}

#[tokio::test]
async fn bad_bodies_get_400_with_a_reason_and_big_ones_413() {
    let (r, mut rx) = reports(None, 600);
    for bad in ["", "{}", "[\"0x11\"]", "[1, {}]", "not json"] {
        let status = send(&r, LOCAL, post("/report", bad.into()), bad.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}");
    }
    let big = format!("[\"{}\"]", "a".repeat(700));
    assert_eq!(
        send(&r, LOCAL, post("/report", big.clone()), big.clone()).await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let declared = post("/report", String::new()).header(CONTENT_LENGTH, "100000");
    assert_eq!(
        send(&r, LOCAL, declared, String::new()).await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        send(&r, LOCAL, Request::get("/report"), String::new()).await,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        send(&r, LOCAL, post("/other", String::new()), String::new()).await,
        StatusCode::NOT_FOUND
    );
    assert!(rx.try_recv().is_err());
    assert_eq!(r.metrics.aeges.malformed.get(), 5);
    assert_eq!(r.metrics.aeges.too_large.get(), 2);
}

/// Reports sharing with the fleet, with a queue of `queue_len`; the
/// queue's and the fleet outbox's receiving ends, and the screen.
fn sharing_reports(
    queue_len: usize,
) -> (
    Reports,
    mpsc::Receiver<Invalidation>,
    mpsc::Receiver<Invalidation>,
    Arc<Screen>,
) {
    let (queue, rx) = mpsc::channel(queue_len);
    let metrics = Arc::new(Metrics::new());
    let screen = Arc::new(Screen::new(
        ScreenSettings::default(),
        std::time::Instant::now(),
    ));
    let (share, outbox) = crate::sidecar::shared_bans::share(metrics.clone());
    let allow = vec!["127.0.0.0/8".parse().unwrap_or_else(|e| panic!("{e}"))];
    let r = Reports::new(allow, None, 4096, queue, screen.clone(), metrics).with_share(Some(share));
    (r, rx, outbox, screen)
}

/// A report the queue cannot take within its wait is answered 503 and
/// shared with no one: the reporter tries again, and the fleet learns it
/// from the instance that takes it. One taken is shared once.
#[tokio::test(start_paused = true)]
async fn a_report_refused_as_busy_is_not_shared_with_the_fleet() {
    let (r, mut rx, mut outbox, _) = sharing_reports(1);
    let b = body(&format!("\"0x{}\"", "de".repeat(20)));
    // The first fills the queue; the second finds it full.
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b.clone()).await,
        StatusCode::OK
    );
    assert!(outbox.try_recv().is_ok());
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b.clone()).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(outbox.try_recv().is_err(), "a refused report was shared");
    assert!(rx.try_recv().is_ok());
}

/// The same failure reported again once applied (a reporter retrying, or
/// reporting each time the transaction fails anew) is queued again but
/// shared with the fleet once.
#[tokio::test]
async fn a_failure_reported_again_is_shared_once() {
    let (r, mut rx, mut outbox, screen) = sharing_reports(8);
    let b = body(&format!("\"0x{}\"", "de".repeat(20)));
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b.clone()).await,
        StatusCode::OK
    );
    let first = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
    let now = screen.millis(std::time::Instant::now());
    screen.apply(&[first], now, wall_now());
    assert_eq!(
        send(&r, LOCAL, post("/report", b.clone()), b.clone()).await,
        StatusCode::OK
    );
    assert!(rx.try_recv().is_ok(), "the repeat is queued");
    assert!(outbox.try_recv().is_ok());
    assert!(outbox.try_recv().is_err(), "a repeat was shared again");
}
