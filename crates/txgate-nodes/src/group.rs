//! The group of nodes: their health together, the agreed head, and the
//! snapshot the proxy publishes to its hot path.
//!
//! Nodes are addressed by index, in the order given to [`Group::new`]; each
//! has a [`Role`] and a weight (its share of calls against the other nodes
//! that may take them, see [`crate::choose()`]).
//!
//! Every update ([`Group::probe`], [`Group::passive`]) applies its input to
//! one node, then judges every in-node again against the group at that
//! moment: a head that moved can make another node lag, and time passing
//! can make a node stale, without that node's own probe. The agreed head
//! follows ([`crate::head`]). The update returns whether the [`Snapshot`]
//! changed, so the proxy republishes only then; the snapshot holds what
//! the hot path reads (which nodes are in, which may answer at the agreed
//! head, the agreed head, the leader), not each node's head, so a head
//! that moves without changing any of those is no change.
//!
//! An index out of range is a caller's bug: updates with one change
//! nothing, queries about one answer as for an out-node.

use crate::head::AgreedHead;
use crate::health::{Head, Health, HealthRules, Passive, Probe, Status, assess};
use crate::{Millis, Role};

/// What an update did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct Update {
    /// The [`Snapshot`] changed: republish it.
    pub changed: bool,
    /// The node answered for another chain for the first time: log it
    /// (once; the node is never used).
    pub newly_wrong_chain: bool,
}

/// One node's state for `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeState {
    /// The node's role.
    pub role: Role,
    /// The node's weight.
    pub weight: u32,
    /// In, or out and why.
    pub status: Status,
    /// The last head the node reported.
    pub head: Option<u64>,
    /// Blocks behind the group's best head ([`Group::best_head`]).
    pub lag: Option<u64>,
    /// In, with its head at or above the agreed head.
    pub eligible: bool,
}

/// One node as the hot path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View {
    role: Role,
    weight: u32,
    is_in: bool,
    eligible: bool,
}

/// What the proxy's hot path reads, published whenever an update changed
/// it: per node its role, weight, whether it is in and whether it may
/// answer at the agreed head; the agreed head; the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    nodes: Vec<View>,
    agreed_head: Option<u64>,
    leader: Option<usize>,
}

impl Snapshot {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the group has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s role.
    pub fn role(&self, i: usize) -> Option<Role> {
        self.nodes.get(i).map(|v| v.role)
    }

    /// Node `i`'s weight (0 out of range).
    pub fn weight(&self, i: usize) -> u32 {
        self.nodes.get(i).map_or(0, |v| v.weight)
    }

    /// Whether node `i` is in.
    pub fn is_in(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|v| v.is_in)
    }

    /// Whether node `i` is in and at or above the agreed head: it may
    /// answer reads of `latest`.
    pub fn eligible(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|v| v.eligible)
    }

    /// The agreed head (what `latest` is rewritten to).
    pub fn agreed_head(&self) -> Option<u64> {
        self.agreed_head
    }

    /// The active sequencer, when one is set: submissions go only to it.
    pub fn leader(&self) -> Option<usize> {
        self.leader
    }
}

#[derive(Debug, Clone)]
struct Node {
    role: Role,
    weight: u32,
    health: Health,
}

/// A group of nodes and their health.
#[derive(Debug, Clone)]
pub struct Group {
    rules: HealthRules,
    nodes: Vec<Node>,
    /// The first accepted chain id; every node must agree with it.
    chain_id: Option<u64>,
    agreed: AgreedHead,
    leader: Option<usize>,
    view: Snapshot,
}

impl Group {
    /// A group of `nodes` (role, weight), all out ([`crate::Reason::Never`])
    /// until they report. Runs of 0 in `rules` are taken as 1.
    pub fn new(rules: HealthRules, nodes: impl IntoIterator<Item = (Role, u32)>) -> Group {
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|(role, weight)| Node {
                role,
                weight,
                health: Health::new(),
            })
            .collect();
        let mut group = Group {
            rules: rules.normalized(),
            nodes,
            chain_id: None,
            agreed: AgreedHead::new(),
            leader: None,
            view: Snapshot {
                nodes: Vec::new(),
                agreed_head: None,
                leader: None,
            },
        };
        group.view = group.build_view();
        group
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the group has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The rules, with runs of 0 taken as 1.
    pub fn rules(&self) -> &HealthRules {
        &self.rules
    }

    /// The group's chain id: the first one a node answered that the rules
    /// accept.
    pub fn chain_id(&self) -> Option<u64> {
        self.chain_id
    }

    /// Applies a probe of node `i` at `now`.
    pub fn probe(&mut self, i: usize, now: Millis, probe: Probe) -> Update {
        let Some(node) = self.nodes.get_mut(i) else {
            return Update::default();
        };
        let mut newly_wrong_chain = false;
        match probe {
            Probe::Failed => node.health.probe_failed(&self.rules),
            // Never used again: nothing to record.
            Probe::Ok { .. } if node.health.is_wrong_chain() => {}
            Probe::Ok {
                chain_id,
                head,
                syncing,
            } => {
                if self.rules.accepts(chain_id, self.chain_id) {
                    self.chain_id = Some(chain_id);
                    node.health.probe_answered(now, head, syncing);
                    let counted = self.counted_heads();
                    let verdict = self.nodes[i].health.head().and_then(|own| {
                        assess(&self.rules, now, own, best(&counted), others(&counted, i))
                    });
                    self.nodes[i].health.judge(&self.rules, verdict);
                } else {
                    newly_wrong_chain = node.health.wrong_chain();
                }
            }
        }
        Update {
            newly_wrong_chain,
            ..self.settle(now)
        }
    }

    /// Applies what a real call forwarded to node `i` saw at `now`.
    pub fn passive(&mut self, i: usize, now: Millis, signal: Passive) -> Update {
        let Some(node) = self.nodes.get_mut(i) else {
            return Update::default();
        };
        node.health.passive(&self.rules, signal);
        self.settle(now)
    }

    /// Sets the active sequencer (op-conductor's leader), or none: while
    /// one is set, submissions go only to it. An index out of range leaves
    /// submissions no node.
    pub fn set_leader(&mut self, leader: Option<usize>) -> Update {
        self.leader = leader;
        self.publish()
    }

    /// Forgets the agreed head's past values: it becomes the quorum head of
    /// the in-nodes now, lower or not (see [`crate::head`]).
    pub fn reset_head(&mut self) -> Update {
        let heads = self.in_heads();
        self.agreed.reset(heads);
        self.publish()
    }

    /// Whether node `i` is in.
    pub fn is_in(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| n.health.status().is_in())
    }

    /// Whether node `i` is in and its head is at or above the agreed head.
    pub fn eligible(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| self.eligible_node(n))
    }

    /// Node `i`'s state, for `/readyz`.
    pub fn state(&self, i: usize) -> Option<NodeState> {
        let node = self.nodes.get(i)?;
        let head = node.health.head().map(|h| h.number);
        let best = self.best_head();
        Some(NodeState {
            role: node.role,
            weight: node.weight,
            status: node.health.status(),
            head,
            lag: head.zip(best).map(|(h, b)| b.saturating_sub(h)),
            eligible: self.eligible_node(node),
        })
    }

    /// The highest head among the nodes neither on the wrong chain nor
    /// failing.
    pub fn best_head(&self) -> Option<u64> {
        best(&self.counted_heads())
    }

    /// The agreed head.
    pub fn agreed_head(&self) -> Option<u64> {
        self.agreed.get()
    }

    /// The active sequencer, when one is set.
    pub fn leader(&self) -> Option<usize> {
        self.leader
    }

    /// The snapshot for the hot path.
    pub fn snapshot(&self) -> Snapshot {
        self.view.clone()
    }

    fn eligible_node(&self, node: &Node) -> bool {
        node.health.status().is_in()
            && node
                .health
                .head()
                .is_some_and(|h| self.agreed.admits(h.number))
    }

    fn counted_heads(&self) -> Vec<Option<Head>> {
        self.nodes
            .iter()
            .map(|n| n.health.counted_head(&self.rules))
            .collect()
    }

    fn in_heads(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|n| n.health.status().is_in())
            .filter_map(|n| n.health.head().map(|h| h.number))
            .collect()
    }

    /// Judges every in-node against the group at `now`, moves the agreed
    /// head, and publishes.
    fn settle(&mut self, now: Millis) -> Update {
        let counted = self.counted_heads();
        let best = best(&counted);
        for (j, node) in self.nodes.iter_mut().enumerate() {
            if !node.health.status().is_in() {
                continue;
            }
            if let Some(own) = node.health.head() {
                let verdict = assess(&self.rules, now, own, best, others(&counted, j));
                node.health.rejudge(verdict);
            }
        }
        let heads = self.in_heads();
        self.agreed.update(heads);
        self.publish()
    }

    fn publish(&mut self) -> Update {
        let view = self.build_view();
        let changed = view != self.view;
        self.view = view;
        Update {
            changed,
            newly_wrong_chain: false,
        }
    }

    fn build_view(&self) -> Snapshot {
        Snapshot {
            nodes: self
                .nodes
                .iter()
                .map(|n| View {
                    role: n.role,
                    weight: n.weight,
                    is_in: n.health.status().is_in(),
                    eligible: self.eligible_node(n),
                })
                .collect(),
            agreed_head: self.agreed.get(),
            leader: self.leader,
        }
    }
}

fn best(counted: &[Option<Head>]) -> Option<u64> {
    counted.iter().flatten().map(|h| h.number).max()
}

fn others(counted: &[Option<Head>], me: usize) -> impl Iterator<Item = Head> + '_ {
    counted
        .iter()
        .enumerate()
        .filter(move |&(k, _)| k != me)
        .filter_map(|(_, h)| *h)
}

#[cfg(test)]
mod tests;
