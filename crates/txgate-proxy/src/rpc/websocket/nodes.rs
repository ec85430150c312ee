//! Which node a session's messages go to, over a node group.
//!
//! A session reads from one node, its *home*, for its whole life: a healthy
//! replica (weighted, by the sessions each already serves) or, with none
//! in, a sequencer. Its own socket goes there, and so do its subscriptions
//! and its reads, on that socket or on the worker's lane to the same node.
//! One node answers all of a client's reads, so the head it sees never
//! goes backwards (no `latest` pinning is needed, and its `newHeads` agree
//! with its `eth_blockNumber`), and a subscription lives on one node.
//!
//! A message for another role goes to a node of that role, chosen per
//! message as over HTTP: submissions, `pending` reads, reads of the
//! client's own writes, filters and `newPendingTransactions` to the
//! sequencer (op-conductor's leader when one is followed), bundle methods
//! to a builder. It travels on the worker's lane to that node when it may,
//! else on a socket of the session's own to that node, opened when first
//! needed (one per node at most). A message whose calls have different
//! roles goes whole to the strongest (builder, then sequencer): a
//! sequencer or builder serves reads too, where a replica takes no
//! submission; splitting a message over sockets would give its answers
//! different heads.
//!
//! When a node the session has a socket to fails or is taken out of the
//! group (a probe, a run of failed calls), the calls owed there are
//! answered -32603, the session stops reading, answers the calls it sent
//! elsewhere, and closes: 1011 when the node's socket failed, 1012 (try
//! again) when the group took the node out. The client reconnects to a
//! healthy node and subscribes again. A subscription is not moved to
//! another node: a second node's notifications would start at its own
//! head, so the client could miss or see twice the blocks, logs and
//! transactions around the switch, and could not tell.

use std::sync::atomic::Ordering;

use txgate_nodes::{Passive, Role};

use super::{Upstream, WebSockets, connect_upstream};
use crate::metrics::{Failover, UpstreamFailure};

/// Why no home could be opened.
#[derive(Debug)]
pub(super) enum Unavailable {
    /// No node that could serve reads is in (a group): 503.
    NoHealthy,
    /// The short form's one node failed to open: as before the group.
    Failed(UpstreamFailure, String),
}

impl WebSockets {
    /// Opens a new session's home: its socket and node. In a group, a node
    /// that fails to open is reported to the group and the next one tried,
    /// until none is left.
    pub(super) async fn open_home(&self) -> Result<(usize, Upstream), Unavailable> {
        let codec = self.settings.upstream_codec;
        if self.group.is_short_form() {
            return connect_upstream(&self.settings, 0, codec)
                .await
                .map(|socket| (0, socket))
                .map_err(|(failure, e)| Unavailable::Failed(failure, e));
        }
        let mut tried = Vec::new();
        let mut role = Role::Replica;
        loop {
            let snapshot = self.group.snapshot();
            let candidates = txgate_nodes::route(role, &snapshot, false)
                .map(|i| (i, snapshot.weight(i), self.homed(i)));
            let chosen = txgate_nodes::choose(candidates, &tried, self.group.tiebreak());
            if chosen.is_none() && role == Role::Replica {
                // Every replica in failed to open: a sequencer serves
                // reads too, as over HTTP.
                role = Role::Sequencer;
                continue;
            }
            let Some(node) = chosen else {
                self.group.metrics().nodes.no_healthy("replica");
                return Err(Unavailable::NoHealthy);
            };
            tried.push(node);
            match connect_upstream(&self.settings, node, codec).await {
                Ok(socket) => return Ok((node, socket)),
                Err((failure, e)) => {
                    let name = &self.settings.nodes[node].name;
                    tracing::debug!(error = %e, node = %name, "upstream WebSocket unavailable: trying another node");
                    self.group.metrics().upstream.failure(failure);
                    self.group.metrics().nodes.failover(Failover::NotWritten);
                    if unreachable(failure) {
                        self.group.passive(node, Passive::ConnectFailed);
                    }
                }
            }
        }
    }

    /// Sessions whose home is node `i`.
    fn homed(&self, i: usize) -> u64 {
        self.homed.get(i).map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Counts a session on its home until the guard drops.
    pub(super) fn home(&self, node: usize) -> Homed<'_> {
        if let Some(n) = self.homed.get(node) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(series) = self.homed_series.get(node) {
            series.inc();
        }
        Homed { ws: self, node }
    }

    /// The node a message of `role` goes to, for a session at `home`;
    /// `None` when no node of the role is in.
    pub(super) fn node_for(&self, role: Role, home: usize) -> Option<usize> {
        let group = &self.group;
        if group.is_short_form() {
            return Some(home);
        }
        if role == Role::Replica {
            // A session reads from its home only.
            return Some(home);
        }
        let snapshot = group.snapshot();
        // A call home's role serves stays home, while the group would still
        // send it there (a standby sequencer behind op-conductor is not).
        if group.node_role(home) == Some(role)
            && txgate_nodes::route(role, &snapshot, false).any(|i| i == home)
        {
            return Some(home);
        }
        let candidates = txgate_nodes::route(role, &snapshot, false)
            .map(|i| (i, snapshot.weight(i), group.outstanding(i)));
        txgate_nodes::choose(candidates, &[], group.tiebreak())
    }

    /// Whether node `i` is still in the group (the short form's always).
    pub(super) fn node_in(&self, i: usize) -> bool {
        self.group.is_short_form() || self.group.snapshot().is_in(i)
    }

    /// Node `i`'s name, for logs.
    pub(super) fn node_name(&self, i: usize) -> &str {
        self.settings.nodes.get(i).map_or("", |n| n.name.as_str())
    }
}

/// Whether a failure to open a node's socket says the node cannot be
/// reached (TCP or TLS), a signal for its health; a refused WebSocket
/// handshake (a node serving no WebSocket) says nothing of its HTTP side.
pub(super) fn unreachable(failure: UpstreamFailure) -> bool {
    matches!(
        failure,
        UpstreamFailure::Connect | UpstreamFailure::Tls | UpstreamFailure::Io
    )
}

/// A session counted on its home node.
#[derive(Debug)]
pub(super) struct Homed<'a> {
    ws: &'a WebSockets,
    node: usize,
}

impl Drop for Homed<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.ws.homed.get(self.node) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(series) = self.ws.homed_series.get(self.node) {
            series.dec();
        }
    }
}

/// The role a whole message goes to, from its calls' roles: the strongest
/// of them (builder, then sequencer, then replica).
pub(super) fn strongest(a: Option<Role>, b: Role) -> Role {
    fn rank(role: Role) -> u8 {
        match role {
            Role::Replica => 0,
            Role::Sequencer => 1,
            Role::Builder => 2,
        }
    }
    match a {
        Some(a) if rank(a) >= rank(b) => a,
        _ => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_message_goes_to_its_strongest_role() {
        assert_eq!(strongest(None, Role::Replica), Role::Replica);
        assert_eq!(
            strongest(Some(Role::Replica), Role::Sequencer),
            Role::Sequencer
        );
        assert_eq!(
            strongest(Some(Role::Sequencer), Role::Replica),
            Role::Sequencer
        );
        assert_eq!(
            strongest(Some(Role::Builder), Role::Sequencer),
            Role::Builder
        );
        assert_eq!(strongest(Some(Role::Replica), Role::Builder), Role::Builder);
    }
}
