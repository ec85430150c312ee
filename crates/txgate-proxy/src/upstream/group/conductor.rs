//! Following op-conductor's leader (`upstream.conductor_url`).
//!
//! Behind op-conductor (the OP Stack's sequencer high availability:
//! several op-node and op-geth pairs, one of them active), only the
//! leader's sequencer builds blocks; a standby's op-geth still takes
//! transactions, into a pool no block is built from. So each probe round
//! asks op-conductor who leads, and submissions go only to the sequencer
//! whose `conductor_id` is the leader's raft server ID
//! ([`GroupState::set_leader`]).
//!
//! **The wire**, as op-conductor's RPC serves it (JSON-RPC over HTTP,
//! namespace `conductor`): the request is
//! `{"jsonrpc":"2.0","id":1,"method":"conductor_leaderWithID","params":[]}`,
//! the answer's `result` an object `{"id": <raft server ID>, "addr": <raft
//! address>, "suffrage": <0 voter, 1 nonvoter>}`. A conductor that knows no
//! leader (an election under way) answers an empty `id`; one whose leader
//! was overridden by hand answers an ID no sequencer has.
//!
//! **Which conductor.** Every op-conductor instance answers for the whole
//! cluster (its raft peers tell it the leader), so one URL would do; but
//! op-conductor runs beside each sequencer, and a lone URL would go dark
//! with its host, just when leadership moves. Several URLs are asked in
//! turn, starting with the one that answered last, until one names a
//! sequencer of the group, all within `upstream.probe_timeout_ms`; a round
//! in which none did starts the next at the following URL, so a conductor
//! that only times out does not take every round.
//!
//! **No answer.** A conductor unreachable, an error, an empty or unknown
//! ID from every URL: the last known leader stays, however long it takes.
//! A sequencer that lost leadership refuses to sequence but its op-geth
//! still takes transactions, so a stale leader costs the submissions sent
//! to it until op-conductor answers again; dropping the leader would cost
//! every submission (503), and a conductor outage is not a leadership
//! change. Until op-conductor first names a leader none is known, and
//! submissions have no node (503, `/readyz` not ready): sent to any
//! sequencer, those a standby took would be lost without a word.
//!
//! Each miss counts in `txgate_upstream_conductor_errors_total{reason}`;
//! `txgate_upstream_leader{node}` is 1 for the leader, 0 for the other
//! sequencers. A change of leader is logged once, by node name; a URL
//! never is (it may hold a key), a conductor is named by its place in
//! the list.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::IntGauge;
use serde::Deserialize;
use txgate_config::{AdmissionConfig, NodeSet, UpstreamConfig};

use super::GroupState;
use crate::metrics::{ConductorMiss, Metrics};
use crate::upstream::Upstream;

/// The question, as op-conductor's own client asks it.
const ASK: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"conductor_leaderWithID","params":[]}"#;

/// The leader before op-conductor first named one: an index no node has,
/// which leaves submissions no node ([`txgate_nodes::Group::set_leader`]).
const NONE_YET: usize = usize::MAX;

/// The sequencers by the raft server ID op-conductor knows them by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ids(Vec<(String, usize)>);

impl Ids {
    /// The `conductor_id` of each node of `set` that has one, with its
    /// index.
    pub(crate) fn new(set: &NodeSet) -> Ids {
        Ids(set
            .nodes()
            .iter()
            .enumerate()
            .filter_map(|(i, node)| Some((node.conductor_id.clone()?, i)))
            .collect())
    }

    /// The node whose `conductor_id` is `id`, exactly (raft IDs are
    /// compared as written).
    pub(crate) fn index(&self, id: &str) -> Option<usize> {
        self.0.iter().find(|(own, _)| own == id).map(|&(_, i)| i)
    }
}

/// What a `conductor_leaderWithID` answer says: the leader's raft server
/// ID (empty: no leader known); `None` when it is no answer to that call
/// (not JSON, an error object, no result).
pub(crate) fn read(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer {
        result: Option<ServerInfo>,
    }
    #[derive(Deserialize)]
    struct ServerInfo {
        id: String,
    }
    serde_json::from_slice::<Answer>(body)
        .ok()?
        .result
        .map(|info| info.id)
}

/// Why one conductor named no sequencer of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Miss {
    /// No HTTP answer, or not a 2xx.
    Call,
    /// An answer that is not a `conductor_leaderWithID` result.
    Answer,
    /// An empty ID: it knows no leader.
    NoLeader,
    /// An ID no sequencer has.
    UnknownId(String),
}

impl Miss {
    fn kind(&self) -> ConductorMiss {
        match self {
            Miss::Call => ConductorMiss::Call,
            Miss::Answer => ConductorMiss::Answer,
            Miss::NoLeader => ConductorMiss::NoLeader,
            Miss::UnknownId(_) => ConductorMiss::UnknownId,
        }
    }
}

/// What the rounds so far left.
#[derive(Debug)]
struct Follow {
    /// The conductor asked first next round.
    first: usize,
    /// The leader followed, once one was named.
    leader: Option<usize>,
    /// Whether the last round got a leader; `None` before the first.
    answered: Option<bool>,
    /// The last unknown ID logged, so that one is logged once.
    unknown: Option<String>,
}

/// The clients to op-conductor and the leader followed.
#[derive(Debug)]
pub struct Conductor {
    clients: Vec<Upstream>,
    ids: Ids,
    follow: Mutex<Follow>,
    /// Each sequencer's `txgate_upstream_leader{node}`.
    gauges: Vec<(usize, IntGauge)>,
    metrics: Arc<Metrics>,
}

impl Conductor {
    /// A client to each of `set`'s conductors (`[upstream.tls]` for an
    /// `https://` one), or `None` when it has none. Until one names a
    /// leader, `state`'s submissions have no node.
    pub fn new(
        set: &NodeSet,
        up: &UpstreamConfig,
        admission: &AdmissionConfig,
        state: &GroupState,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Conductor>, String> {
        if set.conductors().is_empty() {
            return Ok(None);
        }
        let mut own = up.clone();
        own.pool_max_idle = 1;
        // Its own registry: a conductor's calls are not the nodes' calls,
        // and must not show in txgate_upstream_errors_total.
        let private = Arc::new(Metrics::new());
        let clients = set
            .conductors()
            .iter()
            .enumerate()
            .map(|(n, url)| {
                Upstream::new(url, &own, admission, private.clone())
                    .map_err(|e| format!("upstream.conductor_url ({}): {e}", n + 1))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let gauges = set
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, node)| node.conductor_id.is_some())
            .map(|(i, node)| {
                let gauge = metrics.nodes.leader(&node.name);
                gauge.set(0);
                (i, gauge)
            })
            .collect();
        state.set_leader(Some(NONE_YET));
        Ok(Some(Conductor {
            clients,
            ids: Ids::new(set),
            follow: Mutex::new(Follow {
                first: 0,
                leader: None,
                answered: None,
                unknown: None,
            }),
            gauges,
            metrics,
        }))
    }

    /// One round: asks the conductors in turn, within `timeout` in all,
    /// and follows the first leader one of them names; none named, the
    /// last known leader stays (see the module doc).
    pub async fn follow(&self, state: &GroupState, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let first = self.lock().first;
        let count = self.clients.len();
        let mut named = None;
        for k in 0..count {
            let c = (first + k) % count;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.ask(c, left).await {
                Ok(leader) => {
                    named = Some((c, leader));
                    break;
                }
                Err(miss) => self.missed(c, miss),
            }
        }
        let mut follow = self.lock();
        let Some((c, leader)) = named else {
            follow.first = (first + 1) % count;
            if follow.answered != Some(false) {
                tracing::warn!(
                    leader = follow.leader.map_or("none", |i| state.name(i)),
                    "op-conductor named no sequencer of the group: submissions keep going to \
                     the last known leader"
                );
            }
            follow.answered = Some(false);
            return;
        };
        follow.first = c;
        if follow.answered == Some(false) {
            tracing::info!(conductor = c + 1, "op-conductor answers again");
        }
        follow.answered = Some(true);
        if follow.leader == Some(leader) {
            return;
        }
        tracing::info!(
            node = state.name(leader),
            previous = follow.leader.map_or("none", |i| state.name(i)),
            "following op-conductor's leader: submissions go to it"
        );
        follow.leader = Some(leader);
        for (i, gauge) in &self.gauges {
            gauge.set(i64::from(*i == leader));
        }
        state.set_leader(Some(leader));
    }

    /// The leader conductor `c` names, within `timeout`.
    async fn ask(&self, c: usize, timeout: Duration) -> Result<usize, Miss> {
        let reply = self.clients[c]
            .call_within(Bytes::from_static(ASK), Some(timeout))
            .await
            .map_err(|_| Miss::Call)?;
        if !reply.status.is_success() {
            return Err(Miss::Call);
        }
        match read(&reply.body) {
            None => Err(Miss::Answer),
            Some(id) if id.is_empty() => Err(Miss::NoLeader),
            Some(id) => self.ids.index(&id).ok_or(Miss::UnknownId(id)),
        }
    }

    /// Counts a miss of conductor `c`; an unknown ID is logged once.
    fn missed(&self, c: usize, miss: Miss) {
        self.metrics.nodes.conductor_error(miss.kind());
        if let Miss::UnknownId(id) = miss {
            let mut follow = self.lock();
            if follow.unknown.as_deref() != Some(id.as_str()) {
                tracing::warn!(
                    conductor = c + 1,
                    id = id.as_str(),
                    "op-conductor's leader is no sequencer's conductor_id: check \
                     [[upstream.nodes]] conductor_id; the last known leader stays"
                );
                follow.unknown = Some(id);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Follow> {
        self.follow.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
