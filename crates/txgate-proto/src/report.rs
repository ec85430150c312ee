//! The Credible Layer sidecar's failure reports: for every transaction that
//! fails an assertion, the sidecar sends `POST {aeges_url}/report` with the
//! JSON body `[tx_hash, tx_env]`, where `tx_env` is revm's `TxEnv` as serde
//! writes it.
//!
//! [`parse`] is txgate's own tolerant reader of that body. It reads only
//! the fields txgate needs and ignores everything else, so a field it does
//! not read (`gas_price`, `access_list`, `authorization_list`, a field a
//! newer sidecar adds, …) can never make a report unusable:
//!
//! | field | required | accepted forms |
//! | --- | --- | --- |
//! | `tx_hash` (element 0) | yes | a string of 64 hex digits, `0x` optional |
//! | `caller` | yes | a string of 40 hex digits, `0x` optional, any case (no checksum check) |
//! | `kind` | yes | `null` or `"Create"` or `{"Create": …}` (a creation); an address string or `{"Call": address}` (a call) |
//! | `gas_limit` | yes | a quantity that fits 64 bits |
//! | `value` | no, 0 | a quantity that fits 256 bits |
//! | `data` | no, empty | a string of an even number of hex digits, `0x` optional (`"0x"` is empty) |
//! | `nonce` | no, `None` | a quantity that fits 64 bits; best effort, anything else reads as `None` |
//!
//! A *quantity* is a JSON integer of any size (read from its digits, not
//! through `f64`: serde_json without `arbitrary_precision` would round a
//! number above `u64::MAX`, such as `2000000000000000000000`), a `0x` hex
//! string or a decimal string. Negative numbers, fractions and exponents
//! are refused. A JSON `null` counts as missing.
//!
//! Decisions:
//!
//! - **`kind` missing is an error** ([`ReportError::Kind`]): revm always
//!   writes it (`null` for a creation), so its absence means a report txgate
//!   does not understand, and guessing "creation" would hide that from the
//!   `kind` error count.
//! - **Extra array elements are ignored**: `[tx_hash, tx_env, …]` is
//!   accepted for forward compatibility, as unknown `tx_env` fields are.
//!   Fewer than two elements, a body that is not an array, or a `tx_env`
//!   that is not an object (or repeats a field txgate reads) is
//!   [`ReportError::Shape`].
//! - Fields are checked in the order `tx_hash`, `caller`, `kind`,
//!   `gas_limit`, `value`, `data`; the first failure is the one reported.
//!
//! revm-context 12.1 (revm 33.1) writes `kind` as alloy's `TxKind` does:
//! `null` or the address. The tagged forms are older revm's `TransactTo`,
//! accepted as well since they cost nothing.

use alloy_primitives::{Address, B256, Bytes, U256};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use txgate_screen::{Fingerprint, Invalidation};

/// What txgate reads of one failure report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Hash of the failing transaction.
    pub tx_hash: B256,
    /// Its sender (`TxEnv::caller`).
    pub caller: Address,
    /// Its call target; `None` for a contract creation.
    pub kind: Option<Address>,
    /// Its calldata.
    pub data: Bytes,
    /// Value sent.
    pub value: U256,
    /// Gas limit.
    pub gas_limit: u64,
    /// Its nonce, when the report carries a readable one.
    pub nonce: Option<u64>,
}

/// Why a report cannot be used. [`ReportError::reason`] is a bounded label
/// set for metrics; `Display` is one line and never quotes the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Not UTF-8, or not one JSON value.
    #[error("report is not valid JSON")]
    Json,
    /// Not an array `[tx_hash, tx_env, …]` with an object `tx_env`.
    #[error("report is not an array [tx_hash, tx_env] with an object tx_env")]
    Shape,
    /// `tx_hash` is not 32 bytes of hex.
    #[error("report tx_hash is not 32 bytes of hex")]
    TxHash,
    /// `caller` missing, or not 20 bytes of hex.
    #[error("report caller missing or not 20 bytes of hex")]
    Caller,
    /// `kind` missing, or neither a creation nor an address.
    #[error("report kind missing or neither null, Create nor an address")]
    Kind,
    /// `value` not a quantity of at most 256 bits.
    #[error("report value is not an unsigned 256-bit quantity")]
    Value,
    /// `gas_limit` missing, or not a quantity of at most 64 bits.
    #[error("report gas_limit missing or not an unsigned 64-bit quantity")]
    GasLimit,
    /// `data` not an even number of hex digits.
    #[error("report data is not hex bytes")]
    Data,
}

impl ReportError {
    /// Every error, in label order.
    pub const ALL: [ReportError; 8] = [
        ReportError::Json,
        ReportError::Shape,
        ReportError::TxHash,
        ReportError::Caller,
        ReportError::Kind,
        ReportError::Value,
        ReportError::GasLimit,
        ReportError::Data,
    ];

    /// A stable metrics label.
    pub fn reason(self) -> &'static str {
        match self {
            ReportError::Json => "json",
            ReportError::Shape => "shape",
            ReportError::TxHash => "tx_hash",
            ReportError::Caller => "caller",
            ReportError::Kind => "kind",
            ReportError::Value => "value",
            ReportError::GasLimit => "gas_limit",
            ReportError::Data => "data",
        }
    }
}

impl Report {
    /// The fingerprint of the reported call; `None` for a contract
    /// creation, which has none.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        let target = self.kind?;
        Some(Fingerprint::from_parts(
            target,
            &self.data,
            self.value,
            self.gas_limit,
        ))
    }

    /// The invalidation this report asks for (no assertion named; tx hash
    /// and sender known); `None` for a contract creation.
    pub fn invalidation(&self) -> Option<Invalidation> {
        let fp = self.fingerprint()?;
        Some(Invalidation {
            fingerprint: fp.hash,
            target: fp.target,
            selector: fp.selector,
            assertion: None,
            tx_hash: Some(self.tx_hash),
            sender: Some(self.caller),
        })
    }
}

/// The `tx_env` fields txgate reads, each kept as raw JSON. A field that is
/// present is `Some`, even when it is `null`; others are ignored unread.
#[derive(Deserialize)]
struct Env<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    caller: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    gas_limit: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    nonce: Option<&'a RawValue>,
}

/// A present field, `null` included (`Option`'s own impl maps `null` to
/// `None`, which would hide `"kind": null`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// `kind` in revm's older, externally tagged `TransactTo` form.
#[derive(Deserialize)]
enum Tagged<'a> {
    Call(#[serde(borrow)] &'a RawValue),
    Create(serde::de::IgnoredAny),
}

/// Parses a report body `[tx_hash, tx_env, …]`.
pub fn parse(body: &[u8]) -> Result<Report, ReportError> {
    let text = std::str::from_utf8(body).map_err(|_| ReportError::Json)?;
    let whole: &RawValue = serde_json::from_str(text).map_err(|_| ReportError::Json)?;
    let items: Vec<&RawValue> =
        serde_json::from_str(whole.get()).map_err(|_| ReportError::Shape)?;
    let [hash, env, ..] = items.as_slice() else {
        return Err(ReportError::Shape);
    };
    let tx_hash = fixed::<32>(hash)
        .map(B256::from)
        .ok_or(ReportError::TxHash)?;
    // serde would also read a struct from an array: insist on an object.
    if !env.get().trim_start().starts_with('{') {
        return Err(ReportError::Shape);
    }
    let env: Env<'_> = serde_json::from_str(env.get()).map_err(|_| ReportError::Shape)?;

    let caller = not_null(env.caller)
        .and_then(fixed::<20>)
        .map(Address::from)
        .ok_or(ReportError::Caller)?;
    let kind = env.kind.ok_or(ReportError::Kind).and_then(kind)?;
    let gas_limit = not_null(env.gas_limit)
        .and_then(quantity)
        .and_then(|q| u64::try_from(q).ok())
        .ok_or(ReportError::GasLimit)?;
    let value = match not_null(env.value) {
        None => U256::ZERO,
        Some(raw) => quantity(raw).ok_or(ReportError::Value)?,
    };
    let data = match not_null(env.data) {
        None => Bytes::new(),
        Some(raw) => json_string(raw)
            .as_deref()
            .and_then(hex_bytes)
            .map(Bytes::from)
            .ok_or(ReportError::Data)?,
    };
    let nonce = not_null(env.nonce)
        .and_then(quantity)
        .and_then(|q| u64::try_from(q).ok());

    Ok(Report {
        tx_hash,
        caller,
        kind,
        data,
        value,
        gas_limit,
        nonce,
    })
}

/// A present field that is not `null`.
fn not_null(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|r| r.get().trim() != "null")
}

/// The text of a JSON string; `None` for any other JSON value.
fn json_string(raw: &RawValue) -> Option<String> {
    if raw.get().trim_start().starts_with('"') {
        serde_json::from_str(raw.get()).ok()
    } else {
        None
    }
}

/// `kind`: `None` for a creation, the target for a call.
fn kind(raw: &RawValue) -> Result<Option<Address>, ReportError> {
    let text = raw.get().trim();
    if text == "null" {
        return Ok(None);
    }
    if text.starts_with('{') {
        return match serde_json::from_str::<Tagged<'_>>(text) {
            Ok(Tagged::Call(target)) => fixed::<20>(target)
                .map(|a| Some(Address::from(a)))
                .ok_or(ReportError::Kind),
            Ok(Tagged::Create(_)) => Ok(None),
            Err(_) => Err(ReportError::Kind),
        };
    }
    match json_string(raw).as_deref() {
        Some("Create") => Ok(None),
        Some(s) => hex_fixed::<20>(s)
            .map(|a| Some(Address::from(a)))
            .ok_or(ReportError::Kind),
        None => Err(ReportError::Kind),
    }
}

/// A JSON string of exactly `N` bytes of hex.
fn fixed<const N: usize>(raw: &RawValue) -> Option<[u8; N]> {
    hex_fixed(&json_string(raw)?)
}

fn hex_fixed<const N: usize>(text: &str) -> Option<[u8; N]> {
    hex_bytes(text)?.try_into().ok()
}

fn strip_0x(text: &str) -> &str {
    text.strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Hex bytes, `0x` optional; an even number of digits (none is empty).
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let digits = strip_0x(text).as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

/// A quantity: a JSON integer, or a `0x` hex or decimal string.
fn quantity(raw: &RawValue) -> Option<U256> {
    let text = raw.get().trim();
    if text.starts_with('"') {
        let s = json_string(raw)?;
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => hex_quantity(hex),
            None => decimal(&s),
        }
    } else {
        // A JSON number as written: only a plain integer is a quantity.
        decimal(text)
    }
}

/// At least one decimal digit, nothing else; `None` on overflow.
fn decimal(digits: &str) -> Option<U256> {
    if digits.is_empty() {
        return None;
    }
    let ten = U256::from(10u8);
    digits.bytes().try_fold(U256::ZERO, |acc, c| {
        let digit = c.checked_sub(b'0').filter(|d| *d < 10)?;
        acc.checked_mul(ten)?.checked_add(U256::from(digit))
    })
}

/// At least one hex digit, nothing else; `None` above 256 bits.
fn hex_quantity(digits: &str) -> Option<U256> {
    if digits.is_empty() {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 64 {
        return None;
    }
    digits.bytes().try_fold(U256::ZERO, |acc, c| {
        Some(acc << 4usize | U256::from(nibble(c)?))
    })
}

#[cfg(test)]
mod tests {
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

        let inv = report.invalidation().unwrap_or_else(|| panic!("a call"));
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
        assert_eq!(report.invalidation(), None);
    }

    #[test]
    fn short_and_empty_data() {
        let three = ok(&call(r#""data":"0xa9059c""#));
        assert_eq!(three.data.as_ref(), [0xa9, 0x05, 0x9c]);
        let inv = three.invalidation().unwrap_or_else(|| panic!("a call"));
        let fp = Fingerprint::from_parts(TARGET, &[0xa9, 0x05, 0x9c], U256::ZERO, 100_000);
        assert_eq!(inv.fingerprint, fp.hash);
        assert_eq!(inv.selector, [0xa9, 0x05, 0x9c, 0]);

        for empty in [r#""data":"0x""#, r#""data":"""#, r#""data":null"#, ""] {
            let report = ok(&call(empty));
            assert!(report.data.is_empty(), "{empty}");
            let inv = report.invalidation().unwrap_or_else(|| panic!("a call"));
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
}
