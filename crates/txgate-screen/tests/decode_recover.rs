//! Decoding and recovery of every envelope type, checked against alloy's
//! own (k256) recovery; fingerprint invariants as properties.

#![allow(missing_docs, clippy::unwrap_used)]

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{
    SignableTransaction, TxEip1559, TxEip2930, TxEip4844, TxEip4844Variant, TxEip4844WithSidecar,
    TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip4844::BlobTransactionSidecar;
use alloy_eips::eip7594::BlobTransactionSidecarVariant;
use alloy_eips::eip7702::{Authorization, SignedAuthorization};
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256, address};
use proptest::prelude::*;
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_screen::{
    DecodeError, Fingerprint, SignatureError, check_chain_id, decode, decode_hex, recover_sender,
};

const TARGET: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");

fn key(seed: u8) -> SecretKey {
    let mut bytes = [0x11u8; 32];
    bytes[31] = seed;
    SecretKey::from_byte_array(bytes).unwrap()
}

fn sign<T: SignableTransaction<Signature>>(tx: T, key: &SecretKey) -> alloy_consensus::Signed<T> {
    let digest = tx.signature_hash();
    let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), key);
    let (id, compact) = sig.serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    tx.into_signed(signature)
}

fn calldata() -> Bytes {
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(&[0x11; 20]);
    input.extend_from_slice(&U256::from(1000u64).to_be_bytes::<32>());
    input.into()
}

/// One signed transaction of every envelope the upstream accepts.
fn every_type(key: &SecretKey) -> Vec<(&'static str, TxEnvelope)> {
    let legacy = |chain_id| TxLegacy {
        chain_id,
        nonce: 3,
        gas_price: 1_000_000_000,
        gas_limit: 60_000,
        to: TxKind::Call(TARGET),
        value: U256::from(5u64),
        input: calldata(),
    };
    let eip4844 = TxEip4844 {
        chain_id: 31337,
        nonce: 1,
        gas_limit: 100_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TARGET,
        value: U256::ZERO,
        access_list: Default::default(),
        blob_versioned_hashes: vec![[1u8; 32].into()],
        max_fee_per_blob_gas: 1,
        input: calldata(),
    };
    let with_blobs: TxEip4844WithSidecar<BlobTransactionSidecarVariant> =
        TxEip4844WithSidecar::from_tx_and_sidecar(
            eip4844.clone(),
            BlobTransactionSidecarVariant::Eip4844(BlobTransactionSidecar {
                blobs: vec![Default::default()],
                commitments: vec![Default::default()],
                proofs: vec![Default::default()],
            }),
        );
    let auth = Authorization {
        chain_id: U256::from(31337u64),
        address: TARGET,
        nonce: 0,
    };
    let auth = SignedAuthorization::new_unchecked(auth, 0, U256::from(1u64), U256::from(1u64));
    vec![
        ("legacy pre-155", sign(legacy(None), key).into()),
        ("legacy 155", sign(legacy(Some(31337)), key).into()),
        (
            "2930",
            sign(
                TxEip2930 {
                    chain_id: 31337,
                    nonce: 1,
                    gas_price: 1_000_000_000,
                    gas_limit: 80_000,
                    to: TxKind::Call(TARGET),
                    value: U256::from(7u64),
                    access_list: Default::default(),
                    input: calldata(),
                },
                key,
            )
            .into(),
        ),
        (
            "1559",
            sign(
                TxEip1559 {
                    chain_id: 31337,
                    nonce: 9,
                    gas_limit: 90_000,
                    max_fee_per_gas: 3_000_000_000,
                    max_priority_fee_per_gas: 1_000_000_000,
                    to: TxKind::Call(TARGET),
                    value: U256::from(10u64).pow(U256::from(18u64)),
                    access_list: Default::default(),
                    input: calldata(),
                },
                key,
            )
            .into(),
        ),
        (
            "4844",
            sign(
                TxEip4844Variant::<BlobTransactionSidecarVariant>::TxEip4844(eip4844),
                key,
            )
            .into(),
        ),
        (
            "4844 with blobs",
            sign(
                TxEip4844Variant::<BlobTransactionSidecarVariant>::TxEip4844WithSidecar(with_blobs),
                key,
            )
            .into(),
        ),
        (
            "7702",
            sign(
                TxEip7702 {
                    chain_id: 31337,
                    nonce: 2,
                    gas_limit: 120_000,
                    max_fee_per_gas: 3_000_000_000,
                    max_priority_fee_per_gas: 1_000_000_000,
                    to: TARGET,
                    value: U256::ZERO,
                    access_list: Default::default(),
                    authorization_list: vec![auth],
                    input: calldata(),
                },
                key,
            )
            .into(),
        ),
    ]
}

#[test]
fn every_envelope_decodes_and_recovers_like_alloy() {
    for seed in [1u8, 2, 77, 200] {
        let key = key(seed);
        for (name, envelope) in every_type(&key) {
            let raw = envelope.encoded_2718();
            let tx = decode(&raw).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(tx.hash, *envelope.tx_hash(), "{name}");
            assert_eq!(tx.to, Some(TARGET), "{name}");
            let ours = recover_sender(&tx).unwrap_or_else(|e| panic!("{name}: {e}"));
            let alloys = envelope.recover_signer().unwrap();
            assert_eq!(ours, alloys, "{name}");
            // The hex form decodes to the same bytes.
            let hex = format!(
                "0x{}",
                raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            assert_eq!(decode_hex(&hex).unwrap(), raw);
        }
    }
}

#[test]
fn bad_hex_and_bad_rlp_say_which() {
    assert_eq!(decode_hex("abcd").unwrap_err(), DecodeError::BadHex);
    assert_eq!(decode_hex("0x").unwrap_err(), DecodeError::Empty);
    assert_eq!(decode_hex("0xabc").unwrap_err(), DecodeError::BadHex);
    assert_eq!(decode_hex("0xzz").unwrap_err(), DecodeError::BadHex);
    assert_eq!(
        decode(&[0x05, 0xc0]).unwrap_err(),
        DecodeError::UnknownType(5)
    );
    assert_eq!(
        decode(&[0x7e, 0xc0]).unwrap_err(),
        DecodeError::UnknownType(0x7e)
    );
    // A 0x00 type byte in front of a legacy list (found by fuzzing
    // against alloy): legacy has no envelope, so no transaction.
    let regression = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/regressions/raw_tx_differential/crash-cb37c18671fb166b6309790353396ccb47b9c2a0"
    ))
    .unwrap();
    assert_eq!(
        decode(&regression).unwrap_err(),
        DecodeError::UnknownType(0)
    );
    assert!(matches!(
        decode(&[0x02, 0xc3, 0x01]).unwrap_err(),
        DecodeError::BadRlp(_)
    ));
    assert!(matches!(
        decode(&[0x90, 0x01]).unwrap_err(),
        DecodeError::BadRlp(_)
    ));
    let key = key(3);
    let (_, envelope) = every_type(&key).remove(3);
    let mut raw = envelope.encoded_2718();
    raw.push(0x00);
    assert_eq!(decode(&raw).unwrap_err(), DecodeError::TrailingBytes);
    let raw = envelope.encoded_2718();
    assert!(decode(&raw[..raw.len() - 3]).is_err());
    for e in [
        DecodeError::BadHex,
        DecodeError::UnknownType(9),
        DecodeError::TrailingBytes,
    ] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn high_s_and_garbage_signatures_are_refused() {
    let key = key(4);
    let (_, envelope) = every_type(&key).remove(3);
    let tx = decode(&envelope.encoded_2718()).unwrap();
    // s' = n - s with the parity flipped is the same signature in high-s form.
    let n = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .unwrap();
    let s = U256::from_be_slice(&tx.signature[32..]);
    let mut high = tx.clone();
    high.signature[32..].copy_from_slice(&(n - s).to_be_bytes::<32>());
    high.y_parity = !tx.y_parity;
    assert_eq!(recover_sender(&high).unwrap_err(), SignatureError::HighS);
    let mut zero = tx.clone();
    zero.signature = [0u8; 64];
    assert_eq!(recover_sender(&zero).unwrap_err(), SignatureError::Invalid);
    // A flipped parity recovers some other address, never the sender.
    let mut flipped = tx.clone();
    flipped.y_parity = !tx.y_parity;
    assert_ne!(recover_sender(&flipped).ok(), recover_sender(&tx).ok());
}

#[test]
fn chain_id_allow_list() {
    let key = key(5);
    let all = every_type(&key);
    let pre155 = decode(&all[0].1.encoded_2718()).unwrap();
    let modern = decode(&all[3].1.encoded_2718()).unwrap();
    assert!(check_chain_id(&modern, &[]).is_ok());
    assert!(check_chain_id(&modern, &[31337]).is_ok());
    assert_eq!(
        check_chain_id(&modern, &[1]).unwrap_err(),
        DecodeError::WrongChainId { got: Some(31337) }
    );
    assert_eq!(
        check_chain_id(&pre155, &[31337]).unwrap_err(),
        DecodeError::WrongChainId { got: None }
    );
}

#[test]
fn contract_creation_has_no_fingerprint() {
    let key = key(6);
    let create = TxEip1559 {
        chain_id: 31337,
        gas_limit: 500_000,
        to: TxKind::Create,
        input: calldata(),
        ..Default::default()
    };
    let envelope: TxEnvelope = sign(create, &key).into();
    let tx = decode(&envelope.encoded_2718()).unwrap();
    assert_eq!(tx.to, None);
    assert!(Fingerprint::of(&tx).is_none());
}

#[test]
fn buckets() {
    use txgate_screen::fingerprint::{gas_bucket, value_bucket};
    assert_eq!(value_bucket(U256::ZERO), 0);
    assert_eq!(value_bucket(U256::from(1u64)), 1);
    assert_eq!(value_bucket(U256::from(1023u64)), 2);
    assert_eq!(value_bucket(U256::from(1024u64)), 2);
    assert_eq!(gas_bucket(49_999), 0);
    assert_eq!(gas_bucket(50_000), 1);
    // Truncated to 32 bits, as the reference proxy does (not saturated).
    assert_eq!(gas_bucket(u64::MAX), (u64::MAX / 50_000) as u32);
    assert_eq!(gas_bucket((1u64 << 32) * 50_000 + 50_000), 1);
}

/// Signs and decodes a call to TARGET with `calldata()`.
fn signed_call(key: &SecretKey, tx: TxEip1559) -> txgate_screen::Tx {
    let tx = TxEip1559 {
        chain_id: 31337,
        to: TxKind::Call(TARGET),
        input: calldata(),
        ..tx
    };
    let envelope: TxEnvelope = sign(tx, key).into();
    decode(&envelope.encoded_2718()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Nonce, sender, fee and tip never change a fingerprint; neither does a
    /// value or gas limit change inside its bucket.
    #[test]
    fn fingerprint_ignores_what_attackers_vary(
        seed_a in 1u8..=255, seed_b in 1u8..=255,
        nonce_a in any::<u64>(), nonce_b in any::<u64>(),
        tip_a in any::<u64>(), tip_b in any::<u64>(),
        fee_a in any::<u64>(), fee_b in any::<u64>(),
        gas in 21_000u64..10_000_000,
    ) {
        let gas_same_bucket = gas - gas % 50_000 + (gas + 1) % 50_000;
        let a = signed_call(&key(seed_a), TxEip1559 {
            nonce: nonce_a,
            max_priority_fee_per_gas: tip_a.into(),
            max_fee_per_gas: fee_a.max(tip_a).into(),
            value: U256::from(1000u64),
            gas_limit: gas,
            ..Default::default()
        });
        let b = signed_call(&key(seed_b), TxEip1559 {
            nonce: nonce_b,
            max_priority_fee_per_gas: tip_b.into(),
            max_fee_per_gas: fee_b.max(tip_b).into(),
            value: U256::from(1001u64),
            gas_limit: gas_same_bucket,
            ..Default::default()
        });
        prop_assert_ne!(a.hash, b.hash);
        prop_assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
    }

    /// Target, selector, arguments, value bucket and gas bucket each change it.
    #[test]
    fn fingerprint_follows_what_the_call_does(
        other in any::<[u8; 20]>(),
        selector in any::<[u8; 4]>(),
        arg in any::<[u8; 32]>(),
        value_exp in 0u32..200,
        gas in 21_000u64..10_000_000,
    ) {
        let base_input = calldata();
        let value = U256::from(1u64) << value_exp as usize;
        let base = Fingerprint::from_parts(TARGET, &base_input, value, gas);
        let other = Address::from(other);
        prop_assume!(other != TARGET);
        prop_assert_ne!(base, Fingerprint::from_parts(other, &base_input, value, gas));
        let mut changed = base_input.to_vec();
        prop_assume!(selector != [0xa9, 0x05, 0x9c, 0xbb]);
        changed[..4].copy_from_slice(&selector);
        prop_assert_ne!(base.hash, Fingerprint::from_parts(TARGET, &changed, value, gas).hash);
        let mut changed = base_input.to_vec();
        prop_assume!(arg[..] != changed[4..36]);
        changed[4..36].copy_from_slice(&arg);
        prop_assert_ne!(base.hash, Fingerprint::from_parts(TARGET, &changed, value, gas).hash);
        prop_assert_ne!(base.hash, Fingerprint::from_parts(TARGET, &base_input, value << 10usize, gas).hash);
        prop_assert_ne!(base.hash, Fingerprint::from_parts(TARGET, &base_input, value, gas + 50_000).hash);
    }
}

/// The table-based decoder `decode_hex` used before `const-hex`: the
/// reference it must agree with.
fn decode_hex_bytewise(text: &str) -> Result<Vec<u8>, DecodeError> {
    const NIBBLE: [u8; 256] = {
        let mut table = [0xffu8; 256];
        let mut i = 0;
        while i < 10 {
            table[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            table[b'a' as usize + i] = 10 + i as u8;
            table[b'A' as usize + i] = 10 + i as u8;
            i += 1;
        }
        table
    };
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .ok_or(DecodeError::BadHex)?;
    if digits.is_empty() {
        return Err(DecodeError::Empty);
    }
    if digits.len() % 2 != 0 {
        return Err(DecodeError::BadHex);
    }
    let mut out = Vec::with_capacity(digits.len() / 2);
    let mut bad = 0u8;
    for pair in digits.as_bytes().chunks_exact(2) {
        let (hi, lo) = (NIBBLE[pair[0] as usize], NIBBLE[pair[1] as usize]);
        bad |= hi | lo;
        out.push(hi << 4 | (lo & 0x0f));
    }
    if bad & 0x80 != 0 {
        return Err(DecodeError::BadHex);
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]
    /// Any text of hex digits, `x`/`X`, a few non-hex ASCII and
    /// multi-byte characters, with or without a prefix: the same bytes or
    /// the same error as the table-based decoder.
    #[test]
    fn hex_decoding_agrees_with_the_table_decoder(
        prefix in proptest::sample::select(vec!["0x", "0X", "", "0x0x", "x"]),
        body in proptest::collection::vec(
            proptest::sample::select(vec!['0', '9', 'a', 'f', 'A', 'F', 'g', 'x', 'X', ' ', 'é', '\0']),
            0..300,
        ),
    ) {
        let text = format!("{prefix}{}", body.into_iter().collect::<String>());
        prop_assert_eq!(decode_hex(&text), decode_hex_bytewise(&text));
    }
}
