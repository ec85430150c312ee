//! txgate's request path, outermost first.
//!
//! - [`server`]: accept loop, connection cap, HTTP/1.1 and h2c, header-read
//!   timeout, graceful drain.
//! - [`admission`]: one global in-flight cap shared by every clone of the
//!   service, decided before the body is read (HTTP 429).
//! - [`rpc`]: body cap and timeout, content type, JSON-RPC framing, method
//!   [`policy`], forwarding of lone calls and batches.
//! - [`upstream`]: pooled keep-alive client to the node.
//! - [`rescue`]: the one place refusals become HTTP responses.
//! - [`admin`], [`health`], [`metrics`]: the operator's side.
//!
//! [`Proxy`] assembles them from a validated config.

#![deny(unreachable_pub)]

pub mod admin;
pub mod admission;
pub mod health;
pub mod metrics;
pub mod policy;
pub mod rescue;
pub mod rpc;
pub mod server;
pub mod upstream;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tower::ServiceBuilder;
use txgate_config::Config;

use crate::admission::AdmissionLayer;
use crate::health::Readiness;
use crate::metrics::Metrics;
use crate::rpc::RpcService;
use crate::server::{Drained, ServerSettings};
use crate::upstream::Upstream;

/// The assembled proxy, ready to serve.
#[derive(Debug)]
pub struct Proxy {
    config: Config,
    metrics: Arc<Metrics>,
    upstream: Upstream,
    readiness: Arc<Readiness>,
}

impl Proxy {
    /// Builds every stage from a validated config.
    pub fn new(config: Config) -> Result<Proxy, String> {
        config.validate().map_err(|e| e.to_string())?;
        let metrics = Arc::new(Metrics::new());
        let upstream = Upstream::new(&config, metrics.clone())?;
        let readiness = Arc::new(Readiness::new(metrics.clone()));
        Ok(Proxy {
            config,
            metrics,
            upstream,
            readiness,
        })
    }

    /// The metrics registry and handles.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Serves clients on `rpc` and the admin endpoints on `admin` until
    /// `shutdown` completes; then stops accepting, marks itself not ready,
    /// and drains in-flight calls for up to the grace period.
    pub async fn run(
        self,
        rpc: TcpListener,
        admin: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Drained {
        let Proxy {
            config,
            metrics,
            upstream,
            readiness,
        } = self;

        let service = ServiceBuilder::new()
            // Admission: one in-flight cap for the whole process, before the
            // body is read; over it, 429 with Retry-After.
            .layer(AdmissionLayer::new(
                config.admission.max_in_flight,
                config.admission.retry_after_secs,
                metrics.clone(),
            ))
            // JSON-RPC: body cap, content type, framing, method policy,
            // forwarding to the upstream.
            .service(RpcService::new(&config, upstream.clone(), metrics.clone()));

        let probe = tokio::spawn(health::probe_task(
            upstream,
            readiness.clone(),
            Duration::from_millis(config.upstream.health_interval_ms),
        ));
        let admin_task = tokio::spawn(admin::serve(admin, metrics.clone(), readiness.clone()));

        let settings = ServerSettings {
            max_connections: config.server.max_connections,
            header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
            http2: config.server.http2,
            grace_period: Duration::from_millis(config.shutdown.grace_period_ms),
        };
        let drain_readiness = readiness.clone();
        let shutdown = async move {
            shutdown.await;
            drain_readiness.start_draining();
        };
        let drained = server::serve(rpc, service, settings, metrics, shutdown).await;
        probe.abort();
        admin_task.abort();
        drained
    }
}
