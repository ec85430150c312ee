//! The reference proxy's protocol, `rpcproxy.v1`: its invalidations and
//! verdicts as screening state.
//!
//! It carries neither the failing tx hash nor its sender: txgate fills
//! them in from what it forwarded (the pending attribution by
//! fingerprint). `observed_at` is a `google.protobuf.Timestamp`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256};
use txgate_screen::{AssertionKey, Fingerprint, Invalidation, UnixMillis};

use crate::Malformed;
use crate::rpcproxy_v1 as wire;

/// What the sidecar said about a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `ALLOW`: forward, and keep the verdict for its TTL.
    Allow,
    /// `DENY`: ban the fingerprint (under the assertion, if named).
    Deny(Option<AssertionKey>),
    /// `UNKNOWN` (or a value this build does not know): forward, not
    /// cached (fail open), counted.
    Unknown,
}

fn assertion_key(assertion: Option<&wire::Assertion>) -> Result<Option<AssertionKey>, Malformed> {
    let Some(assertion) = assertion.filter(|a| !a.assertion_id.is_empty()) else {
        return Ok(None);
    };
    if assertion.assertion_id.len() != 32 {
        return Err(Malformed::Assertion);
    }
    Ok(Some(AssertionKey {
        id: B256::from_slice(&assertion.assertion_id),
        version: assertion.assertion_version,
    }))
}

/// A wire invalidation as screening state (no tx hash, no sender),
/// started at `started`.
pub fn to_invalidation(
    msg: &wire::Invalidation,
    started: UnixMillis,
) -> Result<Invalidation, Malformed> {
    let fp = msg.fingerprint.as_ref().ok_or(Malformed::Fingerprint)?;
    if fp.hash.len() != 32 {
        return Err(Malformed::Fingerprint);
    }
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
        fingerprint: B256::from_slice(&fp.hash),
        target,
        selector,
        assertion: assertion_key(msg.assertion.as_ref())?,
        tx_hash: None,
        sender: None,
        started,
    })
}

/// When the sidecar observed the failure, in milliseconds since the Unix
/// epoch; `None` when unset or before the epoch.
pub fn observed_at_ms(msg: &wire::Invalidation) -> Option<u64> {
    let t = msg.observed_at.as_ref()?;
    let ms = u64::try_from(t.seconds).ok()?.checked_mul(1000)?;
    ms.checked_add(u64::try_from(t.nanos).ok()? / 1_000_000)
        .filter(|ms| *ms > 0)
}

/// The answer to ShouldForward.
pub fn verdict(answer: &wire::ShouldForwardResponse) -> Result<Verdict, Malformed> {
    use wire::should_forward_response::Verdict as W;
    Ok(match W::try_from(answer.verdict) {
        Ok(W::Allow) => Verdict::Allow,
        Ok(W::Deny) => Verdict::Deny(assertion_key(answer.assertion.as_ref())?),
        Ok(W::Unknown) | Err(_) => Verdict::Unknown,
    })
}

/// The wire form of a fingerprint.
pub fn fingerprint_message(fp: &Fingerprint) -> wire::Fingerprint {
    wire::Fingerprint {
        hash: fp.hash.to_vec(),
        target: fp.target.to_vec(),
        selector: fp.selector.to_vec(),
        arg_hash16: fp.arg_hash16.to_vec(),
        value_bucket: fp.value_bucket,
        gas_bucket: fp.gas_bucket,
    }
}

/// A wire invalidation of `fp` under an assertion, if any.
pub fn invalidation_message(
    fp: &Fingerprint,
    assertion: Option<AssertionKey>,
    l2_block_number: u64,
    observed_at: SystemTime,
) -> wire::Invalidation {
    let since = observed_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    wire::Invalidation {
        fingerprint: Some(fingerprint_message(fp)),
        assertion: assertion.map(|a| wire::Assertion {
            assertion_id: a.id.to_vec(),
            assertion_version: a.version,
        }),
        adopter: String::new(),
        l2_block_number,
        observed_at: Some(prost_types::Timestamp {
            seconds: since.as_secs() as i64,
            nanos: since.subsec_nanos() as i32,
        }),
    }
}

/// A ShouldForward answer.
pub fn verdict_message(verdict: Verdict) -> wire::ShouldForwardResponse {
    use wire::should_forward_response::Verdict as W;
    let (v, assertion) = match verdict {
        Verdict::Allow => (W::Allow, None),
        Verdict::Deny(a) => (W::Deny, a),
        Verdict::Unknown => (W::Unknown, None),
    };
    wire::ShouldForwardResponse {
        verdict: v as i32,
        assertion: assertion.map(|a| wire::Assertion {
            assertion_id: a.id.to_vec(),
            assertion_version: a.version,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;
    use prost::Message;

    #[test]
    fn invalidations_and_verdicts_round_trip() {
        let fp =
            Fingerprint::from_parts(Address::repeat_byte(1), &[1, 2, 3, 4, 5], U256::ONE, 21_000);
        let key = AssertionKey {
            id: B256::repeat_byte(9),
            version: 3,
        };
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let msg = invalidation_message(&fp, Some(key), 7, at);
        let bytes = msg.encode_to_vec();
        let back = wire::Invalidation::decode(bytes.as_slice()).unwrap_or_default();
        let inv = to_invalidation(&back, 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (inv.fingerprint, inv.target, inv.selector),
            (fp.hash, fp.target, fp.selector)
        );
        assert_eq!(inv.assertion, Some(key));
        assert_eq!((inv.tx_hash, inv.sender), (None, None));
        assert_eq!(observed_at_ms(&back), Some(1_700_000_000_123));

        for v in [
            Verdict::Allow,
            Verdict::Deny(Some(key)),
            Verdict::Deny(None),
            Verdict::Unknown,
        ] {
            assert_eq!(verdict(&verdict_message(v)), Ok(v));
        }
        // A verdict this build does not know forwards.
        let future = wire::ShouldForwardResponse {
            verdict: 7,
            assertion: None,
        };
        assert_eq!(verdict(&future), Ok(Verdict::Unknown));
    }

    #[test]
    fn the_answer_is_an_enum_on_the_wire() {
        // DENY = 1 in field 1: the bytes a txgate.v1 reader would take for
        // `forward = true`. The two protocols are not interchangeable.
        let deny = verdict_message(Verdict::Deny(None)).encode_to_vec();
        assert_eq!(deny, [0x08, 0x01]);
    }
}
