//! A session's side towards the node: its answers matched back to the
//! callers' ids, subscriptions tracked, notifications passed on, and the
//! calls a failed socket or lane leaves unanswered.

use super::*;

impl Session {
    /// A message from the node.
    pub(super) fn upstream_message(
        &mut self,
        message: Option<Result<Message, WsError>>,
    ) -> Result<(), WsClose> {
        self.upstream_silent = false;
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                self.fail_pending(&Refusal::UpstreamUnavailable)?;
                return Err(WsClose::Upstream);
            }
            // Pings are answered by tungstenite, pongs only show the node
            // is there; nothing else is expected.
            Some(Ok(_)) => return Ok(()),
        };
        self.upstream_text(text)
    }

    /// A JSON-RPC message from the node, on the session's socket or the
    /// lane.
    pub(super) fn upstream_text(&mut self, text: Utf8Bytes) -> Result<(), WsClose> {
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
            Some(UpstreamBatch::Whole(response)) => self.upstream_answer(&response),
            Some(UpstreamBatch::Responses(responses)) => {
                for response in &responses {
                    self.upstream_answer(response)?;
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
                if self.upstream.send(Message::text(unsubscribe)).is_err() {
                    return Err(WsClose::Upstream);
                }
            }
            return Ok(());
        };
        self.track_subscription(&pending.sub, response);
        let taken = pending.submission && response.error().is_none();
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

    pub(super) fn track_subscription(&mut self, sub: &Sub, response: &UpstreamResponse<'_>) {
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
                        if self.subscribed.insert(id) {
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
                if done && self.subscribed.remove(id) {
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

    /// Answers the calls queued on the lane up to `generation`, whose socket
    /// failed.
    pub(super) fn fail_lane(&mut self, generation: u64) -> Result<(), WsClose> {
        let mut keys: Vec<u64> = self
            .pending
            .values()
            .filter(|p| p.lane.is_some_and(|g| g <= generation))
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

    /// Answers every call still owed with `refusal` (the node went away).
    pub(super) fn fail_pending(&mut self, refusal: &Refusal) -> Result<(), WsClose> {
        let keys: Vec<u64> = self.assemblies.keys().copied().collect();
        for key in keys {
            self.fail_message(key, refusal)?;
        }
        Ok(())
    }

    /// Answers a message's calls still owed with `refusal`, under their
    /// callers' ids; a late answer from the node is then dropped.
    pub(super) fn fail_message(&mut self, key: u64, refusal: &Refusal) -> Result<(), WsClose> {
        let Some(mut assembly) = self.assemblies.remove(&key) else {
            return Ok(());
        };
        let mut owed = Vec::new();
        let mut expired = Vec::new();
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
            false
        });
        // Bounded: a node that never answers its subscribe calls does not
        // grow the set without end (a later success is then left open until
        // the session ends, as the node's own).
        if self.expired_subscribes.len() + expired.len() > MAX_EXPIRED_SUBSCRIBES {
            self.expired_subscribes.clear();
        }
        self.expired_subscribes.extend(expired);
        for (index, caller_id) in owed {
            if let Some(slot) = assembly.slots.get_mut(index) {
                slot.fail(refusal, caller_id.as_deref());
            }
        }
        self.answer(assembly)
    }
}
