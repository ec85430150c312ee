//! txgate's sidecar protocol, `txgate.sidecar.v1` (see `proto/` and
//! SIDECAR_API.md), and conversions between its messages and
//! [`txgate_screen::Invalidation`].

use alloy_primitives::{Address, B256};
use txgate_screen::{Fingerprint, Invalidation};

/// Generated messages, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
pub mod v1 {
    tonic::include_proto!("txgate.sidecar.v1");
}

/// The schema version this build speaks.
pub const SCHEMA_VERSION: u32 = 1;

/// Why a message cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// No fingerprint, or its hash is not 32 bytes.
    Fingerprint,
    /// No assertion, or its id is not 32 bytes.
    Assertion,
    /// `tx_hash` or `sender` present with the wrong length.
    Extension,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Malformed::Fingerprint => "fingerprint missing or hash not 32 bytes",
            Malformed::Assertion => "assertion missing or id not 32 bytes",
            Malformed::Extension => "tx_hash or sender of the wrong length",
        })
    }
}

impl std::error::Error for Malformed {}

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

/// A wire invalidation as screening state. Target and selector are
/// optional on the wire (they only feed cooldowns): missing, they are zero.
pub fn to_invalidation(msg: &v1::Invalidation) -> Result<Invalidation, Malformed> {
    let fp = msg.fingerprint.as_ref().ok_or(Malformed::Fingerprint)?;
    let fingerprint = b256(&fp.hash).ok_or(Malformed::Fingerprint)?;
    let assertion = msg.assertion.as_ref().ok_or(Malformed::Assertion)?;
    let assertion_id = b256(&assertion.assertion_id).ok_or(Malformed::Assertion)?;
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
        assertion_id,
        assertion_version: assertion.assertion_version,
        tx_hash: optional(&msg.tx_hash, 32, B256::from_slice)?,
        sender: optional(&msg.sender, 20, Address::from_slice)?,
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
    assertion_id: B256,
    assertion_version: u64,
    tx_hash: Option<B256>,
    sender: Option<Address>,
    l2_block_number: u64,
    observed_at_ms: u64,
) -> v1::Invalidation {
    v1::Invalidation {
        fingerprint: Some(fingerprint_message(fp)),
        assertion: Some(v1::Assertion {
            assertion_id: assertion_id.to_vec(),
            assertion_version,
        }),
        adopter: Vec::new(),
        l2_block_number,
        observed_at: observed_at_ms,
        tx_hash: tx_hash.map(|h| h.to_vec()).unwrap_or_default(),
        sender: sender.map(|a| a.to_vec()).unwrap_or_default(),
        schema_version: SCHEMA_VERSION,
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
        let msg = invalidation_message(
            &fp,
            B256::repeat_byte(9),
            3,
            Some(B256::repeat_byte(2)),
            Some(Address::repeat_byte(3)),
            10,
            0,
        );
        let inv = to_invalidation(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inv.fingerprint, fp.hash);
        assert_eq!((inv.target, inv.selector), (fp.target, fp.selector));
        assert_eq!(inv.assertion_version, 3);
        assert_eq!(inv.tx_hash, Some(B256::repeat_byte(2)));
        assert_eq!(inv.sender, Some(Address::repeat_byte(3)));

        let mut bad = msg.clone();
        bad.fingerprint = None;
        assert_eq!(to_invalidation(&bad), Err(Malformed::Fingerprint));
        let mut bad = msg.clone();
        bad.assertion = Some(v1::Assertion {
            assertion_id: vec![1; 31],
            assertion_version: 1,
        });
        assert_eq!(to_invalidation(&bad), Err(Malformed::Assertion));
        let mut bad = msg;
        bad.sender = vec![1; 19];
        assert_eq!(to_invalidation(&bad), Err(Malformed::Extension));
    }
}
