//! The body of a report, `[tx_hash, tx_env]`: a transaction in the shape
//! of revm's serde `TxEnv`, from JSON-RPC or from raw bytes.

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, B256, Bytes, U8, U64, U256};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use txgate_screen::Tx;

use crate::node::{hex_bytes, hex_u64};

/// An access list entry, as alloy (and so revm) serialize it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccessItem {
    address: Address,
    #[serde(default)]
    storage_keys: Vec<B256>,
}

/// A signed EIP-7702 authorization, as alloy serializes it (and as
/// JSON-RPC carries it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Authorization {
    chain_id: U256,
    address: Address,
    nonce: U64,
    y_parity: U8,
    r: U256,
    s: U256,
}

/// An entry of revm's `authorization_list`:
/// `Either<SignedAuthorization, RecoveredAuthorization>`, always the
/// signed form here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum AuthorizationItem {
    /// `Either::Left`: the authorization as signed.
    Left(Authorization),
}

/// A transaction in the shape of revm's serde `TxEnv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TxEnv {
    pub(crate) tx_type: u8,
    pub(crate) caller: Address,
    pub(crate) gas_limit: u64,
    pub(crate) gas_price: u128,
    /// The call target; `None` (null) for a creation.
    pub(crate) kind: Option<Address>,
    pub(crate) value: U256,
    pub(crate) data: Bytes,
    pub(crate) nonce: u64,
    pub(crate) chain_id: Option<u64>,
    pub(crate) access_list: Vec<AccessItem>,
    pub(crate) gas_priority_fee: Option<u128>,
    pub(crate) blob_hashes: Vec<B256>,
    pub(crate) max_fee_per_blob_gas: u128,
    pub(crate) authorization_list: Vec<AuthorizationItem>,
}

fn hex_u128(v: &Value) -> Option<u128> {
    u128::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn list<T: for<'de> Deserialize<'de>>(v: &Value, what: &str) -> Result<Vec<T>, String> {
    if v.is_null() {
        return Ok(Vec::new());
    }
    serde_json::from_value(v.clone()).map_err(|e| format!("bad {what}: {e}"))
}

impl TxEnv {
    /// From a transaction as JSON-RPC gives it (`eth_getBlockByNumber` with
    /// full transactions, `eth_getTransactionByHash`).
    pub(crate) fn from_rpc(tx: &Value) -> Result<TxEnv, String> {
        let tx_type = match &tx["type"] {
            Value::Null => 0,
            t => hex_u64(t)
                .and_then(|t| u8::try_from(t).ok())
                .ok_or("bad type")?,
        };
        let gas_price = if tx_type >= 2 {
            hex_u128(&tx["maxFeePerGas"]).ok_or("bad maxFeePerGas")?
        } else {
            hex_u128(&tx["gasPrice"]).ok_or("bad gasPrice")?
        };
        let gas_priority_fee = if tx_type >= 2 {
            Some(hex_u128(&tx["maxPriorityFeePerGas"]).ok_or("bad maxPriorityFeePerGas")?)
        } else {
            None
        };
        let kind = match &tx["to"] {
            Value::Null => None,
            to => Some(to.as_str().and_then(|s| s.parse().ok()).ok_or("bad to")?),
        };
        Ok(TxEnv {
            tx_type,
            caller: tx["from"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or("bad from")?,
            gas_limit: hex_u64(&tx["gas"]).ok_or("bad gas")?,
            gas_price,
            kind,
            value: tx["value"]
                .as_str()
                .and_then(|s| U256::from_str_radix(s.strip_prefix("0x")?, 16).ok())
                .ok_or("bad value")?,
            data: hex_bytes(&tx["input"]).ok_or("bad input")?.into(),
            nonce: hex_u64(&tx["nonce"]).ok_or("bad nonce")?,
            chain_id: hex_u64(&tx["chainId"]),
            access_list: list(&tx["accessList"], "accessList")?,
            gas_priority_fee,
            blob_hashes: list(&tx["blobVersionedHashes"], "blobVersionedHashes")?,
            max_fee_per_blob_gas: hex_u128(&tx["maxFeePerBlobGas"]).unwrap_or(0),
            authorization_list: list(&tx["authorizationList"], "authorizationList")?
                .into_iter()
                .map(AuthorizationItem::Left)
                .collect(),
        })
    }

    /// From a raw transaction decoded by txgate's library (`tx`, its
    /// `sender` recovered by it); what that decoder does not keep (nonce,
    /// fees, access list, blobs, authorizations) is read from the same
    /// bytes with alloy's envelope decoder.
    pub(crate) fn from_raw(tx: &Tx, raw: &[u8], sender: Address) -> Result<TxEnv, String> {
        let envelope = TxEnvelope::decode_2718(&mut &raw[..]).map_err(|e| e.to_string())?;
        Ok(TxEnv {
            tx_type: tx.ty,
            caller: sender,
            gas_limit: tx.gas_limit,
            // The fee cap from EIP-1559 on, the gas price before.
            gas_price: envelope.max_fee_per_gas(),
            kind: tx.to,
            value: tx.value,
            data: tx.input.clone(),
            nonce: envelope.nonce(),
            chain_id: tx.chain_id,
            access_list: envelope
                .access_list()
                .map(|list| {
                    list.iter()
                        .map(|item| AccessItem {
                            address: item.address,
                            storage_keys: item.storage_keys.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            gas_priority_fee: envelope.max_priority_fee_per_gas(),
            blob_hashes: envelope
                .blob_versioned_hashes()
                .map(<[B256]>::to_vec)
                .unwrap_or_default(),
            max_fee_per_blob_gas: envelope.max_fee_per_blob_gas().unwrap_or(0),
            authorization_list: envelope
                .authorization_list()
                .unwrap_or_default()
                .iter()
                .map(|a| {
                    AuthorizationItem::Left(Authorization {
                        chain_id: *a.chain_id(),
                        address: *a.address(),
                        nonce: U64::from(a.nonce()),
                        y_parity: U8::from(a.y_parity()),
                        r: a.r(),
                        s: a.s(),
                    })
                })
                .collect(),
        })
    }
}

/// The JSON body of a report: `[tx_hash, tx_env]`.
pub(crate) fn body(tx_hash: B256, env: &TxEnv) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&(tx_hash, env)).map_err(|e| e.to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use alloy_consensus::{TxEip1559, TxLegacy};
    use alloy_eips::eip2930::{AccessList, AccessListItem};
    use alloy_primitives::TxKind;
    use serde_json::json;

    use super::*;
    use crate::testutil::sign;

    /// An EIP-1559 call as JSON-RPC gives it.
    pub(crate) fn rpc_1559() -> Value {
        json!({
            "type": "0x2", "hash": format!("0x{}", "11".repeat(32)),
            "from": "0x00000000000000000000000000000000000000f1",
            "to": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            "gas": "0x186a0", "gasPrice": "0x6fc23ac0",
            "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x3b9aca00",
            "value": "0x1", "input": "0xaa60e733", "nonce": "0x7", "chainId": "0x7a69",
            "accessList": [{"address": "0x00000000000000000000000000000000000000a0",
                "storageKeys": [format!("0x{}", "00".repeat(31) + "01")]}],
            "v": "0x1", "yParity": "0x1", "r": "0x1", "s": "0x2"
        })
    }

    #[test]
    fn a_json_rpc_transaction_in_revms_tx_env_shape() {
        let env = TxEnv::from_rpc(&rpc_1559()).expect("tx env");
        let json = serde_json::to_value(&env).expect("json");
        assert_eq!(
            json,
            json!({
                "tx_type": 2,
                "caller": "0x00000000000000000000000000000000000000f1",
                "gas_limit": 100_000,
                "gas_price": 2_000_000_000u64,
                "kind": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
                "value": "0x1",
                "data": "0xaa60e733",
                "nonce": 7,
                "chain_id": 31337,
                "access_list": [{"address": "0x00000000000000000000000000000000000000a0",
                    "storageKeys": [format!("0x{}", "00".repeat(31) + "01")]}],
                "gas_priority_fee": 1_000_000_000u64,
                "blob_hashes": [],
                "max_fee_per_blob_gas": 0,
                "authorization_list": []
            })
        );
        // The field order of revm's struct.
        let text = serde_json::to_string(&env).expect("json");
        let order = [
            "tx_type",
            "caller",
            "gas_limit",
            "gas_price",
            "kind",
            "value",
            "data",
            "nonce",
            "chain_id",
            "access_list",
            "gas_priority_fee",
            "blob_hashes",
            "max_fee_per_blob_gas",
            "authorization_list",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|k| text.find(&format!("\"{k}\"")).expect(k))
            .collect();
        assert!(positions.is_sorted(), "{text}");
        // A two-element array body.
        let body: Value =
            serde_json::from_slice(&body(B256::repeat_byte(0x11), &env).expect("body"))
                .expect("json");
        assert_eq!(body[0], json!(format!("0x{}", "11".repeat(32))));
        assert_eq!(body[1], json);
        assert_eq!(body.as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn legacy_creations_and_7702_authorizations() {
        let mut tx = rpc_1559();
        tx["type"] = json!("0x0");
        tx["to"] = Value::Null;
        tx["chainId"] = Value::Null;
        tx.as_object_mut().map(|o| o.remove("accessList"));
        let env = TxEnv::from_rpc(&tx).expect("tx env");
        assert_eq!(env.gas_price, 0x6fc23ac0, "the gas price before EIP-1559");
        let json = serde_json::to_value(&env).expect("json");
        assert_eq!(json["kind"], Value::Null, "a creation");
        assert_eq!(json["gas_priority_fee"], Value::Null);
        assert_eq!(json["chain_id"], Value::Null);
        assert_eq!(json["access_list"], json!([]));

        let mut tx = rpc_1559();
        tx["type"] = json!("0x4");
        tx["authorizationList"] = json!([{"chainId": "0x7a69",
            "address": "0x00000000000000000000000000000000000000b1", "nonce": "0x3",
            "yParity": "0x1", "r": "0x5", "s": "0x6"}]);
        let json = serde_json::to_value(TxEnv::from_rpc(&tx).expect("tx env")).expect("json");
        assert_eq!(
            json["authorization_list"],
            json!([{"Left": {"chainId": "0x7a69",
                "address": "0x00000000000000000000000000000000000000b1", "nonce": "0x3",
                "yParity": "0x1", "r": "0x5", "s": "0x6"}}])
        );
        let mut bad = rpc_1559();
        bad["from"] = json!("nope");
        assert!(TxEnv::from_rpc(&bad).is_err());
    }

    #[test]
    fn a_raw_transaction_in_revms_tx_env_shape() {
        let target = Address::repeat_byte(0xa0);
        let raw = sign(TxEip1559 {
            chain_id: 31337,
            nonce: 7,
            gas_limit: 100_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(target),
            value: U256::from(1),
            access_list: AccessList(vec![AccessListItem {
                address: target,
                storage_keys: vec![B256::repeat_byte(1)],
            }]),
            input: vec![0xaa, 0x60, 0xe7, 0x33].into(),
        });
        let tx = txgate_screen::decode(&raw).expect("decodes");
        let sender = txgate_screen::recover_sender(&tx).expect("recovers");
        let env = TxEnv::from_raw(&tx, &raw, sender).expect("tx env");
        assert_eq!(
            env,
            TxEnv {
                tx_type: 2,
                caller: sender,
                gas_limit: 100_000,
                gas_price: 2_000_000_000,
                kind: Some(target),
                value: U256::from(1),
                data: vec![0xaa, 0x60, 0xe7, 0x33].into(),
                nonce: 7,
                chain_id: Some(31337),
                access_list: vec![AccessItem {
                    address: target,
                    storage_keys: vec![B256::repeat_byte(1)],
                }],
                gas_priority_fee: Some(1_000_000_000),
                blob_hashes: Vec::new(),
                max_fee_per_blob_gas: 0,
                authorization_list: Vec::new(),
            }
        );

        let raw = sign(TxLegacy {
            chain_id: Some(31337),
            nonce: 1,
            gas_price: 3_000_000_000,
            gas_limit: 21_000,
            to: TxKind::Create,
            value: U256::ZERO,
            input: vec![0x60, 0x00].into(),
        });
        let tx = txgate_screen::decode(&raw).expect("decodes");
        let sender = txgate_screen::recover_sender(&tx).expect("recovers");
        let env = TxEnv::from_raw(&tx, &raw, sender).expect("tx env");
        assert_eq!(
            (
                env.tx_type,
                env.gas_price,
                env.gas_priority_fee,
                env.kind,
                env.nonce
            ),
            (0, 3_000_000_000, None, None, 1)
        );
    }
}
