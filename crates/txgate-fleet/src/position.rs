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
    /// The reader had read past the log's last id: the primary is not the
    /// one it read from (a failover to a replica that had not every entry,
    /// or a log that was deleted). It reads the whole window again.
    pub reset: bool,
}

/// Where a reader that had read up to `saved` (`None`: never, a fresh
/// instance) resumes on a log in `state`, at `now_ms` (Unix ms), when an
/// entry older than `window_ms` can no longer hold a live ban.
///
/// - A fresh reader reads the whole window.
/// - A reader behind the log resumes after its own id; if the oldest entry
///   kept is younger than the window, entries after its id were cut by the
///   length cap while live: a gap.
/// - A reader ahead of the log's last id reads the whole window again.
///
/// Reading again what was read is harmless: a ban applied twice runs only
/// its remaining time and charges its sender once.
pub fn resume(saved: Option<StreamId>, state: LogState, now_ms: u64, window_ms: u64) -> Resume {
    let whole = Resume {
        after: StreamId::ZERO,
        gap: false,
        reset: false,
    };
    let Some(saved) = saved else {
        return whole;
    };
    if saved > state.last_generated {
        return Resume {
            reset: true,
            ..whole
        };
    }
    let edge = now_ms.saturating_sub(window_ms);
    let gap = match state.first {
        Some(first) => saved < first && first.ms > edge,
        // Empty: anything after `saved` was cut; live if the last was.
        None => saved < state.last_generated && state.last_generated.ms > edge,
    };
    Resume {
        after: saved,
        gap,
        reset: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    const WINDOW: u64 = 60_000;
    const NOW: u64 = 1_000_000;

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
    fn a_fresh_reader_reads_the_whole_window() {
        let state = LogState {
            first: Some(id(NOW - 30_000, 0)),
            last_generated: id(NOW, 0),
        };
        assert_eq!(
            resume(None, state, NOW, WINDOW),
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
        let r = resume(Some(saved), state, NOW, WINDOW);
        assert_eq!((r.after, r.gap, r.reset), (saved, false, false));
        // Up to date: the same.
        let r = resume(Some(id(NOW, 4)), state, NOW, WINDOW);
        assert_eq!((r.after, r.gap, r.reset), (id(NOW, 4), false, false));
    }

    #[test]
    fn entries_cut_by_age_are_no_gap_entries_cut_while_live_are() {
        let saved = id(NOW - 200_000, 0);
        // The oldest entry kept is at the window's edge or older: what was
        // cut before it had outlived every ban.
        let aged = LogState {
            first: Some(id(NOW - WINDOW, 0)),
            last_generated: id(NOW, 0),
        };
        assert!(!resume(Some(saved), aged, NOW, WINDOW).gap);
        // Younger than the window: the length cap cut live entries.
        let capped = LogState {
            first: Some(id(NOW - WINDOW + 1, 0)),
            last_generated: id(NOW, 0),
        };
        let r = resume(Some(saved), capped, NOW, WINDOW);
        assert!(r.gap && !r.reset);
        assert_eq!(r.after, saved, "it reads on from the oldest kept");
    }

    #[test]
    fn a_reader_ahead_of_the_log_reads_the_whole_window_again() {
        // A promoted replica that missed the last entries.
        let behind = LogState {
            first: Some(id(NOW - 5_000, 0)),
            last_generated: id(NOW - 1_000, 0),
        };
        let r = resume(Some(id(NOW - 500, 0)), behind, NOW, WINDOW);
        assert_eq!((r.after, r.gap, r.reset), (StreamId::ZERO, false, true));
        // A log that is gone (deleted, or a fresh primary).
        let gone = LogState {
            first: None,
            last_generated: StreamId::ZERO,
        };
        let r = resume(Some(id(NOW - 500, 0)), gone, NOW, WINDOW);
        assert_eq!((r.after, r.reset), (StreamId::ZERO, true));
    }

    #[test]
    fn an_empty_log_that_was_written_is_read_on_from_the_saved_id() {
        // Every entry aged out; the reader had read them all.
        let empty = LogState {
            first: None,
            last_generated: id(NOW - 100_000, 0),
        };
        let r = resume(Some(id(NOW - 100_000, 0)), empty, NOW, WINDOW);
        assert_eq!(
            (r.after, r.gap, r.reset),
            (id(NOW - 100_000, 0), false, false)
        );
        // Entries after its id, now all cut: a gap if the last was live.
        let r = resume(Some(id(NOW - 200_000, 0)), empty, NOW, WINDOW);
        assert!(!r.gap);
        let cut = LogState {
            first: None,
            last_generated: id(NOW - 1_000, 0),
        };
        let r = resume(Some(id(NOW - 200_000, 0)), cut, NOW, WINDOW);
        assert!(r.gap && !r.reset);
    }
}
