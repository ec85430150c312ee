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
use txgate_screen::{Fingerprint, Invalidation, UnixMillis};

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
    /// and sender known), started at `started` (a report carries no time:
    /// when it is received); `None` for a contract creation.
    pub fn invalidation(&self, started: UnixMillis) -> Option<Invalidation> {
        let fp = self.fingerprint()?;
        Some(Invalidation {
            fingerprint: fp.hash,
            target: fp.target,
            selector: fp.selector,
            assertion: None,
            tx_hash: Some(self.tx_hash),
            sender: Some(self.caller),
            started,
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
mod tests;
