//! The two writers of a session: to the client, behind a queue bounded in
//! bytes, and to the node.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::Upstream;
use super::session::Client;

/// The client's send queue, bounded in bytes.
pub(super) struct Outbox {
    pub(super) tx: mpsc::UnboundedSender<Message>,
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) max: usize,
}

impl Outbox {
    /// Queues `message`; `false` when the client is gone or over its
    /// queue's bound (a slow reader).
    pub(super) fn push(&self, message: Message) -> bool {
        let len = message.len();
        if self.queued.fetch_add(len, Ordering::AcqRel) + len > self.max {
            return false;
        }
        self.tx.send(message).is_ok()
    }
}

/// Writes the queue to the client; ends when the queue closes or the
/// client fails.
pub(super) async fn write_client(
    mut sink: SplitSink<Client, Message>,
    mut rx: mpsc::UnboundedReceiver<Message>,
    queued: Arc<AtomicUsize>,
) {
    while let Some(message) = rx.recv().await {
        let len = message.len();
        let closing = matches!(message, Message::Close(_));
        let sent = sink.feed(message).await;
        queued.fetch_sub(len, Ordering::AcqRel);
        if sent.is_err() {
            return;
        }
        if (rx.is_empty() || closing) && sink.flush().await.is_err() {
            return;
        }
        if closing {
            break;
        }
    }
    let _ = sink.close().await;
}

/// Writes to the node; ends when the queue closes or the node fails.
pub(super) async fn write_upstream(
    mut sink: SplitSink<Upstream, Message>,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    while let Some(message) = rx.recv().await {
        if sink.feed(message).await.is_err() {
            return;
        }
        if rx.is_empty() && sink.flush().await.is_err() {
            return;
        }
    }
    let _ = sink.close().await;
}
