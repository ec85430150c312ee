//! proxyd's transaction-validation hook (ethereum-optimism/infra,
//! `[tx_validation_middleware]`): the request proxyd posts about each
//! submission, and the answer it reads back.
//!
//! Request: `{"txs": {"<hash>": <tx>, …}}`, one entry per transaction of
//! the call (a bundle: up to [`MAX_TXS`](crate::proxyd::MAX_TXS)), where
//! `<tx>` is go-ethereum's `MarshalJSON` of the signed transaction
//! (re-marshalled through a Go map, so keys sorted) plus `"from"`, the
//! sender proxyd recovered. Answer: `{"unauthorized": {"<hash>": bool, …},
//! "errorCode": "", "errorMessage": ""}`; any `true` refuses the whole call,
//! a non-empty `errorCode` is a service error that proxyd lets through
//! when it fails open.
//!
//! The parser does not take proxyd's word for the hash: each transaction
//! is re-encoded from its fields and hashed (keccak only, no ECDSA), and
//! the map key (and `hash`, when present) must equal that hash. The
//! quantities are re-encoded from their hex digits at any width, not read
//! into fixed-width integers: geth holds most of them in `big.Int`s, and a
//! number this parser could not hold would be a hash mismatch, hence an
//! error answer, hence a call proxyd lets through (the whole bundle around
//! a banned transaction with it). Per type, the fields read are:
//!
//! | type | required | optional |
//! | --- | --- | --- |
//! | `0x0` | `nonce, gasPrice, gas, value, input, v, r, s` | `to` (absent: a creation), `chainId` (checked as a quantity, not hashed) |
//! | `0x1` | `chainId, nonce, gasPrice, gas, value, input, accessList, r, s`, the parity | `to` |
//! | `0x2` | `chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas, value, input, accessList, r, s`, the parity | `to` |
//! | `0x3` | as `0x2` plus `to, maxFeePerBlobGas, blobVersionedHashes` | |
//! | `0x4` | as `0x2` plus `to` | `authorizationList` (absent: empty) |
//!
//! and `type` and `from` for all. The parity of a typed transaction is `v`
//! when present, else `yParity`; both present must agree, and it must be 0
//! or 1. `null` is the same as absent; fields a type does not hash (the
//! other type's fees, `blobs`, op-geth's deposit keys, unknown keys) are
//! skipped. Quantities are `0x` and hex digits without leading zeros
//! (`"0x0"` is zero), as geth writes and reads them; addresses and hashes
//! are `0x` and 40 or 64 hex digits of either case. `from`'s checksum is
//! not checked: proxyd's sender is trusted as it is.

pub mod encode;
mod hash;
mod rlp;
mod scan;
mod wire;

#[cfg(test)]
mod tests;

use alloy_primitives::{Address, B256, U256};

use self::rlp::Writer;
use self::wire::{Fields, State};

/// The most transactions proxyd puts in one request (it refuses a larger
/// bundle itself).
pub const MAX_TXS: usize = 100;

/// One transaction of a hook request, judged by txgate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookTx<'a> {
    /// The request's map key, as sent: the answer goes under it.
    pub key: &'a str,
    /// The hash recomputed from the fields (keccak only); equals the key.
    pub hash: B256,
    /// The sender proxyd recovered (trusted).
    pub from: Address,
    /// Call target; `None` for a creation.
    pub to: Option<Address>,
    /// Value sent, saturated to `U256::MAX` when wider than 256 bits.
    pub value: U256,
    /// Gas limit.
    pub gas: u64,
    /// The decoded `input`.
    pub payload: Vec<u8>,
}

/// A parsed and checked hook request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// Its transactions, in the body's order.
    pub txs: Vec<HookTx<'a>>,
}

/// Why a hook request is refused. [`Invalid::code`] and
/// [`Invalid::message`] make the error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// Not JSON, not the request's shape, a field missing or not in its
    /// format, a key that is not a hash, a transaction listed twice.
    #[error("malformed request")]
    Malformed,
    /// More transactions than the cap.
    #[error("too many transactions")]
    TooMany,
    /// A key (or `hash`) that is not the hash of the transaction's fields.
    #[error("transaction hash does not match its fields")]
    HashMismatch,
    /// A `type` other than 0x0–0x4 (deposits, 0x7e, included).
    #[error("unsupported transaction type")]
    UnsupportedType,
}

impl Invalid {
    /// The answer's `errorCode`.
    pub fn code(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed",
            Invalid::TooMany => "too_many_txs",
            Invalid::HashMismatch => "hash_mismatch",
            Invalid::UnsupportedType => "unsupported_type",
        }
    }

    /// The answer's `errorMessage`: short, and never quoting the input
    /// (proxyd logs it at Error level).
    pub fn message(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed validation request",
            Invalid::TooMany => "too many transactions in one request",
            Invalid::HashMismatch => "transaction hash does not match its fields",
            Invalid::UnsupportedType => "unsupported transaction type",
        }
    }
}

/// Parses and checks a hook body: at most `max_txs` entries; each key must
/// be a 0x hash equal (case-insensitively) to the hash recomputed from the
/// tx's fields (and to its `hash` field when present).
///
/// `{"txs":{}}` is a valid, empty request. The first problem found stops
/// the parse; entries are checked in the body's order, the count before
/// each entry is read. Other top-level keys are skipped; `txs` missing,
/// repeated or not an object is malformed, and so is the same transaction
/// under two keys (keys differing only in case).
pub fn parse(body: &[u8], max_txs: usize) -> Result<Request<'_>, Invalid> {
    // One UTF-8 check of the whole body: the reader then borrows strings
    // without checking each.
    let body = std::str::from_utf8(body).map_err(|_| Invalid::Malformed)?;
    let mut state = State::new(max_txs, body.len());
    wire::body(body, &mut state)?;
    let txs = state.txs;
    let mut hashes: Vec<B256> = txs.iter().map(|tx| tx.hash).collect();
    hashes.sort_unstable();
    if hashes.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(Invalid::Malformed);
    }
    Ok(Request { txs })
}

/// One entry: the key, the fields, the recomputed hash compared with both.
fn build<'a>(key: &'a str, f: &Fields<'a>, w: &mut Writer) -> Result<HookTx<'a>, Invalid> {
    let keyed = B256::from(rlp::fixed::<32>(key)?);
    let ty = hash::tx_type(f)?;
    let from = Address::from(rlp::fixed::<20>(hash::required(&f.from)?)?);
    let claimed = f.hash.as_deref().map(rlp::fixed::<32>).transpose()?;
    let payload = rlp::data(hash::required(&f.input)?)?;
    let (hash, parts) = hash::encode(ty, f, &payload, w)?;
    if hash != keyed || claimed.is_some_and(|claimed| claimed != hash.0) {
        return Err(Invalid::HashMismatch);
    }
    Ok(HookTx {
        key,
        hash,
        from,
        to: parts.to,
        value: parts.value,
        gas: parts.gas,
        payload,
    })
}

/// `{"unauthorized":{"<key>":true|false,…},"errorCode":"","errorMessage":""}`
pub fn write_verdicts<'k>(out: &mut Vec<u8>, verdicts: impl IntoIterator<Item = (&'k str, bool)>) {
    out.extend_from_slice(br#"{"unauthorized":{"#);
    for (i, (key, refused)) in verdicts.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, key);
        out.extend_from_slice(if refused { b":true" } else { b":false" });
    }
    out.extend_from_slice(br#"},"errorCode":"","errorMessage":""}"#);
}

/// `{"unauthorized":{},"errorCode":"<code>","errorMessage":"<message>"}`
/// (never a `true` beside an error: proxyd reads the error first and
/// ignores the verdicts).
pub fn write_error(out: &mut Vec<u8>, code: &str, message: &str) {
    out.extend_from_slice(br#"{"unauthorized":{},"errorCode":"#);
    string(out, code);
    out.extend_from_slice(br#","errorMessage":"#);
    string(out, message);
    out.push(b'}');
}

/// A JSON string, quotes, backslashes and control characters escaped
/// (hashes and the codes have none).
fn string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    for &b in text.as_bytes() {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0..0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}
