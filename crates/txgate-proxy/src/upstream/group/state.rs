//! What every worker shares about the group: the health of each node
//! (one [`Group`] behind a lock, written by the probe task and by failed
//! calls), the snapshot the hot path reads, each node's calls in flight,
//! and the clients that submitted lately (read-your-writes).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use txgate_config::{NodeSet, UpstreamConfig};
use txgate_nodes::{
    Group, HealthRules, Millis, Passive, Probe, RecentWrites, Role, Snapshot, Status,
};

use crate::metrics::{Metrics, NodeSeries};

/// Clients remembered for read-your-writes at most (an entry is an
/// address and a time: about 48 bytes).
pub const MAX_RECENT_WRITERS: usize = 65_536;

/// [`GroupState::agreed`] without a head.
const NO_HEAD: u64 = u64::MAX;

/// The process-wide state of the node group.
#[derive(Debug)]
pub struct GroupState {
    /// Node names, in the configuration's order (indexes everywhere).
    names: Vec<String>,
    roles: Vec<Role>,
    /// `[upstream] url` alone: one node that serves everything, used
    /// whatever its probe says (today's behaviour).
    short_form: bool,
    overrides: BTreeMap<String, Role>,
    group: Mutex<Group>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// The snapshot's agreed head, for the hot path's one read per call
    /// ([`NO_HEAD`]: none).
    agreed: AtomicU64,
    outstanding: Vec<AtomicU64>,
    /// Whether the node has failed real calls since its last good one
    /// (only then does a good call take the group's lock).
    failing: Vec<AtomicBool>,
    tiebreak: AtomicU64,
    writes: Option<Mutex<RecentWrites<IpAddr>>>,
    series: Vec<NodeSeries>,
    /// Each node's state as last logged.
    logged: Mutex<Vec<Option<Status>>>,
    epoch: Instant,
    metrics: Arc<Metrics>,
}

/// A node's role in the pure crate's terms.
pub(crate) fn role(role: txgate_config::Role) -> Role {
    match role {
        txgate_config::Role::Sequencer => Role::Sequencer,
        txgate_config::Role::Replica => Role::Replica,
        txgate_config::Role::Builder => Role::Builder,
    }
}

impl GroupState {
    /// The group of `nodes`, judged by `[upstream]`'s rules; every node
    /// starts out until its probes bring it in (one that never reported a
    /// head is not healthy), except in the short form.
    pub fn new(
        nodes: &NodeSet,
        up: &UpstreamConfig,
        chain_ids: &[u64],
        metrics: Arc<Metrics>,
    ) -> Self {
        let specs = nodes.nodes();
        let rules = HealthRules {
            fail_after: up.fail_after,
            recover_after: up.recover_after,
            max_block_lag: up.max_block_lag,
            max_head_age: millis(up.max_head_age),
            chain_ids: chain_ids.to_vec(),
            passive_after: txgate_nodes::PASSIVE_AFTER,
        };
        let group = Group::new(rules, specs.iter().map(|n| (role(n.role), n.weight)));
        let snapshot = Arc::new(group.snapshot());
        let series = specs
            .iter()
            .map(|n| metrics.nodes.node(&n.name, n.role.as_str()))
            .collect();
        GroupState {
            names: specs.iter().map(|n| n.name.clone()).collect(),
            roles: specs.iter().map(|n| role(n.role)).collect(),
            short_form: nodes.is_short_form(),
            overrides: nodes
                .methods()
                .iter()
                .map(|(m, r)| (m.clone(), role(*r)))
                .collect(),
            group: Mutex::new(group),
            agreed: AtomicU64::new(snapshot.agreed_head().unwrap_or(NO_HEAD)),
            snapshot: RwLock::new(snapshot),
            outstanding: specs.iter().map(|_| AtomicU64::new(0)).collect(),
            failing: specs.iter().map(|_| AtomicBool::new(false)).collect(),
            tiebreak: AtomicU64::new(0),
            writes: up
                .read_your_writes
                .filter(|_| !nodes.is_short_form())
                .map(|window| Mutex::new(RecentWrites::new(millis(window), MAX_RECENT_WRITERS))),
            series,
            logged: Mutex::new(vec![None; specs.len()]),
            epoch: Instant::now(),
            metrics,
        }
    }

    /// Whether this is the one-node short form.
    pub fn is_short_form(&self) -> bool {
        self.short_form
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the group has no node (never: validation requires one).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Node `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("", String::as_str)
    }

    /// Node `i`'s role.
    pub fn node_role(&self, i: usize) -> Option<Role> {
        self.roles.get(i).copied()
    }

    /// The role a call of `method` goes to, before read-your-writes.
    pub fn role_of(&self, method: &str, pending_subscription: bool) -> Role {
        txgate_nodes::role(method, pending_subscription, &self.overrides)
    }

    /// The snapshot the hot path routes by.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Calls in flight on node `i`.
    pub fn outstanding(&self, i: usize) -> u64 {
        self.outstanding
            .get(i)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// A number that changes from call to call, to spread ties.
    pub fn tiebreak(&self) -> u64 {
        self.tiebreak.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a call to node `i` until the guard drops.
    pub fn begin(&self, i: usize) -> InFlight<'_> {
        if let Some(n) = self.outstanding.get(i) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(s) = self.series.get(i) {
            s.calls.inc();
        }
        InFlight {
            state: self,
            node: i,
        }
    }

    /// Node `i`'s series.
    pub fn series(&self, i: usize) -> Option<&NodeSeries> {
        self.series.get(i)
    }

    /// The process's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The time on the group's clock.
    pub fn now(&self) -> Millis {
        millis(self.epoch.elapsed())
    }

    /// A probe result for node `i`.
    pub fn probe(&self, i: usize, probe: Probe) {
        let now = self.now();
        let mut group = self.lock();
        let update = group.probe(i, now, probe);
        if update.newly_wrong_chain {
            tracing::error!(
                node = self.name(i),
                "upstream node is on another chain than the group: never used"
            );
        }
        if update.changed {
            self.publish(&group);
        }
        self.log_state(&group, i);
    }

    /// Logs node `i`'s state when it differs from the last one logged: an
    /// operator sees each node come in, go out and why, and a node that is
    /// down at start (out, never reported a head) once. Called with the
    /// group locked, so that the lines of a probe and of a failed call that
    /// race come out in the order their changes were made.
    fn log_state(&self, group: &Group, i: usize) {
        let Some(state) = group.state(i) else {
            return;
        };
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = logged.get_mut(i) else {
            return;
        };
        if *last == Some(state.status) {
            return;
        }
        *last = Some(state.status);
        match state.status {
            Status::In => tracing::info!(
                node = self.name(i),
                role = state.role.as_str(),
                head = state.head,
                "upstream node in"
            ),
            Status::Out(reason) => tracing::warn!(
                node = self.name(i),
                role = state.role.as_str(),
                reason = reason.as_str(),
                head = state.head,
                lag = state.lag,
                "upstream node out"
            ),
        }
    }

    /// What a real call to node `i` said about it.
    pub fn passive(&self, i: usize, signal: Passive) {
        let Some(failing) = self.failing.get(i) else {
            return;
        };
        if signal == Passive::Ok {
            // The common case takes no lock.
            if !failing.swap(false, Ordering::AcqRel) {
                return;
            }
        } else {
            failing.store(true, Ordering::Release);
        }
        let now = self.now();
        let mut group = self.lock();
        let update = group.passive(i, now, signal);
        if update.changed {
            self.publish(&group);
            self.log_state(&group, i);
        }
    }

    /// Follows op-conductor's leader: submissions go only to it.
    pub fn set_leader(&self, leader: Option<usize>) {
        let mut group = self.lock();
        let update = group.set_leader(leader);
        if update.changed {
            self.publish(&group);
        }
    }

    /// Each node's state, for `/readyz`: name, role, state, reason, head,
    /// lag.
    pub fn states(&self) -> Vec<(String, txgate_nodes::NodeState)> {
        let group = self.lock();
        (0..self.names.len())
            .filter_map(|i| group.state(i).map(|s| (self.names[i].clone(), s)))
            .collect()
    }

    /// The name of the sequencer op-conductor names leader (`None`: no
    /// conductor followed, or none named yet).
    pub fn leader_name(&self) -> Option<&str> {
        // Before op-conductor first names one, the leader is an index out
        // of range (submissions go nowhere): no name.
        self.snapshot()
            .leader()
            .and_then(|i| self.names.get(i))
            .map(String::as_str)
    }

    /// The group's agreed head.
    pub fn agreed_head(&self) -> Option<u64> {
        match self.agreed.load(Ordering::Acquire) {
            NO_HEAD => None,
            head => Some(head),
        }
    }

    /// Whether every kind of call has somewhere to go: submissions a
    /// healthy sequencer (or the leader), reads a healthy replica or the
    /// sequencer. The short form is ready while its node answers probes.
    pub fn ready(&self) -> bool {
        let snapshot = self.snapshot();
        txgate_nodes::route(Role::Sequencer, &snapshot, false)
            .next()
            .is_some()
            && txgate_nodes::route(Role::Replica, &snapshot, false)
                .next()
                .is_some()
    }

    /// Records a submission by `client` (read-your-writes).
    pub fn wrote(&self, client: IpAddr) {
        if let Some(writes) = &self.writes {
            let now = self.now();
            writes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .wrote(client, now);
        }
    }

    /// Whether `client` submitted within the read-your-writes window.
    pub fn wrote_lately(&self, client: IpAddr) -> bool {
        match &self.writes {
            Some(writes) => {
                let now = self.now();
                let writes = writes.lock().unwrap_or_else(|p| p.into_inner());
                !writes.is_empty() && writes.recent(&client, now)
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Group> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes the group's view to the hot path and the metrics, with
    /// the group locked (so two publishers cannot store their snapshots
    /// out of order).
    fn publish(&self, group: &Group) {
        let snapshot = Arc::new(group.snapshot());
        for (i, series) in self.series.iter().enumerate() {
            if let Some(state) = group.state(i) {
                series.up.set(i64::from(state.status.is_in()));
                series.head.set(state.head.map_or(0, |h| h as i64));
                series.lag.set(state.lag.map_or(0, |l| l as i64));
            }
        }
        self.metrics
            .nodes
            .agreed_head
            .set(snapshot.agreed_head().map_or(0, |h| h as i64));
        // The snapshot first: a reader that sees the new head routes by a
        // snapshot that knows it (the head only rises).
        let head = snapshot.agreed_head().unwrap_or(NO_HEAD);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = snapshot;
        self.agreed.store(head, Ordering::Release);
    }
}

/// A call in flight on one node.
#[derive(Debug)]
pub struct InFlight<'a> {
    state: &'a GroupState,
    node: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.state.outstanding.get(self.node) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A duration on the group's millisecond clock.
pub(crate) fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}
