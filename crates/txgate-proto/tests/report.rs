//! The sidecar's failure report as revm itself writes it: a revm-context
//! 12.1 `TxEnv` serialised by serde_json into `[tx_hash, tx_env]`, read by
//! `report::parse`, must give the same fingerprint, sender and hash as the
//! signed raw transaction with the same fields, decoded and recovered by
//! txgate's own screen.

#![allow(missing_docs)]

use alloy_consensus::{
    SignableTransaction, Signed, TxEip1559, TxEip4844, TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7702::{Authorization, SignedAuthorization};
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256, address};
use revm_context::TxEnv;
use revm_context::either::Either;
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_proto::report::{self, Report};
use txgate_screen::{Fingerprint, Invalidation, Tx, decode, recover_sender};

const CHAIN_ID: u64 = 31337;
const TARGET: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");

fn key() -> SecretKey {
    SecretKey::from_byte_array([0x42; 32]).unwrap_or_else(|e| panic!("key: {e}"))
}

fn address_of(key: &SecretKey) -> Address {
    let public = key.public_key(SECP256K1).serialize_uncompressed();
    Address::from_raw_public_key(&public[1..])
}

fn sign_hash(digest: B256) -> Signature {
    let (id, compact) = SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(digest.0), &key())
        .serialize_compact();
    Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    )
}

fn sign<T: SignableTransaction<Signature>>(tx: T) -> Signed<T> {
    let signature = sign_hash(tx.signature_hash());
    tx.into_signed(signature)
}

/// The signed transaction as txgate screens it: decoded from its raw
/// EIP-2718 bytes, sender recovered.
fn screened(envelope: TxEnvelope) -> (Tx, Address) {
    let raw = envelope.encoded_2718();
    let tx = decode(&raw).unwrap_or_else(|e| panic!("decode: {e}"));
    assert_eq!(tx.hash, *envelope.tx_hash());
    let sender = recover_sender(&tx).unwrap_or_else(|e| panic!("recover: {e}"));
    assert_eq!(sender, address_of(&key()));
    (tx, sender)
}

/// The body the sidecar posts, `[tx_hash, tx_env]`, and what txgate reads
/// of it.
fn reported(hash: B256, env: &TxEnv) -> (serde_json::Value, Report) {
    let body = serde_json::to_vec(&(hash, env)).unwrap_or_else(|e| panic!("serialise: {e}"));
    let report = report::parse(&body).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&body));
    });
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("reparse: {e}"));
    (json, report)
}

/// The report and the screened transaction agree on everything txgate
/// takes from either.
fn assert_same(report: &Report, tx: &Tx, sender: Address) {
    assert_eq!(report.tx_hash, tx.hash);
    assert_eq!(report.caller, sender);
    assert_eq!(report.kind, tx.to);
    assert_eq!(report.data, tx.input);
    assert_eq!(report.value, tx.value);
    assert_eq!(report.gas_limit, tx.gas_limit);
    assert_eq!(report.fingerprint(), Fingerprint::of(tx));
    assert_eq!(
        report.invalidation(0),
        Invalidation::of(tx, Some(sender), None, 0)
    );
}

fn transfer_calldata() -> Bytes {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(&[0x11; 20]);
    input.extend_from_slice(&U256::from(1000u64).to_be_bytes::<32>());
    input.into()
}

fn eip1559(to: TxKind, input: Bytes, value: U256) -> TxEip1559 {
    TxEip1559 {
        chain_id: CHAIN_ID,
        nonce: 7,
        gas_limit: 100_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to,
        value,
        access_list: AccessList::default(),
        input,
    }
}

/// revm's `TxEnv` of an EIP-1559 transaction, field by field.
fn env_1559(tx: &TxEip1559, caller: Address) -> TxEnv {
    TxEnv {
        tx_type: 2,
        caller,
        gas_limit: tx.gas_limit,
        gas_price: tx.max_fee_per_gas,
        kind: tx.to,
        value: tx.value,
        data: tx.input.clone(),
        nonce: tx.nonce,
        chain_id: Some(tx.chain_id),
        access_list: tx.access_list.clone(),
        gas_priority_fee: Some(tx.max_priority_fee_per_gas),
        ..TxEnv::default()
    }
}

#[test]
fn eip1559_call_matches_the_signed_transaction() {
    // A value above u64 (revm writes U256 as a hex string).
    let value = U256::from(2_000_000_000_000_000_000_000u128);
    let tx = eip1559(TxKind::Call(TARGET), transfer_calldata(), value);
    let signed = sign(tx.clone());
    let hash = *signed.hash();
    let (screened_tx, sender) = screened(signed.into());
    let (json, report) = reported(hash, &env_1559(&tx, sender));

    assert_eq!(report.tx_hash, hash);
    assert_eq!(report.nonce, Some(7));
    assert_eq!(report.value, value);
    assert_same(&report, &screened_tx, sender);
    let inv = report.invalidation(0).unwrap_or_else(|| panic!("a call"));
    assert_eq!(inv.selector, [0xa9, 0x05, 0x9c, 0xbb]);
    assert_eq!(inv.target, TARGET);
    assert_eq!(inv.tx_hash, Some(hash));
    assert_eq!(inv.sender, Some(sender));
    assert_eq!(inv.assertion, None);

    // The wire as revm-context 12.1 writes it: a two-element array, the
    // target a plain address string.
    let items = json.as_array().unwrap_or_else(|| panic!("an array"));
    assert_eq!(items.len(), 2);
    assert!(items[1]["kind"].is_string(), "{json}");
    assert!(items[1]["value"].is_string(), "{json}");
    assert!(items[1]["gas_limit"].is_u64(), "{json}");
}

#[test]
fn legacy_call_matches_the_signed_transaction() {
    let tx = TxLegacy {
        chain_id: Some(CHAIN_ID),
        nonce: 3,
        // Above u64: serde_json writes a u128 as a bare number, which
        // txgate does not read and must not trip over.
        gas_price: u128::from(u64::MAX) + 5,
        gas_limit: 60_000,
        to: TxKind::Call(TARGET),
        value: U256::from(5u64),
        input: transfer_calldata(),
    };
    let signed = sign(tx.clone());
    let hash = *signed.hash();
    let (screened_tx, sender) = screened(signed.into());
    let env = TxEnv {
        tx_type: 0,
        caller: sender,
        gas_limit: tx.gas_limit,
        gas_price: tx.gas_price,
        kind: tx.to,
        value: tx.value,
        data: tx.input.clone(),
        nonce: tx.nonce,
        chain_id: tx.chain_id,
        gas_priority_fee: None,
        ..TxEnv::default()
    };
    let (json, report) = reported(hash, &env);
    assert!(json[1]["gas_price"].is_number(), "{json}");
    assert_eq!(report.nonce, Some(3));
    assert_same(&report, &screened_tx, sender);
    assert!(report.invalidation(0).is_some());
}

#[test]
fn short_calldata_matches_the_signed_transaction() {
    for input in [
        &[][..],
        &[0xd0][..],
        &[0xd0, 0xe3, 0x0d][..],
        &[0xd0, 0xe3, 0x0d, 0x2e][..],
    ] {
        let tx = eip1559(
            TxKind::Call(TARGET),
            Bytes::copy_from_slice(input),
            U256::ZERO,
        );
        let signed = sign(tx.clone());
        let hash = *signed.hash();
        let (screened_tx, sender) = screened(signed.into());
        let (_, report) = reported(hash, &env_1559(&tx, sender));
        assert_eq!(report.data.as_ref(), input);
        assert_same(&report, &screened_tx, sender);
        let inv = report.invalidation(0).unwrap_or_else(|| panic!("a call"));
        let mut selector = [0u8; 4];
        selector[..input.len()].copy_from_slice(input);
        assert_eq!(inv.selector, selector);
    }
}

#[test]
fn creation_has_no_invalidation() {
    let tx = eip1559(
        TxKind::Create,
        Bytes::from_static(&[0x60, 0x80, 0x60, 0x40, 0x52]),
        U256::ZERO,
    );
    let signed = sign(tx.clone());
    let hash = *signed.hash();
    let (screened_tx, sender) = screened(signed.into());
    let (json, report) = reported(hash, &env_1559(&tx, sender));

    // revm-context 12.1 writes a creation's kind as null.
    assert!(json[1]["kind"].is_null(), "{json}");
    assert_eq!(report.kind, None);
    assert_eq!(report.caller, sender);
    assert_eq!(report.tx_hash, hash);
    assert_eq!(Fingerprint::of(&screened_tx), None);
    assert_eq!(report.invalidation(0), None);
    assert_same(&report, &screened_tx, sender);
}

#[test]
fn access_lists_blobs_and_authorizations_are_ignored() {
    let access_list = AccessList(vec![AccessListItem {
        address: TARGET,
        storage_keys: vec![B256::repeat_byte(1), B256::repeat_byte(2)],
    }]);

    // EIP-4844: blob hashes and a blob fee.
    let blob = TxEip4844 {
        chain_id: CHAIN_ID,
        nonce: 1,
        gas_limit: 150_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TARGET,
        value: U256::from(1u8),
        access_list: access_list.clone(),
        blob_versioned_hashes: vec![B256::repeat_byte(0x01)],
        max_fee_per_blob_gas: u128::from(u64::MAX) * 3,
        input: transfer_calldata(),
    };
    let signed = sign(blob.clone());
    let hash = *signed.hash();
    let (screened_tx, sender) = screened(signed.into());
    let env = TxEnv {
        tx_type: 3,
        caller: sender,
        gas_limit: blob.gas_limit,
        gas_price: blob.max_fee_per_gas,
        kind: TxKind::Call(blob.to),
        value: blob.value,
        data: blob.input.clone(),
        nonce: blob.nonce,
        chain_id: Some(blob.chain_id),
        access_list: blob.access_list.clone(),
        gas_priority_fee: Some(blob.max_priority_fee_per_gas),
        blob_hashes: blob.blob_versioned_hashes.clone(),
        max_fee_per_blob_gas: blob.max_fee_per_blob_gas,
        ..TxEnv::default()
    };
    let (json, report) = reported(hash, &env);
    assert!(
        !json[1]["access_list"].as_array().is_none_or(Vec::is_empty),
        "{json}"
    );
    assert_same(&report, &screened_tx, sender);

    // EIP-7702: an authorization list.
    let authorization = Authorization {
        chain_id: U256::from(CHAIN_ID),
        address: Address::repeat_byte(0x77),
        nonce: 9,
    };
    let auth_sig = sign_hash(authorization.signature_hash());
    let signed_auth: SignedAuthorization = authorization.into_signed(auth_sig);
    let delegate = TxEip7702 {
        chain_id: CHAIN_ID,
        nonce: 2,
        gas_limit: 120_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TARGET,
        value: U256::ZERO,
        access_list,
        authorization_list: vec![signed_auth.clone()],
        input: transfer_calldata(),
    };
    let signed = sign(delegate.clone());
    let hash = *signed.hash();
    let (screened_tx, sender) = screened(signed.into());
    let env = TxEnv {
        tx_type: 4,
        caller: sender,
        gas_limit: delegate.gas_limit,
        gas_price: delegate.max_fee_per_gas,
        kind: TxKind::Call(delegate.to),
        value: delegate.value,
        data: delegate.input.clone(),
        nonce: delegate.nonce,
        chain_id: Some(delegate.chain_id),
        access_list: delegate.access_list.clone(),
        gas_priority_fee: Some(delegate.max_priority_fee_per_gas),
        authorization_list: vec![Either::Left(signed_auth)],
        ..TxEnv::default()
    };
    let (json, report) = reported(hash, &env);
    assert!(
        !json[1]["authorization_list"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{json}"
    );
    assert_same(&report, &screened_tx, sender);
}
