//! The wire formats txgate learns from (see `proto/` and SIDECAR_API.md),
//! and their conversions into [`txgate_screen::Invalidation`]:
//!
//! - `txgate.sidecar.v1`, txgate's own protocol (this module's root);
//! - `rpcproxy.v1`, the reference proxy's ([`rpcproxy`]);
//! - `sidecar.transport.v1`, the Credible Layer sidecar's result stream
//!   ([`results`]);
//! - the Credible Layer sidecar's failure reports, JSON `[tx_hash, TxEnv]`
//!   ([`report`]);
//! - `aeges.v1`, the question the sequencer's pool plugin asks about each
//!   transaction entering the pool ([`aeges`]);
//! - proxyd's transaction-validation hook, JSON `{"txs": {hash: tx}}`
//!   answered `{"unauthorized": {hash: bool}}` ([`proxyd`]).

use alloy_primitives::{Address, B256};
use txgate_screen::{AssertionKey, Fingerprint, Invalidation, UnixMillis};

/// Generated messages, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
pub mod v1 {
    tonic::include_proto!("txgate.sidecar.v1");
}

pub mod aeges;
/// proxyd's transaction-validation hook: the request, checked by hash,
/// and the answer.
pub mod proxyd;
pub mod report;
pub mod results;
pub mod rpcproxy;

/// Generated messages of `rpcproxy.v1`, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
pub mod rpcproxy_v1 {
    tonic::include_proto!("rpcproxy.v1");
}

/// Generated messages of `sidecar.transport.v1` (results only), client and
/// server.
#[allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
pub mod transport_v1 {
    tonic::include_proto!("sidecar.transport.v1");
}

/// Generated messages of `aeges.v1`, the pool plugin's service, client
/// and server.
#[allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
pub mod aeges_v1 {
    tonic::include_proto!("aeges.v1");
}

/// The schema version this build speaks (2: replay on subscription).
pub const SCHEMA_VERSION: u32 = 2;

/// Why a message cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// No fingerprint, or its hash is not 32 bytes.
    #[error("fingerprint missing or hash not 32 bytes")]
    Fingerprint,
    /// An assertion whose id is not 32 bytes.
    #[error("assertion id not 32 bytes")]
    Assertion,
    /// `tx_hash` or `sender` present with the wrong length.
    #[error("tx_hash or sender of the wrong length")]
    Extension,
}

fn b256(bytes: &[u8]) -> Option<B256> {
    (bytes.len() == 32).then(|| B256::from_slice(bytes))
}

fn optional<T>(
    bytes: &[u8],
    len: usize,
    make: impl Fn(&[u8]) -> T,
) -> Result<Option<T>, Malformed> {
    match bytes.len() {
        0 => Ok(None),
        n if n == len => Ok(Some(make(bytes))),
        _ => Err(Malformed::Extension),
    }
}

/// An assertion from the wire: absent (or with an empty id) is "no
/// assertion"; an id of another length is malformed.
pub fn assertion_key(assertion: Option<&v1::Assertion>) -> Result<Option<AssertionKey>, Malformed> {
    let Some(assertion) = assertion.filter(|a| !a.assertion_id.is_empty()) else {
        return Ok(None);
    };
    let id = b256(&assertion.assertion_id).ok_or(Malformed::Assertion)?;
    Ok(Some(AssertionKey {
        id,
        version: assertion.assertion_version,
    }))
}

/// A wire invalidation as screening state, started at `started` (the
/// receiver knows best when: see the proxy's stream). Target and selector
/// are optional on the wire (they only feed cooldowns): missing, they are
/// zero. So is the assertion: a sidecar that names none bans under none.
pub fn to_invalidation(
    msg: &v1::Invalidation,
    started: UnixMillis,
) -> Result<Invalidation, Malformed> {
    let fp = msg.fingerprint.as_ref().ok_or(Malformed::Fingerprint)?;
    let fingerprint = b256(&fp.hash).ok_or(Malformed::Fingerprint)?;
    let assertion = assertion_key(msg.assertion.as_ref())?;
    let target = if fp.target.len() == 20 {
        Address::from_slice(&fp.target)
    } else {
        Address::ZERO
    };
    let mut selector = [0u8; 4];
    if fp.selector.len() == 4 {
        selector.copy_from_slice(&fp.selector);
    }
    Ok(Invalidation {
        fingerprint,
        target,
        selector,
        assertion,
        tx_hash: optional(&msg.tx_hash, 32, B256::from_slice)?,
        sender: optional(&msg.sender, 20, Address::from_slice)?,
        started,
    })
}

/// The wire form of a fingerprint.
pub fn fingerprint_message(fp: &Fingerprint) -> v1::Fingerprint {
    v1::Fingerprint {
        hash: fp.hash.to_vec(),
        target: fp.target.to_vec(),
        selector: fp.selector.to_vec(),
        arg_hash16: fp.arg_hash16.to_vec(),
        value_bucket: fp.value_bucket,
        gas_bucket: fp.gas_bucket,
    }
}

/// A wire invalidation of `fp` (full parts known) under an assertion.
pub fn invalidation_message(
    fp: &Fingerprint,
    assertion: AssertionKey,
    tx_hash: Option<B256>,
    sender: Option<Address>,
    l2_block_number: u64,
    observed_at_ms: u64,
) -> v1::Invalidation {
    v1::Invalidation {
        fingerprint: Some(fingerprint_message(fp)),
        assertion: Some(v1::Assertion {
            assertion_id: assertion.id.to_vec(),
            assertion_version: assertion.version,
        }),
        adopter: Vec::new(),
        l2_block_number,
        observed_at: observed_at_ms,
        tx_hash: tx_hash.map(|h| h.to_vec()).unwrap_or_default(),
        sender: sender.map(|a| a.to_vec()).unwrap_or_default(),
        schema_version: SCHEMA_VERSION,
        kind: v1::Kind::Live as i32,
        age_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_malformed() {
        let fp = Fingerprint::from_parts(
            Address::repeat_byte(1),
            &[1, 2, 3, 4, 5],
            alloy_primitives::U256::from(7u64),
            21_000,
        );
        let key = AssertionKey {
            id: B256::repeat_byte(9),
            version: 3,
        };
        let msg = invalidation_message(
            &fp,
            key,
            Some(B256::repeat_byte(2)),
            Some(Address::repeat_byte(3)),
            10,
            0,
        );
        let inv = to_invalidation(&msg, 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inv.fingerprint, fp.hash);
        assert_eq!((inv.target, inv.selector), (fp.target, fp.selector));
        assert_eq!(inv.assertion, Some(key));
        assert_eq!(inv.tx_hash, Some(B256::repeat_byte(2)));
        assert_eq!(inv.sender, Some(Address::repeat_byte(3)));

        let mut bad = msg.clone();
        bad.fingerprint = None;
        assert_eq!(to_invalidation(&bad, 0), Err(Malformed::Fingerprint));
        let mut bad = msg.clone();
        bad.assertion = Some(v1::Assertion {
            assertion_id: vec![1; 31],
            assertion_version: 1,
        });
        assert_eq!(to_invalidation(&bad, 0), Err(Malformed::Assertion));
        // No assertion on the wire is "no assertion", not assertion 0x00…00.
        let mut none = msg.clone();
        none.assertion = None;
        assert_eq!(to_invalidation(&none, 0).map(|i| i.assertion), Ok(None));
        let mut bad = msg;
        bad.sender = vec![1; 19];
        assert_eq!(to_invalidation(&bad, 0), Err(Malformed::Extension));
    }
}
