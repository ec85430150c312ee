//! Who sent a conditional call, as op-txproxy authenticated its callers:
//! an `X-Optimism-Signature: <address>:<signature>` header whose signature
//! is a secp256k1 signature over the EIP-191 hash of the request body
//! (`keccak256("\x19Ethereum Signed Message:\n" ‖ len ‖ body)`, go-ethereum's
//! `accounts.TextHash`), by the key of `<address>`.
//!
//! The address is 40 hex digits, the signature 130 (`r ‖ s ‖ v`), each
//! with or without `0x` (op-txproxy's own clients wrote the signature
//! without it); `v` is the recovery id, 0 or 1 as go-ethereum's
//! `crypto.Sign` writes it, and also 27 or 28 as wallets' `personal_sign`
//! does (op-txproxy refused those). Hex digits are case-insensitive.
//! Nothing else is accepted: no whitespace inside, no other length (where
//! op-txproxy's `HexToAddress` padded or cut an address of another length).
//!
//! One ECDSA recovery per verified header (about the cost of one sender
//! recovery); the header is refused before it when its shape is wrong.
//!
//! ```
//! # use txgate_conditional::caller::{verify, CallerError};
//! assert_eq!(verify(b"0x12:0x34", b"{}"), Err(CallerError::Malformed));
//! ```

use alloy_primitives::{Address, eip191_hash_message, keccak256};
use secp256k1::Message;
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};

/// The header that carries the caller's signature.
pub const HEADER: &str = "x-optimism-signature";

/// Why a caller's header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    /// Not `<40 hex>:<130 hex>` (each with or without `0x`).
    #[error("invalid authentication: expected <address>:<signature>")]
    Malformed,
    /// The signature does not recover to a key (bad `r`, `s` or `v`).
    #[error("invalid authentication: bad signature")]
    BadSignature,
    /// The signature is valid but by another key than the address named.
    #[error("invalid authentication: signer does not match the address")]
    Mismatch,
}

impl CallerError {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CallerError::Malformed => "malformed",
            CallerError::BadSignature => "bad_signature",
            CallerError::Mismatch => "mismatch",
        }
    }
}

/// The address that signed `body`, when `header` (the value of
/// [`HEADER`]) names it and carries its valid signature over the body.
pub fn verify(header: &[u8], body: &[u8]) -> Result<Address, CallerError> {
    let (address, signature) = parse(header)?;
    let signer = recover(&signature, &eip191_hash_message(body).0)?;
    if signer == address {
        Ok(signer)
    } else {
        Err(CallerError::Mismatch)
    }
}

/// The address and the 65-byte signature of a header.
fn parse(header: &[u8]) -> Result<(Address, [u8; 65]), CallerError> {
    let colon = header
        .iter()
        .position(|&b| b == b':')
        .ok_or(CallerError::Malformed)?;
    let (address, signature) = (&header[..colon], &header[colon + 1..]);
    let mut a = [0u8; 20];
    let mut s = [0u8; 65];
    decode_prefixed(address, &mut a)?;
    decode_prefixed(signature, &mut s)?;
    Ok((Address::from(a), s))
}

/// Exactly `2 × out.len()` hex digits, after an optional `0x`, into `out`.
fn decode_prefixed(text: &[u8], out: &mut [u8]) -> Result<(), CallerError> {
    let digits = text
        .strip_prefix(b"0x")
        .or_else(|| text.strip_prefix(b"0X"))
        .unwrap_or(text);
    if digits.len() != 2 * out.len() {
        return Err(CallerError::Malformed);
    }
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(())
}

fn nibble(c: u8) -> Result<u8, CallerError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(CallerError::Malformed),
    }
}

/// The header value a caller holding `key` sends with `body`
/// (`0x<address>:0x<r ‖ s ‖ v>`, `v` 0 or 1): what a bundler signs with,
/// and what the tests and benches use.
pub fn sign(key: &secp256k1::SecretKey, body: &[u8]) -> (Address, String) {
    let digest = eip191_hash_message(body);
    let (id, compact) = secp256k1::SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(digest.0), key)
        .serialize_compact();
    let public = key
        .public_key(secp256k1::SECP256K1)
        .serialize_uncompressed();
    let address = Address::from_slice(&keccak256(&public[1..])[12..]);
    let mut value = format!("{address}:0x");
    for byte in compact.iter().chain([&(i32::from(id) as u8)]) {
        value.push(char::from(HEX[usize::from(byte >> 4)]));
        value.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    (address, value)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The address whose key made `signature` (`r ‖ s ‖ v`) over `digest`.
/// Unlike a transaction's, a high `s` is taken: the signature names a
/// caller, and go-ethereum's recovery, which op-txproxy used, takes it.
fn recover(signature: &[u8; 65], digest: &[u8; 32]) -> Result<Address, CallerError> {
    let v = match signature[64] {
        v @ 0..=1 => v,
        v @ 27..=28 => v - 27,
        _ => return Err(CallerError::BadSignature),
    };
    let id = RecoveryId::try_from(i32::from(v)).map_err(|_| CallerError::BadSignature)?;
    let sig = RecoverableSignature::from_compact(&signature[..64], id)
        .map_err(|_| CallerError::BadSignature)?;
    let key = sig
        .recover(Message::from_digest(*digest))
        .map_err(|_| CallerError::BadSignature)?;
    let uncompressed = key.serialize_uncompressed();
    Ok(Address::from_slice(&keccak256(&uncompressed[1..])[12..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use secp256k1::SecretKey;

    /// A header signed by `key` over `body`, with recovery id `v + offset`.
    fn header(key: &SecretKey, body: &[u8], offset: u8) -> (Address, String) {
        let (address, value) = sign(key, body);
        let v = u8::from_str_radix(&value[value.len() - 2..], 16).unwrap() + offset;
        (address, format!("{}{v:02x}", &value[..value.len() - 2]))
    }

    fn key(n: u8) -> SecretKey {
        SecretKey::from_byte_array([n; 32]).unwrap()
    }

    #[test]
    fn a_signed_body_names_its_signer() {
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransactionConditional","params":[]}"#;
        for offset in [0, 27] {
            let (address, value) = header(&key(7), body, offset);
            assert_eq!(verify(value.as_bytes(), body), Ok(address));
            // Case of the hex digits, and the prefixes, do not matter.
            let upper = value.to_uppercase().replacen("0X", "0x", 2);
            assert_eq!(verify(upper.as_bytes(), body), Ok(address));
            let bare = value.replace("0x", "");
            assert_eq!(verify(bare.as_bytes(), body), Ok(address));
        }
    }

    #[test]
    fn another_body_or_address_is_refused() {
        let body = b"{\"a\":1}";
        let (_, value) = header(&key(7), body, 0);
        // The same signature over another body recovers someone else.
        assert_eq!(
            verify(value.as_bytes(), b"{\"a\":2}"),
            Err(CallerError::Mismatch)
        );
        let (other, _) = header(&key(8), body, 0);
        let claimed = format!("{other}{}", &value[42..]);
        assert_eq!(verify(claimed.as_bytes(), body), Err(CallerError::Mismatch));
    }

    #[test]
    fn shapes_and_signatures_that_cannot_verify() {
        let body = b"{}";
        let (address, value) = header(&key(9), body, 0);
        let sig = &value[45..];
        for bad in [
            String::new(),
            format!("{address}"),
            format!("{address}:"),
            format!("{}:0x{sig}", &value[2..41]),   // 39 digits
            format!("{address}:0x0x{sig}"),         // two prefixes
            format!("{address}:0x{}", &sig[..128]), // 64 bytes
            format!("{address}:0x{sig}00"),         // 66 bytes
            format!("{address} :0x{sig}"),          // space
            format!("{address}:0x{}zz", &sig[..128]), // not hex
            format!("{address}:0x{sig}:0x{sig}"),   // two signatures
        ] {
            assert_eq!(
                verify(bad.as_bytes(), body),
                Err(CallerError::Malformed),
                "{bad}"
            );
        }
        let v = |v: &str| format!("{address}:0x{}{v}", &sig[..128]);
        assert_eq!(
            verify(v("02").as_bytes(), body),
            Err(CallerError::BadSignature)
        );
        assert_eq!(
            verify(v("1d").as_bytes(), body),
            Err(CallerError::BadSignature)
        );
        let zero = format!("{address}:0x{}", "0".repeat(130));
        assert_eq!(
            verify(zero.as_bytes(), body),
            Err(CallerError::BadSignature)
        );
    }
}
