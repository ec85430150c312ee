//! The strict read of a bundle's params: what is taken, and each shape
//! refused before any screening.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::*;

fn parse(params: &str, max: usize) -> Result<Vec<String>, Malformed> {
    let raw = RawValue::from_string(params.to_owned()).unwrap();
    parse_txs(Some(&raw), max).map(|txs| txs.into_iter().map(Cow::into_owned).collect())
}

#[test]
fn the_txs_are_taken_in_order_and_every_other_field_is_ignored() {
    let params = r#"[{"blockNumber":"0x10","txs":["0x01","0x02","0x03"],
        "revertingTxHashes":[],"replacementUuid":"a","refund":{"txs":5}}]"#;
    assert_eq!(parse(params, 100).unwrap(), ["0x01", "0x02", "0x03"]);
    // Borrowed from the params when there are no escapes.
    let raw = RawValue::from_string(r#"[{"txs":["0xab"]}]"#.into()).unwrap();
    let txs = parse_txs(Some(&raw), 100).unwrap();
    assert!(matches!(txs[0], Cow::Borrowed("0xab")));
    // An escaped key or string is what any JSON reader makes of it.
    let escaped = r#"[{"t\u0078s":["0x\u0061b"]}]"#;
    assert_eq!(parse(escaped, 100).unwrap(), ["0xab"]);
    // Empty: nothing to screen, still a bundle.
    assert_eq!(parse(r#"[{"txs":[]}]"#, 100).unwrap(), Vec::<String>::new());
    // Exactly at the cap.
    assert_eq!(parse(r#"[{"txs":["0x01","0x02"]}]"#, 2).unwrap().len(), 2);
}

#[test]
fn every_malformed_shape_is_refused_with_its_problem() {
    let cases: &[(&str, Malformed)] = &[
        ("[]", Malformed::Shape),
        ("{}", Malformed::Shape),
        (r#"{"txs":["0x01"]}"#, Malformed::Shape),
        ("[null]", Malformed::Shape),
        (r#"["0x01"]"#, Malformed::Shape),
        (r#"[["0x01"], "0x10"]"#, Malformed::Shape),
        (r#"[{"txs":["0x01"]}, {}]"#, Malformed::Shape),
        (r#"[{"txs":["0x01"]}, null]"#, Malformed::Shape),
        ("[{}]", Malformed::NoTxs),
        (r#"[{"blockNumber":"0x1"}]"#, Malformed::NoTxs),
        (r#"[{"TXS":["0x01"]}]"#, Malformed::CaseVariant),
        (r#"[{"Txs":["0x01"]}]"#, Malformed::CaseVariant),
        (
            r#"[{"txs":["0x01"],"tXs":["0x02"]}]"#,
            Malformed::CaseVariant,
        ),
        // U+017F folds to `s` in Go's matching.
        ("[{\"tx\u{17f}\":[\"0x01\"]}]", Malformed::CaseVariant),
        (r#"[{"txs":["0x01"],"txs":["0x02"]}]"#, Malformed::Duplicate),
        (r#"[{"txs":[],"txs":["0x02"]}]"#, Malformed::Duplicate),
        (r#"[{"txs":"0x01"}]"#, Malformed::NotStrings),
        (r#"[{"txs":null}]"#, Malformed::NotStrings),
        (r#"[{"txs":{"0":"0x01"}}]"#, Malformed::NotStrings),
        (r#"[{"txs":["0x01",2]}]"#, Malformed::NotStrings),
        (r#"[{"txs":[null]}]"#, Malformed::NotStrings),
        (r#"[{"txs":[["0x01"]]}]"#, Malformed::NotStrings),
        (
            r#"[{"txs":["0x01","0x02","0x03"]}]"#,
            Malformed::TooMany { max: 2 },
        ),
    ];
    for (params, problem) in cases {
        assert_eq!(parse(params, 2).err(), Some(*problem), "{params}");
    }
    assert_eq!(parse_txs(None, 2).err(), Some(Malformed::Shape));
    // Keys that only look alike are other fields.
    assert_eq!(
        parse(r#"[{"txs":["0x01"],"txss":[],"tx":[],"t xs":1}]"#, 2).unwrap(),
        ["0x01"]
    );
}

#[test]
fn messages_name_the_expected_shape_and_the_cap() {
    assert!(Malformed::Shape.message().contains(r#"[{"txs""#));
    assert!(
        Malformed::TooMany { max: 7 }
            .message()
            .contains("more than 7")
    );
    assert!(
        Malformed::CaseVariant
            .message()
            .starts_with("invalid params:")
    );
}
