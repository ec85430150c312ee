//! The ban snapshot: denied fingerprints with their remaining times and
//! assertions, as bytes (the proxy writes them to a file and reads them back
//! at start, so a restart forgets no live ban).
//!
//! Format 3, big-endian:
//!
//! ```text
//! "TXGATE-BANS\0"  12 bytes magic
//! format           u32 (3)
//! count            u64
//! count × record:  fingerprint (32) ‖ expires_in_ms u64 ‖ suspect_for_ms u64
//!                  ‖ n u8 ‖ n × (assertion id (32) ‖ assertion version u64)
//! log mark         u8 (0: none; 1: followed by ms u64 ‖ seq u64)
//! keccak256 of everything above (32)
//! ```
//!
//! The log mark is how far the instance had read the fleet's ban log
//! ([`LogMark`]) when it wrote the bans: they include every ban of the log
//! up to it, and a restart reads the log on from there. Format 3 is format
//! 2 with the mark; a format 2 snapshot is read with none.
//!
//! Format 2 has format 1's layout; its fingerprints follow the reference
//! proxy's rule (zero argument hash for calldata of 4 bytes or fewer, gas
//! bucket truncated to 32 bits; see [`crate::fingerprint`]). A format 1
//! snapshot is still read: its bans of calls with more than 4 bytes of
//! calldata (and less than 2³²·50 000 gas) have the same hash under both
//! rules and keep working; the others can no longer match any transaction
//! and lapse with their remaining time. Dropping all of them would instead
//! let an attack that was held back through the upgrade. The loader
//! counts and logs the bans it restored from format 1.
//!
//! Times are relative (remaining at the time of writing), so a snapshot
//! does not depend on clocks agreeing across restarts; the time the process
//! was down is not counted against the bans (a restart errs towards
//! keeping a ban a little longer, never shorter).

use alloy_primitives::{B256, keccak256};

use crate::assertion::AssertionKey;
use crate::ttl::Millis;

const MAGIC: &[u8; 12] = b"TXGATE-BANS\0";
/// The format this build writes.
pub const FORMAT: u32 = 3;
/// The oldest format this build reads.
pub const OLDEST_FORMAT: u32 = 1;
/// Assertions per record at most (the set keeps two).
const MAX_ASSERTIONS: usize = 2;

/// One denied (or suspect) fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanRecord {
    /// The fingerprint.
    pub fingerprint: B256,
    /// Remaining ban.
    pub expires_in: Millis,
    /// Remaining time until the end of its suspect window.
    pub suspect_for: Millis,
    /// The assertions it was banned under (empty: none named).
    pub assertions: Vec<AssertionKey>,
}

/// A position in the fleet's ban log (a Redis stream id, `<ms>-<seq>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMark {
    /// The id's milliseconds.
    pub ms: u64,
    /// The id's sequence within them.
    pub seq: u64,
}

/// Why a snapshot was not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Not a ban snapshot.
    #[error("not a txgate ban snapshot")]
    BadMagic,
    /// A format this build does not read.
    #[error("unsupported snapshot format {0}")]
    UnsupportedFormat(u32),
    /// Ends early, or a count larger than the bytes.
    #[error("snapshot is truncated")]
    Truncated,
    /// The checksum does not match: corrupt.
    #[error("snapshot checksum mismatch (corrupt)")]
    Checksum,
}

/// Encodes records, with no log mark.
pub fn encode(records: &[BanRecord]) -> Vec<u8> {
    encode_with(records, None)
}

/// Encodes records and how far the ban log they include was read.
pub fn encode_with(records: &[BanRecord], mark: Option<LogMark>) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + records.len() * 100 + 17 + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_be_bytes());
    out.extend_from_slice(&(records.len() as u64).to_be_bytes());
    for r in records {
        out.extend_from_slice(r.fingerprint.as_slice());
        out.extend_from_slice(&r.expires_in.to_be_bytes());
        out.extend_from_slice(&r.suspect_for.to_be_bytes());
        let n = r.assertions.len().min(MAX_ASSERTIONS);
        out.push(n as u8);
        for key in &r.assertions[..n] {
            out.extend_from_slice(key.id.as_slice());
            out.extend_from_slice(&key.version.to_be_bytes());
        }
    }
    match mark {
        None => out.push(0),
        Some(mark) => {
            out.push(1);
            out.extend_from_slice(&mark.ms.to_be_bytes());
            out.extend_from_slice(&mark.seq.to_be_bytes());
        }
    }
    let sum = keccak256(&out);
    out.extend_from_slice(sum.as_slice());
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if self.bytes.len() < n {
            return Err(SnapshotError::Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }

    fn b256(&mut self) -> Result<B256, SnapshotError> {
        Ok(B256::from_slice(self.take(32)?))
    }
}

/// A decoded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Its format ([`OLDEST_FORMAT`] to [`FORMAT`]).
    pub format: u32,
    /// Its bans.
    pub records: Vec<BanRecord>,
    /// How far the fleet's ban log was read (format 3; `None` before it,
    /// or when none was read).
    pub log_mark: Option<LogMark>,
}

/// Decodes a snapshot; any damage is an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<Decoded, SnapshotError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    if bytes.len() < MAGIC.len() + 4 + 8 + 32 {
        return Err(SnapshotError::Truncated);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    let mut r = Reader {
        bytes: &body[MAGIC.len()..],
    };
    let mut format = [0u8; 4];
    format.copy_from_slice(r.take(4)?);
    let format = u32::from_be_bytes(format);
    if !(OLDEST_FORMAT..=FORMAT).contains(&format) {
        return Err(SnapshotError::UnsupportedFormat(format));
    }
    if keccak256(body).as_slice() != sum {
        // A cut file fails here too; say which when the count tells.
        return Err(SnapshotError::Checksum);
    }
    let count = r.u64()?;
    // Each record is at least 49 bytes: a count beyond the bytes is damage.
    if count > (r.bytes.len() / 49) as u64 {
        return Err(SnapshotError::Truncated);
    }
    let mut records = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let fingerprint = r.b256()?;
        let expires_in = r.u64()?;
        let suspect_for = r.u64()?;
        let n = r.take(1)?[0] as usize;
        if n > MAX_ASSERTIONS {
            return Err(SnapshotError::Truncated);
        }
        let mut assertions = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.b256()?;
            assertions.push(AssertionKey {
                id,
                version: r.u64()?,
            });
        }
        records.push(BanRecord {
            fingerprint,
            expires_in,
            suspect_for,
            assertions,
        });
    }
    let log_mark = if format >= 3 {
        match r.take(1)?[0] {
            0 => None,
            1 => Some(LogMark {
                ms: r.u64()?,
                seq: r.u64()?,
            }),
            _ => return Err(SnapshotError::Truncated),
        }
    } else {
        None
    };
    if !r.bytes.is_empty() {
        return Err(SnapshotError::Truncated);
    }
    Ok(Decoded {
        format,
        records,
        log_mark,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<BanRecord> {
        (0..50u8)
            .map(|i| BanRecord {
                fingerprint: B256::repeat_byte(i),
                expires_in: u64::from(i) * 1000,
                suspect_for: u64::from(i) * 2000,
                assertions: (0..(i % 3))
                    .map(|j| AssertionKey {
                        id: B256::repeat_byte(j),
                        version: u64::from(j) + 1,
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn round_trip() {
        let records = sample();
        let back = decode(&encode(&records)).map(|d| (d.format, d.records, d.log_mark));
        assert_eq!(back, Ok((FORMAT, records.clone(), None)));
        assert_eq!(decode(&encode(&[])).map(|d| d.records), Ok(vec![]));
        let mark = LogMark {
            ms: 1_764_000_000_000,
            seq: 7,
        };
        let back = decode(&encode_with(&records, Some(mark))).map(|d| (d.records, d.log_mark));
        assert_eq!(back, Ok((records, Some(mark))));
    }

    /// Format 2: format 3 without the mark byte.
    fn format_2(records: &[BanRecord]) -> Vec<u8> {
        let bytes = encode(records);
        let mut out = bytes[..bytes.len() - 33].to_vec();
        out[12..16].copy_from_slice(&2u32.to_be_bytes());
        let sum = keccak256(&out);
        out.extend_from_slice(sum.as_slice());
        out
    }

    #[test]
    fn format_2_is_read_with_no_mark() {
        let records = sample();
        assert_eq!(
            decode(&format_2(&records)),
            Ok(Decoded {
                format: 2,
                records,
                log_mark: None
            })
        );
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let bytes = encode_with(&sample()[..5], Some(LogMark { ms: 5, seq: 6 }));
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "cut at {len}");
        }
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(decode(&damaged).is_err(), "flip at {i}");
        }
        assert_eq!(decode(b"hello"), Err(SnapshotError::BadMagic));
    }

    /// Rewrites the format field (and the checksum) of a snapshot.
    fn with_format(bytes: &[u8], format: u32) -> Vec<u8> {
        let mut out = bytes[..bytes.len() - 32].to_vec();
        out[12..16].copy_from_slice(&format.to_be_bytes());
        let sum = keccak256(&out);
        out.extend_from_slice(sum.as_slice());
        out
    }

    #[test]
    fn format_1_is_read_and_named_and_unknown_formats_are_refused() {
        let records = sample();
        let old = with_format(&format_2(&records), 1);
        assert_eq!(
            decode(&old),
            Ok(Decoded {
                format: 1,
                records,
                log_mark: None
            })
        );
        let future = with_format(&encode(&[]), FORMAT + 1);
        assert_eq!(
            decode(&future),
            Err(SnapshotError::UnsupportedFormat(FORMAT + 1))
        );
        let zero = with_format(&encode(&[]), 0);
        assert_eq!(decode(&zero), Err(SnapshotError::UnsupportedFormat(0)));
    }
}
