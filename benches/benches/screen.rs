//! Screening cost per transaction, as ratios to one libsecp256k1 recovery
//! measured in the same run (the machines are noisy; absolute times are
//! not comparable across runs).
//!
//! Baselines: raw libsecp256k1 recovery of a 1559 transaction's sender, and
//! alloy's default (k256) recovery of the same transaction.

#![allow(missing_docs)]

use std::hint::black_box;

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Signature, TxKind, U256, keccak256};
use criterion::{Criterion, criterion_group, criterion_main};
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_screen::{Fingerprint, decode, decode_hex, recover_sender};

fn signed_transfer() -> (TxEnvelope, Vec<u8>) {
    let key = SecretKey::from_byte_array([0x42; 32]).unwrap_or_else(|_| unreachable!());
    let mut input = vec![0xa9, 0x05, 0x9c, 0xbb];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(&[0x11; 20]);
    input.extend_from_slice(&U256::from(1000u64).to_be_bytes::<32>());
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce: 7,
        gas_limit: 65_000,
        max_fee_per_gas: 3_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(Address::repeat_byte(0x5f)),
        value: U256::ZERO,
        access_list: Default::default(),
        input: input.into(),
    };
    let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), &key);
    let (id, compact) = sig.serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    let envelope: TxEnvelope = tx.into_signed(signature).into();
    let raw = envelope.encoded_2718();
    (envelope, raw)
}

fn bench(c: &mut Criterion) {
    let (envelope, raw) = signed_transfer();
    let hex = format!(
        "0x{}",
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let tx = decode(&raw).unwrap_or_else(|e| panic!("{e}"));

    let mut g = c.benchmark_group("screen");
    g.bench_function("baseline_libsecp256k1_recover", |b| {
        b.iter(|| recover_sender(black_box(&tx)))
    });
    g.bench_function("baseline_alloy_k256_recover", |b| {
        b.iter(|| black_box(&envelope).recover_signer())
    });
    g.bench_function("keccak256_32_bytes", |b| {
        b.iter(|| keccak256(black_box([7u8; 32])))
    });
    g.bench_function("decode_hex_and_envelope", |b| {
        b.iter(|| decode(&decode_hex(black_box(&hex)).unwrap_or_default()))
    });
    g.bench_function("fingerprint", |b| {
        b.iter(|| Fingerprint::of(black_box(&tx)))
    });
    g.bench_function("decode_recover_fingerprint", |b| {
        b.iter(|| {
            let bytes = decode_hex(black_box(&hex)).unwrap_or_default();
            let tx = decode(&bytes).ok()?;
            let sender = recover_sender(&tx).ok()?;
            Some((sender, Fingerprint::of(&tx)))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
