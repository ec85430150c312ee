//! The sidecar's state: what it judged, and the subscribers it streams to.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use txgate_proto::v1;
use txgate_proto::v1::rpc_proxy_heuristics_server::RpcProxyHeuristics;
use txgate_screen::Fingerprint;

use crate::config::Config;
use crate::node::Node;

/// Invalidations buffered per subscriber; a subscriber further behind
/// loses the oldest (logged).
const BUFFER: usize = 1 << 18;

/// Shared state.
#[derive(Debug)]
pub(crate) struct Hub {
    pub(crate) config: Config,
    pub(crate) node: Node,
    stream: broadcast::Sender<v1::Invalidation>,
    /// Fingerprints judged invalid, with their assertions.
    judged: Mutex<HashMap<B256, Vec<(B256, u64)>>>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Hub {
    pub(crate) fn new(config: Config, node: Node) -> Hub {
        let (stream, _) = broadcast::channel(BUFFER);
        Hub {
            config,
            node,
            stream,
            judged: Mutex::new(HashMap::new()),
        }
    }

    /// Records and streams one invalidation; returns the subscribers
    /// reached.
    pub(crate) fn invalidate(
        &self,
        fp: &Fingerprint,
        assertion: (B256, u64),
        tx_hash: Option<B256>,
        sender: Option<Address>,
        block: u64,
    ) -> usize {
        if let Ok(mut judged) = self.judged.lock() {
            let entry = judged.entry(fp.hash).or_default();
            if !entry.contains(&assertion) {
                entry.push(assertion);
            }
        }
        let message = txgate_proto::invalidation_message(
            fp,
            assertion.0,
            assertion.1,
            tx_hash,
            sender,
            block,
            unix_ms(),
        );
        self.stream.send(message).unwrap_or(0)
    }

    fn verdict(&self, fp: &B256) -> Option<Vec<(B256, u64)>> {
        self.judged.lock().ok()?.get(fp).cloned()
    }
}

/// The gRPC service.
#[derive(Debug)]
pub(crate) struct Service(pub(crate) std::sync::Arc<Hub>);

type InvalidationStream = Pin<Box<dyn Stream<Item = Result<v1::Invalidation, Status>> + Send>>;

#[tonic::async_trait]
impl RpcProxyHeuristics for Service {
    type StreamInvalidationsStream = InvalidationStream;

    async fn stream_invalidations(
        &self,
        request: Request<()>,
    ) -> Result<Response<InvalidationStream>, Status> {
        tracing::info!(peer = ?request.remote_addr(), "subscriber joined");
        let stream =
            BroadcastStream::new(self.0.stream.subscribe()).filter_map(|item| match item {
                Ok(message) => Some(Ok(message)),
                Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                    tracing::warn!(lost = n, "subscriber too slow; oldest invalidations lost");
                    None
                }
            });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn should_forward(
        &self,
        request: Request<v1::ShouldForwardRequest>,
    ) -> Result<Response<v1::ShouldForwardResponse>, Status> {
        let hub = &self.0;
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
        let deny = |assertions: Vec<(B256, u64)>| v1::ShouldForwardResponse {
            forward: false,
            assertions: assertions
                .into_iter()
                .map(|(id, version)| v1::Assertion {
                    assertion_id: id.to_vec(),
                    assertion_version: version,
                })
                .collect(),
            ttl_ms: 0,
        };
        if let Some(assertions) = hub.verdict(&hash) {
            return Ok(Response::new(deny(assertions)));
        }
        // Not judged yet: simulate a call to a protected contract.
        let target = (fp.target.len() == 20).then(|| Address::from_slice(&fp.target));
        if let Some(target) = target.filter(|t| hub.config.protects(*t))
            && let Ok(raw) = txgate_screen::decode(&request.raw_tx)
        {
            let sender = (request.sender.len() == 20).then(|| Address::from_slice(&request.sender));
            let reverted = hub.node.simulate(&raw, sender).await.ok();
            let violated: Vec<(B256, u64)> = hub
                .config
                .violated(target, &raw.input, reverted)
                .into_iter()
                .map(|a| (a.id, a.version))
                .collect();
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
