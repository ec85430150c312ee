//! Which nodes may take a call ([`route`]) and which one of them takes it
//! ([`choose()`]).
//!
//! Routing by role, with the fallbacks:
//!
//! - [`Role::Replica`] (reads): the in-replicas; when no replica is in, the
//!   in-sequencers (any of them, leader or not: a standby sequencer follows
//!   the chain and serves reads). Reads keep working on a group whose
//!   replicas are all down, at the cost of load on the sequencers.
//! - [`Role::Builder`] (bundles): the in-builders when the group has any
//!   builder node at all; only when it has none, the sequencers. A group
//!   with builders whose builders are all out has no healthy upstream for
//!   bundles: a bundle sent to the sequencer instead would not be a bundle
//!   (no atomicity, no revert protection), so falling back would change
//!   what the client asked for, where a group without builders has said
//!   so in its configuration.
//! - [`Role::Sequencer`] (submissions, and reads of the pending state):
//!   the in-sequencers; while a leader is set (op-conductor's active
//!   sequencer), only the leader, and only if it is in: a standby sequencer
//!   would accept a transaction and never include it. The fallback of
//!   bundles to sequencers follows the same rule.
//!
//! With `at_head`, a node counts only if it may answer at the agreed head
//! ([`Snapshot::eligible`]), for reads tagged `latest` rewritten to it; the
//! fallbacks are judged on the same test. No candidate: the caller answers
//! 503, -32603 "no healthy upstream".
//!
//! Choice, weighted least-outstanding: among the candidates not excluded
//! (nodes this call already tried), the node with the lowest
//! `(outstanding + 1) / weight`, where `outstanding` is the calls in flight
//! on the node. A slow node holds its calls longer, so it has more in
//! flight and is chosen less, with no latency measured; a node of weight 2
//! takes twice the calls of a node of weight 1 at the same load. A weight
//! of 0 is never chosen (a node drained). Ties go to the node whose index,
//! mixed with `tiebreak`, is lowest: deterministic given the inputs, and a
//! counter passed as `tiebreak` spreads tied calls over the tied nodes
//! rather than always sending them to the first.

use crate::Role;
use crate::group::Snapshot;

/// The node to send a call to: the candidate `(index, weight,
/// outstanding)` not in `exclude` with the lowest `(outstanding + 1) /
/// weight`, ties broken by `tiebreak`; `None` when there is none (weights
/// of 0 are never chosen).
pub fn choose(
    candidates: impl IntoIterator<Item = (usize, u32, u64)>,
    exclude: &[usize],
    tiebreak: u64,
) -> Option<usize> {
    let mut best: Option<(usize, u32, u128, u64)> = None;
    for (index, weight, outstanding) in candidates {
        if weight == 0 || exclude.contains(&index) {
            continue;
        }
        let load = u128::from(outstanding) + 1;
        let rank = mix(tiebreak, index);
        let better = match best {
            None => true,
            Some((_, best_weight, best_load, best_rank)) => {
                // load / weight < best_load / best_weight, exactly.
                let ours = load * u128::from(best_weight);
                let theirs = best_load * u128::from(weight);
                ours < theirs || (ours == theirs && rank < best_rank)
            }
        };
        if better {
            best = Some((index, weight, load, rank));
        }
    }
    best.map(|(index, ..)| index)
}

/// The tie-break rank of `index` under `tiebreak` (splitmix64).
fn mix(tiebreak: u64, index: usize) -> u64 {
    let mut z = tiebreak
        .wrapping_add((index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The nodes that may take a call of `role`, with the fallbacks between
/// roles and the leader rule (see the module doc); with `at_head`, only
/// nodes at or above the agreed head.
pub fn route(role: Role, snapshot: &Snapshot, at_head: bool) -> Route<'_> {
    let usable = |i: usize| {
        if at_head {
            snapshot.eligible(i)
        } else {
            snapshot.is_in(i)
        }
    };
    let has = |r: Role, need_usable: bool| {
        (0..snapshot.len()).any(|i| snapshot.role(i) == Some(r) && (!need_usable || usable(i)))
    };
    let submissions = || match snapshot.leader() {
        Some(leader) => Target::Only(leader),
        None => Target::Role(Role::Sequencer),
    };
    let target = match role {
        Role::Replica if has(Role::Replica, true) => Target::Role(Role::Replica),
        Role::Replica => Target::Role(Role::Sequencer),
        Role::Builder if has(Role::Builder, false) => Target::Role(Role::Builder),
        Role::Builder | Role::Sequencer => submissions(),
    };
    Route {
        snapshot,
        target,
        at_head,
        next: 0,
    }
}

#[derive(Debug, Clone, Copy)]
enum Target {
    Role(Role),
    Only(usize),
}

/// The indices of the nodes a call may go to, from [`route`].
#[derive(Debug, Clone)]
pub struct Route<'a> {
    snapshot: &'a Snapshot,
    target: Target,
    at_head: bool,
    next: usize,
}

impl Iterator for Route<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.next < self.snapshot.len() {
            let i = self.next;
            self.next += 1;
            let wanted = match self.target {
                Target::Role(role) => self.snapshot.role(i) == Some(role),
                Target::Only(only) => i == only,
            };
            let usable = if self.at_head {
                self.snapshot.eligible(i)
            } else {
                self.snapshot.is_in(i)
            };
            if wanted && usable {
                return Some(i);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
