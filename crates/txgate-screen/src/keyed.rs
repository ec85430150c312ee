//! A fast keyed hasher for keys that are (mostly) keccak outputs: tx hashes,
//! fingerprints, addresses.
//!
//! The keys are chosen by whoever signs a transaction, and an attacker can
//! grind them, so the identity of a few bytes is not enough: each map gets a
//! random seed and every input byte goes through a folded 64×64→128
//! multiply. Far cheaper than SipHash on 32 bytes.

use std::hash::{BuildHasher, Hasher};

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a).wrapping_mul(u128::from(b));
    (product as u64) ^ ((product >> 64) as u64)
}

/// Per-map random seeds.
#[derive(Debug, Clone, Copy)]
pub struct KeyState {
    seed: u64,
}

impl KeyState {
    /// A seed from the operating system's randomness, unknown to whoever
    /// chooses the keys. Maps are made at start and on rare rebuilds, so
    /// the system call is off the request path.
    ///
    /// Without an entropy source (which Linux always has: `getrandom(2)`,
    /// else `/dev/urandom`) there is no safe seed, and a guessable one
    /// would let an attacker pile keys into one bucket: refuse to go on.
    pub fn new() -> KeyState {
        match getrandom::u64() {
            Ok(seed) => KeyState::with_seed(seed),
            Err(e) => panic!("no entropy source for hash seeds: {e}"),
        }
    }

    /// A fixed seed (tests and benches that need reproducible layouts).
    pub const fn with_seed(seed: u64) -> KeyState {
        KeyState { seed }
    }

    /// The 64-bit hash of `bytes`.
    #[inline]
    pub fn hash_bytes(&self, bytes: &[u8]) -> u64 {
        let mut hasher = self.build_hasher();
        hasher.write(bytes);
        hasher.finish()
    }
}

impl Default for KeyState {
    fn default() -> Self {
        KeyState::new()
    }
}

impl BuildHasher for KeyState {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { state: self.seed }
    }
}

/// See [`KeyState`].
#[derive(Debug, Clone, Copy)]
pub struct KeyHasher {
    state: u64,
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(16);
        for chunk in &mut chunks {
            let (a, b) = chunk.split_at(8);
            let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
            let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
            self.state = fold(a ^ self.state ^ K0, b ^ K1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut tail = [0u8; 16];
            tail[..rest.len()].copy_from_slice(rest);
            let a = u64::from_le_bytes([
                tail[0], tail[1], tail[2], tail[3], tail[4], tail[5], tail[6], tail[7],
            ]);
            let b = u64::from_le_bytes([
                tail[8], tail[9], tail[10], tail[11], tail[12], tail[13], tail[14], tail[15],
            ]);
            self.state = fold(a ^ self.state ^ K1, b ^ K0 ^ rest.len() as u64);
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        // Length prefixes of slices: fold them in too.
        self.state = fold(self.state ^ n as u64, K1);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold(self.state, K0 ^ K1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_and_inputs_spread() {
        let (a, b) = (KeyState::new(), KeyState::new());
        assert_ne!(a.hash_bytes(&[1; 32]), b.hash_bytes(&[1; 32]));
        assert_ne!(a.hash_bytes(&[1; 32]), a.hash_bytes(&[2; 32]));
        // A change in the last byte moves the low bits too (bucket index).
        let mut key = [7u8; 32];
        let h1 = a.hash_bytes(&key);
        key[31] ^= 1;
        let h2 = a.hash_bytes(&key);
        assert_ne!(h1 & 0xffff, h2 & 0xffff);
    }
}
