//! Per-client rate limits for txgate, with no I/O and injected time.
//!
//! - [`gcra`]: one rate as one number per client (GCRA), all-or-nothing
//!   charges of any cost (a batch counts every call).
//! - [`table`]: the bounded table of clients, by IP (IPv6 by prefix) or by
//!   API key, whose eviction an address-rotating attacker cannot steer;
//!   optionally keeping each client's usage for a fleet-wide sync.
//! - [`sampler`]: at most a rate of events per key (log lines per reason),
//!   the rest counted.
//! - [`pacing`]: how long to hold the answer to a client that keeps
//!   sending refused submissions, and the bounded table of their streaks.
//!
//! ```
//! use txgate_limits::{Limits, Rate, Table, Slot};
//! let table = Table::new(10_000);
//! let limits = Limits { calls: Rate::new(100, 20), txs: Rate::new(5, 5) };
//! let client = txgate_limits::ip_key("203.0.113.7".parse().unwrap(), 64);
//! let now = 1_000_000_000; // nanoseconds on the caller's monotonic clock
//! assert_eq!(table.charge(client, now, &limits, 1, 0), (Slot::Own, Ok(())));
//! ```

pub mod gcra;
pub mod pacing;
pub mod sampler;
mod shards;
pub mod table;

pub use gcra::{Nanos, Rate, SharedRate};
pub use pacing::{Pacing, Streaks, Untracked};
pub use sampler::Sampler;
pub use table::{Limits, Refused, Slot, Spans, Table, Usage, Which, ip_key};
