//! `aeges.v1.AegesService/VerifyTransaction`: the sequencer's pool plugin
//! asks about each transaction entering its pool.
//!
//! [`decode`] reads a request and checks every field txgate uses, so the
//! screening engine gets a [`PoolTx`] it can trust the shape of; anything
//! else is an [`Invalid`] with a short, stable reason (the answer is gRPC
//! `INVALID_ARGUMENT`, never a verdict). Fields txgate does not use (fees,
//! access list, blob hashes, code delegations) are decoded by prost and
//! not checked: the pool validated them.

use alloy_primitives::{Address, B256, U256};
use prost::Message;
use txgate_screen::PoolTx;

use crate::aeges_v1::{VerifyTransactionRequest, VerifyTransactionResponse};

/// The service's path on the wire.
pub const VERIFY_PATH: &str = "/aeges.v1.AegesService/VerifyTransaction";

/// Why a request is refused without a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Not a protobuf `VerifyTransactionRequest`.
    Malformed,
    /// No `transaction`.
    MissingTransaction,
    /// `hash` is not 32 bytes.
    Hash,
    /// `sender` is not 20 bytes.
    Sender,
    /// `to` is present and not 20 bytes.
    To,
    /// `value` is over 32 bytes.
    Value,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Invalid {}

impl Invalid {
    /// Every reason, for metric labels made up front.
    pub const ALL: [Invalid; 6] = [
        Invalid::Malformed,
        Invalid::MissingTransaction,
        Invalid::Hash,
        Invalid::Sender,
        Invalid::To,
        Invalid::Value,
    ];

    /// A short message for the caller (the gRPC status message).
    pub fn message(self) -> &'static str {
        match self {
            Invalid::Malformed => "not a VerifyTransactionRequest",
            Invalid::MissingTransaction => "transaction missing",
            Invalid::Hash => "hash must be 32 bytes",
            Invalid::Sender => "sender must be 20 bytes",
            Invalid::To => "to must be 20 bytes when present",
            Invalid::Value => "value must be at most 32 bytes",
        }
    }

    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed",
            Invalid::MissingTransaction => "missing_transaction",
            Invalid::Hash => "hash_length",
            Invalid::Sender => "sender_length",
            Invalid::To => "to_length",
            Invalid::Value => "value_length",
        }
    }
}

/// A decoded request: its event id, and the transaction it asks about.
#[derive(Debug, Clone)]
pub struct Request {
    /// To echo in the answer.
    pub event_id: u64,
    message: VerifyTransactionRequest,
}

impl Request {
    /// The transaction, checked by [`decode`].
    pub fn tx(&self) -> PoolTx<'_> {
        // `decode` checked every length below.
        let tx = self
            .message
            .transaction
            .as_ref()
            .unwrap_or_else(|| unreachable!("decode checked the transaction"));
        PoolTx {
            hash: B256::from_slice(&tx.hash),
            sender: Address::from_slice(&tx.sender),
            to: tx.to.as_deref().map(Address::from_slice),
            value: U256::from_be_slice(&tx.value),
            gas_limit: tx.gas_limit,
            payload: &tx.payload,
        }
    }
}

/// Reads one serialized `VerifyTransactionRequest` (the gRPC frame's
/// message, without its 5-byte prefix); `bytes` is borrowed, not copied,
/// by the byte fields.
pub fn decode(bytes: bytes::Bytes) -> Result<Request, Invalid> {
    let message = VerifyTransactionRequest::decode(bytes).map_err(|_| Invalid::Malformed)?;
    let tx = message
        .transaction
        .as_ref()
        .ok_or(Invalid::MissingTransaction)?;
    if tx.hash.len() != 32 {
        return Err(Invalid::Hash);
    }
    if tx.sender.len() != 20 {
        return Err(Invalid::Sender);
    }
    if tx.to.as_ref().is_some_and(|to| to.len() != 20) {
        return Err(Invalid::To);
    }
    if tx.value.len() > 32 {
        return Err(Invalid::Value);
    }
    Ok(Request {
        event_id: message.event_id,
        message,
    })
}

/// Longest serialized `VerifyTransactionResponse`: two tags, a 10-byte
/// varint and a bool.
pub const MAX_RESPONSE_BYTES: usize = 13;

/// A `VerifyTransactionResponse`, serialized into `out`; returns its
/// length (at most [`MAX_RESPONSE_BYTES`]). No allocation.
pub fn encode_into(event_id: u64, denied: bool, out: &mut [u8; MAX_RESPONSE_BYTES]) -> usize {
    let mut rest = &mut out[..];
    // Cannot fail: the buffer holds the longest message.
    let _ = VerifyTransactionResponse { event_id, denied }.encode(&mut rest);
    MAX_RESPONSE_BYTES - rest.len()
}

/// A `VerifyTransactionResponse`, serialized.
pub fn encode(event_id: u64, denied: bool) -> Vec<u8> {
    let mut out = [0u8; MAX_RESPONSE_BYTES];
    let n = encode_into(event_id, denied, &mut out);
    out[..n].to_vec()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::aeges_v1::{AccessListEntry, Transaction};

    fn tx() -> Transaction {
        Transaction {
            hash: vec![0x11; 32].into(),
            sender: vec![0x22; 20].into(),
            to: Some(vec![0x33; 20].into()),
            value: {
                let mut v = vec![0u8; 32];
                v[31] = 7;
                v.into()
            },
            nonce: 3,
            r#type: 2,
            chain_id: Some(1),
            payload: vec![0xa9, 0x05, 0x9c, 0xbb, 1, 2, 3].into(),
            gas_limit: 90_000,
            max_fee_per_gas: Some(10),
            max_priority_fee_per_gas: Some(1),
            access_list: vec![AccessListEntry {
                address: vec![0x44; 20].into(),
                storage_keys: vec![vec![0x55; 32].into()],
            }],
            ..Transaction::default()
        }
    }

    fn request(tx: Option<Transaction>) -> bytes::Bytes {
        VerifyTransactionRequest {
            event_id: 42,
            transaction: tx,
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn a_request_reads_into_the_fields_the_engine_uses() {
        let r = decode(request(Some(tx()))).unwrap();
        assert_eq!(r.event_id, 42);
        let t = r.tx();
        assert_eq!(t.hash, B256::repeat_byte(0x11));
        assert_eq!(t.sender, Address::repeat_byte(0x22));
        assert_eq!(t.to, Some(Address::repeat_byte(0x33)));
        assert_eq!(t.value, U256::from(7));
        assert_eq!(t.gas_limit, 90_000);
        assert_eq!(t.payload, [0xa9, 0x05, 0x9c, 0xbb, 1, 2, 3]);
        // A creation, a zero value sent as no bytes, a short value.
        let mut creation = tx();
        creation.to = None;
        creation.value = bytes::Bytes::new();
        let r = decode(request(Some(creation))).unwrap();
        assert_eq!((r.tx().to, r.tx().value), (None, U256::ZERO));
        let mut short = tx();
        short.value = vec![1, 0].into();
        assert_eq!(
            decode(request(Some(short))).unwrap().tx().value,
            U256::from(256)
        );
    }

    #[test]
    fn every_bad_field_has_its_reason() {
        type Change = fn(&mut Transaction);
        let cases: [(Change, Invalid); 7] = [
            (|t| t.hash = vec![1; 31].into(), Invalid::Hash),
            (|t| t.hash = bytes::Bytes::new(), Invalid::Hash),
            (|t| t.sender = vec![1; 32].into(), Invalid::Sender),
            (|t| t.to = Some(vec![1; 19].into()), Invalid::To),
            (|t| t.to = Some(bytes::Bytes::new()), Invalid::To),
            (|t| t.value = vec![1; 33].into(), Invalid::Value),
            (|t| t.sender = bytes::Bytes::new(), Invalid::Sender),
        ];
        for (change, want) in cases {
            let mut t = tx();
            change(&mut t);
            assert_eq!(decode(request(Some(t))).unwrap_err(), want, "{want}");
        }
        assert_eq!(
            decode(request(None)).unwrap_err(),
            Invalid::MissingTransaction
        );
        // Not protobuf: a truncated varint, a length past the end.
        for garbage in [&[0x08u8, 0xff][..], &[0x12, 0x7f, 0x01][..]] {
            assert_eq!(
                decode(bytes::Bytes::copy_from_slice(garbage)).unwrap_err(),
                Invalid::Malformed
            );
        }
        let labels: Vec<&str> = Invalid::ALL.iter().map(|i| i.reason()).collect();
        assert_eq!(labels.len(), 6);
    }

    #[test]
    fn the_answer_echoes_the_event_id() {
        let bytes = encode(u64::MAX, true);
        assert_eq!(bytes.len(), MAX_RESPONSE_BYTES);
        assert_eq!(
            bytes,
            VerifyTransactionResponse {
                event_id: u64::MAX,
                denied: true
            }
            .encode_to_vec()
        );
        let back = VerifyTransactionResponse::decode(&bytes[..]).unwrap();
        assert_eq!((back.event_id, back.denied), (u64::MAX, true));
        // proto3: a zero id and `false` are not on the wire at all.
        assert!(encode(0, false).is_empty());
    }
}
