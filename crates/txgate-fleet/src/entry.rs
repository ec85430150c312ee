//! One entry of the ban log: the bans one instance learned in one batch,
//! as JSON an operator can read with `XRANGE`.
//!
//! An entry has two fields: `origin` (the appending process, so it skips
//! its own entries while it runs) and `bans`, a JSON array of
//! `{"fingerprint", "target", "selector", "tx_hash"?, "sender"?,
//! "started_ms"}`. No assertion travels: a shared ban counts towards no
//! assertion's cooldown.

use std::str::FromStr;

use alloy_primitives::{Address, B256};
use serde::{Deserialize, Serialize};
use txgate_screen::Invalidation;
use txgate_screen::wall::UnixMillis;

/// Bans per entry at most: an entry stays under about 11 KiB.
pub const MAX_BANS_PER_ENTRY: usize = 32;
/// A `bans` field larger than this is not parsed (32 bans take about
/// 10 KiB).
pub const MAX_BANS_BYTES: usize = 64 * 1024;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ban {
    fingerprint: String,
    target: String,
    selector: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tx_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender: Option<String>,
    started_ms: UnixMillis,
}

impl Ban {
    fn of(i: &Invalidation) -> Ban {
        Ban {
            fingerprint: i.fingerprint.to_string(),
            target: i.target.to_string(),
            selector: alloy_primitives::hex::encode_prefixed(i.selector),
            tx_hash: i.tx_hash.map(|h| h.to_string()),
            sender: i.sender.map(|a| a.to_string()),
            started_ms: i.started,
        }
    }

    fn invalidation(&self) -> Option<Invalidation> {
        let selector = alloy_primitives::hex::decode(&self.selector).ok()?;
        Some(Invalidation {
            fingerprint: B256::from_str(&self.fingerprint).ok()?,
            target: Address::from_str(&self.target).ok()?,
            selector: selector.try_into().ok()?,
            assertion: None,
            tx_hash: match &self.tx_hash {
                Some(h) => Some(B256::from_str(h).ok()?),
                None => None,
            },
            sender: match &self.sender {
                Some(a) => Some(Address::from_str(a).ok()?),
                None => None,
            },
            started: self.started_ms,
        })
    }
}

/// The `bans` field of an entry holding `bans` (at most
/// [`MAX_BANS_PER_ENTRY`]: the caller splits).
pub fn encode(bans: &[Invalidation]) -> String {
    let bans: Vec<Ban> = bans.iter().map(Ban::of).collect();
    serde_json::to_string(&bans).unwrap_or_else(|_| "[]".to_string())
}

/// An entry that does not parse: skipped whole and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// The bans of an entry's `bans` field; any field that does not parse (or
/// more than [`MAX_BANS_PER_ENTRY`] bans, or more than [`MAX_BANS_BYTES`])
/// refuses the entry whole.
pub fn decode(field: &[u8]) -> Result<Vec<Invalidation>, Malformed> {
    if field.len() > MAX_BANS_BYTES {
        return Err(Malformed);
    }
    let bans: Vec<Ban> = serde_json::from_slice(field).map_err(|_| Malformed)?;
    if bans.len() > MAX_BANS_PER_ENTRY {
        return Err(Malformed);
    }
    bans.iter()
        .map(|b| b.invalidation().ok_or(Malformed))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ban() -> Invalidation {
        Invalidation {
            fingerprint: B256::repeat_byte(7),
            target: Address::repeat_byte(9),
            selector: [0xa9, 0x05, 0x9c, 0xbb],
            assertion: None,
            tx_hash: Some(B256::repeat_byte(1)),
            sender: Some(Address::repeat_byte(2)),
            started: 1_764_000_000_123,
        }
    }

    #[test]
    fn a_ban_crosses_the_log_whole_with_its_start() {
        let mut partial = ban();
        partial.tx_hash = None;
        partial.sender = None;
        let field = encode(&[ban(), partial]);
        assert_eq!(decode(field.as_bytes()).unwrap(), vec![ban(), partial]);
    }

    #[test]
    fn a_full_entry_stays_under_its_bound() {
        let field = encode(&[ban(); MAX_BANS_PER_ENTRY]);
        assert!(field.len() < MAX_BANS_BYTES / 5, "{}", field.len());
        assert_eq!(decode(field.as_bytes()).unwrap().len(), MAX_BANS_PER_ENTRY);
    }

    #[test]
    fn anything_malformed_is_refused_whole() {
        assert_eq!(decode(b"not json"), Err(Malformed));
        let good: serde_json::Value = serde_json::from_str(&encode(&[ban()])).unwrap();
        let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut bad = good.clone();
            edit(&mut bad);
            decode(&serde_json::to_vec(&bad).unwrap())
        };
        assert_eq!(
            refused(&|b| b[0]["selector"] = "0x1234".into()),
            Err(Malformed)
        );
        assert_eq!(
            refused(&|b| b[0]["assertion"] = "0x01".into()),
            Err(Malformed)
        );
        assert_eq!(refused(&|b| b[0]["target"] = "0x12".into()), Err(Malformed));
        assert_eq!(
            refused(&|b| b[0]
                .as_object_mut()
                .unwrap()
                .remove("started_ms")
                .map(drop)
                .unwrap_or(())),
            Err(Malformed)
        );
        let too_many = encode(&[ban(); MAX_BANS_PER_ENTRY + 1]);
        assert_eq!(decode(too_many.as_bytes()), Err(Malformed));
        assert_eq!(decode(&vec![b' '; MAX_BANS_BYTES + 1]), Err(Malformed));
    }
}
