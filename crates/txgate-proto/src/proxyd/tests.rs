//! The hook's parser against alloy: transactions of every type signed with
//! alloy-consensus, written as proxyd writes them ([`encode`]), parsed
//! back; the recomputed hash must be alloy's ([`types`]). Then the
//! refusals, each with its reason, the RLP writer, and the answer's shape.

mod fixtures;
mod mutations;
mod types;

use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{B256, hex};
use serde_json::{Value, json};

use self::fixtures::*;
use super::rlp::{self, Writer};
use super::*;

/// The writer against the yellow paper's examples and the long forms.
#[test]
fn rlp_writer() {
    fn encoded(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        f(&mut w);
        w.as_slice().to_vec()
    }
    fn list(w: &mut Writer, items: impl FnOnce(&mut Writer)) {
        let mark = w.begin_list();
        items(w);
        w.end_list(mark);
    }
    assert_eq!(encoded(|w| w.bytes(b"dog")), [0x83, b'd', b'o', b'g']);
    assert_eq!(encoded(|w| w.bytes(b"")), [0x80]);
    assert_eq!(encoded(|w| w.bytes(&[0x7f])), [0x7f]);
    assert_eq!(encoded(|w| w.bytes(&[0x80])), [0x81, 0x80]);
    assert_eq!(encoded(|w| w.bytes(&[7; 56]))[..2], [0xb8, 56]);
    assert_eq!(encoded(|w| w.bytes(&[7; 1024]))[..3], [0xb9, 0x04, 0x00]);
    let pets = encoded(|w| list(w, |w| [b"cat", b"dog"].into_iter().for_each(|b| w.bytes(b))));
    assert_eq!(pets, [0xc8, 0x83, b'c', b'a', b't', 0x83, b'd', b'o', b'g']);
    // The set-theoretic three: [ [], [[]], [ [], [[]] ] ].
    let empty = |w: &mut Writer| list(w, |_| ());
    let three = encoded(|w| {
        list(w, |w| {
            empty(w);
            list(w, empty);
            list(w, |w| {
                empty(w);
                list(w, empty);
            });
        })
    });
    assert_eq!(three, [0xc7, 0xc0, 0xc1, 0xc0, 0xc3, 0xc0, 0xc1, 0xc0]);
    let long = encoded(|w| list(w, |w| w.bytes(&[1; 60])));
    assert_eq!(long[..3], [0xf8, 62, 0xb8]);
    assert_eq!(rlp::list_header(70_000).0[..4], [0xfa, 0x01, 0x11, 0x70]);
    for (text, rlp) in [
        ("0x0", &[0x80][..]),
        ("0xf", &[0x0f]),
        ("0x7f", &[0x7f]),
        ("0x80", &[0x81, 0x80]),
        ("0x400", &[0x82, 0x04, 0x00]),
        ("0xABcd", &[0x82, 0xab, 0xcd]),
    ] {
        assert_eq!(encoded(|w| drop(w.quantity(text))), rlp, "{text}");
    }
    for bad in ["0x0x12", "0x123", "12", "0xzz", "0x 1"] {
        assert!(rlp::data(bad).is_err(), "{bad}");
    }
    assert_eq!(rlp::data("0x"), Ok(vec![]));
    assert_eq!(rlp::data("0xABcd"), Ok(vec![0xab, 0xcd]));
    for bad in [
        "", "0x", "0x00", "0x01", "12", "0X1", "0xg", "0x1g", "0x0x1", "0x 1", "0x10x12", "0x1-",
    ] {
        assert!(Writer::default().quantity(bad).is_err(), "{bad}");
    }
}

fn assert_invalid(body: &[u8], want: Invalid) {
    let shown = String::from_utf8_lossy(&body[..body.len().min(600)]);
    assert_eq!(parse(body, MAX_TXS), Err(want), "{shown}");
}

/// Sets (`Some`) or removes (`None`) one field of the typical transaction.
fn with(field: &str, value: Option<Value>) -> Vec<u8> {
    edited(&typical(0), |t| {
        match value {
            Some(value) => t.insert(field.into(), value),
            None => t.remove(field),
        };
    })
}

#[test]
fn malformed_requests() {
    use Invalid::*;
    let tx = json_of(&typical(0));
    let hash = hash_of(&tx);
    let other = hash_of(&json_of(&typical(1)));

    for body in [
        "",
        "not json",
        "[]",
        "{}",
        "null",
        r#"{"txs":[]}"#,
        r#"{"txs":null}"#,
    ] {
        assert_invalid(body.as_bytes(), Malformed);
    }
    for body in [
        r#"{"txs":{},"txs":{}}"#,
        r#"{"txs":{}} x"#,
        r#"{"txs":{"0x00":{}}}"#,
    ] {
        assert_invalid(body.as_bytes(), Malformed);
    }
    assert_invalid(&body_of("not a hash", &tx), Malformed);
    assert_invalid(b"{\"txs\":{},\"x\":\"\xff\"}", Malformed); // not UTF-8
    // The key of another transaction, or a `hash` field that differs.
    assert_invalid(&body_of(&other, &tx), HashMismatch);
    assert_invalid(&with("hash", Some(json!(other))), HashMismatch);
    // One input byte flipped.
    let input = tx["input"].as_str().unwrap_or_default();
    let flipped = format!("0x08{}", &input[4..]);
    assert_invalid(&with("input", Some(json!(flipped))), HashMismatch);

    let cases = [
        // Required fields missing, null, or of the wrong shape.
        ("maxFeePerGas", None, Malformed),
        ("maxFeePerGas", Some(Value::Null), Malformed),
        ("from", None, Malformed),
        ("accessList", None, Malformed),
        ("type", None, Malformed),
        ("gas", Some(json!(150_000)), Malformed),
        ("accessList", Some(json!({})), Malformed),
        ("input", Some(json!("0x123")), Malformed),
        ("to", Some(json!("0x1234")), Malformed),
        // Quantities as geth reads them: no leading zero, not "0x" alone.
        ("value", Some(json!("0x03039")), Malformed),
        ("nonce", Some(json!("0x00")), Malformed),
        ("value", Some(json!("0x")), Malformed),
        ("gas", Some(json!("249f0")), Malformed),
        ("type", Some(json!("0x02")), Malformed),
        ("gas", Some(json!("0x10000000000000000")), Malformed),
        // The parity: v and yParity disagreeing, or neither 0 nor 1.
        (
            "yParity",
            Some(json!(if tx["v"] == json!("0x0") {
                "0x1"
            } else {
                "0x0"
            })),
            Malformed,
        ),
        // Deposits and unknown types.
        ("type", Some(json!("0x7e")), UnsupportedType),
        ("type", Some(json!("0x5")), UnsupportedType),
    ];
    for (field, value, want) in cases {
        assert_invalid(&with(field, value), want);
    }
    let two = edited(&typical(0), |t| {
        t.insert("v".into(), json!("0x2"));
        t.remove("yParity");
    });
    assert_invalid(&two, Malformed);

    // A key repeated inside a transaction, or the same transaction twice
    // (also under keys differing in case).
    let text = String::from_utf8(body_of(&hash, &tx)).unwrap_or_default();
    let repeated = text.replacen(r#""nonce":"#, r#""nonce":"0x0","nonce":"#, 1);
    assert_invalid(repeated.as_bytes(), Malformed);
    let tx_text = serde_json::to_string(&tx).unwrap_or_default();
    let upper = format!("0x{}", hash[2..].to_uppercase());
    for second in [&hash, &upper] {
        let twice = format!(r#"{{"txs":{{"{hash}":{tx_text},"{second}":{tx_text}}}}}"#);
        assert_invalid(twice.as_bytes(), Malformed);
    }
}

#[test]
fn blob_and_set_code_must_call() {
    let signer = key(2);
    let p = Params {
        blob_hashes: vec![B256::repeat_byte(1)],
        ..Params::default()
    };
    let blob = envelope(3, p, &signer);
    let set = |envelope, field: &str, value: Option<Value>| {
        edited(envelope, |t| {
            match value {
                Some(value) => t.insert(field.into(), value),
                None => t.remove(field),
            };
        })
    };
    assert_invalid(&set(&blob, "to", Some(Value::Null)), Invalid::Malformed);
    // Absent is the empty list, as geth omits it: one hash dropped is
    // another transaction.
    assert_invalid(
        &set(&blob, "blobVersionedHashes", None),
        Invalid::HashMismatch,
    );
    // A blob transaction with no hashes (geth writes no field) is judged.
    let empty = envelope(
        3,
        Params {
            blob_hashes: Vec::new(),
            ..Params::default()
        },
        &signer,
    );
    round_trip(&empty, &signer);
    assert_invalid(&set(&blob, "maxFeePerBlobGas", None), Invalid::Malformed);
    // Type 3 numbers are 256-bit in geth.
    let wide = format!("0x1{}", "0".repeat(64));
    assert_invalid(&set(&blob, "value", Some(json!(wide))), Invalid::Malformed);
    let set_code = envelope(4, Params::default(), &signer);
    assert_invalid(&set(&set_code, "to", Some(Value::Null)), Invalid::Malformed);
    // Only yParity, or only v: either is the parity.
    round_trip(&set_code, &signer);
    for parity in ["v", "yParity"] {
        let body = set(&set_code, parity, None);
        let hash = parse(&body, MAX_TXS).map(|r| r.txs[0].hash);
        assert_eq!(hash, Ok(*set_code.tx_hash()));
    }
}

#[test]
fn cap_counts_while_visiting() {
    let raws: Vec<Vec<u8>> = (0..=MAX_TXS as u64)
        .map(|n| typical(n).encoded_2718())
        .collect();
    let refs: Vec<&[u8]> = raws.iter().map(Vec::as_slice).collect();
    let full = encode::request(&refs[..MAX_TXS]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parse(&full, MAX_TXS).map(|r| r.txs.len()), Ok(MAX_TXS));
    let over = encode::request(&refs).unwrap_or_else(|e| panic!("{e}"));
    assert_invalid(&over, Invalid::TooMany);
    // The entry past the cap is refused before it is read.
    let one = String::from_utf8(encode::request(&refs[..1]).unwrap_or_default());
    let garbage = one
        .unwrap_or_default()
        .replacen("}}", r#"},"0x12":[1,2,3]}"#, 1);
    assert_eq!(parse(garbage.as_bytes(), 1), Err(Invalid::TooMany));
    assert_eq!(
        parse(br#"{"txs":{}}"#, MAX_TXS),
        Ok(Request { txs: vec![] })
    );
}

/// Unknown keys (a sidecar, op-geth's deposit fields, anything) and
/// explicit nulls are read past; whitespace, escapes and upper-case hex
/// are as good as the compact lowercase form.
#[test]
fn tolerant_of_extras_nulls_and_spelling() {
    let envelope = typical(3);
    let body = edited(&envelope, |t| {
        let nulls = [
            "maxFeePerBlobGas",
            "blobVersionedHashes",
            "authorizationList",
            "mint",
        ];
        for field in nulls {
            t.insert(field.into(), Value::Null);
        }
        t.insert("blobs".into(), json!(["0x00"]));
        t.insert("sourceHash".into(), json!(hex::encode_prefixed(B256::ZERO)));
        t.insert("isSystemTx".into(), json!(false));
        t.insert("extra".into(), json!({"nested": [1, 2.5, {"x": null}]}));
        t.remove("hash");
        let s = t["s"].as_str().unwrap_or_default()[2..].to_uppercase();
        t.insert("s".into(), json!(format!("0x{s}")));
    });
    let mut value: Value = serde_json::from_slice(&body).unwrap_or_default();
    value["version"] = json!(2);
    let pretty = serde_json::to_vec_pretty(&value).unwrap_or_default();
    let parsed = parse(&pretty, MAX_TXS).map(|r| r.txs[0].hash);
    assert_eq!(parsed, Ok(*envelope.tx_hash()));

    // An escaped digit in a value; an upper-case key, answered as sent.
    let text = String::from_utf8(body).unwrap_or_default();
    let escaped = text.replacen(r#""gas":"0x2"#, r#""gas":"0x\u0032"#, 1);
    assert_ne!(escaped, text);
    assert_eq!(
        parse(escaped.as_bytes(), MAX_TXS).map(|r| r.txs[0].gas),
        Ok(150_000)
    );
    let hash = hex::encode(envelope.tx_hash());
    let upper = text.replacen(&hash, &hash.to_uppercase(), 1);
    let key = parse(upper.as_bytes(), MAX_TXS).map(|r| r.txs[0].key.to_owned());
    assert_eq!(key, Ok(format!("0x{}", hash.to_uppercase())));
}

#[test]
fn answers_have_proxyd_shape() {
    let mut out = Vec::new();
    write_verdicts(&mut out, [("0xaa", true), ("0xbb", false)]);
    let want = r#"{"unauthorized":{"0xaa":true,"0xbb":false},"errorCode":"","errorMessage":""}"#;
    assert_eq!(String::from_utf8_lossy(&out), want);
    out.clear();
    write_verdicts(&mut out, []);
    let want = r#"{"unauthorized":{},"errorCode":"","errorMessage":""}"#;
    assert_eq!(String::from_utf8_lossy(&out), want);

    let all = [
        Invalid::Malformed,
        Invalid::TooMany,
        Invalid::HashMismatch,
        Invalid::UnsupportedType,
    ];
    let codes = [
        "malformed",
        "too_many_txs",
        "hash_mismatch",
        "unsupported_type",
    ];
    assert_eq!(all.map(Invalid::code), codes);
    for invalid in all {
        out.clear();
        write_error(&mut out, invalid.code(), invalid.message());
        let value: Value = serde_json::from_slice(&out).unwrap_or_default();
        let (code, message) = (invalid.code(), invalid.message());
        let want = json!({"unauthorized": {}, "errorCode": code, "errorMessage": message});
        assert_eq!(value, want);
    }
    out.clear();
    write_error(&mut out, "x\"y", "a\\b\nc\u{1}");
    let value: Value = serde_json::from_slice(&out).unwrap_or_default();
    let want = json!({"unauthorized": {}, "errorCode": "x\"y", "errorMessage": "a\\b\nc\u{1}"});
    assert_eq!(value, want);
}
