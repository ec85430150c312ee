//! Signed transactions of every type, and proxyd's body for them.

use alloy_consensus::{
    SignableTransaction, Signed, Transaction, TxEip1559, TxEip2930, TxEip4844, TxEip4844Variant,
    TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7594::BlobTransactionSidecarVariant;
use alloy_eips::eip7702::SignedAuthorization;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256, hex};
use secp256k1::{Message, SECP256K1, SecretKey};
use serde_json::{Map, Value, json};

use crate::proxyd::{MAX_TXS, encode, parse};

pub(super) const CHAIN_ID: u64 = 10;
pub(super) const TARGET: Address = Address::repeat_byte(0x5f);

pub(super) fn key(seed: u8) -> SecretKey {
    let mut bytes = [1u8; 32];
    bytes[31] = seed;
    SecretKey::from_byte_array(bytes).unwrap_or_else(|e| panic!("key: {e}"))
}

pub(super) fn address_of(key: &SecretKey) -> Address {
    let public = key.public_key(SECP256K1).serialize_uncompressed();
    Address::from_raw_public_key(&public[1..])
}

pub(super) fn sign_hash(digest: B256, key: &SecretKey) -> Signature {
    let (id, compact) = SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(digest.0), key)
        .serialize_compact();
    let word = |b: &[u8]| U256::from_be_slice(b);
    Signature::new(
        word(&compact[..32]),
        word(&compact[32..]),
        i32::from(id) == 1,
    )
}

pub(super) fn sign<T: SignableTransaction<Signature>>(tx: T, key: &SecretKey) -> Signed<T> {
    let signature = sign_hash(tx.signature_hash(), key);
    tx.into_signed(signature)
}

pub(super) fn calldata(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The fields of a transaction of any type; each type takes its own.
#[derive(Debug, Clone, Default)]
pub(super) struct Params {
    pub(super) chain_id: Option<u64>,
    pub(super) nonce: u64,
    pub(super) gas: u64,
    pub(super) fee: u128,
    pub(super) tip: u128,
    pub(super) to: Option<Address>,
    pub(super) value: U256,
    pub(super) input: Bytes,
    pub(super) access_list: Vec<(Address, Vec<B256>)>,
    pub(super) blob_hashes: Vec<B256>,
    pub(super) blob_fee: u128,
    pub(super) auths: Vec<SignedAuthorization>,
}

/// Signs `p` as a transaction of type `ty` (a blob or set-code one calls
/// `TARGET` when `to` is `None`).
pub(super) fn envelope(ty: u8, p: Params, signer: &SecretKey) -> TxEnvelope {
    let kind = p.to.map_or(TxKind::Create, TxKind::Call);
    let call = p.to.unwrap_or(TARGET);
    let chain_id = p.chain_id.unwrap_or(CHAIN_ID);
    let access_list = AccessList(
        (p.access_list.into_iter())
            .map(|(address, storage_keys)| AccessListItem {
                address,
                storage_keys,
            })
            .collect(),
    );
    let (nonce, gas_limit, value, input) = (p.nonce, p.gas, p.value, p.input);
    let (max_fee_per_gas, max_priority_fee_per_gas) = (p.fee, p.tip);
    match ty {
        0 => {
            let (chain_id, gas_price, to) = (p.chain_id, p.fee, kind);
            let tx = TxLegacy {
                chain_id,
                nonce,
                gas_price,
                gas_limit,
                to,
                value,
                input,
            };
            sign(tx, signer).into()
        }
        1 => {
            let (gas_price, to) = (p.fee, kind);
            let tx = TxEip2930 {
                chain_id,
                nonce,
                gas_price,
                gas_limit,
                to,
                value,
                access_list,
                input,
            };
            sign(tx, signer).into()
        }
        2 => {
            let to = kind;
            let tx = TxEip1559 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
                to,
                value,
                access_list,
                input,
            };
            sign(tx, signer).into()
        }
        3 => {
            let (to, blob_versioned_hashes, max_fee_per_blob_gas) =
                (call, p.blob_hashes, p.blob_fee);
            let tx = TxEip4844 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
                to,
                value,
                access_list,
                blob_versioned_hashes,
                max_fee_per_blob_gas,
                input,
            };
            sign(
                TxEip4844Variant::<BlobTransactionSidecarVariant>::TxEip4844(tx),
                signer,
            )
            .into()
        }
        _ => {
            let (to, authorization_list) = (call, p.auths);
            let tx = TxEip7702 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
                to,
                value,
                access_list,
                authorization_list,
                input,
            };
            sign(tx, signer).into()
        }
    }
}

/// A typical EIP-1559 call with 100 bytes of calldata, signed by `key(1)`.
pub(super) fn typical(nonce: u64) -> TxEnvelope {
    let p = Params {
        nonce,
        gas: 150_000,
        fee: 3_000_000_000,
        tip: 1_000_000,
        to: Some(TARGET),
        value: U256::from(12_345u64),
        input: calldata(100, 7),
        ..Params::default()
    };
    envelope(2, p, &key(1))
}

pub(super) fn json_of(envelope: &TxEnvelope) -> Value {
    encode::tx_json(&envelope.encoded_2718()).unwrap_or_else(|e| panic!("tx_json: {e}"))
}

pub(super) fn hash_of(tx: &Value) -> String {
    tx["hash"].as_str().unwrap_or_default().to_owned()
}

/// `{"txs": {key: tx}}`.
pub(super) fn body_of(key: &str, tx: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({ "txs": { key: tx } })).unwrap_or_else(|e| panic!("{e}"))
}

/// The body proxyd sends for `envelope` with `edit` applied to its tx.
pub(super) fn edited(envelope: &TxEnvelope, edit: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
    let mut tx = json_of(envelope);
    let hash = hash_of(&tx);
    edit(
        tx.as_object_mut()
            .unwrap_or_else(|| panic!("not an object")),
    );
    body_of(&hash, &tx)
}

/// Parses the body proxyd sends for `envelope` and checks everything the
/// screen reads against alloy's reading of the same transaction; returns
/// the transaction's JSON.
pub(super) fn round_trip(envelope: &TxEnvelope, signer: &SecretKey) -> Value {
    let body = encode::request(&[&envelope.encoded_2718()]).unwrap_or_else(|e| panic!("{e}"));
    let request = parse(&body, MAX_TXS).unwrap_or_else(|e| {
        let shown = String::from_utf8_lossy(&body[..body.len().min(2000)]);
        panic!("{e:?}: {shown}")
    });
    let [tx] = request.txs.as_slice() else {
        panic!("one tx expected");
    };
    assert_eq!(tx.hash, *envelope.tx_hash());
    assert_eq!(tx.key, hex::encode_prefixed(envelope.tx_hash()));
    assert_eq!(tx.from, address_of(signer));
    assert_eq!(tx.to, envelope.to());
    assert_eq!(tx.value, envelope.value());
    assert_eq!(tx.gas, envelope.gas_limit());
    assert_eq!(tx.payload, envelope.input().to_vec());
    json_of(envelope)
}

pub(super) fn keys(tx: &Value) -> Vec<&str> {
    let keys = tx
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect());
    keys.unwrap_or_default()
}
