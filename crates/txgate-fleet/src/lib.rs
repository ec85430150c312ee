//! The fleet's ban log, with no I/O.
//!
//! Bans that reach one instance only (a failure report, a result-stream
//! failure) are appended to a Redis stream that every instance reads from
//! the last entry it applied. This crate holds what needs no connection:
//! the entries' wire format ([`entry`]) and where a reader resumes after a
//! reconnect, a restart or a failover ([`position`]).

pub mod entry;
pub mod position;

pub use position::{BadStreamId, LogPosition, LogState, Resume, StreamId, resume};
