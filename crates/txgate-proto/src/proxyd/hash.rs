//! One transaction's JSON fields back into its canonical encoding, and the
//! hash of that encoding.
//!
//! The hash is `keccak256` of `rlp(fields)` for legacy transactions and of
//! `type ‖ rlp(fields)` for typed ones, with the fields in go-ethereum's
//! struct order (`tx_legacy.go`, `tx_access_list.go`, `tx_dynamic_fee.go`,
//! `tx_blob.go`, `tx_setcode.go`):
//!
//! | type | fields |
//! | --- | --- |
//! | 0 | nonce, gasPrice, gas, to, value, input, v, r, s |
//! | 1 | chainId, nonce, gasPrice, gas, to, value, input, accessList, yParity, r, s |
//! | 2 | chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas, to, value, input, accessList, yParity, r, s |
//! | 3 | as 2, with maxFeePerBlobGas, blobVersionedHashes after accessList |
//! | 4 | as 2, with authorizationList after accessList |
//!
//! An access-list entry is `[address, [storageKey…]]`, an authorization
//! `[chainId, address, nonce, yParity, r, s]`; `to: null` (a creation) is
//! the empty string. The hash never covers a blob sidecar, `hash`, `from`
//! or a legacy `chainId` (which lives in `v`).
//!
//! Widths follow geth's types: `nonce` and `gas` are 64-bit; for types 0–2
//! every other number is a `big.Int` and is taken at any width; for types
//! 3 and 4 they are 256-bit, and a wider one is malformed (geth cannot
//! hold it, so proxyd cannot have sent it).

use std::ops::Range;

use alloy_primitives::{Address, B256, Keccak256, U256};

use super::Invalid;
use super::rlp::{self, BadHex, Writer};
use super::wire::{Fields, Text};

impl From<BadHex> for Invalid {
    fn from(_: BadHex) -> Self {
        Invalid::Malformed
    }
}

/// What the screen needs of a transaction, beside its hash.
pub(super) struct Parts {
    pub(super) to: Option<Address>,
    pub(super) value: U256,
    pub(super) gas: u64,
}

/// The transaction type from `type`: missing or not a quantity is
/// malformed; a type other than 0–4 (deposits, 0x7e, included) is
/// unsupported.
pub(super) fn tx_type(fields: &Fields<'_>) -> Result<u8, Invalid> {
    let ty = rlp::uint64(required(&fields.ty)?)?;
    match u8::try_from(ty) {
        Ok(ty @ 0..=4) => Ok(ty),
        _ => Err(Invalid::UnsupportedType),
    }
}

/// Writes the fields of a transaction of type `ty` (from [`tx_type`]) into
/// `w` in canonical order and returns its hash and what the screen reads.
/// `payload` is the decoded `input`.
pub(super) fn encode(
    ty: u8,
    f: &Fields<'_>,
    payload: &[u8],
    w: &mut Writer,
) -> Result<(B256, Parts), Invalid> {
    // Types 3 and 4 hold their numbers in 256 bits, the others in big.Int.
    let cap = if ty >= 3 { 32 } else { usize::MAX };
    w.clear();
    if ty == 0 {
        if let Some(chain_id) = &f.chain_id {
            // Not hashed (it is part of `v`), but still a quantity.
            rlp::uint_check(chain_id)?;
        }
    } else {
        number(w, &f.chain_id, cap)?;
    }
    number(w, &f.nonce, 8)?;
    if ty <= 1 {
        number(w, &f.gas_price, cap)?;
    } else {
        number(w, &f.max_priority_fee_per_gas, cap)?;
        number(w, &f.max_fee_per_gas, cap)?;
    }
    let gas = number(w, &f.gas, 8)?;
    let gas = w.as_slice()[gas]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let to = match &f.to {
        Some(to) => Some(Address::from(rlp::fixed::<20>(to)?)),
        // Blob and set-code transactions cannot create.
        None if ty >= 3 => return Err(Invalid::Malformed),
        None => None,
    };
    match &to {
        Some(to) => w.bytes(to.as_slice()),
        None => w.bytes(&[]),
    }
    let value = number(w, &f.value, cap)?;
    let value = &w.as_slice()[value];
    // Wider than 256 bits: the transaction cannot execute; its value
    // still buckets as the largest.
    let value = if value.len() > 32 {
        U256::MAX
    } else {
        U256::from_be_slice(value)
    };
    w.bytes(payload);
    if ty != 0 {
        access_list(w, f)?;
    }
    if ty == 3 {
        number(w, &f.max_fee_per_blob_gas, cap)?;
        // geth omits an empty list (`omitempty`): absent is empty. A
        // blob transaction without blobs is invalid in a pool, but proxyd
        // recovers its sender and asks; refusing it as malformed would be
        // an error answer, which proxyd lets through (a bundle with it).
        let hashes = f.blob_versioned_hashes.as_deref().unwrap_or(&[]);
        let mark = w.begin_list();
        for hash in hashes {
            w.bytes(&rlp::fixed::<32>(hash)?);
        }
        w.end_list(mark);
    }
    if ty == 4 {
        authorization_list(w, f)?;
    }
    if ty == 0 {
        number(w, &f.v, cap)?;
    } else {
        // The integer: 0 is the empty string.
        match parity(f)? {
            0 => w.bytes(&[]),
            _ => w.bytes(&[1]),
        }
    }
    number(w, &f.r, cap)?;
    number(w, &f.s, cap)?;

    let mut hasher = Keccak256::new();
    if ty != 0 {
        hasher.update([ty]);
    }
    let (head, n) = rlp::list_header(w.as_slice().len());
    hasher.update(&head[..n]);
    hasher.update(w.as_slice());
    Ok((hasher.finalize(), Parts { to, value, gas }))
}

/// A required field.
pub(super) fn required<'f>(field: &'f Option<Text<'_>>) -> Result<&'f str, Invalid> {
    field.as_deref().ok_or(Invalid::Malformed)
}

/// Writes a required number of at most `cap` bytes; returns where its
/// minimal big-endian bytes sit in the writer's buffer (valid until a
/// list around them is closed: read them at once).
fn number(w: &mut Writer, field: &Option<Text<'_>>, cap: usize) -> Result<Range<usize>, Invalid> {
    let range = w.quantity(required(field)?)?;
    if range.len() > cap {
        return Err(Invalid::Malformed);
    }
    Ok(range)
}

/// A typed transaction's signature parity: from `v` when present (the
/// number geth hashes), else from `yParity`; both present must agree;
/// either way 0 or 1.
fn parity(f: &Fields<'_>) -> Result<u64, Invalid> {
    let v = f.v.as_deref().map(rlp::uint64).transpose()?;
    let y = f.y_parity.as_deref().map(rlp::uint64).transpose()?;
    let parity = match (v, y) {
        (Some(v), Some(y)) if v != y => return Err(Invalid::Malformed),
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => return Err(Invalid::Malformed),
    };
    match parity {
        0 | 1 => Ok(parity),
        _ => Err(Invalid::Malformed),
    }
}

/// `[[address, [storageKey…]]…]`; required (`[]` when empty).
fn access_list(w: &mut Writer, f: &Fields<'_>) -> Result<(), Invalid> {
    let list = f.access_list.as_ref().ok_or(Invalid::Malformed)?;
    let outer = w.begin_list();
    for tuple in list {
        let entry = w.begin_list();
        w.bytes(&rlp::fixed::<20>(required(&tuple.address)?)?);
        let keys = tuple.storage_keys.as_ref().ok_or(Invalid::Malformed)?;
        let inner = w.begin_list();
        for key in keys {
            w.bytes(&rlp::fixed::<32>(key)?);
        }
        w.end_list(inner);
        w.end_list(entry);
    }
    w.end_list(outer);
    Ok(())
}

/// `[[chainId, address, nonce, yParity, r, s]…]`; geth omits an empty
/// list, so absent is empty.
fn authorization_list(w: &mut Writer, f: &Fields<'_>) -> Result<(), Invalid> {
    let outer = w.begin_list();
    for auth in f.authorization_list.iter().flatten() {
        let entry = w.begin_list();
        number(w, &auth.chain_id, 32)?;
        w.bytes(&rlp::fixed::<20>(required(&auth.address)?)?);
        number(w, &auth.nonce, 8)?;
        // geth keeps it in a uint8.
        number(w, &auth.y_parity, 1)?;
        number(w, &auth.r, 32)?;
        number(w, &auth.s, 32)?;
        w.end_list(entry);
    }
    w.end_list(outer);
    Ok(())
}
