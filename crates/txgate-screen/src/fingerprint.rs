//! Transaction fingerprints: what stays the same when an attacker resubmits
//! the same payload from fresh EOAs with other nonces, tips and small
//! changes of value or gas.
//!
//! `fingerprint = keccak256(target ‖ selector ‖ arg_hash16 ‖ value_bucket
//! (u64 BE) ‖ gas_bucket (u32 BE))`. Nonce, sender, gas price and tips are
//! not in it; value and gas limit enter only by bucket. Contract creations
//! have no fingerprint (they bypass fingerprint screening).

use alloy_primitives::{Address, B256, U256, keccak256};

use crate::tx::Tx;

/// Gas limit per gas bucket.
pub const GAS_BUCKET_SIZE: u64 = 50_000;

/// A fingerprint and the parts it hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// The fingerprint itself.
    pub hash: B256,
    /// Call target.
    pub target: Address,
    /// First four bytes of calldata (zero-padded when shorter).
    pub selector: [u8; 4],
    /// First 16 bytes of keccak256 of the arguments.
    pub arg_hash16: [u8; 16],
    /// [`value_bucket`] of the value.
    pub value_bucket: u64,
    /// [`gas_bucket`] of the gas limit.
    pub gas_bucket: u32,
}

/// `bit_len(value) / 10 + 1`, and 0 for a zero value: about one bucket per
/// factor of 1024.
pub fn value_bucket(value: U256) -> u64 {
    if value.is_zero() {
        0
    } else {
        value.bit_len() as u64 / 10 + 1
    }
}

/// `gas_limit / 50 000`, saturating.
pub fn gas_bucket(gas_limit: u64) -> u32 {
    u32::try_from(gas_limit / GAS_BUCKET_SIZE).unwrap_or(u32::MAX)
}

impl Fingerprint {
    /// The fingerprint of a call; `None` for a contract creation.
    pub fn of(tx: &Tx) -> Option<Fingerprint> {
        let target = tx.to?;
        Some(Fingerprint::from_parts(
            target,
            &tx.input,
            tx.value,
            tx.gas_limit,
        ))
    }

    /// The fingerprint of a call to `target` with `input`.
    pub fn from_parts(target: Address, input: &[u8], value: U256, gas_limit: u64) -> Fingerprint {
        let mut selector = [0u8; 4];
        // Calldata shorter than a selector is hashed whole as arguments too,
        // so that distinct short inputs keep distinct fingerprints.
        let args = if input.len() >= 4 {
            selector.copy_from_slice(&input[..4]);
            &input[4..]
        } else {
            selector[..input.len()].copy_from_slice(input);
            input
        };
        let mut arg_hash16 = [0u8; 16];
        arg_hash16.copy_from_slice(&keccak256(args)[..16]);
        let value_bucket = value_bucket(value);
        let gas_bucket = gas_bucket(gas_limit);
        let mut preimage = [0u8; 20 + 4 + 16 + 8 + 4];
        preimage[..20].copy_from_slice(target.as_slice());
        preimage[20..24].copy_from_slice(&selector);
        preimage[24..40].copy_from_slice(&arg_hash16);
        preimage[40..48].copy_from_slice(&value_bucket.to_be_bytes());
        preimage[48..52].copy_from_slice(&gas_bucket.to_be_bytes());
        Fingerprint {
            hash: keccak256(preimage),
            target,
            selector,
            arg_hash16,
            value_bucket,
            gas_bucket,
        }
    }
}
