//! A reported call and its copy: the failure report an instance is told
//! (as the Credible Layer sidecar posts it), and the same calldata signed
//! by another, unfunded account, which every instance must refuse once the
//! ban has reached it.

use std::time::Duration;

use alloy_primitives::{Address, B256, hex, keccak256};
use serde_json::json;
use txgate_benches::procs::{HttpClient, post};
use txgate_benches::{Eoa, call, raw_hex, send_raw};

const TARGET: Address = Address::repeat_byte(0x6b);
const GAS: u64 = 100_000;

/// One ban to report, and the call that must be refused once it is known.
#[derive(Debug)]
pub(crate) struct Reported {
    /// The report's body.
    pub(crate) report: String,
    /// The copy's `eth_sendRawTransaction` body.
    pub(crate) copy: String,
}

impl Reported {
    /// The `n`th call of `series` (distinct pairs, distinct calldata and
    /// accounts).
    pub(crate) fn new(series: u8, n: u64) -> Reported {
        let input = call([0xfb, series, 0, 1], n);
        let hash: B256 = keccak256([&[series][..], &n.to_be_bytes()].concat());
        let report = json!([format!("{hash}"), {
            "tx_type": 2, "caller": format!("{}", Eoa::new(0x3d, n ^ u64::from(series) << 40).address),
            "gas_limit": GAS, "gas_price": 2_000_000_000u64, "kind": format!("{TARGET}"),
            "value": "0x0", "data": format!("0x{}", hex::encode(&input)), "nonce": 0,
            "chain_id": 31337, "access_list": [], "gas_priority_fee": 1_000_000_000u64,
            "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
        }])
        .to_string();
        let copycat = Eoa::new(0x4e, n ^ u64::from(series) << 40);
        let copy = send_raw(&raw_hex(&copycat.sign(0, TARGET, &input, GAS, 1)));
        Reported { report, copy }
    }
}

/// Posts `report` to an instance's report endpoint; whether it was taken
/// within a second.
pub(crate) async fn report(client: &HttpClient, url: &str, report: &str) -> bool {
    let posted = post(client, url, report.to_string());
    matches!(
        tokio::time::timeout(Duration::from_secs(1), posted).await,
        Ok(Ok((200, _)))
    )
}

/// Submits `copy` to `rpc` once; whether the instance refused it for its
/// banned fingerprint (an answer within `within`; a refusal for another
/// reason, such as a node's error for an earlier try remembered by hash,
/// does not count).
pub(crate) async fn refused(client: &HttpClient, rpc: &str, copy: &str, within: Duration) -> bool {
    let sent = post(client, rpc, copy.to_string());
    matches!(
        tokio::time::timeout(within, sent).await,
        Ok(Ok((_, answer))) if answer["error"]["data"]["reason"] == "denied_fingerprint"
    )
}
