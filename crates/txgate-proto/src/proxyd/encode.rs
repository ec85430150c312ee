//! The exact body proxyd sends, built from signed raw transactions: for
//! tests, benches and load clients, never on the serving path.
//!
//! Each transaction is go-ethereum's `MarshalJSON` after proxyd's round
//! trip through a Go map: keys sorted (nested objects too), `null` where
//! geth writes a nil pointer (the other type's fee fields, `to` of a
//! creation), keys absent where geth omits them (`chainId` of an
//! unprotected legacy transaction, `accessList` and `yParity` of a legacy
//! one, an empty `authorizationList` or `blobVersionedHashes`, `maxFeePerBlobGas` and
//! `blobVersionedHashes` outside type 3), quantities as minimal `0x` hex,
//! addresses and hashes lowercase, plus `from` checksummed (EIP-55) and
//! `hash`. A blob transaction in its network form also carries `blobs`,
//! `commitments` and `proofs`. The body is keyed by the lowercase hash.
//!
//! The fields come from alloy's decoding and the sender from txgate's own
//! recovery, so the parser, which re-encodes them by hand, is checked
//! against an independent reading of the same bytes.

use std::collections::BTreeMap;
use std::fmt::LowerHex;

use alloy_consensus::{Signed, TxEip4844Variant, TxEnvelope};
use alloy_eips::eip2718::Decodable2718;
use alloy_eips::eip2930::AccessList;
use alloy_eips::eip7594::BlobTransactionSidecarVariant;
use alloy_primitives::{Signature, TxKind, U256, hex};
use serde_json::{Map, Value};

/// The body proxyd posts for these signed raw transactions (EIP-2718
/// bytes). The same transaction twice is one entry, as in proxyd's map.
/// Error: a raw transaction that does not decode or whose sender does not
/// recover.
pub fn request(raws: &[&[u8]]) -> Result<Vec<u8>, String> {
    let mut txs = BTreeMap::new();
    for raw in raws {
        let tx = tx_json(raw)?;
        let hash = tx["hash"].as_str().unwrap_or_default().to_owned();
        txs.insert(hash, tx);
    }
    let body = object([("txs", Value::Object(txs.into_iter().collect()))]);
    serde_json::to_vec(&body).map_err(|e| e.to_string())
}

/// One transaction as proxyd sends it: geth's JSON plus `from`.
pub fn tx_json(raw: &[u8]) -> Result<Value, String> {
    let screened = txgate_screen::decode(raw).map_err(|e| e.to_string())?;
    let from = txgate_screen::recover_sender(&screened).map_err(|e| e.to_string())?;
    let envelope = TxEnvelope::decode_2718_exact(raw).map_err(|e| e.to_string())?;
    let mut f = BTreeMap::new();
    f.insert("from", Value::String(from.to_checksum(None)));
    f.insert("hash", Value::String(hex::encode_prefixed(screened.hash)));
    match &envelope {
        TxEnvelope::Legacy(signed) => {
            let tx = signed.tx();
            common(&mut f, 0, signed, tx.nonce, tx.gas_limit, tx.to, tx.value);
            f.insert("input", data(&tx.input));
            f.insert("gasPrice", quantity(tx.gas_price));
            f.insert("maxFeePerGas", Value::Null);
            f.insert("maxPriorityFeePerGas", Value::Null);
            let parity = u128::from(signed.signature().v());
            let v = match tx.chain_id {
                Some(id) => {
                    f.insert("chainId", quantity(id));
                    u128::from(id) * 2 + 35 + parity
                }
                None => 27 + parity,
            };
            f.insert("v", quantity(v));
        }
        TxEnvelope::Eip2930(signed) => {
            let tx = signed.tx();
            common(&mut f, 1, signed, tx.nonce, tx.gas_limit, tx.to, tx.value);
            typed(&mut f, signed.signature(), tx.chain_id, &tx.access_list);
            f.insert("input", data(&tx.input));
            f.insert("gasPrice", quantity(tx.gas_price));
            f.insert("maxFeePerGas", Value::Null);
            f.insert("maxPriorityFeePerGas", Value::Null);
        }
        TxEnvelope::Eip1559(signed) => {
            let tx = signed.tx();
            common(&mut f, 2, signed, tx.nonce, tx.gas_limit, tx.to, tx.value);
            typed(&mut f, signed.signature(), tx.chain_id, &tx.access_list);
            f.insert("input", data(&tx.input));
            fees(&mut f, tx.max_fee_per_gas, tx.max_priority_fee_per_gas);
        }
        TxEnvelope::Eip4844(signed) => {
            let (tx, sidecar) = match signed.tx() {
                TxEip4844Variant::TxEip4844(tx) => (tx, None),
                TxEip4844Variant::TxEip4844WithSidecar(with) => (&with.tx, Some(&with.sidecar)),
            };
            let to = TxKind::Call(tx.to);
            common(&mut f, 3, signed, tx.nonce, tx.gas_limit, to, tx.value);
            typed(&mut f, signed.signature(), tx.chain_id, &tx.access_list);
            f.insert("input", data(&tx.input));
            fees(&mut f, tx.max_fee_per_gas, tx.max_priority_fee_per_gas);
            f.insert("maxFeePerBlobGas", quantity(tx.max_fee_per_blob_gas));
            if !tx.blob_versioned_hashes.is_empty() {
                let hashes = tx.blob_versioned_hashes.iter().map(data);
                f.insert("blobVersionedHashes", Value::Array(hashes.collect()));
            }
            if let Some(sidecar) = sidecar {
                blobs(&mut f, sidecar);
            }
        }
        TxEnvelope::Eip7702(signed) => {
            let tx = signed.tx();
            let to = TxKind::Call(tx.to);
            common(&mut f, 4, signed, tx.nonce, tx.gas_limit, to, tx.value);
            typed(&mut f, signed.signature(), tx.chain_id, &tx.access_list);
            f.insert("input", data(&tx.input));
            fees(&mut f, tx.max_fee_per_gas, tx.max_priority_fee_per_gas);
            if !tx.authorization_list.is_empty() {
                let list = tx.authorization_list.iter().map(|auth| {
                    object([
                        ("address", data(auth.address())),
                        ("chainId", quantity(*auth.chain_id())),
                        ("nonce", quantity(auth.nonce())),
                        ("r", quantity(auth.r())),
                        ("s", quantity(auth.s())),
                        ("yParity", quantity(auth.y_parity())),
                    ])
                });
                f.insert("authorizationList", Value::Array(list.collect()));
            }
        }
    }
    Ok(object(f))
}

/// Every type's `nonce, gas, to, value, type, r, s`.
fn common<T>(
    f: &mut BTreeMap<&'static str, Value>,
    ty: u8,
    signed: &Signed<T>,
    nonce: u64,
    gas: u64,
    to: TxKind,
    value: U256,
) {
    f.insert("type", quantity(ty));
    f.insert("nonce", quantity(nonce));
    f.insert("gas", quantity(gas));
    f.insert("to", to.to().map_or(Value::Null, data));
    f.insert("value", quantity(value));
    f.insert("r", quantity(signed.signature().r()));
    f.insert("s", quantity(signed.signature().s()));
}

/// A typed transaction's `chainId, accessList, v, yParity`.
fn typed(
    f: &mut BTreeMap<&'static str, Value>,
    signature: &Signature,
    chain_id: u64,
    access_list: &AccessList,
) {
    f.insert("chainId", quantity(chain_id));
    let parity = quantity(u8::from(signature.v()));
    f.insert("v", parity.clone());
    f.insert("yParity", parity);
    let list = access_list.iter().map(|item| {
        let keys = item.storage_keys.iter().map(data);
        object([
            ("address", data(item.address)),
            ("storageKeys", Value::Array(keys.collect())),
        ])
    });
    f.insert("accessList", Value::Array(list.collect()));
}

/// The EIP-1559 fee fields, and geth's `gasPrice: null` beside them.
fn fees(f: &mut BTreeMap<&'static str, Value>, max_fee: u128, max_priority_fee: u128) {
    f.insert("gasPrice", Value::Null);
    f.insert("maxFeePerGas", quantity(max_fee));
    f.insert("maxPriorityFeePerGas", quantity(max_priority_fee));
}

/// A network-form blob transaction's sidecar (cell proofs are geth's
/// `proofs` too).
fn blobs(f: &mut BTreeMap<&'static str, Value>, sidecar: &BlobTransactionSidecarVariant) {
    let (blobs, commitments, proofs) = match sidecar {
        BlobTransactionSidecarVariant::Eip4844(s) => (&s.blobs, &s.commitments, &s.proofs),
        BlobTransactionSidecarVariant::Eip7594(s) => (&s.blobs, &s.commitments, &s.cell_proofs),
    };
    f.insert("blobs", Value::Array(blobs.iter().map(data).collect()));
    f.insert(
        "commitments",
        Value::Array(commitments.iter().map(data).collect()),
    );
    f.insert("proofs", Value::Array(proofs.iter().map(data).collect()));
}

/// A quantity: `0x` and lowercase hex without leading zeros (`0x0`).
fn quantity(n: impl LowerHex) -> Value {
    Value::String(format!("{n:#x}"))
}

/// Bytes, an address or a hash: `0x` and lowercase hex.
fn data(bytes: impl AsRef<[u8]>) -> Value {
    Value::String(hex::encode_prefixed(bytes))
}

/// An object whose keys are inserted in sorted order, so that it prints
/// sorted whether or not serde_json keeps insertion order.
fn object<'k>(entries: impl IntoIterator<Item = (&'k str, Value)>) -> Value {
    let sorted: BTreeMap<&str, Value> = entries.into_iter().collect();
    let map: Map<String, Value> = sorted.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    Value::Object(map)
}
