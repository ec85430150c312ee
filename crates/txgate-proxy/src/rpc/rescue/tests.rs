//! Statuses, codes, messages and `data` of refusals.

use super::*;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};

#[test]
fn overloaded_carries_retry_after_and_limit_code() {
    let r = Refusal::Overloaded.respond(None, &HeaderValue::from_static("3"));
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[RETRY_AFTER], "3");
    assert_eq!(Refusal::Overloaded.class().code, code::LIMIT_EXCEEDED);
}

#[test]
fn screening_refusals_carry_reason_fingerprint_and_assertions() {
    let fp = alloy_primitives::B256::repeat_byte(0xf0);
    let id = alloy_primitives::B256::repeat_byte(0xa5);
    let refusal = Refusal::Screened(Rejection::Denied {
        fingerprint: fp,
        assertions: vec![id],
    });
    assert_eq!(refusal.class().code, code::TRANSACTION_REJECTED);
    let mut out = Vec::new();
    refusal.write(&mut out, None);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["data"]["reason"], "denied_fingerprint");
    assert_eq!(v["error"]["data"]["fingerprint"], format!("{fp}"));
    assert_eq!(v["error"]["data"]["assertion_ids"][0], format!("{id}"));

    let backoff = Refusal::Screened(Rejection::SenderBackoff { retry_after: 2500 });
    let r = backoff.respond(None, &HeaderValue::from_static("1"));
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[RETRY_AFTER], "3");
    assert_eq!(backoff.class().code, code::LIMIT_EXCEEDED);
}

#[test]
fn a_bundle_is_refused_as_its_transaction_would_be_and_names_it() {
    let fp = alloy_primitives::B256::repeat_byte(0xf0);
    let tx_hash = alloy_primitives::B256::repeat_byte(0x11);
    let refusal = Refusal::Bundle(Box::new(UnitRejection {
        index: 2,
        tx_hash: Some(tx_hash),
        rejection: Rejection::Denied {
            fingerprint: fp,
            assertions: vec![],
        },
    }));
    assert_eq!(refusal.class().code, code::TRANSACTION_REJECTED);
    assert_eq!(refusal.class().outcome, Outcome::Screened);
    let mut out = Vec::new();
    refusal.write(&mut out, None);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let data = &v["error"]["data"];
    assert_eq!(data["reason"], "denied_fingerprint");
    assert_eq!(data["bundle_index"], 2);
    assert_eq!(data["tx_hash"], format!("{tx_hash}"));
    assert_eq!(data["fingerprint"], format!("{fp}"));
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("transaction rejected: "), "{message}");
    assert!(message.ends_with("(bundle_index 2)"), "{message}");

    let backoff = Refusal::Bundle(Box::new(UnitRejection {
        index: 0,
        tx_hash: Some(tx_hash),
        rejection: Rejection::SenderBackoff { retry_after: 1500 },
    }));
    let r = backoff.respond(None, &HeaderValue::from_static("1"));
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[RETRY_AFTER], "2");
    let invalid = Refusal::Bundle(Box::new(UnitRejection {
        index: 1,
        tx_hash: None,
        rejection: Rejection::Invalid(txgate_screen::DecodeError::BadHex),
    }));
    assert_eq!(invalid.class().code, code::INVALID_PARAMS);
    let mut out = Vec::new();
    invalid.write(&mut out, None);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["data"]["bundle_index"], 1);
    assert!(v["error"]["data"].get("tx_hash").is_none());

    let malformed = Refusal::MalformedBundle(Malformed::TooMany { max: 100 });
    assert_eq!(malformed.class().code, code::INVALID_PARAMS);
    let mut out = Vec::new();
    malformed.write(&mut out, None);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["data"]["problem"], "too_many_txs");
    assert_eq!(v["error"]["data"]["max_bundle_txs"], 100);
    assert_eq!(
        refused_submissions(&[Some(refusal), Some(malformed), None]),
        1,
        "a refused bundle is one refused submission; a malformed one none"
    );
}

#[test]
fn only_429_carries_retry_after() {
    let r = Refusal::Parse.respond(None, &HeaderValue::from_static("3"));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.headers().get(RETRY_AFTER).is_none());
    assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
}

#[test]
fn only_screening_refusals_count_as_refused_submissions() {
    use txgate_screen::{DecodeError, Rejection};
    let verdicts = [
        None,
        Some(Refusal::Screened(Rejection::Invalid(DecodeError::BadHex))),
        Some(Refusal::MethodDenied),
        Some(Refusal::Screened(Rejection::Invalid(DecodeError::Empty))),
    ];
    assert_eq!(refused_submissions(&verdicts), 2, "screening's only");
}
