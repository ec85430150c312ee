//! The report reader against the sidecar's example, every accepted form of
//! each field, and each error it can give.

use super::*;
use alloy_primitives::{address, b256};

const HASH: &str = "0x1111111111111111111111111111111111111111111111111111111111111111";
const CALLER: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const TARGET: Address = address!("0x000000000000000000000000000000000000dEaD");

fn ok(body: &str) -> Report {
    parse(body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
}

fn err(body: &str) -> ReportError {
    match parse(body.as_bytes()) {
        Ok(report) => panic!("{body}: parsed as {report:?}"),
        Err(e) => e,
    }
}

/// `[HASH, {fields}]` with the given `tx_env` fields.
fn body(fields: &str) -> String {
    format!(r#"["{HASH}", {{{fields}}}]"#)
}

/// A minimal call with the given extra fields.
fn call(extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { ", " };
    body(&format!(
        r#""caller":"{CALLER}", "gas_limit":100000, "kind":"{TARGET}"{sep}{extra}"#
    ))
}

const EXAMPLE: &str = r#"["0x1111111111111111111111111111111111111111111111111111111111111111", {"tx_type":2, "caller":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8", "gas_limit":100000, "gas_price":2000000000, "kind":"0x000000000000000000000000000000000000dead", "value":"0x1", "data":"0xa9059cbb000000000000000000000000111111111111111111111111111111111111111100000000000000000000000000000000000000000000000000000000000003e8", "nonce":7, "chain_id":31337, "access_list":[], "gas_priority_fee":1000000000, "blob_hashes":[], "max_fee_per_blob_gas":0, "authorization_list":[]}]"#;

#[test]
fn the_sidecar_example() {
    let report = ok(EXAMPLE);
    assert_eq!(
        report.tx_hash,
        b256!("0x1111111111111111111111111111111111111111111111111111111111111111")
    );
    assert_eq!(report.caller, CALLER);
    assert_eq!(report.kind, Some(TARGET));
    assert_eq!(report.value, U256::from(1u8));
    assert_eq!(report.gas_limit, 100_000);
    assert_eq!(report.nonce, Some(7));
    assert_eq!(report.data.len(), 4 + 32 + 32);
    assert_eq!(report.data[..4], [0xa9, 0x05, 0x9c, 0xbb]);

    let inv = report.invalidation(0).unwrap_or_else(|| panic!("a call"));
    let fp = Fingerprint::from_parts(TARGET, &report.data, U256::from(1u8), 100_000);
    assert_eq!(inv.fingerprint, fp.hash);
    assert_eq!(inv.target, TARGET);
    assert_eq!(inv.selector, [0xa9, 0x05, 0x9c, 0xbb]);
    assert_eq!(inv.assertion, None);
    assert_eq!(inv.tx_hash, Some(report.tx_hash));
    assert_eq!(inv.sender, Some(CALLER));
}

#[test]
fn quantities_as_numbers_hex_and_decimal_strings() {
    for (value, gas, want_value, want_gas) in [
        ("1000", "21000", 1000u64, 21000u64),
        (r#""0x3e8""#, r#""0x5208""#, 1000, 21000),
        (r#""0X3E8""#, r#""0x0000005208""#, 1000, 21000),
        (r#""1000""#, r#""21000""#, 1000, 21000),
        ("0", r#""0x0""#, 0, 0),
        (r#""0x00""#, r#""0""#, 0, 0),
        (
            "18446744073709551615",
            r#""0xffffffffffffffff""#,
            u64::MAX,
            u64::MAX,
        ),
    ] {
        let report = ok(&body(&format!(
            r#""caller":"{CALLER}", "kind":null, "value":{value}, "gas_limit":{gas}"#
        )));
        assert_eq!(report.value, U256::from(want_value), "{value}");
        assert_eq!(report.gas_limit, want_gas, "{gas}");
    }
}

#[test]
fn u128_and_u256_json_numbers() {
    let report = ok(&call(r#""value":2000000000000000000000"#));
    assert_eq!(report.value, U256::from(2_000_000_000_000_000_000_000u128));
    let report = ok(&call(&format!(r#""value":{}"#, U256::MAX)));
    assert_eq!(report.value, U256::MAX);
    let report = ok(&call(&format!(r#""value":"0x{:x}""#, U256::MAX)));
    assert_eq!(report.value, U256::MAX);
    let report = ok(&call(&format!(r#""value":"{}""#, U256::MAX)));
    assert_eq!(report.value, U256::MAX);
    // One more is too many, in every form.
    let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    assert_eq!(
        err(&call(&format!(r#""value":{over}"#))),
        ReportError::Value
    );
    assert_eq!(
        err(&call(&format!(r#""value":"{over}""#))),
        ReportError::Value
    );
    assert_eq!(
        err(&call(&format!(r#""value":"0x1{}""#, "0".repeat(64)))),
        ReportError::Value
    );
}

#[test]
fn unknown_fields_are_ignored() {
    let report = ok(&call(
        r#""gas_price":"not a number", "access_list":{"odd":true}, "authorization_list":[[1,2],{"x":null}], "blob_hashes":7, "chain_id":"x", "gas_priority_fee":-1, "future_field":{"nested":[1,2,3e300]}, "tx_type":"eip1559""#,
    ));
    assert_eq!(report.caller, CALLER);
    assert_eq!(report.kind, Some(TARGET));
}

#[test]
fn missing_optional_fields_default() {
    let report = ok(&call(""));
    assert_eq!(report.value, U256::ZERO);
    assert!(report.data.is_empty());
    assert_eq!(report.nonce, None);
    let nulls = ok(&call(r#""value":null, "data":null, "nonce":null"#));
    assert_eq!(nulls, report);
    // The nonce is best effort: unreadable is absent, not an error.
    assert_eq!(ok(&call(r#""nonce":"seven""#)).nonce, None);
    assert_eq!(ok(&call(r#""nonce":"0x7""#)).nonce, Some(7));
}

#[test]
fn extra_array_elements_are_ignored() {
    let report = ok(&format!(
        r#"["{HASH}", {{"caller":"{CALLER}", "gas_limit":1, "kind":null}}, "assertion", 1, null]"#
    ));
    assert_eq!(report.caller, CALLER);
}

#[test]
fn every_kind_form() {
    let target = format!("{TARGET}");
    let bare = target.trim_start_matches("0x").to_lowercase();
    for (kind, want) in [
        ("null".to_string(), None),
        (r#""Create""#.to_string(), None),
        (r#"{"Create":null}"#.to_string(), None),
        (r#"{"Create":"Create"}"#.to_string(), None),
        (format!(r#""{target}""#), Some(TARGET)),
        (format!(r#""{bare}""#), Some(TARGET)),
        (format!(r#"{{"Call":"{target}"}}"#), Some(TARGET)),
    ] {
        let report = ok(&body(&format!(
            r#""caller":"{CALLER}", "gas_limit":1, "kind":{kind}"#
        )));
        assert_eq!(report.kind, want, "{kind}");
    }
}

#[test]
fn creation_has_no_invalidation() {
    let report = ok(&body(&format!(
        r#""caller":"{CALLER}", "gas_limit":1000000, "kind":null, "data":"0x6080604052""#
    )));
    assert_eq!(report.kind, None);
    assert_eq!(report.fingerprint(), None);
    assert_eq!(report.invalidation(0), None);
}

#[test]
fn short_and_empty_data() {
    let three = ok(&call(r#""data":"0xa9059c""#));
    assert_eq!(three.data.as_ref(), [0xa9, 0x05, 0x9c]);
    let inv = three.invalidation(0).unwrap_or_else(|| panic!("a call"));
    let fp = Fingerprint::from_parts(TARGET, &[0xa9, 0x05, 0x9c], U256::ZERO, 100_000);
    assert_eq!(inv.fingerprint, fp.hash);
    assert_eq!(inv.selector, [0xa9, 0x05, 0x9c, 0]);

    for empty in [r#""data":"0x""#, r#""data":"""#, r#""data":null"#, ""] {
        let report = ok(&call(empty));
        assert!(report.data.is_empty(), "{empty}");
        let inv = report.invalidation(0).unwrap_or_else(|| panic!("a call"));
        let fp = Fingerprint::from_parts(TARGET, &[], U256::ZERO, 100_000);
        assert_eq!(inv.fingerprint, fp.hash);
        assert_eq!(inv.selector, [0; 4]);
    }
    assert_eq!(
        ok(&call(r#""data":"A9059CBB""#)).data.as_ref(),
        [0xa9, 0x05, 0x9c, 0xbb]
    );
}

#[test]
fn json_errors() {
    assert_eq!(parse(b"").err(), Some(ReportError::Json));
    assert_eq!(parse(b"[").err(), Some(ReportError::Json));
    assert_eq!(parse(b"\xff\xfe").err(), Some(ReportError::Json));
    assert_eq!(
        parse(EXAMPLE.replace("]", "] x").as_bytes()).err(),
        Some(ReportError::Json)
    );
    assert_eq!(parse(b"{\"a\":1,}").err(), Some(ReportError::Json));
}

#[test]
fn shape_errors() {
    for shape in [
        "{}".to_string(),
        "null".to_string(),
        "[]".to_string(),
        format!(r#"["{HASH}"]"#),
        format!(r#"["{HASH}", null]"#),
        format!(r#"["{HASH}", []]"#),
        format!(r#"["{HASH}", "0x"]"#),
        // A field txgate reads, twice: ambiguous.
        call(&format!(r#""caller":"{CALLER}""#)),
    ] {
        assert_eq!(err(&shape), ReportError::Shape, "{shape}");
    }
}

#[test]
fn tx_hash_errors() {
    let env = format!(r#"{{"caller":"{CALLER}", "gas_limit":1, "kind":null}}"#);
    for hash in [
        "null",
        "1",
        r#""0x11""#,
        r#""0x111111111111111111111111111111111111111111111111111111111111111""#,
        r#""0x11111111111111111111111111111111111111111111111111111111111111111111""#,
        r#""0x111111111111111111111111111111111111111111111111111111111111111g""#,
        "[]",
    ] {
        assert_eq!(
            err(&format!("[{hash}, {env}]")),
            ReportError::TxHash,
            "{hash}"
        );
    }
    let bare = HASH.trim_start_matches("0x");
    assert!(parse(format!(r#"["{bare}", {env}]"#).as_bytes()).is_ok());
}

#[test]
fn caller_errors() {
    for caller in [
        "",
        r#""caller":null,"#,
        r#""caller":"0x1234","#,
        r#""caller":1,"#,
        r#""caller":"0x70997970c51812dc3a010c7d01b50e0d17dc79cz","#,
    ] {
        let b = body(&format!(r#"{caller} "gas_limit":1, "kind":null"#));
        assert_eq!(err(&b), ReportError::Caller, "{caller}");
    }
}

#[test]
fn kind_errors() {
    for kind in [
        "",
        r#", "kind":1"#,
        r#", "kind":"0xdead""#,
        r#", "kind":"create""#,
        r#", "kind":{"Call":null}"#,
        r#", "kind":{"Call":"0x12"}"#,
        r#", "kind":{"Other":null}"#,
        r#", "kind":{}"#,
        r#", "kind":[]"#,
    ] {
        let b = body(&format!(r#""caller":"{CALLER}", "gas_limit":1{kind}"#));
        assert_eq!(err(&b), ReportError::Kind, "{kind}");
    }
}

#[test]
fn value_errors() {
    for value in [
        "-1",
        "1.0",
        "1e3",
        r#""0x""#,
        r#""""#,
        r#""abc""#,
        r#""-1""#,
        r#""0x-1""#,
        r#"" 1""#,
        r#""1_000""#,
        "true",
        "[]",
        "{}",
    ] {
        let b = call(&format!(r#""value":{value}"#));
        assert_eq!(err(&b), ReportError::Value, "{value}");
    }
}

#[test]
fn gas_limit_errors() {
    for gas in [
        "",
        r#", "gas_limit":null"#,
        r#", "gas_limit":18446744073709551616"#,
        r#", "gas_limit":"0x10000000000000000""#,
        r#", "gas_limit":-1"#,
        r#", "gas_limit":1.5"#,
        r#", "gas_limit":"lots""#,
    ] {
        let b = body(&format!(r#""caller":"{CALLER}", "kind":null{gas}"#));
        assert_eq!(err(&b), ReportError::GasLimit, "{gas}");
    }
}

#[test]
fn data_errors() {
    for data in [r#""0xabc""#, r#""0xzz""#, "12", "[1,2]", r#""0x 1""#] {
        let b = call(&format!(r#""data":{data}"#));
        assert_eq!(err(&b), ReportError::Data, "{data}");
    }
}

#[test]
fn reasons_are_distinct_and_display_quotes_nothing() {
    let mut labels: Vec<_> = ReportError::ALL.iter().map(|e| e.reason()).collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), ReportError::ALL.len());

    let secret = "SECRET".repeat(100);
    let b = body(&format!(
        r#""caller":"{secret}", "gas_limit":1, "kind":null"#
    ));
    let e = err(&b);
    assert_eq!(e.reason(), "caller");
    let shown = e.to_string();
    assert!(!shown.contains("SECRET") && !shown.contains('\n') && shown.len() < 100);
    for e in ReportError::ALL {
        let shown = e.to_string();
        assert!(!shown.contains('\n') && shown.len() < 100, "{shown}");
    }
}
