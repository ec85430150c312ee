//! Decoding a raw transaction parameter: hex, then the EIP-2718 envelope.
//!
//! Every envelope the upstream accepts: legacy (with and without EIP-155),
//! EIP-2930, EIP-1559, EIP-4844 (plain, and the network form with blobs),
//! EIP-7702. What screening needs is copied out once into [`Tx`]; the
//! envelope itself is dropped.

use std::fmt;

use alloy_consensus::{Signed, Transaction, TxEnvelope};
use alloy_eips::eip2718::{Decodable2718, Eip2718Error};
use alloy_primitives::{Address, B256, Bytes, U256};

/// What screening needs of one signed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tx {
    /// The transaction hash (of the execution form, without blobs).
    pub hash: B256,
    /// EIP-2718 type (0 for legacy).
    pub ty: u8,
    /// Chain id; `None` for a pre-EIP-155 legacy transaction.
    pub chain_id: Option<u64>,
    /// Call target; `None` for a contract creation.
    pub to: Option<Address>,
    /// Calldata.
    pub input: Bytes,
    /// Value sent.
    pub value: U256,
    /// Gas limit.
    pub gas_limit: u64,
    /// The hash the sender signed.
    pub signature_hash: B256,
    /// `r ‖ s`, big-endian.
    pub signature: [u8; 64],
    /// Recovery bit.
    pub y_parity: bool,
}

/// Why a raw transaction parameter is refused (-32602).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not `0x`-prefixed even-length hex.
    BadHex,
    /// No bytes after `0x`.
    Empty,
    /// A type byte no upstream accepts.
    UnknownType(u8),
    /// The RLP does not decode as that type.
    BadRlp(&'static str),
    /// Bytes left over after the transaction.
    TrailingBytes,
    /// A chain id outside the allow-list.
    WrongChainId {
        /// The transaction's chain id (`None`: pre-EIP-155, no chain id).
        got: Option<u64>,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadHex => {
                f.write_str("invalid hex: raw transaction must be 0x-prefixed hex")
            }
            DecodeError::Empty => f.write_str("empty raw transaction"),
            DecodeError::UnknownType(t) => write!(f, "unknown transaction type 0x{t:02x}"),
            DecodeError::BadRlp(why) => write!(f, "invalid RLP: {why}"),
            DecodeError::TrailingBytes => {
                f.write_str("invalid RLP: trailing bytes after the transaction")
            }
            DecodeError::WrongChainId { got: Some(id) } => {
                write!(f, "chain id {id} is not accepted here")
            }
            DecodeError::WrongChainId { got: None } => {
                f.write_str("transactions without a chain id (pre-EIP-155) are not accepted here")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes `0x`-prefixed hex into bytes.
pub fn decode_hex(text: &str) -> Result<Vec<u8>, DecodeError> {
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
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    digits
        .as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or(DecodeError::BadHex)
}

/// Decodes one EIP-2718 transaction from raw bytes.
pub fn decode(raw: &[u8]) -> Result<Tx, DecodeError> {
    let Some(&first) = raw.first() else {
        return Err(DecodeError::Empty);
    };
    // Typed envelopes start with a type byte below 0x7f; legacy with a list
    // header (>= 0xc0). Anything else is no transaction at all.
    if first > 0x7f && first < 0xc0 {
        return Err(DecodeError::BadRlp("not a transaction envelope"));
    }
    if first <= 0x7f && !matches!(first, 1..=4) {
        return Err(DecodeError::UnknownType(first));
    }
    let envelope = TxEnvelope::decode_2718_exact(raw).map_err(|e| match e {
        Eip2718Error::UnexpectedType(t) => DecodeError::UnknownType(t),
        Eip2718Error::RlpError(alloy_primitives::private::alloy_rlp::Error::UnexpectedLength) => {
            DecodeError::TrailingBytes
        }
        Eip2718Error::RlpError(e) => DecodeError::BadRlp(rlp_reason(&e)),
        _ => DecodeError::BadRlp("malformed transaction"),
    })?;
    let hash = *envelope.tx_hash();
    Ok(match &envelope {
        TxEnvelope::Legacy(signed) => summarize(signed, hash, 0),
        TxEnvelope::Eip2930(signed) => summarize(signed, hash, 1),
        TxEnvelope::Eip1559(signed) => summarize(signed, hash, 2),
        TxEnvelope::Eip4844(signed) => summarize(signed, hash, 3),
        TxEnvelope::Eip7702(signed) => summarize(signed, hash, 4),
    })
}

fn rlp_reason(e: &alloy_primitives::private::alloy_rlp::Error) -> &'static str {
    use alloy_primitives::private::alloy_rlp::Error;
    match e {
        Error::Overflow => "integer overflow",
        Error::LeadingZero => "leading zero",
        Error::InputTooShort => "input too short",
        Error::NonCanonicalSingleByte | Error::NonCanonicalSize => "non-canonical encoding",
        Error::UnexpectedList => "unexpected list",
        Error::UnexpectedString => "unexpected string",
        Error::ListLengthMismatch { .. } => "list length mismatch",
        _ => "malformed transaction",
    }
}

fn summarize<T>(signed: &Signed<T>, hash: B256, ty: u8) -> Tx
where
    T: Transaction + alloy_consensus::SignableTransaction<alloy_primitives::Signature>,
{
    let tx = signed.tx();
    let sig = signed.signature();
    let mut signature = [0u8; 64];
    signature[..32].copy_from_slice(&sig.r().to_be_bytes::<32>());
    signature[32..].copy_from_slice(&sig.s().to_be_bytes::<32>());
    Tx {
        hash,
        ty,
        chain_id: tx.chain_id(),
        to: tx.to(),
        input: tx.input().clone(),
        value: tx.value(),
        gas_limit: tx.gas_limit(),
        signature_hash: signed.signature_hash(),
        signature,
        y_parity: sig.v(),
    }
}

/// Checks the chain id against an allow-list; an empty list accepts all.
pub fn check_chain_id(tx: &Tx, allowed: &[u64]) -> Result<(), DecodeError> {
    if allowed.is_empty() || tx.chain_id.is_some_and(|id| allowed.contains(&id)) {
        Ok(())
    } else {
        Err(DecodeError::WrongChainId { got: tx.chain_id })
    }
}
