//! A session's side towards the nodes: its own sockets (opened, pinged,
//! watched), answers matched back to the callers' ids, subscriptions
//! tracked, notifications passed on, and the calls a failed socket or lane
//! leaves unanswered.

use super::*;
use crate::request::Refuse;
use crate::rpc::submission_log::Forwarded;

/// One of a session's own sockets to a node.
pub(super) struct Own {
    pub(super) node: usize,
    pub(super) socket: Socket<crate::upstream::tls::Conn>,
    /// No message from the node since txgate's last ping to it.
    pub(super) silent: bool,
}

impl Own {
    pub(super) fn new(node: usize, socket: Upstream) -> Own {
        Own {
            node,
            socket: Socket::new(socket),
            silent: false,
        }
    }
}

/// A message waiting for its node's socket to open.
pub(super) struct Waiting {
    node: usize,
    key: u64,
    text: Utf8Bytes,
    /// Some call of it awaits an answer (else: notifications only, sent
    /// once the socket opens whatever happened meanwhile).
    owes: bool,
}

/// A socket to a node being opened.
pub(super) type Opening =
    Pin<Box<dyn Future<Output = (usize, Result<Upstream, (UpstreamFailure, String)>)> + Send>>;

/// The next message on any of the session's own sockets, with its node;
/// each call starts at the next socket, so a busy one cannot starve the
/// others.
pub(super) fn own_io<'a>(
    own: &'a mut [Own],
    turn: &'a mut usize,
) -> impl Future<Output = (usize, Option<Result<Message, WsError>>)> + 'a {
    *turn = turn.wrapping_add(1);
    let start = *turn;
    std::future::poll_fn(move |cx| {
        let n = own.len();
        for k in 0..n {
            let own = &mut own[(start + k) % n];
            if let std::task::Poll::Ready(message) = own.socket.poll_io(cx, true) {
                return std::task::Poll::Ready((own.node, message));
            }
        }
        std::task::Poll::Pending
    })
}

/// Sends a close frame on each socket and flushes it.
pub(super) async fn close_all(own: Vec<Own>) {
    for mut own in own {
        let _ = own.socket.close(None).await;
    }
}

impl Session {
    /// A message from node `node`, on the session's own socket to it.
    pub(super) fn upstream_message(
        &mut self,
        node: usize,
        message: Option<Result<Message, WsError>>,
    ) -> Result<(), WsClose> {
        if let Some(own) = self.own.iter_mut().find(|o| o.node == node) {
            own.silent = false;
        }
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                return self.node_failed(node, WsClose::Upstream);
            }
            // Pings are answered by tungstenite, pongs only show the node
            // is there; nothing else is expected.
            Some(Ok(_)) => return Ok(()),
        };
        self.upstream_text(text, Some(node))
    }

    /// Sends `text` (message `key`, which `owes` answers) on the session's
    /// own socket to `node`, opening one first if it has none (the
    /// messages waiting for it bounded by the socket's in-flight cap).
    pub(super) fn send_own(
        &mut self,
        node: usize,
        key: u64,
        text: Utf8Bytes,
        owes: bool,
    ) -> Result<(), WsClose> {
        if let Some(own) = self.own.iter_mut().find(|o| o.node == node) {
            if own.socket.send(Message::Text(text)).is_err() {
                // The node's socket failed or stopped reading (its buffer
                // over its bound).
                return self.node_failed(node, WsClose::Upstream);
            }
            return Ok(());
        }
        if self.waiting.len() >= self.conn.ws.settings.max_in_flight {
            self.conn.shared.metrics.websocket.opening_full.inc();
            self.unsent(key);
            return self.fail_message(key, &Refusal::UpstreamUnavailable);
        }
        if !self.waiting.iter().any(|w| w.node == node) {
            let settings = self.conn.ws.settings.clone();
            self.opening.push(Box::pin(async move {
                let opened =
                    super::super::connect_upstream(&settings, node, settings.upstream_codec).await;
                (node, opened)
            }));
        }
        self.waiting.push(Waiting {
            node,
            key,
            text,
            owes,
        });
        Ok(())
    }

    /// Marks message `key`'s calls as never sent (their log lines name no
    /// node).
    fn unsent(&mut self, key: u64) {
        for pending in self.pending.values_mut().filter(|p| p.message == key) {
            pending.via = Via::Unsent;
        }
    }

    /// A socket to `node` opened (its waiting messages sent, those still
    /// owed an answer) or failed to (their calls answered -32603).
    pub(super) fn opened(
        &mut self,
        node: usize,
        opened: Result<Upstream, (UpstreamFailure, String)>,
    ) -> Result<(), WsClose> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.node == node);
        self.waiting = rest;
        match opened {
            Ok(socket) => {
                self.own.push(Own::new(node, socket));
                for w in mine {
                    // A message answered meanwhile (its timeout) is not
                    // sent late.
                    if !w.owes || self.assemblies.contains_key(&w.key) {
                        self.send_own(node, w.key, w.text, w.owes)?;
                    }
                }
                Ok(())
            }
            Err((failure, e)) => {
                let ws = &self.conn.ws;
                tracing::debug!(error = %e, node = ws.node_name(node), "upstream WebSocket unavailable");
                self.conn.shared.metrics.upstream.failure(failure);
                if super::super::nodes::unreachable(failure) {
                    ws.group.passive(node, txgate_nodes::Passive::ConnectFailed);
                }
                for w in mine {
                    self.unsent(w.key);
                    self.fail_message(w.key, &Refusal::UpstreamUnavailable)?;
                }
                Ok(())
            }
        }
    }

    /// Node `node`, which the session has a socket to, failed (`Upstream`)
    /// or was taken out of the group (`NodeOut`): its socket is dropped,
    /// the calls sent on it are answered -32603, and the session leaves
    /// once the rest are answered.
    pub(super) fn node_failed(&mut self, node: usize, reason: WsClose) -> Result<(), WsClose> {
        self.own.retain(|o| o.node != node);
        let mut keys: Vec<u64> = self
            .pending
            .values()
            .filter(|p| p.via == Via::Own(node))
            .map(|p| p.message)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            self.fail_message(key, &Refusal::UpstreamUnavailable)?;
        }
        if self.leaving.is_none() {
            tracing::debug!(
                node = self.conn.ws.node_name(node),
                reason = reason.as_str(),
                "WebSocket session leaving its node"
            );
            self.leaving = Some(reason);
        }
        Ok(())
    }

    /// Leaves every node the group has taken out (a sweep's check).
    pub(super) fn watch_nodes(&mut self) -> Result<(), WsClose> {
        let out: Vec<usize> = self
            .own
            .iter()
            .map(|o| o.node)
            .filter(|&node| !self.conn.ws.node_in(node))
            .collect();
        for node in out {
            self.node_failed(node, WsClose::NodeOut)?;
        }
        Ok(())
    }

    /// Pings each own socket; one silent since the last ping has failed.
    pub(super) fn ping_nodes(&mut self) -> Result<(), WsClose> {
        let mut failed = Vec::new();
        for own in &mut self.own {
            if own.silent
                || own
                    .socket
                    .send(Message::Ping(Bytes::from_static(b"txgate")))
                    .is_err()
            {
                failed.push(own.node);
            }
            own.silent = true;
        }
        for node in failed {
            self.node_failed(node, WsClose::Upstream)?;
        }
        Ok(())
    }

    /// A JSON-RPC message from a node, on the session's own socket to it
    /// (`from`) or a lane.
    pub(super) fn upstream_text(
        &mut self,
        text: Utf8Bytes,
        from: Option<usize>,
    ) -> Result<(), WsClose> {
        let bytes = text.as_bytes();
        match encode::parse_upstream_batch(bytes) {
            Some(UpstreamBatch::Whole(response)) if response.is_notification() => {
                // A subscription notification, relayed as it came.
                self.send_client(Bytes::from(text), WsSent::Notification)
            }
            Some(UpstreamBatch::Whole(response)) if response.id.is_none() => {
                // An error under a null id (a message the node could not
                // read): no call of ours to give it to; those it was for
                // are answered by their timeout.
                tracing::debug!("upstream WebSocket answered without an id");
                Ok(())
            }
            // The node answers each message it is sent with one message: a
            // call of ours its answer leaves out (a node that answers a
            // batch over its limit with one error, say) will never be
            // answered, and is answered now rather than at its timeout.
            // A lone answer settles the rest of its batch only when it is
            // an error (a node refusing the batch whole); a gateway that
            // answers a batch a call at a time sends results.
            Some(UpstreamBatch::Whole(response)) => {
                let message = match response.error() {
                    Some(_) => self.message_of(&response),
                    None => None,
                };
                self.upstream_answer(&response, from)?;
                match message {
                    Some(key) => self.settle_message(key, Settle::Unanswered),
                    None => Ok(()),
                }
            }
            Some(UpstreamBatch::Responses(responses)) => {
                let mut messages: Vec<u64> = Vec::new();
                for response in &responses {
                    if let Some(key) = self.message_of(response)
                        && !messages.contains(&key)
                    {
                        messages.push(key);
                    }
                    self.upstream_answer(response, from)?;
                }
                for key in messages {
                    self.settle_message(key, Settle::Unanswered)?;
                }
                Ok(())
            }
            None => {
                tracing::debug!("upstream WebSocket sent a message that is not JSON-RPC");
                Ok(())
            }
        }
    }

    pub(super) fn upstream_answer(
        &mut self,
        response: &UpstreamResponse<'_>,
        from: Option<usize>,
    ) -> Result<(), WsClose> {
        let Some(id) = response.index() else {
            return Ok(());
        };
        let Some(pending) = self.pending.remove(&(id as u64)) else {
            // Late (timed out already) or not ours. A subscription opened
            // after its caller was told it timed out is closed again.
            if self.expired_subscribes.remove(&(id as u64))
                && let Some(subscription) = response.result().filter(|r| r.get().starts_with('"'))
            {
                let unsubscribe = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"eth_unsubscribe\",\"params\":[{}]}}",
                    subscription.get()
                );
                if let Some(own) = self.own.iter_mut().find(|o| Some(o.node) == from)
                    && own.socket.send(Message::text(unsubscribe)).is_err()
                {
                    let node = own.node;
                    return self.node_failed(node, WsClose::Upstream);
                }
            }
            return Ok(());
        };
        self.track_subscription(&pending.sub, response, from);
        if let Some(logged) = &pending.logged {
            // The line reads only the node's error, if any.
            let body = match response.error() {
                Some(error) => format!("{{\"error\":{}}}", error.get()).into_bytes(),
                None => b"{}".to_vec(),
            };
            self.log_submission(logged, pending.via, Ok(&body));
        }
        let taken = pending.submission && response.error().is_none();
        if pending.submits
            && let Some(client) = self.conn.peer.client
        {
            // Read-your-writes, as over HTTP: after any submission the node
            // answered, the client's next reads of its own writes go to the
            // sequencer (a no-op in the short form).
            self.conn.shared.upstream.state().wrote(client);
        }
        let pacing = self.conn.shared.pacer.as_ref().zip(self.conn.peer.client);
        let Some(assembly) = self.assemblies.get_mut(&pending.message) else {
            if taken && let Some((pacer, client)) = pacing {
                pacer.note(client, Pace::Cleared);
            }
            return Ok(());
        };
        if taken {
            // As for an HTTP batch: the streak starts over from the
            // message's refusals (counted once), and the message is not
            // held.
            if let Some((pacer, client)) = pacing {
                let pace = match std::mem::take(&mut assembly.refused) {
                    0 => Pace::Cleared,
                    n => Pace::Restarted(n),
                };
                pacer.note(client, pace);
            }
            assembly.hold_until = None;
        }
        // A notification's answer is dropped, as over HTTP.
        if let Some(slot) = assembly.slots.get_mut(pending.index)
            && slot.answer(response, pending.caller_id.as_deref())
        {
            assembly.waiting -= 1;
        }
        if assembly.waiting == 0
            && let Some(done) = self.assemblies.remove(&pending.message)
        {
            return self.answer(done);
        }
        Ok(())
    }

    pub(super) fn track_subscription(
        &mut self,
        sub: &Sub,
        response: &UpstreamResponse<'_>,
        from: Option<usize>,
    ) {
        let metrics = &self.conn.shared.metrics.websocket;
        match sub {
            Sub::None => {}
            Sub::Subscribe => {
                let id = response
                    .result()
                    .filter(|_| response.error().is_none())
                    .and_then(|r| serde_json::from_str::<String>(r.get()).ok());
                match id {
                    Some(id) => {
                        let node = from.unwrap_or(self.home);
                        if self.subscribed.insert(id, node).is_none() {
                            self.conn.open_subscriptions.fetch_add(1, Ordering::AcqRel);
                            metrics.subscriptions.inc();
                        } else {
                            // The node reused an id: one subscription.
                            self.conn.release_subscription();
                        }
                    }
                    None => self.conn.release_subscription(),
                }
            }
            Sub::Unsubscribe(id) => {
                let done = response.result().is_some_and(|r| r.get() == "true");
                if done && self.subscribed.remove(id).is_some() {
                    self.conn.release_subscription();
                    self.conn.open_subscriptions.fetch_sub(1, Ordering::AcqRel);
                    metrics.subscriptions.dec();
                }
            }
        }
    }

    /// Answers the calls past their deadline with a timeout.
    pub(super) fn expire(&mut self) -> Result<(), WsClose> {
        let now = Instant::now();
        let late: Vec<u64> = self
            .assemblies
            .iter()
            .filter(|(_, a)| a.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            self.conn
                .shared
                .metrics
                .upstream
                .failure(crate::metrics::UpstreamFailure::Timeout);
            self.fail_message(key, &Refusal::UpstreamTimeout)?;
        }
        Ok(())
    }

    /// Answers the calls queued on the lane to `node` up to `generation`,
    /// whose socket failed.
    pub(super) fn fail_lane(&mut self, node: usize, generation: u64) -> Result<(), WsClose> {
        let mut keys: Vec<u64> = self
            .pending
            .values()
            .filter(|p| matches!(p.via, Via::Lane(n, g) if n == node && g <= generation))
            .map(|p| p.message)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            self.fail_message(key, &Refusal::UpstreamUnavailable)?;
        }
        Ok(())
    }

    /// The lane's answer to the call `id` was over
    /// `upstream.max_response_bytes`: its message is answered -32603, as an
    /// HTTP call's would be.
    pub(super) fn too_large(&mut self, id: u64) -> Result<(), WsClose> {
        let Some(key) = self.pending.get(&id).map(|p| p.message) else {
            return Ok(());
        };
        self.conn
            .shared
            .metrics
            .upstream
            .failure(crate::metrics::UpstreamFailure::TooLarge);
        self.fail_message(key, &Refusal::UpstreamUnavailable)
    }

    /// The submission-log line of a submission sent on `via`.
    fn log_submission(&self, logged: &Logged, via: Via, answer: Result<&[u8], &'static str>) {
        let shared = &self.conn.shared;
        let node = match via {
            Via::Own(node) | Via::Lane(node, _) => shared.upstream.state().name(node),
            Via::Unsent => "",
        };
        shared.submissions.write(
            logged.admitted,
            &Forwarded {
                method: &logged.method,
                params: logged.params.as_deref(),
                node,
                duration: logged.sent.elapsed(),
                answer,
                client: self.conn.peer.client,
            },
        );
    }

    /// The client message a node's answer is for, while it still waits.
    fn message_of(&self, response: &UpstreamResponse<'_>) -> Option<u64> {
        let id = response.index()?;
        self.pending.get(&(id as u64)).map(|p| p.message)
    }

    /// Answers a message's calls still owed with `refusal`, under their
    /// callers' ids; a late answer from the node is then dropped.
    pub(super) fn fail_message(&mut self, key: u64, refusal: &Refusal) -> Result<(), WsClose> {
        self.settle_message(key, Settle::Refused(refusal))
    }

    /// Answers every call of message `key` still waiting for the node, as
    /// `how` says, and the message with them.
    fn settle_message(&mut self, key: u64, how: Settle<'_>) -> Result<(), WsClose> {
        // Answered whole already (an assembly leaves once nothing waits).
        let Some(mut assembly) = self.assemblies.remove(&key) else {
            return Ok(());
        };
        let mut owed = Vec::new();
        let mut expired = Vec::new();
        let mut submissions = Vec::new();
        let conn = &self.conn;
        self.pending.retain(|id, p| {
            if p.message != key {
                return true;
            }
            if let Sub::Subscribe = p.sub {
                conn.release_subscription();
                expired.push(*id);
            }
            owed.push((p.index, p.caller_id.take()));
            if let Some(logged) = p.logged.take() {
                submissions.push((logged, p.via));
            }
            false
        });
        let why = match how {
            Settle::Refused(refusal) => refusal.class().outcome.as_str(),
            Settle::Unanswered => Refusal::UpstreamUnavailable.class().outcome.as_str(),
        };
        for (logged, via) in submissions {
            self.log_submission(&logged, via, Err(why));
        }
        // Bounded: a node that never answers its subscribe calls does not
        // grow the set without end (a later success is then left open until
        // the session ends, as the node's own).
        if self.expired_subscribes.len() + expired.len() > MAX_EXPIRED_SUBSCRIBES {
            self.expired_subscribes.clear();
        }
        self.expired_subscribes.extend(expired);
        for (index, caller_id) in owed {
            if let Some(slot) = assembly.slots.get_mut(index) {
                match how {
                    Settle::Refused(refusal) => slot.fail(refusal, caller_id.as_deref()),
                    Settle::Unanswered => slot.unanswered(caller_id.as_deref()),
                }
            }
        }
        self.answer(assembly)
    }
}

/// How the calls of a message still waiting for the node are answered.
#[derive(Clone, Copy)]
enum Settle<'a> {
    /// Refused, with this.
    Refused(&'a Refusal),
    /// Left out of the node's answer to their message: -32603, "upstream
    /// returned no response for this call", as over HTTP.
    Unanswered,
}
