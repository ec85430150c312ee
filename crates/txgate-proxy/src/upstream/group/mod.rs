//! The node group: each worker's clients to every node, and the choice of
//! node for each call.
//!
//! A call goes to a node of its role ([`txgate_nodes::route`]: reads to
//! healthy replicas, falling back to the sequencer; submissions to the
//! sequencer, or op-conductor's leader; bundle methods to a builder when
//! one is configured), weighted least-outstanding among those healthy
//! ([`txgate_nodes::choose`]), so a slow node gets less.
//!
//! **Failover.** A call whose request was never written whole (connect
//! refused or timed out, the TLS handshake failed, the write failed) goes
//! to the next healthy node of its role, always: the node cannot have
//! taken it. A read that fails after it was written (connection reset or
//! closed, timeout, a 5xx without JSON-RPC) is asked once more on another
//! node, within the call's own deadline. A submission that was written is
//! never sent again: the node may have taken it, and a second node would
//! then see it twice (HEURISTICS.md, "Node group"). Every failure is also
//! a passive health signal: a connect failure takes the node out at once,
//! a run of failed calls soon after.
//!
//! The short form (`[upstream] url` alone) is one node used whatever its
//! probe says, as before the group existed: a call it fails is answered
//! 502 or 504.
//!
//! With `upstream.conductor_url`, the probe task also follows
//! op-conductor's leader ([`conductor`]).

pub mod conductor;
mod probe;
mod state;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use txgate_config::{AdmissionConfig, NodeSet, UpstreamConfig};
use txgate_nodes::{Passive, Role};

pub use conductor::Conductor;
pub use probe::probe_round;
pub use state::{GroupState, MAX_RECENT_WRITERS};

use super::{Failed, Reply, Upstream};
use crate::metrics::{Failover, Metrics, UpstreamFailure};

/// Why a call through the group got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The node (the last one tried) failed it.
    Upstream(UpstreamFailure),
    /// No healthy node of its role (HTTP 503, -32603).
    NoHealthy,
}

/// One worker's clients to the group's nodes; clones share them.
#[derive(Debug, Clone)]
pub struct Nodes {
    clients: Arc<[Upstream]>,
    state: Arc<GroupState>,
    call_timeout: Duration,
    metrics: Arc<Metrics>,
    /// op-conductor, asked each probe round: only the probe task's
    /// clients have it.
    conductor: Option<Arc<Conductor>>,
}

impl Nodes {
    /// Clients to every node of `set` (each with its own pool and TLS
    /// settings), sharing `state` with every other worker.
    pub fn new(
        set: &NodeSet,
        up: &UpstreamConfig,
        admission: &AdmissionConfig,
        metrics: Arc<Metrics>,
        state: Arc<GroupState>,
    ) -> Result<Nodes, String> {
        let clients = set
            .nodes()
            .iter()
            .map(|node| {
                let mut own = up.clone();
                own.tls = node.tls.clone();
                Upstream::new(&node.url, &own, admission, metrics.clone())
                    .map_err(|e| format!("upstream node {}: {e}", node.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes {
            clients: clients.into(),
            state,
            call_timeout: up.call_timeout,
            metrics,
            conductor: None,
        })
    }

    /// These clients, asking `conductor` each probe round as well.
    pub fn with_conductor(self, conductor: Option<Conductor>) -> Nodes {
        Nodes {
            conductor: conductor.map(Arc::new),
            ..self
        }
    }

    /// op-conductor, when these are the probe task's clients and it is
    /// configured.
    pub(crate) fn conductor(&self) -> Option<&Conductor> {
        self.conductor.as_deref()
    }

    /// The shared state.
    pub fn state(&self) -> &Arc<GroupState> {
        &self.state
    }

    /// The block `latest` reads are served at (`None`: the short form, or
    /// no quorum of healthy nodes yet).
    pub fn agreed_head(&self) -> Option<u64> {
        if self.state.is_short_form() {
            return None;
        }
        self.state.agreed_head()
    }

    /// Node `i`'s client.
    pub(crate) fn client(&self, i: usize) -> Option<&Upstream> {
        self.clients.get(i)
    }

    /// Where a call of `method` with `params` from `client` goes: its
    /// role, turned to the sequencer for a read of the `pending` block or
    /// a read of the client's own writes within the window.
    pub fn role_for(
        &self,
        method: &str,
        params: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> Role {
        let pending_subscription = method == "eth_subscribe"
            && params.is_some_and(|p| p.contains("newPendingTransactions"));
        let role = self.state.role_of(method, pending_subscription);
        if role != Role::Replica || self.state.is_short_form() {
            return role;
        }
        if is_submission(method) {
            // Whatever the method map says, a submission is the
            // sequencer's: a replica would take it into a pool no block
            // is built from.
            return Role::Sequencer;
        }
        let pending = params.is_some_and(|p| p.contains("\"pending\""));
        let recent = txgate_nodes::reads_own_writes(method)
            && client.is_some_and(|c| self.state.wrote_lately(c));
        if txgate_nodes::needs_sequencer(method, pending, recent) {
            Role::Sequencer
        } else {
            role
        }
    }

    /// `upstream.call_timeout`: a call's deadline when it names none.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The node a call of `role` would go to first ([`Nodes::call`]'s
    /// choice, without its failover): for a call sent another way (an
    /// HTTP client's call on a WebSocket lane). `None`: no node of the role
    /// (nor, for a read, the sequencer) is in.
    pub fn pick(&self, role: Role, at_head: bool) -> Option<usize> {
        if self.state.is_short_form() {
            return Some(0);
        }
        let snapshot = self.state.snapshot();
        let first = |role, at_head| {
            let candidates = txgate_nodes::route(role, &snapshot, at_head)
                .map(|i| (i, snapshot.weight(i), self.state.outstanding(i)));
            txgate_nodes::choose(candidates, &[], self.state.tiebreak())
        };
        first(role, at_head).or_else(|| {
            (role == Role::Replica)
                .then(|| first(Role::Sequencer, false))
                .flatten()
        })
    }

    /// Posts `body` to a node of `role` and reads the answer within
    /// `timeout` (`None`: the call timeout), failing over as the module
    /// doc says; `resend` says whether the body may be sent again after it
    /// was written (reads: once).
    pub async fn call(
        &self,
        role: Role,
        resend: bool,
        at_head: bool,
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Reply, CallError> {
        self.call_avoiding(role, resend, at_head, body, timeout, None)
            .await
    }

    /// [`Nodes::call`], trying node `avoid` last (a read another way lost
    /// there: asked again on another node, as the failover does).
    pub async fn call_avoiding(
        &self,
        role: Role,
        resend: bool,
        at_head: bool,
        body: Bytes,
        timeout: Option<Duration>,
        mut avoid: Option<usize>,
    ) -> Result<Reply, CallError> {
        // A read asked again (`avoid`) is not sent to a third node, but
        // may still be written again on a fresh connection to the same
        // one when its pooled one closed: only a submission may not.
        let rewrite = resend || avoid.is_some();
        if self.state.is_short_form() {
            let only = &self.clients[0];
            return only
                .exchange(body, timeout, rewrite)
                .await
                .map_err(|f| CallError::Upstream(f.failure));
        }
        let deadline = Instant::now() + timeout.unwrap_or(self.call_timeout);
        let metrics = &self.metrics;
        let mut tried: Vec<usize> = Vec::with_capacity(2);
        tried.extend(avoid);
        let mut resent = false;
        let mut last = None;
        let mut broken_write = false;
        let mut role = role;
        let mut at_head = at_head;
        loop {
            let snapshot = self.state.snapshot();
            let candidates = txgate_nodes::route(role, &snapshot, at_head)
                .map(|i| (i, snapshot.weight(i), self.state.outstanding(i)));
            let chosen = txgate_nodes::choose(candidates, &tried, self.state.tiebreak());
            if chosen.is_none() && role == Role::Replica {
                // Every healthy replica was tried: a read falls back to
                // the sequencer, as when none is healthy, as it stands.
                role = Role::Sequencer;
                at_head = false;
                continue;
            }
            // No other node: the one to avoid is asked after all.
            if chosen.is_none()
                && let Some(node) = avoid.take()
            {
                tried.retain(|&t| t != node);
                continue;
            }
            let Some(i) = chosen else {
                // A write that failed on an open connection left its node
                // in: the answer is that failure, not "no healthy
                // upstream".
                if broken_write && !resent {
                    return Err(CallError::Upstream(UpstreamFailure::Io));
                }
                // Every node of the role is out, or failed before the
                // request was written (a failure after it is answered
                // where it happens).
                metrics.nodes.no_healthy(role.as_str());
                return Err(match last {
                    Some(failure) if resent => CallError::Upstream(failure),
                    _ => CallError::NoHealthy,
                });
            };
            tried.push(i);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CallError::Upstream(UpstreamFailure::Timeout));
            }
            let started = Instant::now();
            let answer = {
                let _in_flight = self.state.begin(i);
                self.clients[i]
                    .exchange(body.clone(), Some(left), rewrite)
                    .await
            };
            match answer {
                Ok(mut reply) if reply.status.is_server_error() && !reply.is_json_rpc() => {
                    reply.node = i;
                    self.state.passive(i, Passive::Failed);
                    if resend && !resent {
                        resent = true;
                        metrics.nodes.failover(Failover::ReadRetry);
                        last = Some(UpstreamFailure::Status);
                        continue;
                    }
                    return Ok(reply);
                }
                Ok(mut reply) => {
                    reply.node = i;
                    self.state.passive(i, Passive::Ok);
                    if let Some(series) = self.state.series(i) {
                        series.duration.observe(started.elapsed().as_secs_f64());
                    }
                    return Ok(reply);
                }
                Err(Failed {
                    failure,
                    written: false,
                }) => {
                    // A node that cannot be reached is out at once. A
                    // write that failed on an open connection (a reset: the
                    // node refusing a body over its own cap closes while it
                    // is being written) counts like any broken connection,
                    // five in a row: one client's call must not take every
                    // node of the role out.
                    match failure {
                        UpstreamFailure::Connect | UpstreamFailure::Tls => {
                            self.state.passive(i, Passive::ConnectFailed);
                        }
                        UpstreamFailure::Io => {
                            self.state.passive(i, Passive::Failed);
                            broken_write = true;
                        }
                        _ => {}
                    }
                    metrics.nodes.failover(Failover::NotWritten);
                    last = Some(failure);
                }
                Err(Failed {
                    failure,
                    written: true,
                }) => {
                    // A broken connection or a timeout counts against the
                    // node (five in a row with no good answer between take
                    // it out); an oversized or unreadable answer may be the
                    // call's own doing (a huge eth_getLogs), so it does not.
                    // A call with its own longer deadline (a sync submission
                    // waiting for its block) times out by its own doing.
                    let counts = failure == UpstreamFailure::Io
                        || (failure == UpstreamFailure::Timeout && timeout.is_none());
                    if counts {
                        self.state.passive(i, Passive::Failed);
                    }
                    if !resend || resent || failure == UpstreamFailure::TooLarge {
                        return Err(CallError::Upstream(failure));
                    }
                    resent = true;
                    metrics.nodes.failover(Failover::ReadRetry);
                    last = Some(failure);
                }
            }
        }
    }
}

/// Whether `method` submits something: once written to a node it is
/// never sent to another (the node may have taken it).
pub fn is_submission(method: &str) -> bool {
    method.starts_with("eth_send") || method.starts_with("mev_send") || method == "eth_cancelBundle"
}

#[cfg(test)]
mod tests;
