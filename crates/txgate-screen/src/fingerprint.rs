//! Transaction fingerprints: what stays the same when an attacker resubmits
//! the same payload from fresh EOAs with other nonces, tips and small
//! changes of value or gas.
//!
//! `fingerprint = keccak256(target ‖ selector ‖ arg_hash16 ‖ value_bucket
//! (u64 BE) ‖ gas_bucket (u32 BE))`. Nonce, sender, gas price and tips are
//! not in it; value and gas limit enter only by bucket. Contract creations
//! have no fingerprint (they bypass fingerprint screening).
//!
//! The rule is the reference proxy's, byte for byte, because a sidecar of
//! the reference protocol sends the hash and txgate bans by it: the
//! selector is the first four bytes of calldata, zero-padded when shorter;
//! `arg_hash16` is the first 16 bytes of keccak256 of the calldata after
//! the selector, and **16 zero bytes when the calldata has 4 bytes or
//! fewer**; the gas bucket is `gas_limit / 50 000` **truncated to 32 bits**.
//! (Before snapshot format 2, txgate hashed short calldata whole and
//! saturated the gas bucket: see [`crate::snapshot`].)

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

/// `gas_limit / 50 000`, truncated to its low 32 bits (the reference's
/// rule; it differs from saturation only from 2³²·50 000 gas on).
pub fn gas_bucket(gas_limit: u64) -> u32 {
    (gas_limit / GAS_BUCKET_SIZE) as u32
}

/// The first 16 bytes of keccak256 of the arguments (calldata after the
/// selector); 16 zero bytes when the calldata has 4 bytes or fewer.
pub fn arg_hash16(input: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    if input.len() > 4 {
        out.copy_from_slice(&keccak256(&input[4..])[..16]);
    }
    out
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
        let n = input.len().min(4);
        selector[..n].copy_from_slice(&input[..n]);
        Fingerprint::from_components(
            target,
            selector,
            arg_hash16(input),
            value_bucket(value),
            gas_bucket(gas_limit),
        )
    }

    /// The fingerprint of its components (already bucketed and hashed).
    pub fn from_components(
        target: Address,
        selector: [u8; 4],
        arg_hash16: [u8; 16],
        value_bucket: u64,
        gas_bucket: u32,
    ) -> Fingerprint {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's rule, written out from its definition: selector
    /// zero-padded, arguments hashed only past a 4-byte selector, gas
    /// bucket truncated to 32 bits.
    fn reference(target: Address, input: &[u8], value: U256, gas_limit: u64) -> B256 {
        let mut selector = [0u8; 4];
        for (i, b) in input.iter().take(4).enumerate() {
            selector[i] = *b;
        }
        let arg = if input.len() <= 4 {
            [0u8; 16]
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&keccak256(&input[4..]).0[..16]);
            a
        };
        let vb: u64 = if value.is_zero() {
            0
        } else {
            (value.bit_len() as u64 / 10 + 1).min(255)
        };
        let gb = (gas_limit / 50_000) as u32;
        let mut buf = Vec::new();
        buf.extend_from_slice(target.as_slice());
        buf.extend_from_slice(&selector);
        buf.extend_from_slice(&arg);
        buf.extend_from_slice(&vb.to_be_bytes());
        buf.extend_from_slice(&gb.to_be_bytes());
        keccak256(buf)
    }

    #[test]
    fn agrees_with_the_reference_byte_for_byte() {
        let target = Address::repeat_byte(0xde);
        let calldata: Vec<u8> = (0u8..36).map(|i| i.wrapping_mul(37) | 1).collect();
        let gas = [
            0,
            21_000,
            49_999,
            50_000,
            1 << 40,
            (1u64 << 32) * 50_000,
            u64::MAX,
        ];
        let values = [U256::ZERO, U256::ONE, U256::from(1023u64), U256::MAX];
        for len in [0usize, 3, 4, 5, 36] {
            for g in gas {
                for v in values {
                    let fp = Fingerprint::from_parts(target, &calldata[..len], v, g);
                    assert_eq!(
                        fp.hash,
                        reference(target, &calldata[..len], v, g),
                        "{len} {g} {v}"
                    );
                }
            }
        }
        // Short calldata: no argument hash at all.
        let fp = Fingerprint::from_parts(target, &[0xd0, 0xe3, 0x0d], U256::ZERO, 30_000);
        assert_eq!(fp.arg_hash16, [0u8; 16]);
        assert_eq!(fp.selector, [0xd0, 0xe3, 0x0d, 0]);
        // A huge gas limit wraps like the reference's bucket.
        assert_eq!(gas_bucket((1u64 << 32) * 50_000), 0);
        assert_eq!(gas_bucket(u64::MAX), (u64::MAX / 50_000) as u32);
    }

    #[test]
    fn components_rebuild_the_same_fingerprint() {
        let fp =
            Fingerprint::from_parts(Address::repeat_byte(3), &[9; 68], U256::from(5u64), 90_000);
        let again = Fingerprint::from_components(
            fp.target,
            fp.selector,
            fp.arg_hash16,
            fp.value_bucket,
            fp.gas_bucket,
        );
        assert_eq!(again, fp);
    }
}
