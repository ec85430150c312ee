//! Decoding a raw transaction parameter: hex, then the EIP-2718 envelope.
//!
//! Every envelope the upstream accepts: legacy (with and without EIP-155),
//! EIP-2930, EIP-1559, EIP-4844 (plain, and the network form with blobs),
//! EIP-7702. What screening needs is copied out once into [`Tx`]; the
//! envelope itself is dropped.

use alloy_consensus::transaction::RlpEcdsaDecodableTx;
use alloy_consensus::{
    SignableTransaction, Transaction, TxEip1559, TxEip2930, TxEip4844Variant, TxEip7702, TxLegacy,
};
use alloy_primitives::private::alloy_rlp::{Error as RlpError, Header};
use alloy_primitives::{Address, B256, Bytes, Signature, U256, keccak256};

/// What screening needs of one signed transaction.
///
/// The signing hash is not computed here: it costs an RLP re-encoding and a
/// keccak, and only a sender-cache miss needs it ([`Tx::signature_hash`]).
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
    /// `r ‖ s`, big-endian.
    pub signature: [u8; 64],
    /// Recovery bit.
    pub y_parity: bool,
    unsigned: Unsigned,
}

/// The decoded transaction body, kept for the signing hash.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unsigned {
    Legacy(TxLegacy),
    Eip2930(TxEip2930),
    Eip1559(TxEip1559),
    Eip4844(TxEip4844Variant),
    Eip7702(TxEip7702),
}

impl Tx {
    /// The hash the sender signed (an RLP encoding and a keccak).
    pub fn signature_hash(&self) -> B256 {
        match &self.unsigned {
            Unsigned::Legacy(tx) => tx.signature_hash(),
            Unsigned::Eip2930(tx) => tx.signature_hash(),
            Unsigned::Eip1559(tx) => tx.signature_hash(),
            Unsigned::Eip4844(tx) => tx.signature_hash(),
            Unsigned::Eip7702(tx) => tx.signature_hash(),
        }
    }
}

/// Why a raw transaction parameter is refused (-32602).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not `0x`-prefixed even-length hex.
    #[error("invalid hex: raw transaction must be 0x-prefixed hex")]
    BadHex,
    /// No bytes after `0x`.
    #[error("empty raw transaction")]
    Empty,
    /// A type byte no upstream accepts.
    #[error("unknown transaction type 0x{0:02x}")]
    UnknownType(u8),
    /// The RLP does not decode as that type.
    #[error("invalid RLP: {0}")]
    BadRlp(&'static str),
    /// Bytes left over after the transaction.
    #[error("invalid RLP: trailing bytes after the transaction")]
    TrailingBytes,
    /// A chain id outside the allow-list.
    #[error("{}", wrong_chain_id(*got))]
    WrongChainId {
        /// The transaction's chain id (`None`: pre-EIP-155, no chain id).
        got: Option<u64>,
    },
}

fn wrong_chain_id(got: Option<u64>) -> String {
    match got {
        Some(id) => format!("chain id {id} is not accepted here"),
        None => "transactions without a chain id (pre-EIP-155) are not accepted here".into(),
    }
}

/// Decodes `0x`-prefixed hex into bytes. The digits go through
/// `const-hex` (SIMD where the CPU has it), which took about a sixth off
/// refusing a recently failed transaction against a table decoder.
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
    // Sized for the digits as given: were they to start with a second
    // `0x`, which const-hex would strip, the lengths differ and it fails.
    let mut out = vec![0u8; digits.len() / 2];
    const_hex::decode_to_slice(digits, &mut out).map_err(|_| DecodeError::BadHex)?;
    Ok(out)
}

/// The transaction hash straight from the raw bytes, without decoding: the
/// keccak of the bytes, except for an EIP-4844 transaction in its network
/// form, whose hash covers the inner transaction only. Fast-reject runs on
/// this, before any decoding or ECDSA. Garbage gets a hash too; decoding
/// refuses it later.
pub fn tx_hash(raw: &[u8]) -> B256 {
    if raw.first() == Some(&3)
        && let Some(inner) = blob_network_inner(&raw[1..])
    {
        let mut preimage = Vec::with_capacity(1 + inner.len());
        preimage.push(3);
        preimage.extend_from_slice(inner);
        return keccak256(preimage);
    }
    keccak256(raw)
}

/// In `rlp([tx, blobs, commitments, proofs])`, the whole RLP item `tx`, if
/// the payload is that network form (its first element is a list).
fn blob_network_inner(payload: &[u8]) -> Option<&[u8]> {
    let mut buf = payload;
    let outer = Header::decode(&mut buf).ok()?;
    if !outer.list {
        return None;
    }
    let start = buf;
    let inner = Header::decode(&mut buf).ok()?;
    if !inner.list {
        return None;
    }
    let header_len = start.len() - buf.len();
    start.get(..header_len + inner.payload_length)
}

/// Decodes one EIP-2718 transaction from raw bytes.
pub fn decode(raw: &[u8]) -> Result<Tx, DecodeError> {
    decode_with_hash(raw, tx_hash(raw))
}

/// Decodes one EIP-2718 transaction whose hash ([`tx_hash`]) is known.
pub fn decode_with_hash(raw: &[u8], hash: B256) -> Result<Tx, DecodeError> {
    let Some(&first) = raw.first() else {
        return Err(DecodeError::Empty);
    };
    // Typed envelopes start with a type byte below 0x7f; legacy with a list
    // header (>= 0xc0). Anything else is no transaction at all.
    if first > 0x7f && first < 0xc0 {
        return Err(DecodeError::BadRlp("not a transaction envelope"));
    }
    // Type 0 is legacy, which has no envelope: a 0x00 byte in front of a
    // legacy list is no transaction (nodes refuse it, and its hash would
    // not be the legacy transaction's). Found by the differential fuzz
    // target against alloy.
    if first == 0 {
        return Err(DecodeError::UnknownType(0));
    }
    let (ty, mut buf) = if first >= 0xc0 {
        (0, raw)
    } else {
        (first, &raw[1..])
    };
    let buf = &mut buf;
    let tx = match ty {
        0 => body(
            TxLegacy::rlp_decode_with_signature(buf),
            hash,
            0,
            Unsigned::Legacy,
        ),
        1 => body(
            TxEip2930::rlp_decode_with_signature(buf),
            hash,
            1,
            Unsigned::Eip2930,
        ),
        2 => body(
            TxEip1559::rlp_decode_with_signature(buf),
            hash,
            2,
            Unsigned::Eip1559,
        ),
        3 => body(
            TxEip4844Variant::rlp_decode_with_signature(buf),
            hash,
            3,
            Unsigned::Eip4844,
        ),
        4 => body(
            TxEip7702::rlp_decode_with_signature(buf),
            hash,
            4,
            Unsigned::Eip7702,
        ),
        other => return Err(DecodeError::UnknownType(other)),
    }
    .map_err(|e| match e {
        RlpError::UnexpectedLength => DecodeError::TrailingBytes,
        e => DecodeError::BadRlp(rlp_reason(&e)),
    })?;
    if !buf.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(tx)
}

fn body<T>(
    decoded: Result<(T, Signature), RlpError>,
    hash: B256,
    ty: u8,
    wrap: fn(T) -> Unsigned,
) -> Result<Tx, RlpError>
where
    T: Transaction,
{
    let (tx, sig) = decoded?;
    let mut signature = [0u8; 64];
    signature[..32].copy_from_slice(&sig.r().to_be_bytes::<32>());
    signature[32..].copy_from_slice(&sig.s().to_be_bytes::<32>());
    Ok(Tx {
        hash,
        ty,
        chain_id: tx.chain_id(),
        to: tx.to(),
        input: tx.input().clone(),
        value: tx.value(),
        gas_limit: tx.gas_limit(),
        signature,
        y_parity: sig.v(),
        unsigned: wrap(tx),
    })
}

fn rlp_reason(e: &RlpError) -> &'static str {
    match e {
        RlpError::Overflow => "integer overflow",
        RlpError::LeadingZero => "leading zero",
        RlpError::InputTooShort => "input too short",
        RlpError::NonCanonicalSingleByte | RlpError::NonCanonicalSize => "non-canonical encoding",
        RlpError::UnexpectedList => "unexpected list",
        RlpError::UnexpectedString => "unexpected string",
        RlpError::ListLengthMismatch { .. } => "list length mismatch",
        _ => "malformed transaction",
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
