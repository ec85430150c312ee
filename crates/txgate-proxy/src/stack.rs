//! The client-facing stack, assembled here and nowhere else, in the order
//! a request meets it (the crate's outline): the server's connection
//! handling and client identity ([`crate::server`]), per-client rates
//! ([`crate::limits::clients`]), the in-flight cap
//! ([`crate::limits::admission`]), then the JSON-RPC service
//! ([`crate::rpc`]) with its screening stack ([`crate::screening`]) and
//! the upstream client ([`crate::upstream`]).
//!
//! [`Stack`] holds what every worker shares, built once per process and
//! cloned into each worker, which builds its own service from it on its
//! own runtime (its upstream pool and its sidecar connection are its own).

use std::io;
use std::sync::Arc;

use tower::ServiceBuilder;
use txgate_config::{Settings, Source};
use txgate_screen::Screen;

use crate::limits::admission::{Admission, AdmissionLayer};
use crate::limits::clients::{ClientLimit, ClientLimitLayer};
use crate::limits::pacing::Paced;
use crate::metrics::Metrics;
use crate::rpc::{PerProcess, RpcService, RpcSettings};
use crate::screening::{ProbeClient, VerdictCache};
use crate::server::workers::MakeService;
use crate::sidecar;
use crate::upstream::group::{GroupState, Nodes};

/// What every worker's stack shares, one of each per process.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    /// The node group's health, shared by every worker's clients.
    pub(crate) group: Arc<GroupState>,
    pub(crate) config: Arc<Settings>,
    pub(crate) metrics: Arc<Metrics>,
    /// Per-client rates, before admission.
    pub(crate) client_limits: ClientLimitLayer,
    /// One in-flight cap for the whole process.
    pub(crate) admission: AdmissionLayer,
    pub(crate) screen: Option<Arc<Screen>>,
    /// ShouldForward verdicts, and the source that gives them (`None`:
    /// not asked).
    pub(crate) verdicts: Option<(Arc<VerdictCache>, Source)>,
    /// The handles the JSON-RPC service shares across workers.
    pub(crate) process: PerProcess,
}

/// One worker's service: pacing (outermost: a held answer holds no
/// in-flight slot), per-client rates, then admission, then JSON-RPC.
pub(crate) type Service = Paced<ClientLimit<Admission<RpcService>>>;

impl MakeService for Stack {
    type Service = Service;

    fn make(&self) -> io::Result<Service> {
        let config = &self.config;
        let upstream = Nodes::new(
            config.nodes(),
            &config.upstream,
            &config.admission,
            self.metrics.clone(),
            self.group.clone(),
        )
        .map_err(io::Error::other)?;
        // Each worker asks the sidecar over its own connection, from its
        // own runtime; the verdicts are shared.
        let probe = match &self.verdicts {
            Some((verdicts, source)) => {
                let channel = sidecar::channel(
                    &format!("http://{}", source.url.authority()),
                    config.sidecar.connect_timeout,
                    sidecar::Keepalive::from(&config.sidecar),
                )
                .map_err(io::Error::other)?;
                ProbeClient::new(
                    source.protocol,
                    channel,
                    config.sidecar.should_forward_scope,
                    config.sidecar.should_forward_timeout,
                    config.sidecar.verdict_ttl,
                    verdicts.clone(),
                    self.metrics.clone(),
                )
                .map(Arc::new)
            }
            None => None,
        };
        Ok(ServiceBuilder::new()
            // Pacing reads each answer's mark once it is ready, with the
            // request's client as identity found it; outside admission and
            // the per-client rates, so a held answer takes no in-flight
            // slot.
            .layer_fn(Paced::new)
            // Per-client rates (API key, else client IP), before the body
            // is read: a client over its rate takes no in-flight slot.
            .layer(self.client_limits.clone())
            // One in-flight cap for the whole process, decided before the
            // body is read.
            .layer(self.admission.clone())
            // JSON-RPC: body cap, content type, framing, method policy, the
            // screening stack for raw transactions, forwarding.
            .service(RpcService::new(
                RpcSettings {
                    rpc: &config.rpc,
                    screen: &config.screen,
                    body_read_timeout: config.server.body_read_timeout,
                    retry_after_secs: config.admission.retry_after_secs,
                },
                upstream,
                self.metrics.clone(),
                self.screen.clone(),
                probe,
                self.process.clone(),
            )))
    }

    async fn drained(&self) {
        // The worker's lane to the node ends with a close frame, not with
        // the runtime.
        if let Some(websockets) = &self.process.websockets {
            websockets.close_lane_here().await;
        }
    }
}
