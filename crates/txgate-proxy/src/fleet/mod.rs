//! The one link to the fleet's Redis (`[redis]`), used by both things an
//! instance shares with the others through it: the sync of the per-client
//! limits and conditional rates ([`crate::limits::sync`]) and the ban
//! channel ([`crate::sidecar::shared_bans`]).
//!
//! - [`Link`] owns the client and `redis.timeout_ms`: a connect (with its
//!   PING), a subscribe, and every round trip on a connection it made end
//!   within that time, or fail as timed out; slower counts as Redis down.
//! - [`Backoff`] is the one retry rule after a failure: 100 ms doubling to
//!   a longest wait (2 s for the limits' sync, about 1 s for the ban log),
//!   each wait ±20% so a fleet does not reconnect in step.
//!
//! What each user counts stays its own: `txgate_redis_*` for the sync,
//! `txgate_fleet_bans_total` for the ban channel.

mod backoff;
mod link;

pub use backoff::Backoff;
pub use link::Link;
