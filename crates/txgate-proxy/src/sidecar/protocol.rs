//! Subscribing in each protocol txgate speaks, and each protocol's
//! messages as one [`Message`] type.
//!
//! An invalidation starts when it is received: a live one was just
//! learned (its `observed_at`, on the sidecar's clock, only measures the
//! lag), a replayed one `age_ms` before (the sidecar's own measure, which
//! no clock skew distorts). So a replay runs only what is left of its ban.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use tonic::Status;
use tonic::transport::Channel;
use txgate_config::Protocol;
use txgate_proto::rpcproxy_v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient as RpcproxyClient;
use txgate_proto::transport_v1::SubscribeResultsRequest;
use txgate_proto::transport_v1::sidecar_transport_client::SidecarTransportClient;
use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient as TxgateClient;
use txgate_proto::{SCHEMA_VERSION, results, rpcproxy, rpcproxy_v1, to_invalidation, v1};

use txgate_proto::Malformed;
use txgate_proto::results::Outcome;
use txgate_screen::Invalidation;

use crate::screening::state::wall_now;

/// A message of any protocol.
#[derive(Debug, Clone)]
pub enum Message {
    /// An invalidation (`txgate.v1`, `rpcproxy.v1`).
    Invalidation {
        /// As screening state.
        invalidation: Invalidation,
        /// When the sidecar observed it (Unix ms), if it says.
        observed_ms: Option<u64>,
        /// Replayed on subscription, learned this long ago (ms).
        replayed_age_ms: Option<u64>,
        /// The message's schema version, when newer than this build's.
        newer_schema: Option<u32>,
    },
    /// The sidecar has replayed its live set; live invalidations follow.
    CaughtUp,
    /// A transaction's result (`sidecar.transport.v1`).
    Result(Outcome),
    /// A message that cannot be used.
    Malformed(Malformed),
}

/// A subscription's messages.
pub type Messages = Pin<Box<dyn Stream<Item = Result<Message, Status>> + Send>>;

/// Subscribes to what `protocol` streams over `channel`; a message over
/// `max_message_bytes` breaks the stream (refused from its length prefix).
pub async fn subscribe(
    protocol: Protocol,
    channel: Channel,
    max_message_bytes: usize,
) -> Result<Messages, Status> {
    Ok(match protocol {
        Protocol::TxgateV1 => {
            // Replay: a new fleet member learns every live ban at once.
            let stream = TxgateClient::new(channel)
                .max_decoding_message_size(max_message_bytes)
                .stream_invalidations(v1::StreamRequest { replay: true })
                .await?
                .into_inner();
            Box::pin(stream.map(|item| item.map(|msg| txgate_message(&msg))))
        }
        Protocol::RpcproxyV1 => {
            let stream = RpcproxyClient::new(channel)
                .max_decoding_message_size(max_message_bytes)
                .stream_invalidations(rpcproxy_v1::Empty {})
                .await?
                .into_inner();
            Box::pin(stream.map(|item| {
                item.map(|msg| match rpcproxy::to_invalidation(&msg, wall_now()) {
                    Ok(invalidation) => Message::Invalidation {
                        invalidation,
                        observed_ms: rpcproxy::observed_at_ms(&msg),
                        replayed_age_ms: None,
                        newer_schema: None,
                    },
                    Err(e) => Message::Malformed(e),
                })
            }))
        }
        Protocol::TransportV1 => {
            // Live results only, from now on (no `from_block`).
            let stream = SidecarTransportClient::new(channel)
                .max_decoding_message_size(max_message_bytes)
                .subscribe_results(SubscribeResultsRequest { from_block: None })
                .await?
                .into_inner();
            Box::pin(stream.map(|item| item.map(|r| Message::Result(results::classify(&r)))))
        }
    })
}

/// One `txgate.v1` message: live, replayed (with its age) or the
/// caught-up marker.
fn txgate_message(msg: &v1::Invalidation) -> Message {
    let kind = v1::Kind::try_from(msg.kind).unwrap_or(v1::Kind::Live);
    if kind == v1::Kind::CaughtUp {
        return Message::CaughtUp;
    }
    let replayed_age_ms = (kind == v1::Kind::Replayed).then_some(msg.age_ms);
    let started = wall_now().saturating_sub(replayed_age_ms.unwrap_or(0));
    match to_invalidation(msg, started) {
        Ok(invalidation) => Message::Invalidation {
            invalidation,
            observed_ms: (msg.observed_at > 0).then_some(msg.observed_at),
            replayed_age_ms,
            newer_schema: (msg.schema_version > SCHEMA_VERSION).then_some(msg.schema_version),
        },
        Err(e) => Message::Malformed(e),
    }
}
