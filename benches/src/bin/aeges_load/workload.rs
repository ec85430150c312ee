//! What the pool asks: its transactions (a tenth with banned calldata),
//! framed as gRPC sends them, and the failure reports that ban them.

use alloy_primitives::{Address, U256, hex, keccak256};
use bytes::Bytes;
use prost::Message;
use serde_json::json;
use txgate_proto::aeges_v1::{Transaction, VerifyTransactionRequest};

/// Where honest calls go.
const TARGET: Address = Address::repeat_byte(0x5f);
/// Where banned calldata goes.
pub(crate) const BAD_TARGET: Address = Address::repeat_byte(0x6e);
/// Every transaction's gas limit.
pub(crate) const GAS: u64 = 90_000;
/// Banned calldata variants (and reports posted).
pub(crate) const BANNED: u64 = 1000;

/// A 100-byte payload; banned calldata goes to its own target.
pub(crate) fn payload(n: u64) -> Vec<u8> {
    let mut p = vec![0xa9, 0x05, 0x9c, 0xbb];
    p.extend_from_slice(&U256::from(n).to_be_bytes::<32>());
    p.extend_from_slice(&[0x11; 64]);
    p
}

/// The `n`-th transaction the pool asks about.
fn transaction(n: u64, banned: bool) -> Transaction {
    let mut value = vec![0u8; 32];
    value[31] = 1;
    let (to, arg) = if banned {
        (BAD_TARGET, n % BANNED)
    } else {
        (TARGET, n)
    };
    Transaction {
        hash: keccak256(n.to_be_bytes()).to_vec().into(),
        sender: Address::from_slice(&keccak256(n.to_le_bytes())[..20])
            .to_vec()
            .into(),
        to: Some(to.to_vec().into()),
        value: value.into(),
        nonce: 0,
        r#type: 2,
        chain_id: Some(1),
        payload: payload(arg).into(),
        gas_limit: GAS,
        max_fee_per_gas: Some(2_000_000_000),
        max_priority_fee_per_gas: Some(1),
        ..Transaction::default()
    }
}

/// The failure report the sidecar would post for banned variant `n`.
pub(crate) fn report(n: u64) -> String {
    json!([format!("{}", keccak256((n + (1 << 40)).to_be_bytes())), {
        "tx_type": 2, "caller": format!("{}", Address::repeat_byte(0x99)),
        "gas_limit": GAS, "gas_price": 2_000_000_000u64, "kind": format!("{BAD_TARGET}"),
        "value": "0x1", "data": format!("0x{}", hex::encode(payload(n))), "nonce": n,
        "chain_id": 1, "access_list": [], "gas_priority_fee": 1u64,
        "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
    }])
    .to_string()
}

/// One call framed as gRPC sends it: flag, length, message.
pub(crate) fn framed(n: u64) -> Bytes {
    let message = VerifyTransactionRequest {
        event_id: n,
        transaction: Some(transaction(n, n.is_multiple_of(10))),
    }
    .encode_to_vec();
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(&message);
    out.into()
}
