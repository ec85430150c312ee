//! Prometheus metrics, one struct of ready handles per domain.
//!
//! Every label set is bounded and created up front; the request path holds
//! ready handles and never looks a label up by string, except the method
//! name, which goes through one hash lookup into a fixed table. Every name
//! is prefixed `txgate_`.
//!
//! - [`http`]: calls, responses by outcome, connections, in flight.
//! - [`client`]: PROXY protocol headers, where each client came from.
//! - [`limits`]: per-client limit refusals.
//! - [`pacing`]: refusals held back from clients that keep being
//!   refused.
//! - [`websocket`]: client WebSockets: sockets, messages, subscriptions,
//!   closes.
//! - [`upstream`]: upstream failures, round trip, health.
//! - [`screen`]: screening decisions, caches, invalidations; [`bundle`]:
//!   what became of each `eth_sendBundle`.
//! - [`sidecar`]: the invalidation stream and the ShouldForward probe.
//! - [`snapshot`]: ban snapshot writes and loads.
//! - [`process`]: background tasks and fatal failures.
//! - [`aeges`], [`verify`]: the Aeges listener's reports and pool
//!   questions.
//! - [`admin`]: the ban endpoints of the admin listener.
//! - [`conditional`]: the checks on conditional transactions.
//! - [`tls`]: TLS handshakes on the client port and with the node, the
//!   certificate's expiry and reloads.

pub mod admin;
pub mod aeges;
pub mod bundle;
pub mod client;
pub mod conditional;
pub mod http;
pub mod limits;
pub mod nodes;
pub mod pacing;
pub mod process;
pub mod proxyd;
mod registrar;
pub mod screen;
pub mod sidecar;
pub mod snapshot;
pub mod tls;
pub mod upstream;
pub mod verify;
pub mod websocket;

use prometheus::{Encoder, Registry, TextEncoder};

pub use admin::AdminMetrics;
pub use aeges::AegesMetrics;
pub use bundle::{BundleMetrics, BundleResult};
pub use client::ClientMetrics;
pub use conditional::ConditionalMetrics;
pub use http::{HttpMetrics, KNOWN_METHODS, Outcome};
pub use limits::LimitMetrics;
pub use nodes::{ConductorMiss, Failover, NodeMetrics, NodeSeries};
pub use pacing::PacingMetrics;
pub use process::ProcessMetrics;
pub use proxyd::{HookError, ProxydMetrics};
pub use screen::{ClearedAs, ScreenMetrics};
pub use sidecar::SidecarMetrics;
pub use snapshot::SnapshotMetrics;
pub use tls::{Handshake, TlsMetrics, UpstreamHandshake};
pub use upstream::{UpstreamFailure, UpstreamMetrics};
pub use verify::VerifyMetrics;
pub use websocket::{WebSocketMetrics, WsClose, WsSent};

use registrar::Registrar;

/// All of txgate's metrics, with their handles resolved.
pub struct Metrics {
    registry: Registry,
    /// The client-facing side.
    pub http: HttpMetrics,
    /// Who the clients are.
    pub client: ClientMetrics,
    /// Per-client limits.
    pub limits: LimitMetrics,
    /// Held refusals.
    pub pacing: PacingMetrics,
    /// The upstream node.
    pub upstream: UpstreamMetrics,
    /// The node group.
    pub nodes: NodeMetrics,
    /// Screening.
    pub screen: ScreenMetrics,
    /// The sidecar link.
    pub sidecar: SidecarMetrics,
    /// Ban snapshots.
    pub snapshot: SnapshotMetrics,
    /// Background tasks and fatal failures.
    pub process: ProcessMetrics,
    /// The Aeges listener: failure reports.
    pub aeges: AegesMetrics,
    /// The Aeges listener: the pool's questions.
    pub verify: VerifyMetrics,
    /// The Aeges listener: proxyd's validation hook.
    pub proxyd: ProxydMetrics,
    /// The admin listener's ban endpoints.
    pub admin: AdminMetrics,
    /// Conditional transactions.
    pub conditional: ConditionalMetrics,
    /// Client WebSockets.
    pub websocket: WebSocketMetrics,
    /// TLS on both sides.
    pub tls: TlsMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("txgate".into()), None)
            .unwrap_or_else(|_| unreachable!("prefix is valid"));
        let r = Registrar::new(&registry);
        let (http, upstream, screen, sidecar, snapshot, process) = (
            HttpMetrics::new(&r),
            UpstreamMetrics::new(&r),
            ScreenMetrics::new(&r),
            SidecarMetrics::new(&r),
            SnapshotMetrics::new(&r),
            ProcessMetrics::new(&r),
        );
        let (aeges, verify) = (AegesMetrics::new(&r), VerifyMetrics::new(&r));
        let proxyd = ProxydMetrics::new(&r);
        let (client, limits) = (ClientMetrics::new(&r), LimitMetrics::new(&r));
        let pacing = PacingMetrics::new(&r);
        let nodes = NodeMetrics::new(&r);
        let (admin, conditional) = (AdminMetrics::new(&r), ConditionalMetrics::new(&r));
        let (websocket, tls) = (WebSocketMetrics::new(&r), TlsMetrics::new(&r));
        Metrics {
            registry,
            websocket,
            tls,
            admin,
            conditional,
            client,
            limits,
            pacing,
            aeges,
            verify,
            proxyd,
            http,
            upstream,
            nodes,
            screen,
            sidecar,
            snapshot,
            process,
        }
    }

    /// The registry, for collectors added by later stages.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        // Encoding into a Vec fails only on an invalid metric, which
        // registration already ruled out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use txgate_screen::Reason;

    #[test]
    fn outcomes_are_indexed_by_discriminant() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
        for (i, k) in UpstreamFailure::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        for (i, c) in WsClose::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        for (i, h) in UpstreamHandshake::ALL.iter().enumerate() {
            assert_eq!(*h as usize, i);
        }
    }

    #[test]
    fn render_has_prefix_and_bounded_methods() {
        let m = Metrics::new();
        m.http.call("eth_chainId");
        m.http.call("made_up_method_1");
        m.http.call("made_up_method_2");
        m.http.outcome(Outcome::MethodDenied);
        m.upstream.failure(UpstreamFailure::Timeout);
        let text = String::from_utf8(m.render()).unwrap_or_default();
        assert!(text.contains("txgate_rpc_calls_total{method=\"eth_chainId\"} 1"));
        assert!(text.contains("txgate_rpc_calls_total{method=\"other\"} 2"));
        assert!(!text.contains("made_up"));
        assert!(text.contains("txgate_http_responses_total{outcome=\"method_denied\"} 1"));
        assert!(text.contains("txgate_upstream_errors_total{kind=\"timeout\"} 1"));
        assert!(text.contains("txgate_request_duration_seconds_bucket"));
        m.screen.refused(Reason::DeniedFingerprint, false);
        m.screen.refused(Reason::RecentFailure, true);
        m.screen.cleared(ClearedAs::Clean);
        m.sidecar.probe.deny.inc();
        m.snapshot.write_failed.inc();
        let text = String::from_utf8(m.render()).unwrap_or_default();
        assert!(text.contains(
            "txgate_screen_decisions_total{decision=\"refused\",reason=\"denied_fingerprint\"} 1"
        ));
        assert!(text.contains(
            "txgate_screen_decisions_total{decision=\"would_refuse\",reason=\"recent_failure\"} 1"
        ));
        assert!(
            text.contains(
                "txgate_screen_decisions_total{decision=\"forwarded\",reason=\"clean\"} 1"
            )
        );
        assert!(text.contains("txgate_screen_entries{cache=\"denied\"} 0"));
        assert!(text.contains("txgate_should_forward_total{result=\"deny\"} 1"));
        assert!(text.contains("txgate_ban_snapshots_total{result=\"error\"} 1"));
        assert!(text.contains("txgate_ban_snapshot_load_failures_total{reason=\"unusable\"} 0"));
    }
}
