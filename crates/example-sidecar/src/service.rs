//! The gRPC service `txgate.sidecar.v1.RpcProxyHeuristics`, txgate's own
//! protocol.
//!
//! - `StreamInvalidations` streams every invalidation of the hub to every
//!   subscriber, with the failing tx hash and its sender when known; asked
//!   to replay, it first sends the live set (with ages) and a caught-up
//!   marker.
//! - `ShouldForward` answers from what the hub judged, and for a call to a
//!   protected contract it has not judged, judges it: from the calldata
//!   when an assertion forbids its selector, else by simulating it on the
//!   node with `eth_call` when an assertion is about reverts.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use alloy_primitives::{Address, B256};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use txgate_proto::v1;
use txgate_proto::v1::rpc_proxy_heuristics_server::RpcProxyHeuristics;
use txgate_screen::AssertionKey;

use crate::hub::{Event, Hub, Invalidated};
use crate::node::Node;

/// The gRPC service: the hub, and the node to simulate calls on.
#[derive(Debug)]
pub(crate) struct Service {
    hub: Arc<Hub>,
    node: Node,
}

impl Service {
    /// The service over `hub`, simulating unjudged calls on `node`.
    pub(crate) fn new(hub: Arc<Hub>, node: Node) -> Service {
        Service { hub, node }
    }
}

type InvalidationStream = Pin<Box<dyn Stream<Item = Result<v1::Invalidation, Status>> + Send>>;

/// The wire form of an invalidation in this protocol.
pub(crate) fn invalidation_message(event: &Invalidated) -> v1::Invalidation {
    let observed_at_ms = event
        .at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    txgate_proto::invalidation_message(
        &event.fp,
        event.assertion,
        event.tx_hash,
        event.sender,
        event.block,
        observed_at_ms,
    )
}

fn deny(assertions: Vec<AssertionKey>) -> v1::ShouldForwardResponse {
    v1::ShouldForwardResponse {
        forward: false,
        assertions: assertions
            .into_iter()
            .map(|a| v1::Assertion {
                assertion_id: a.id.to_vec(),
                assertion_version: a.version,
            })
            .collect(),
        ttl_ms: 0,
    }
}

#[tonic::async_trait]
impl RpcProxyHeuristics for Service {
    type StreamInvalidationsStream = InvalidationStream;

    async fn stream_invalidations(
        &self,
        request: Request<v1::StreamRequest>,
    ) -> Result<Response<InvalidationStream>, Status> {
        let replay = request.get_ref().replay;
        tracing::info!(peer = ?request.remote_addr(), replay, "subscriber joined");
        let stream = self.hub.subscribe_events(replay).map(|event| {
            Ok(match event {
                Event::Live(e) => invalidation_message(&e),
                Event::Replayed(e, age) => v1::Invalidation {
                    kind: v1::Kind::Replayed as i32,
                    age_ms: age.as_millis() as u64,
                    ..invalidation_message(&e)
                },
                Event::CaughtUp => v1::Invalidation {
                    kind: v1::Kind::CaughtUp as i32,
                    schema_version: txgate_proto::SCHEMA_VERSION,
                    ..Default::default()
                },
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn should_forward(
        &self,
        request: Request<v1::ShouldForwardRequest>,
    ) -> Result<Response<v1::ShouldForwardResponse>, Status> {
        let hub = &self.hub;
        if hub.config.should_forward_delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(hub.config.should_forward_delay_ms)).await;
        }
        let request = request.into_inner();
        let fp = request
            .fingerprint
            .as_ref()
            .filter(|fp| fp.hash.len() == 32)
            .ok_or_else(|| Status::invalid_argument("fingerprint hash must be 32 bytes"))?;
        let hash = B256::from_slice(&fp.hash);
        if let Some(assertions) = hub.verdict(&hash) {
            return Ok(Response::new(deny(assertions)));
        }
        // Not judged yet: judge a call to a protected contract, from its
        // calldata when that is enough (a forbidden selector), else by
        // simulating it on the node. A call that breaks a forbidden-selector
        // assertion is denied under that one alone, unsimulated, even if
        // it would also revert.
        let target = (fp.target.len() == 20).then(|| Address::from_slice(&fp.target));
        if let Some(target) = target.filter(|t| hub.config.protects(*t))
            && let Ok(raw) = txgate_screen::decode(&request.raw_tx)
        {
            let mut violated = hub.config.violated(target, &raw.input, None);
            if violated.is_empty() && hub.config.needs_simulation(target) {
                let sender =
                    (request.sender.len() == 20).then(|| Address::from_slice(&request.sender));
                let reverted = self.node.simulate(&raw, sender).await.ok();
                violated = hub.config.violated(target, &raw.input, reverted);
            }
            let violated: Vec<AssertionKey> = violated.into_iter().map(|a| a.key()).collect();
            if !violated.is_empty() {
                return Ok(Response::new(deny(violated)));
            }
        }
        Ok(Response::new(v1::ShouldForwardResponse {
            forward: true,
            assertions: Vec::new(),
            ttl_ms: 0,
        }))
    }
}
