//! Helpers shared by the benchmarks in `benches/` and the load tools in
//! `src/bin/`: signing test transactions, the body of their submission,
//! making invalidations, the flag `cargo bench` passes.

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256, keccak256};
use secp256k1::{Message, SECP256K1, SecretKey};
use txgate_screen::{Fingerprint, Invalidation};

pub mod moka_denied;
pub mod open_loop;
pub mod procs;
pub mod start;
pub mod stats;

/// Anvil's chain id.
pub const CHAIN_ID: u64 = 31337;

/// An account with a deterministic key: `fill` repeated, then `seed`.
#[derive(Debug)]
pub struct Eoa {
    key: SecretKey,
    /// Its address.
    pub address: Address,
}

impl Eoa {
    /// The account of (`fill`, `seed`); distinct pairs, distinct keys.
    pub fn new(fill: u8, seed: u64) -> Eoa {
        let mut bytes = [fill; 32];
        bytes[24..].copy_from_slice(&seed.to_be_bytes());
        let key = SecretKey::from_byte_array(bytes).unwrap_or_else(|_| unreachable!("valid key"));
        let public = key.public_key(SECP256K1).serialize_uncompressed();
        Eoa {
            key,
            address: Address::from_raw_public_key(&public[1..]),
        }
    }

    /// A signed EIP-1559 call to `to` on [`CHAIN_ID`].
    pub fn sign(
        &self,
        nonce: u64,
        to: Address,
        input: &[u8],
        gas_limit: u64,
        tip: u128,
    ) -> TxEnvelope {
        let tx = TxEip1559 {
            chain_id: CHAIN_ID,
            nonce,
            gas_limit,
            max_fee_per_gas: 50_000_000_000 + tip,
            max_priority_fee_per_gas: tip,
            to: TxKind::Call(to),
            value: U256::ZERO,
            access_list: Default::default(),
            input: Bytes::copy_from_slice(input),
        };
        let (id, compact) = SECP256K1
            .sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), &self.key)
            .serialize_compact();
        let signature = Signature::new(
            U256::from_be_slice(&compact[..32]),
            U256::from_be_slice(&compact[32..]),
            i32::from(id) == 1,
        );
        tx.into_signed(signature).into()
    }
}

/// The `0x…` raw form of a transaction.
pub fn raw_hex(envelope: &TxEnvelope) -> String {
    format!(
        "0x{}",
        alloy_primitives::hex::encode(envelope.encoded_2718())
    )
}

/// The body of an `eth_sendRawTransaction` call (id 1) of `raw` (`0x…`).
pub fn send_raw(raw: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]})
        .to_string()
}

/// `--bench`, which `cargo bench` passes to the targets it runs: the load
/// tools take it on their command lines, and ignore it.
#[derive(Debug, clap::Args)]
pub struct CargoBench {
    #[arg(long = "bench", hide = true)]
    _bench: bool,
}

/// `selector` with one `uint256` argument.
pub fn call(selector: [u8; 4], arg: u64) -> Vec<u8> {
    let mut input = selector.to_vec();
    input.extend_from_slice(&[0u8; 24]);
    input.extend_from_slice(&arg.to_be_bytes());
    input
}

/// The ban of a call's fingerprint (to `target`, with `payload`, `value`
/// and `gas_limit`), naming no assertion, transaction or sender. Like every
/// invalidation here it starts at wall-clock 0: the benches apply them with
/// the wall clock at 0, so each is fresh when applied.
pub fn ban(target: Address, payload: &[u8], value: U256, gas_limit: u64) -> Invalidation {
    let fp = Fingerprint::from_parts(target, payload, value, gas_limit);
    Invalidation {
        fingerprint: fp.hash,
        target,
        selector: fp.selector,
        assertion: None,
        tx_hash: None,
        sender: None,
        started: 0,
    }
}

/// `count` invalidations of random fingerprints (and tx hashes), spread
/// over 1000 assertions and random targets, numbered from `from`.
pub fn random_invalidations(
    from: u64,
    count: u64,
    with_tx: bool,
    with_sender: bool,
) -> Vec<Invalidation> {
    (from..from + count)
        .map(|i| {
            let h = keccak256(i.to_be_bytes());
            Invalidation {
                fingerprint: h,
                target: Address::from_slice(&h[..20]),
                selector: [h[20], h[21], h[22], h[23]],
                assertion: Some(txgate_screen::AssertionKey {
                    id: B256::left_padding_from(&(i % 1000).to_be_bytes()),
                    version: 1,
                }),
                tx_hash: with_tx.then(|| keccak256(h)),
                sender: with_sender.then(|| Address::from_slice(&h[12..])),
                started: 0,
            }
        })
        .collect()
}
