//! Sender recovery with libsecp256k1.
//!
//! High-s signatures are refused (EIP-2): every upstream rejects them, so
//! recovering one would waste an ECDSA and forwarding it would waste the
//! upstream's.

use alloy_primitives::{Address, keccak256};
use secp256k1::Message;
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};

use crate::tx::Tx;

/// Half the secp256k1 group order, big-endian: an `s` above it is high-s.
const HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x5d, 0x57, 0x6e, 0x73, 0x57, 0xa4, 0x50, 0x1d, 0xdf, 0xe9, 0x2f, 0x46, 0x68, 0x1b, 0x20, 0xa0,
];

/// Why a signature is refused (-32602).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `s` in the upper half of the curve order.
    #[error("invalid signature: s is in the upper half of the curve order")]
    HighS,
    /// `r` or `s` zero or out of range, or no key recovers.
    #[error("invalid signature")]
    Invalid,
}

/// Recovers the sender of `tx`.
pub fn recover_sender(tx: &Tx) -> Result<Address, SignatureError> {
    recover(&tx.signature, tx.y_parity, tx.signature_hash().as_ref())
}

/// Recovers the address that signed `digest` with `r ‖ s` and `y_parity`.
pub fn recover(
    signature: &[u8; 64],
    y_parity: bool,
    digest: &[u8; 32],
) -> Result<Address, SignatureError> {
    if signature[32..] > HALF_ORDER[..] {
        return Err(SignatureError::HighS);
    }
    let id = RecoveryId::try_from(i32::from(y_parity)).map_err(|_| SignatureError::Invalid)?;
    let sig =
        RecoverableSignature::from_compact(signature, id).map_err(|_| SignatureError::Invalid)?;
    let key = sig
        .recover(Message::from_digest(*digest))
        .map_err(|_| SignatureError::Invalid)?;
    let uncompressed = key.serialize_uncompressed();
    let hash = keccak256(&uncompressed[1..]);
    Ok(Address::from_slice(&hash[12..]))
}
