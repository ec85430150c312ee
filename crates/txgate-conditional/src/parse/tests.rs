//! The cost as op-geth's tests count it, and every malformed shape.

#![allow(clippy::unwrap_used)]

use super::*;

const A1: &str = "0x5ff137d4b0fdcd49dca30c7cf57e578a026d2789";
const A2: &str = "0x0000000071727de22e5e9d8baf0edac6f37da032";
const H1: &str = "0x0000000000000000000000000000000000000000000000000000000000000001";
const H2: &str = "0x0000000000000000000000000000000000000000000000000000000000000002";

fn cost(json: &str) -> u64 {
    check(json, 1000)
        .unwrap_or_else(|e| panic!("{json}: {e}"))
        .cost
}

fn invalid(json: &str) -> Reason {
    match check(json, 1000) {
        Err(Refusal::Invalid(reason)) => reason,
        other => panic!("{json}: {other:?}"),
    }
}

/// The cases of op-geth's `TestTransactionConditionalCost` (commit
/// fcbac426): an account with no slots costs 1, a root 2, two slots 3.
#[test]
fn cost_is_counted_as_op_geth_does() {
    assert_eq!(cost("{}"), 0);
    assert_eq!(cost(r#"{"knownAccounts": {}}"#), 0);
    assert_eq!(cost(r#"{"knownAccounts": null}"#), 0);
    assert_eq!(
        cost(&format!(r#"{{"knownAccounts": {{"{A1}": {{}}}}}}"#)),
        1
    );
    assert_eq!(
        cost(&format!(r#"{{"knownAccounts": {{"{A1}": "{H1}"}}}}"#)),
        2
    );
    assert_eq!(
        cost(&format!(
            r#"{{"knownAccounts": {{"{A1}": {{"{H1}": "{H2}", "{H2}": "{H1}"}}}}}}"#
        )),
        3
    );
    assert_eq!(cost(r#"{"blockNumberMin": "0x1"}"#), 1);
    assert_eq!(cost(r#"{"blockNumberMin": 1, "blockNumberMax": 2}"#), 1);
    assert_eq!(cost(r#"{"timestampMax": "1700000000"}"#), 1);
    // op-geth's "summed" case: a root account (2), a two-slot account (3),
    // a block bound (1) and a timestamp bound (1).
    let summed = format!(
        r#"{{"knownAccounts": {{"{A1}": "{H1}", "{A2}": {{"{H1}": "{H2}", "{H2}": "{H1}"}}}},
            "blockNumberMin": "0x1", "timestampMin": 1}}"#
    );
    assert_eq!(cost(&summed), 7);
    let checked = check(&summed, 1000).unwrap();
    assert_eq!(checked.accounts, 2);
}

#[test]
fn over_the_max_is_refused_with_the_cost_and_the_max() {
    // 1000 lookups pass (an inclusive limit); 1001 do not.
    let slots = |n: usize| {
        (0..n)
            .map(|i| format!(r#""0x{i:064x}": "{H1}""#))
            .collect::<Vec<_>>()
            .join(",")
    };
    let at_max = format!(r#"{{"knownAccounts": {{"{A1}": {{{}}}}}}}"#, slots(999));
    assert_eq!(cost(&at_max), 1000);
    let over = format!(r#"{{"knownAccounts": {{"{A1}": {{{}}}}}}}"#, slots(1000));
    let refusal = check(&over, 1000).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::CostExceeded {
            cost: 1001,
            max: 1000
        }
    );
    assert_eq!(refusal.code(), -32005);
    assert_eq!(
        refusal.to_string(),
        "conditional cost, 1001, exceeded max: 1000"
    );
    // The bounds count too.
    let with_bound = format!(
        r#"{{"knownAccounts": {{"{A1}": {{{}}}}}, "timestampMax": 5}}"#,
        slots(999)
    );
    assert!(matches!(
        check(&with_bound, 1000),
        Err(Refusal::CostExceeded { cost: 1001, .. })
    ));
}

#[test]
fn bounds_are_hex_or_decimal_and_min_may_equal_max() {
    assert_eq!(
        cost(r#"{"blockNumberMin": "0xff", "blockNumberMax": 255}"#),
        1
    );
    assert_eq!(cost(r#"{"timestampMin": "10", "timestampMax": "0xa"}"#), 1);
    assert_eq!(cost(r#"{"blockNumberMin": null, "timestampMax": null}"#), 0);
    let big = format!(r#"{{"blockNumberMax": "0x{}"}}"#, "f".repeat(64));
    assert_eq!(cost(&big), 1);
    assert_eq!(
        invalid(r#"{"blockNumberMin": 2, "blockNumberMax": 1}"#),
        Reason::BlockRange
    );
    assert_eq!(
        invalid(r#"{"timestampMin": "0x2", "timestampMax": "0x1"}"#),
        Reason::TimestampRange
    );
    let refusal = check(r#"{"timestampMin": 2, "timestampMax": 1}"#, 1000).unwrap_err();
    assert_eq!(refusal.code(), -32003);
    assert_eq!(
        refusal.to_string(),
        "failed conditional validation: timestamp minimum constraint must be less than the maximum"
    );
    // A value op-geth could not decode: its RPC layer's code and prefix.
    let refusal = check(r#"{"knownAccounts": {"0x12": "0x00"}}"#, 1000).unwrap_err();
    assert_eq!(refusal, Refusal::Invalid(Reason::BadAddress));
    assert_eq!(refusal.code(), -32602);
    assert_eq!(
        refusal.to_string(),
        "invalid argument 1: an account key is not a 0x-prefixed 20-byte address"
    );
    let refusal = check(r#"{"blockNumberMin": "x"}"#, 1000).unwrap_err();
    assert_eq!(refusal.code(), -32602);
    // What op-geth accepts and txgate refuses on purpose stays -32003.
    let refusal = check(r#"{"extra": 1}"#, 1000).unwrap_err();
    assert_eq!(refusal, Refusal::Invalid(Reason::UnknownField));
    assert_eq!(refusal.code(), -32003);
    for reason in Reason::ALL {
        let decode = matches!(
            reason,
            Reason::NotAnObject
                | Reason::BadAccounts
                | Reason::BadAddress
                | Reason::BadAccount
                | Reason::BadSlot
                | Reason::BadBlockNumber
                | Reason::BadTimestamp
        );
        assert_eq!(reason.undecodable(), decode, "{reason:?}");
    }
}

#[test]
fn every_malformed_shape_is_named() {
    let cases: Vec<(String, Reason)> = vec![
        ("[]".into(), Reason::NotAnObject),
        ("\"x\"".into(), Reason::NotAnObject),
        ("{".into(), Reason::NotAnObject),
        ("{} {}".into(), Reason::NotAnObject),
        (r#"{"foobarbaz": 1234}"#.into(), Reason::UnknownField),
        (
            r#"{"timestampMin": 1, "timestampMin": 2}"#.into(),
            Reason::Duplicate,
        ),
        (r#"{"knownAccounts": []}"#.into(), Reason::BadAccounts),
        (r#"{"knownAccounts": "0x"}"#.into(), Reason::BadAccounts),
        (r#"{"knownAccounts": {"": ""}}"#.into(), Reason::BadAddress),
        (
            r#"{"knownAccounts": {"0x12": {}}}"#.into(),
            Reason::BadAddress,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{}": {{}}}}}}"#, &A1[2..]),
            Reason::BadAddress,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": "0x01"}}}}"#),
            Reason::BadAccount,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": 7}}}}"#),
            Reason::BadAccount,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": null}}}}"#),
            Reason::BadAccount,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": [1]}}}}"#),
            Reason::BadAccount,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": {{"0x01": "{H1}"}}}}}}"#),
            Reason::BadSlot,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": {{"{H1}": "0xzz"}}}}}}"#),
            Reason::BadSlot,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": {{"{H1}": {{"deeper": 1}}}}}}}}"#),
            Reason::BadSlot,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": {{"{H1}": "{H2}", "{H1}": "{H1}"}}}}}}"#),
            Reason::Duplicate,
        ),
        (
            format!(r#"{{"knownAccounts": {{"{A1}": "{H1}", "{A1}": "{H2}"}}}}"#),
            Reason::Duplicate,
        ),
        (r#"{"blockNumberMin": -1}"#.into(), Reason::BadBlockNumber),
        (r#"{"blockNumberMin": 1.5}"#.into(), Reason::BadBlockNumber),
        (r#"{"blockNumberMin": "0x"}"#.into(), Reason::BadBlockNumber),
        (
            r#"{"blockNumberMin": "12a"}"#.into(),
            Reason::BadBlockNumber,
        ),
        (
            format!(r#"{{"blockNumberMin": "0x1{}"}}"#, "0".repeat(64)),
            Reason::BadBlockNumber,
        ),
        (
            r#"{"timestampMax": "0x10000000000000000"}"#.into(),
            Reason::BadTimestamp,
        ),
        (r#"{"timestampMax": {}}"#.into(), Reason::BadTimestamp),
        (r#"{"timestampMax": true}"#.into(), Reason::BadTimestamp),
    ];
    for (json, reason) in cases {
        assert_eq!(invalid(&json), reason, "{json}");
    }
}

#[test]
fn deep_nesting_fails_at_its_first_level() {
    // 100 000 levels of arrays where a number is expected: refused at the
    // first `[` without recursing (serde_json's own limit is never met).
    let deep = format!(
        r#"{{"timestampMax": {}1{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(invalid(&deep), Reason::BadTimestamp);
    let deep = format!(
        r#"{{"knownAccounts": {{"{A1}": {}}}}}"#,
        "[".repeat(100_000)
    );
    assert_eq!(invalid(&deep), Reason::BadAccount);
}

#[test]
fn escaped_keys_are_read_like_plain_ones() {
    // A JSON escape in a key: serde hands an owned string; same result.
    let escaped = format!(r#"{{"known\u0041ccounts": {{"{A1}": "{H1}"}}}}"#);
    assert_eq!(cost(&escaped), 2);
}
