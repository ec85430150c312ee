//! Positions in the ban log (Redis stream ids) and where a reader resumes.
//!
//! An id is `<milliseconds>-<sequence>`: the primary's clock when the entry
//! was appended, and a counter within that millisecond. Ids only grow on
//! one primary; after a failover, a replica promoted before it had every
//! entry can have a last id below the one a reader had reached.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use txgate_screen::snapshot::LogMark;

/// A stream entry id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    /// The primary's wall clock when the entry was appended (Unix ms).
    pub ms: u64,
    /// The entry's place within that millisecond.
    pub seq: u64,
}

impl StreamId {
    /// `0-0`: before every entry; reading after it reads the whole log.
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl From<StreamId> for LogMark {
    fn from(id: StreamId) -> LogMark {
        LogMark {
            ms: id.ms,
            seq: id.seq,
        }
    }
}

impl From<LogMark> for StreamId {
    fn from(mark: LogMark) -> StreamId {
        StreamId {
            ms: mark.ms,
            seq: mark.seq,
        }
    }
}

/// How far an instance has read the log: the last entry whose bans are
/// applied. The snapshot saves it with the bans (they include every ban up
/// to it), and a restart resumes after it. Cheap to clone; the reader sets
/// it, the snapshot reads it.
#[derive(Debug, Clone, Default)]
pub struct LogPosition(Arc<Mutex<Option<StreamId>>>);

impl LogPosition {
    /// A position read from a snapshot (`None`: none saved).
    pub fn starting_at(saved: Option<StreamId>) -> LogPosition {
        LogPosition(Arc::new(Mutex::new(saved)))
    }

    /// The last entry applied, if any.
    pub fn get(&self) -> Option<StreamId> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entries up to `id` are applied.
    pub fn set(&self, id: StreamId) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(id);
    }
}

/// An id that is not `<u64>-<u64>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadStreamId;

impl fmt::Display for BadStreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a stream id (<ms>-<seq>)")
    }
}

impl std::error::Error for BadStreamId {}

impl FromStr for StreamId {
    type Err = BadStreamId;

    fn from_str(s: &str) -> Result<StreamId, BadStreamId> {
        let (ms, seq) = s.split_once('-').ok_or(BadStreamId)?;
        let digits = |p: &str| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BadStreamId);
            }
            p.parse::<u64>().map_err(|_| BadStreamId)
        };
        Ok(StreamId {
            ms: digits(ms)?,
            seq: digits(seq)?,
        })
    }
}

/// What the primary says about the log when a reader connects
/// (`XINFO STREAM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogState {
    /// The oldest entry kept (`None`: the log is empty).
    pub first: Option<StreamId>,
    /// The last id the primary generated (`0-0` for a log never written).
    pub last_generated: StreamId,
}

/// Where a reader starts reading, and what its start says about what it
/// may have missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Read the entries after this id.
    pub after: StreamId,
    /// Entries the reader had not read were trimmed while they were still
    /// live (cut by the log's length cap, not by age): bans it may never
    /// learn. Counted.
    pub gap: bool,
    /// The primary is not the one the reader read from: it had read past
    /// the log's last id (a failover to a replica that had not every
    /// entry, or a log that was deleted), or the primary is on another
    /// history (its replication id changed). It reads the whole window
    /// again.
    pub reset: bool,
}

/// Where a reader that had read up to `saved` (`None`: never, a fresh
/// instance) resumes on a log in `state` that keeps `length` entries of at
/// most `cap` (the length cap; the log is also trimmed by age).
///
/// - A fresh reader reads the whole log (what is left is the live window).
/// - A reader behind the log resumes after its own id. If entries after
///   its id are gone (the oldest kept is past it) while the log is at its
///   length cap, the cap may have cut them while live: a gap. Below the
///   cap, only age trimmed the log, and what age trims can no longer hold
///   a live ban.
/// - A reader ahead of the log's last id reads the whole log again.
/// - So does a reader whose primary's history is not the one it read
///   under (`other_history`: its replication id changed, a failover or a
///   split brain healed): ids on either side of the change say nothing of
///   what the other side holds, so entries behind its id may be new to it.
///
/// Reading again what was read is harmless: a ban applied twice runs only
/// its remaining time and charges its sender once.
pub fn resume(
    saved: Option<StreamId>,
    state: LogState,
    length: u64,
    cap: u64,
    other_history: bool,
) -> Resume {
    let whole = Resume {
        after: StreamId::ZERO,
        gap: false,
        reset: false,
    };
    let Some(saved) = saved else {
        return whole;
    };
    if saved > state.last_generated || other_history {
        return Resume {
            reset: true,
            ..whole
        };
    }
    let cut_after_saved = match state.first {
        Some(first) => saved < first && saved < state.last_generated,
        // Empty: anything after `saved` was trimmed.
        None => saved < state.last_generated,
    };
    Resume {
        after: saved,
        gap: cut_after_saved && length >= cap,
        reset: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    const NOW: u64 = 1_000_000;
    const CAP: u64 = 4096;

    #[test]
    fn ids_parse_print_and_order_as_redis_does() {
        let a: StreamId = "1700000000000-3".parse().unwrap();
        assert_eq!(a, id(1_700_000_000_000, 3));
        assert_eq!(a.to_string(), "1700000000000-3");
        assert!(id(5, 9) < id(6, 0));
        assert!(id(6, 0) < id(6, 1));
        for bad in [
            "",
            "5",
            "5-",
            "-5",
            "a-1",
            "1-b",
            "1-2-3",
            "+1-2",
            "18446744073709551616-0",
        ] {
            assert_eq!(bad.parse::<StreamId>(), Err(BadStreamId), "{bad}");
        }
    }

    #[test]
    fn a_fresh_reader_reads_the_whole_log() {
        let state = LogState {
            first: Some(id(NOW - 30_000, 0)),
            last_generated: id(NOW, 0),
        };
        assert_eq!(
            resume(None, state, CAP, CAP, false),
            Resume {
                after: StreamId::ZERO,
                gap: false,
                reset: false
            }
        );
    }

    #[test]
    fn a_reader_behind_resumes_after_its_own_id() {
        let state = LogState {
            first: Some(id(NOW - 50_000, 0)),
            last_generated: id(NOW, 4),
        };
        let saved = id(NOW - 10_000, 2);
        let r = resume(Some(saved), state, CAP, CAP, false);
        assert_eq!((r.after, r.gap, r.reset), (saved, false, false));
        // Up to date: the same.
        let r = resume(Some(id(NOW, 4)), state, CAP, CAP, false);
        assert_eq!((r.after, r.gap, r.reset), (id(NOW, 4), false, false));
    }

    #[test]
    fn entries_cut_below_the_cap_are_no_gap_entries_cut_at_it_are() {
        let saved = id(NOW - 200_000, 0);
        let state = LogState {
            first: Some(id(NOW - 1_000, 0)),
            last_generated: id(NOW, 0),
        };
        // Below the cap: only age trimmed it.
        let r = resume(Some(saved), state, 10, CAP, false);
        assert_eq!((r.after, r.gap, r.reset), (saved, false, false));
        // At the cap: the cap may have cut live entries.
        let r = resume(Some(saved), state, CAP, CAP, false);
        assert!(r.gap && !r.reset);
        assert_eq!(r.after, saved, "it reads on from the oldest kept");
        // Its own entry is the oldest kept: nothing was cut after it.
        let r = resume(Some(id(NOW - 1_000, 0)), state, CAP, CAP, false);
        assert!(!r.gap);
    }

    #[test]
    fn a_reader_ahead_of_the_log_reads_the_whole_log_again() {
        // A promoted replica that missed the last entries.
        let behind = LogState {
            first: Some(id(NOW - 5_000, 0)),
            last_generated: id(NOW - 1_000, 0),
        };
        let r = resume(Some(id(NOW - 500, 0)), behind, CAP, CAP, false);
        assert_eq!((r.after, r.gap, r.reset), (StreamId::ZERO, false, true));
        // A log that is gone (deleted, or a fresh primary).
        let gone = LogState {
            first: None,
            last_generated: StreamId::ZERO,
        };
        let r = resume(Some(id(NOW - 500, 0)), gone, 0, CAP, false);
        assert_eq!((r.after, r.reset), (StreamId::ZERO, true));
    }

    /// A split brain healed: the instance read up to T0+50 on the old
    /// primary, cut off with it, while the new one took an entry at T0+20
    /// and one at T0+55. Its id is behind the new primary's last, but the
    /// T0+20 entry was never its to read: on another history, it reads the
    /// whole log again.
    #[test]
    fn a_reader_on_another_history_reads_the_whole_log_again() {
        let healed = LogState {
            first: Some(id(NOW - 30_000, 0)),
            last_generated: id(NOW + 55, 0),
        };
        let saved = id(NOW + 50, 0);
        let r = resume(Some(saved), healed, 100, CAP, false);
        assert_eq!((r.after, r.reset), (saved, false), "the same history");
        let r = resume(Some(saved), healed, 100, CAP, true);
        assert_eq!((r.after, r.gap, r.reset), (StreamId::ZERO, false, true));
        // A fresh reader reads it all anyway, with nothing to reset.
        assert!(!resume(None, healed, 100, CAP, true).reset);
    }

    #[test]
    fn an_empty_log_that_was_written_is_read_on_from_the_saved_id() {
        let empty = LogState {
            first: None,
            last_generated: id(NOW - 100_000, 0),
        };
        let r = resume(Some(id(NOW - 100_000, 0)), empty, 0, CAP, false);
        assert_eq!(
            (r.after, r.gap, r.reset),
            (id(NOW - 100_000, 0), false, false)
        );
        let r = resume(Some(id(NOW - 200_000, 0)), empty, 0, CAP, false);
        assert!(!r.gap, "emptied by age");
    }
}
