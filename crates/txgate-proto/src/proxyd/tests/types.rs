//! Every transaction type, an oversized one, and random ones: the hash
//! recomputed from proxyd's JSON is alloy's hash of the raw transaction.

use alloy_consensus::{Transaction, TxEip4844Variant, TxEip4844WithSidecar, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip4844::{Blob, BlobTransactionSidecar, Bytes48};
use alloy_eips::eip7594::BlobTransactionSidecarVariant;
use alloy_eips::eip7702::{Authorization, SignedAuthorization};
use alloy_primitives::{Address, B256, Bytes, U256, hex, keccak256};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::proxyd::{MAX_TXS, encode, parse};

#[test]
fn every_type_hashes_as_alloy() {
    let signer = key(1);
    let base = Params {
        nonce: 3,
        gas: 60_000,
        fee: 1_000_000_000,
        tip: 1_000,
        to: Some(TARGET),
        value: U256::from(10u64).pow(U256::from(18u64)),
        input: calldata(36, 1),
        ..Params::default()
    };
    let check = |ty, p: &Params| round_trip(&envelope(ty, p.clone(), &signer), &signer);

    // Legacy before EIP-155: v 27/28; no chainId, yParity, accessList.
    let tx = check(0, &base);
    let legacy_keys = [
        "from",
        "gas",
        "gasPrice",
        "hash",
        "input",
        "maxFeePerGas",
        "maxPriorityFeePerGas",
        "nonce",
        "r",
        "s",
        "to",
        "type",
        "v",
        "value",
    ];
    assert_eq!(keys(&tx), legacy_keys);
    assert!(["0x1b", "0x1c"].contains(&tx["v"].as_str().unwrap_or_default()));
    assert_eq!(
        (&tx["type"], &tx["maxFeePerGas"]),
        (&json!("0x0"), &Value::Null)
    );
    // Legacy with EIP-155, and a creation.
    let protected = Params {
        chain_id: Some(CHAIN_ID),
        ..base.clone()
    };
    let tx = check(0, &protected);
    assert_eq!(tx["chainId"], json!("0xa"));
    assert!(["0x37", "0x38"].contains(&tx["v"].as_str().unwrap_or_default()));
    let tx = check(
        0,
        &Params {
            to: None,
            ..protected
        },
    );
    assert_eq!(tx["to"], Value::Null);

    // EIP-2930 with an access list, zeros and an empty input.
    let keys_of = |n: u8| (1..=n).map(B256::repeat_byte).collect();
    let listed = Params {
        access_list: vec![
            (Address::repeat_byte(0xaa), keys_of(2)),
            (Address::ZERO, vec![]),
        ],
        ..base.clone()
    };
    let tx = check(
        1,
        &Params {
            nonce: 0,
            value: U256::ZERO,
            input: Bytes::new(),
            ..listed.clone()
        },
    );
    let key2 = json!(hex::encode_prefixed(B256::repeat_byte(2)));
    assert_eq!(tx["accessList"][0]["storageKeys"][1], key2);
    assert_eq!(keys(&tx["accessList"][0]), ["address", "storageKeys"]);
    let zeros = (&tx["input"], &tx["value"], &tx["nonce"]);
    assert_eq!(zeros, (&json!("0x"), &json!("0x0"), &json!("0x0")));
    assert_eq!(tx["maxFeePerGas"], Value::Null);

    // EIP-1559: a call, a creation with a long input, an access list.
    let tx = round_trip(&typical(5), &signer);
    let typed_keys = [
        "accessList",
        "chainId",
        "from",
        "gas",
        "gasPrice",
        "hash",
        "input",
        "maxFeePerGas",
        "maxPriorityFeePerGas",
        "nonce",
        "r",
        "s",
        "to",
        "type",
        "v",
        "value",
        "yParity",
    ];
    assert_eq!(keys(&tx), typed_keys);
    assert_eq!(
        (&tx["gasPrice"], &tx["accessList"]),
        (&Value::Null, &json!([]))
    );
    assert_eq!(tx["v"], tx["yParity"]);
    assert_eq!(tx["from"], json!(address_of(&signer).to_checksum(None)));
    check(
        2,
        &Params {
            to: None,
            input: calldata(300, 2),
            ..base.clone()
        },
    );
    check(2, &listed);

    // EIP-4844, plain, then in its network form (the blobs not hashed).
    let blob = Params {
        blob_hashes: keys_of(2),
        blob_fee: 1 << 70,
        ..listed.clone()
    };
    let tx = check(3, &blob);
    assert_eq!(tx["maxFeePerBlobGas"], json!("0x400000000000000000"));
    assert!(tx.get("blobs").is_none());
    let TxEnvelope::Eip4844(signed) = envelope(3, blob, &signer) else {
        panic!("not a blob tx");
    };
    let TxEip4844Variant::TxEip4844(tx) = signed.tx().clone() else {
        panic!("already with a sidecar");
    };
    let sidecar = BlobTransactionSidecar {
        blobs: vec![Blob::repeat_byte(0)],
        commitments: vec![Bytes48::repeat_byte(0xc0)],
        proofs: vec![Bytes48::repeat_byte(0xd0)],
    };
    let sidecar = BlobTransactionSidecarVariant::Eip4844(sidecar);
    let network = TxEip4844Variant::TxEip4844WithSidecar(TxEip4844WithSidecar { tx, sidecar });
    let tx = round_trip(&sign(network, &signer).into(), &signer);
    assert_eq!(tx["blobs"].as_array().map(Vec::len), Some(1));

    // EIP-7702 with authorizations, and with none (the key is absent).
    let authorization = Authorization {
        chain_id: U256::from(CHAIN_ID),
        address: Address::repeat_byte(0x77),
        nonce: 2,
    };
    let signature = sign_hash(authorization.signature_hash(), &signer);
    let any_chain = Authorization {
        chain_id: U256::ZERO,
        ..authorization.clone()
    };
    let auths = vec![
        authorization.into_signed(signature),
        SignedAuthorization::new_unchecked(any_chain, 1, U256::from(5u64), U256::MAX),
    ];
    let tx = check(
        4,
        &Params {
            auths,
            tip: 0,
            ..listed.clone()
        },
    );
    let auth_keys = ["address", "chainId", "nonce", "r", "s", "yParity"];
    assert_eq!(keys(&tx["authorizationList"][0]), auth_keys);
    assert_eq!(tx["maxPriorityFeePerGas"], json!("0x0"));
    let tx = check(4, &listed);
    assert!(tx.get("authorizationList").is_none());
}

/// A legacy transaction geth would hash but alloy cannot hold: a 300-bit
/// value, a chain id of 2^80 (in `v`), a 300-byte input. Its RLP is
/// written out by hand here, byte for byte.
#[test]
fn oversized_legacy_hashes_at_any_width() {
    let value: Vec<u8> = std::iter::once(0x0a).chain([0xff; 37]).collect(); // 300 bits
    let chain_id: Vec<u8> = std::iter::once(1).chain([0; 10]).collect(); // 2^80
    let mut v = chain_id.clone(); // 2^81 + 35 + 1
    (v[0], v[10]) = (2, 36);
    let (r, s) = ([0x11u8; 32], [0x22u8; 32]);
    let input = calldata(300, 9).to_vec();

    let mut payload = vec![0x01]; // nonce 1
    payload.extend([0x84, 0x3b, 0x9a, 0xca, 0x00]); // gasPrice 1 gwei
    payload.extend([0x82, 0x52, 0x08]); // gas 21000
    payload.push(0x94);
    payload.extend(TARGET.as_slice());
    payload.push(0x80 + 38);
    payload.extend(&value);
    payload.extend([0xb9, 0x01, 0x2c]); // 300 bytes
    payload.extend(&input);
    payload.push(0x80 + 11);
    payload.extend(&v);
    payload.push(0xa0);
    payload.extend(r);
    payload.push(0xa0);
    payload.extend(s);
    let len = u16::try_from(payload.len()).unwrap_or_else(|e| panic!("{e}"));
    let mut rlp = vec![0xf9];
    rlp.extend(len.to_be_bytes());
    rlp.extend(payload);
    let hash = keccak256(&rlp);

    let tx = json!({
        "chainId": quantity(&chain_id),
        "from": "0x0000000000000000000000000000000000000001",
        "gas": "0x5208",
        "gasPrice": "0x3b9aca00",
        "hash": hex::encode_prefixed(hash),
        "input": hex::encode_prefixed(&input),
        "maxFeePerGas": null,
        "maxPriorityFeePerGas": null,
        "nonce": "0x1",
        "r": hex::encode_prefixed(r),
        "s": hex::encode_prefixed(s),
        "to": hex::encode_prefixed(TARGET),
        "type": "0x0",
        "v": quantity(&v),
        "value": quantity(&value),
    });
    let body = body_of(&hex::encode_prefixed(hash), &tx);
    let request = parse(&body, MAX_TXS).unwrap_or_else(|e| panic!("{e:?}"));
    let [parsed] = request.txs.as_slice() else {
        panic!("one tx expected");
    };
    assert_eq!(parsed.hash, hash);
    assert_eq!(parsed.value, U256::MAX);
    assert_eq!((parsed.gas, parsed.to), (21_000, Some(TARGET)));
    assert_eq!(parsed.from, Address::with_last_byte(1));
    assert_eq!(parsed.payload, input);
}

/// A quantity from big-endian bytes: no leading zero digit.
fn quantity(bytes: &[u8]) -> String {
    let digits = hex::encode(bytes);
    format!("0x{}", digits.trim_start_matches('0'))
}

/// Random transactions alloy can represent, of every type.
fn arbitrary_tx() -> impl Strategy<Value = (u8, Params, u8)> {
    let numbers = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<[u128; 3]>(),
        any::<[u8; 32]>(),
    );
    let data = (
        proptest::collection::vec(any::<u8>(), 0..200),
        proptest::option::of(any::<[u8; 20]>()),
        proptest::collection::vec((any::<[u8; 20]>(), 0u8..3), 0..3),
        proptest::collection::vec(any::<[u8; 32]>(), 0..3),
        proptest::collection::vec((any::<[u8; 32]>(), any::<u64>(), 0u8..2), 0..3),
    );
    (0u8..5, numbers, data, any::<u8>()).prop_map(|(ty, numbers, data, seed)| {
        let (chain_id, nonce, gas, [fee, tip, blob_fee], value) = numbers;
        let (input, to, access_list, blob_hashes, auths) = data;
        let auth = |(word, nonce, parity): ([u8; 32], u64, u8)| {
            let word = U256::from_be_bytes(word);
            let inner = Authorization {
                chain_id: word,
                address: TARGET,
                nonce,
            };
            SignedAuthorization::new_unchecked(inner, parity, word >> 3, U256::from(nonce))
        };
        let access = |(address, n): ([u8; 20], u8)| {
            (
                Address::from(address),
                (0..n).map(B256::with_last_byte).collect(),
            )
        };
        let params = Params {
            // Legacy: a third without a chain id; any chain id fits `v`.
            chain_id: (ty != 0 || chain_id % 3 != 0).then_some(chain_id),
            nonce,
            gas,
            fee,
            tip,
            to: to.map(Address::from),
            value: U256::from_be_bytes(value),
            input: input.into(),
            access_list: access_list.into_iter().map(access).collect(),
            blob_hashes: blob_hashes.into_iter().map(B256::from).collect(),
            blob_fee,
            auths: auths.into_iter().map(auth).collect(),
        };
        (ty, params, seed)
    })
}

proptest! {
    /// Our hash of proxyd's JSON is alloy's hash of the raw transaction.
    #[test]
    fn hash_matches_alloy((ty, params, seed) in arbitrary_tx()) {
        let envelope = envelope(ty, params, &key(seed));
        let body = encode::request(&[&envelope.encoded_2718()]).map_err(TestCaseError::fail)?;
        let request = parse(&body, MAX_TXS).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(request.txs.len(), 1);
        prop_assert_eq!(request.txs[0].hash, *envelope.tx_hash());
        prop_assert_eq!(request.txs[0].value, envelope.value());
        prop_assert_eq!(request.txs[0].gas, envelope.gas_limit());
    }
}
