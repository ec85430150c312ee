//! txgate's view of a group of nodes, with no I/O, no async and no clock:
//! the proxy probes each node every interval (`eth_chainId`,
//! `eth_blockNumber`, `eth_syncing`), reports the results and what its real
//! calls saw, and this crate decides which nodes serve and which one takes
//! each call. Time is passed in as milliseconds ([`Millis`]) on the
//! caller's monotonic clock, so tests drive it like paused time.
//!
//! A group has one or more sequencers (they take submissions), replicas
//! (they serve reads) and optionally builders (they take bundles), each a
//! [`Role`].
//!
//! - [`health`]: the rules of one node's health ([`HealthRules`]): a node
//!   is out until it has reported a head and passed `recover_after` good
//!   probes in a row; it goes out after `fail_after` failed probes, or at
//!   once when it syncs, lags, stands still while others advance, answers
//!   for another chain, or fails real calls.
//! - [`group`]: [`Group`], the nodes together: it applies probes and
//!   passive signals, judges lag and staleness against the other nodes, and
//!   keeps the [`Snapshot`] the proxy publishes to its hot path, saying on
//!   each update whether that snapshot changed.
//! - [`head`]: the agreed head, the highest block a strict majority of the
//!   in-nodes has reached, which never goes down for clients.
//! - [`choose`](mod@choose): which nodes may take a call of a role ([`route`], with the
//!   fallbacks between roles and the sequencer leader), and which of them
//!   takes it ([`choose()`]: weighted least-outstanding).
//! - [`writes`]: [`RecentWrites`], the bounded table of clients that
//!   submitted lately, whose reads of their own writes go to the sequencer.
//! - [`methods`]: the role of each JSON-RPC method, and when a read must go
//!   to the sequencer.
//!
//! ```
//! use txgate_nodes::{Group, HealthRules, Probe, Role, choose, route};
//! let rules = HealthRules {
//!     fail_after: 3,
//!     recover_after: 2,
//!     max_block_lag: 10,
//!     max_head_age: 30_000,
//!     chain_ids: vec![10],
//!     passive_after: 5,
//! };
//! let mut group = Group::new(rules, [(Role::Sequencer, 1), (Role::Replica, 1)]);
//! let ok = Probe::Ok { chain_id: 10, head: 100, syncing: false };
//! for now in [0, 1_000] {
//!     let _ = group.probe(0, now, ok);
//!     let _ = group.probe(1, now, ok);
//! }
//! let snapshot = group.snapshot();
//! assert_eq!(snapshot.agreed_head(), Some(100));
//! let replicas = route(Role::Replica, &snapshot, true).map(|i| (i, snapshot.weight(i), 0));
//! assert_eq!(choose(replicas, &[], 0), Some(1));
//! ```

pub mod choose;
pub mod group;
pub mod head;
pub mod health;
pub mod methods;
pub mod writes;

pub use choose::{Route, choose, route};
pub use group::{Group, NodeState, Snapshot, Update};
pub use head::{AgreedHead, quorum_head};
pub use health::{HealthRules, PASSIVE_AFTER, Passive, Probe, Reason, Status};
pub use methods::{default_role, needs_sequencer, reads_own_writes, role};
pub use writes::RecentWrites;

/// Milliseconds on the caller's monotonic clock (the same unit as
/// `txgate_screen::Millis`).
pub type Millis = u64;

/// What a node is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Takes submissions (raw transactions), and holds the pending state.
    Sequencer,
    /// Serves reads.
    Replica,
    /// Takes bundles.
    Builder,
}

impl Role {
    /// The role's name in configuration and on `/readyz`: `sequencer`,
    /// `replica`, `builder`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Sequencer => "sequencer",
            Role::Replica => "replica",
            Role::Builder => "builder",
        }
    }
}
