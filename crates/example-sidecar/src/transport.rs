//! The gRPC service `sidecar.transport.v1.SidecarTransport` over the
//! hub's result stream ([`crate::results`]): each subscriber gets what is
//! published from when it joined, from its `from_block` on.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use txgate_proto::transport_v1::sidecar_transport_server::SidecarTransport;
use txgate_proto::transport_v1::{SubscribeResultsRequest, TransactionResult};

use crate::hub::Hub;
use crate::results::from_block;

/// The gRPC service `sidecar.transport.v1.SidecarTransport`.
#[derive(Debug)]
pub(crate) struct Service {
    hub: Arc<Hub>,
}

impl Service {
    /// The service over the hub's results.
    pub(crate) fn new(hub: Arc<Hub>) -> Service {
        Service { hub }
    }
}

type ResultStream = Pin<Box<dyn Stream<Item = Result<TransactionResult, Status>> + Send>>;

#[tonic::async_trait]
impl SidecarTransport for Service {
    type SubscribeResultsStream = ResultStream;

    async fn subscribe_results(
        &self,
        request: Request<SubscribeResultsRequest>,
    ) -> Result<Response<ResultStream>, Status> {
        let peer = request.remote_addr();
        let from = from_block(request.get_ref()).map_err(Status::invalid_argument)?;
        tracing::info!(peer = ?peer, from_block = ?from, "results subscriber joined");
        let stream = self.hub.results.subscribe(from).map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }
}
