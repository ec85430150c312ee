//! txgate's screening logic, with no I/O and no async, so that every piece
//! is easy to test and to bench. Time is passed in as milliseconds
//! ([`Millis`]), never read from a clock, so tests drive it like paused
//! time; so is the wall clock ([`UnixMillis`]), which only what crosses
//! hosts is told in (a ban's start).
//!
//! - [`tx`]: hex, the tx hash from raw bytes, EIP-2718 decoding, the
//!   chain-id allow-list.
//! - [`recover`]: sender recovery with libsecp256k1, high-s refused.
//! - [`fingerprint`]: the fingerprint of a call and its value and gas
//!   buckets.
//! - [`ttl`]: the bounded, expiring map behind the recent-failure, sender
//!   and pending caches.
//! - [`wall`]: wall-clock time, which a ban's start is told in (it crosses
//!   hosts and restarts), and what is left of a life that started then.
//! - [`bloom`]: the counting bloom filter, exact about absence.
//! - [`denied`]: denied fingerprints, a counting bloom in front of sharded
//!   maps.
//! - [`backpressure`]: token buckets per sender, charged by invalidations.
//! - [`assertion`]: assertion versions and cooldowns with a trickle.
//! - [`hot`]: the calls that drew an invalidation lately.
//! - [`engine`]: [`Screen`], the state and the stages in order, and
//!   [`Screen::apply`] for batches of invalidations.
//! - [`stage`]: the stages of the request path, and their order, written
//!   once.
//! - [`snapshot`]: the ban snapshot format (a restart forgets no ban).
//! - [`keyed`]: the hasher of every map, seeded from the OS.
//! - `shard`: the sharding shared by the maps.

pub mod assertion;
pub mod backpressure;
pub mod bloom;
pub mod denied;
pub mod engine;
pub mod fingerprint;
pub mod forwarded;
pub mod hot;
pub mod keyed;
pub mod recover;
mod shard;
pub mod snapshot;
pub mod stage;
pub mod ttl;
pub mod tx;
pub mod wall;

pub use assertion::AssertionKey;
pub use engine::{
    Admitted, Applied, BanView, Candidate, CooldownView, FailureView, Invalidation, PoolTx,
    PoolVerdict, Reason, Rejection, Screen, ScreenSettings, SenderView, Sizes, UnitRejection,
};
pub use fingerprint::Fingerprint;
pub use recover::{SignatureError, recover_sender};
pub use ttl::{Millis, millis};
pub use tx::{DecodeError, Tx, check_chain_id, decode, decode_hex, decode_with_hash, tx_hash};
pub use wall::{MAX_CLOCK_SKEW, UnixMillis, unix_millis};
