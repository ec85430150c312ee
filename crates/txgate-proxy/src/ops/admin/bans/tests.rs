//! The ban endpoints over in-process requests: access, lookups, lifts,
//! export and import, and every kind of bad input.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};

use alloy_primitives::{B256, keccak256};
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use txgate_screen::{
    AssertionKey, Invalidation, ScreenSettings, decode, decode_hex, recover_sender,
};

use super::*;
use crate::metrics::admin::Change;
use crate::screening::tests::raw;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const OUTSIDE: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));

fn bans(token: Option<&str>) -> Bans {
    let screen = Arc::new(Screen::new(
        ScreenSettings::default(),
        std::time::Instant::now(),
    ));
    Bans::new(
        screen,
        token.map(str::to_owned),
        4096,
        Arc::new(Metrics::new()),
    )
}

fn request(method: &str, uri: &str, body: &str, token: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

async fn call(bans: &Bans, req: Request<Full<Bytes>>, peer: IpAddr) -> (StatusCode, Value) {
    let response = bans.handle(req, peer).await;
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

/// Bans the calldata of `raw` (failed by its own sender, under one
/// assertion), as the batch worker would.
fn ban(bans: &Bans, raw: &str) {
    let bytes = decode_hex(raw).unwrap();
    let tx = decode(&bytes).unwrap();
    let sender = recover_sender(&tx).unwrap();
    let mut inv = Invalidation::of(
        &tx,
        Some(sender),
        Some(AssertionKey {
            id: B256::repeat_byte(0xa5),
            version: 3,
        }),
        crate::screening::state::wall_now(),
    )
    .unwrap();
    inv.tx_hash = Some(keccak256(&bytes));
    bans.screen.apply(&[inv], 1, inv.started);
}

fn now(bans: &Bans) -> Millis {
    bans.screen.millis(std::time::Instant::now())
}

#[tokio::test]
async fn a_token_is_asked_for_when_set_else_loopback_only() {
    let open = bans(None);
    let q = "/bans/lookup?sender=0x00000000000000000000000000000000000000aa";
    assert_eq!(
        call(&open, request("GET", q, "", None), LOOPBACK).await.0,
        200
    );
    let (status, body) = call(&open, request("GET", q, "", None), OUTSIDE).await;
    assert_eq!(status, 403);
    assert!(body["error"].as_str().unwrap().contains("token_file"));

    let guarded = bans(Some("s3cret"));
    for token in [None, Some("wrong"), Some("s3cret2")] {
        let response = guarded.handle(request("GET", q, "", token), LOOPBACK).await;
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(response.headers()[WWW_AUTHENTICATE], "Bearer");
    }
    let right = request("GET", q, "", Some("s3cret"));
    assert_eq!(call(&guarded, right, OUTSIDE).await.0, 200);
    let m = &guarded.metrics.admin;
    let text = String::from_utf8(guarded.metrics.render()).unwrap();
    assert!(text.contains(
        "txgate_admin_ban_requests_total{endpoint=\"lookup\",result=\"unauthorized\"} 3"
    ));
    assert!(text.contains("txgate_admin_ban_requests_total{endpoint=\"lookup\",result=\"ok\"} 1"));
    assert_eq!(m.change(Change::LiftSender).get(), 0);
}

#[tokio::test]
async fn a_lookup_says_which_rule_refuses_and_a_lift_ends_it() {
    let b = bans(None);
    let calldata = [0xa9, 0x05, 0x9c, 0xbb, 7, 7];
    let failed = raw(1, 0, &calldata);
    ban(&b, &failed);
    // The failed transaction itself: its hash.
    let body = json!({ "raw": failed }).to_string();
    let (status, v) = call(&b, request("POST", "/bans/lookup", &body, None), LOOPBACK).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["refused_by"], "recent_failure");
    let failure = &v["tx_hash"]["recent_failure"];
    assert_eq!(failure["assertion"]["version"], 3);
    assert_eq!(failure["charged"], true);
    // The same calldata from a fresh sender: its fingerprint.
    let copy = raw(2, 0, &calldata);
    let body = json!({ "raw": copy }).to_string();
    let (_, v) = call(&b, request("POST", "/bans/lookup", &body, None), LOOPBACK).await;
    assert_eq!(v["refused_by"], "denied_fingerprint");
    let ban = &v["fingerprint"]["ban"];
    assert_eq!(ban["state"], "denied");
    assert_eq!(
        ban["assertions"][0]["id"],
        B256::repeat_byte(0xa5).to_string()
    );
    assert!(ban["expires_in_ms"].as_u64().unwrap() > 100_000);
    assert_eq!(v["call"]["selector"], "0xa9059cbb");
    assert_eq!(v["sender"]["backpressure"], Value::Null);
    assert!(b.screen.screen(&copy, now(&b)).is_err());

    // Lift the fingerprint: the copy passes; lifting again lifts nothing.
    let fp = v["fingerprint"]["value"].as_str().unwrap().to_owned();
    let lift = json!({ "fingerprint": fp }).to_string();
    let (status, v) = call(&b, request("POST", "/bans/lift", &lift, None), LOOPBACK).await;
    assert_eq!(
        (status, v["fingerprint"]["lifted"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert!(b.screen.screen(&copy, now(&b)).is_ok());
    let (_, v) = call(&b, request("POST", "/bans/lift", &lift, None), LOOPBACK).await;
    assert_eq!(v["fingerprint"]["lifted"], false);
    assert_eq!(b.metrics.admin.change(Change::LiftFingerprint).get(), 1);

    // The failed hash and the charged sender, by GET.
    let hash = keccak256(decode_hex(&failed).unwrap());
    let lift = json!({ "tx_hash": hash.to_string() }).to_string();
    let (_, v) = call(&b, request("POST", "/bans/lift", &lift, None), LOOPBACK).await;
    assert_eq!(v["tx_hash"]["lifted"], true);
    let uri = format!("/bans/lookup?tx_hash={hash}");
    let (_, v) = call(&b, request("GET", &uri, "", None), LOOPBACK).await;
    assert_eq!(v["tx_hash"]["recent_failure"], Value::Null);
    assert_eq!(v["refused_by"], Value::Null);
}

#[tokio::test]
async fn an_export_imports_into_another_instance() {
    let from = bans(None);
    for i in 0..50u8 {
        ban(&from, &raw(10 + i, 0, &[0x12, 0x34, 0x56, 0x78, i]));
    }
    let response = from
        .handle(request("GET", "/bans", "", None), LOOPBACK)
        .await;
    assert_eq!(response.status(), 200);
    let export = response.into_body().collect().await.unwrap().to_bytes();
    let list: Value = serde_json::from_slice(&export).unwrap();
    assert_eq!(list["format"], "txgate-bans");
    assert_eq!(list["bans"].as_array().unwrap().len(), 50);

    let to = bans(None);
    let copy = raw(99, 0, &[0x12, 0x34, 0x56, 0x78, 7]);
    assert!(to.screen.screen(&copy, now(&to)).is_ok());
    let req = request("POST", "/bans/import", "", None).map(|_| Full::new(export.clone()));
    // Over this instance's 4096-byte cap: refused whole, nothing imported.
    assert!(export.len() > 4096);
    let (status, _) = call(&to, req, LOOPBACK).await;
    assert_eq!(status, 413);
    let to = Bans::new(to.screen.clone(), None, 1 << 20, to.metrics.clone());
    let req = request("POST", "/bans/import", "", None).map(|_| Full::new(export.clone()));
    let (status, v) = call(&to, req, LOOPBACK).await;
    assert_eq!((status, v["imported"].clone()), (StatusCode::OK, json!(50)));
    assert!(to.screen.screen(&copy, now(&to)).is_err());
    assert_eq!(to.metrics.admin.change(Change::Import).get(), 50);
}

#[tokio::test]
async fn bad_input_gets_a_clear_400() {
    let b = bans(None);
    let cases: &[(&str, &str, &str, u16, &str)] = &[
        ("POST", "/bans/lookup", "{", 400, "bad JSON body"),
        ("POST", "/bans/lookup", "{}", 400, "name a tx_hash"),
        (
            "POST",
            "/bans/lookup",
            r#"{"txhash":"0x01"}"#,
            400,
            "unknown field",
        ),
        (
            "POST",
            "/bans/lookup",
            r#"{"fingerprint":"0x01"}"#,
            400,
            "fingerprint is not 32 bytes",
        ),
        (
            "POST",
            "/bans/lookup",
            r#"{"sender":"zz"}"#,
            400,
            "sender is not 20 bytes",
        ),
        ("POST", "/bans/lookup", r#"{"raw":"0xzz"}"#, 400, "raw:"),
        (
            "GET",
            "/bans/lookup?nope=1",
            "",
            400,
            "unknown parameter `nope`",
        ),
        ("GET", "/bans/lookup", "", 400, "name a tx_hash"),
        ("POST", "/bans/lift", "{}", 400, "name a fingerprint"),
        ("POST", "/bans/lift", r#"{"raw":"0x01"}"#, 400, "not raw"),
        (
            "POST",
            "/bans/import",
            r#"{"format":"x","version":1,"bans":[]}"#,
            400,
            "expected format",
        ),
        (
            "POST",
            "/bans/import",
            r#"{"format":"txgate-bans","version":1,"bans":[{"fingerprint":"0x01","expires_in_ms":1,"suspect_for_ms":1}]}"#,
            400,
            "bans[0]: fingerprint",
        ),
        ("GET", "/bans/import", "", 405, "use POST"),
        ("DELETE", "/bans", "", 405, "use GET"),
        ("GET", "/bans/nothing", "", 404, "no such ban endpoint"),
    ];
    for (method, uri, body, status, says) in cases {
        let (got, v) = call(&b, request(method, uri, body, None), LOOPBACK).await;
        assert_eq!(got.as_u16(), *status, "{method} {uri} {body}: {v}");
        let message = v["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{method} {uri} {body}: {message}");
    }
    let long = format!(
        r#"{{"format":"txgate-bans","version":1,"bans":[{{"fingerprint":"{}","expires_in_ms":{},"suspect_for_ms":{}}}]}}"#,
        B256::repeat_byte(1),
        MAX_IMPORT_TTL_MS + 1,
        MAX_IMPORT_TTL_MS + 1
    );
    let (got, v) = call(&b, request("POST", "/bans/import", &long, None), LOOPBACK).await;
    assert_eq!(got, 400, "{v}");
    assert_eq!(b.screen.sizes().denied, 0);
    let too_big = "x".repeat(MAX_SMALL_BODY + 1);
    let (got, _) = call(
        &b,
        request("POST", "/bans/lookup", &too_big, None),
        LOOPBACK,
    )
    .await;
    assert_eq!(got, 413);
}
