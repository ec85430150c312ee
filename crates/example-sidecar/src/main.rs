//! example-sidecar: a real sidecar for txgate's demo and end-to-end tests.
//!
//! One tonic gRPC server, on one port, serves three protocols:
//!
//! - `txgate.sidecar.v1.RpcProxyHeuristics`, txgate's own ([`service`]):
//!   `StreamInvalidations` streams every invalidation to every subscriber,
//!   with the failing tx hash and sender; `ShouldForward` answers from what
//!   it judged, and for a call to a protected contract it has not judged,
//!   simulates it with `eth_call`.
//! - `rpcproxy.v1.RpcProxyHeuristics`, the reference proxy's
//!   ([`rpcproxy`]): the same invalidations in that protocol's form (no tx
//!   hash, no sender), and `ShouldForward` verdicts `DENY` / `ALLOW` /
//!   `UNKNOWN` from the same judgements.
//! - `sidecar.transport.v1.SidecarTransport`, the Credible Layer sidecar's
//!   ([`transport`], over [`results`]): `SubscribeResults` streams a
//!   `TransactionResult` for every transaction the sidecar sees executed
//!   (`SUCCESS`, `REVERTED`, `ASSERTION_FAILED`), live, from `from_block`
//!   on.
//!
//! Around it:
//!
//! - A watcher of the local node ([`watch`], over the JSON-RPC client
//!   [`node`]): each new block's transactions to a protected contract are
//!   judged by the configured assertions ("no call may revert": the
//!   receipt's status; "selector S is forbidden": the calldata), and each
//!   violation is streamed as an invalidation whose fingerprint, tx hash
//!   and sender come from txgate's own library; every transaction's result
//!   is published.
//! - Failure reports ([`report`], `--report-url`): every transaction judged
//!   to fail an assertion is posted, fire and forget, as `[tx_hash,
//!   tx_env]` to the URL's `/report`, as the production sidecar does.
//! - An HTTP admin endpoint for tests ([`admin`]): `POST /invalidations`
//!   with `{"raw_tx": "0x…", "assertion_id": "0x…", "assertion_version": 1}`
//!   (or an array of them; or `{"synthetic": N, ...}` for N random
//!   fingerprints), `POST /results` with `[{"tx_hash": "0x…", "status":
//!   5}]` (raw results), `GET /healthz`.
//!
//! The state between them is the [`hub`]: what was judged (bounded by
//! [`judged`]: a TTL and a maximum of fingerprints), the broadcast stream
//! of invalidations (bounded per subscriber) and the broadcast of results
//! ([`results`]; 16,384 per subscriber, a subscriber further behind loses
//! the oldest). Dependencies go one way: `node` and `judged` know nothing
//! of the others; `hub` uses `judged` and `results`; `watch`, the gRPC
//! services and `admin` use `hub` (and `node`, `report`).
//! Assertions and limits come from [`config`].

mod admin;
mod config;
mod hub;
mod judged;
mod node;
mod report;
mod results;
mod rpcproxy;
mod service;
#[cfg(test)]
mod testutil;
mod transport;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use txgate_proto::rpcproxy_v1::rpc_proxy_heuristics_server::RpcProxyHeuristicsServer as RpcProxyServer;
use txgate_proto::transport_v1::sidecar_transport_server::SidecarTransportServer;
use txgate_proto::v1::rpc_proxy_heuristics_server::RpcProxyHeuristicsServer;

use crate::admin::Admin;
use crate::hub::Hub;
use crate::report::Reporter;
use crate::service::Service;

/// A sidecar that judges transactions on a local node.
///
/// One gRPC port serves txgate.sidecar.v1.RpcProxyHeuristics,
/// rpcproxy.v1.RpcProxyHeuristics and sidecar.transport.v1.SidecarTransport
/// (SubscribeResults).
#[derive(Debug, Parser)]
#[command(name = "example-sidecar", version, about, long_about)]
struct Cli {
    /// gRPC listen address (txgate.sidecar.v1, rpcproxy.v1 and
    /// sidecar.transport.v1, on the one port).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Admin HTTP listen address (POST /invalidations, POST /results,
    /// GET /healthz).
    #[arg(long, default_value = "127.0.0.1:50052")]
    admin_listen: SocketAddr,
    /// The node's JSON-RPC URL.
    #[arg(long, default_value = "http://127.0.0.1:8545")]
    node: String,
    /// Assertions (TOML).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Post a failure report for every transaction judged to fail an
    /// assertion: JSON [tx_hash, tx_env] to this URL with its path replaced
    /// by /report (query kept; user:pass@ sent as Basic auth). http:// only.
    /// Overrides `report_url` in the config.
    #[arg(long, value_name = "URL")]
    report_url: Option<String>,
    /// Serve only these protocols (comma-separated: txgate.v1,
    /// rpcproxy.v1, sidecar.transport.v1); all three by default. For
    /// tests of a proxy pointed at a server of another protocol.
    #[arg(long, value_delimiter = ',', value_name = "PROTOCOLS")]
    protocols: Vec<String>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

/// The protocols one server serves.
#[derive(Debug, Clone, Copy)]
struct Served {
    txgate: bool,
    rpcproxy: bool,
    transport: bool,
}

impl Served {
    const ALL: Served = Served {
        txgate: true,
        rpcproxy: true,
        transport: true,
    };

    fn parse(names: &[String]) -> Result<Served, String> {
        if names.is_empty() {
            return Ok(Served::ALL);
        }
        let mut served = Served {
            txgate: false,
            rpcproxy: false,
            transport: false,
        };
        for name in names {
            match name.trim() {
                "txgate.v1" => served.txgate = true,
                "rpcproxy.v1" => served.rpcproxy = true,
                "sidecar.transport.v1" => served.transport = true,
                other => return Err(format!("unknown protocol `{other}`")),
            }
        }
        Ok(served)
    }
}

/// The gRPC server: the three protocols over one hub, on one port.
fn router(hub: Arc<Hub>, node: node::Node, served: Served) -> tonic::transport::server::Router {
    let txgate = served
        .txgate
        .then(|| RpcProxyHeuristicsServer::new(Service::new(hub.clone(), node)));
    let rpcproxy = served
        .rpcproxy
        .then(|| RpcProxyServer::new(rpcproxy::Service::new(hub.clone())));
    let transport = served
        .transport
        .then(|| SidecarTransportServer::new(transport::Service::new(hub)));
    // A service left out answers gRPC UNIMPLEMENTED.
    tonic::transport::Server::builder()
        .add_optional_service(txgate)
        .add_optional_service(rpcproxy)
        .add_optional_service(transport)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    if cli.log_json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    let config = match &cli.config {
        Some(path) => match config::Config::load(path) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("example-sidecar: {}: {e}", path.display());
                return std::process::ExitCode::from(2);
            }
        },
        None => config::Config::default(),
    };
    let protocols = match Served::parse(&cli.protocols) {
        Ok(served) => served,
        Err(e) => {
            eprintln!("example-sidecar: --protocols: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let reporter = match cli.report_url.as_ref().or(config.report_url.as_ref()) {
        Some(url) => match Reporter::new(url) {
            Ok(reporter) => reporter,
            Err(e) => {
                eprintln!("example-sidecar: report URL: {e}");
                return std::process::ExitCode::from(2);
            }
        },
        None => Reporter::disabled(),
    };
    let (grpc, admin) = match (
        TcpListener::bind(cli.listen).await,
        TcpListener::bind(cli.admin_listen).await,
    ) {
        (Ok(grpc), Ok(admin)) => (grpc, admin),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot bind");
            return std::process::ExitCode::FAILURE;
        }
    };
    let (Ok(grpc_addr), Ok(admin_addr)) = (grpc.local_addr(), admin.local_addr()) else {
        return std::process::ExitCode::FAILURE;
    };
    let node = node::Node::new(&cli.node);
    let hub = Arc::new(Hub::new(config.clone()));
    let report_to = reporter.target().map(|t| t.redacted());
    tracing::info!(grpc = %grpc_addr, admin = %admin_addr, node = %cli.node,
        assertions = config.assertion.len(), report_to = ?report_to, "listening");

    tokio::spawn(watch::watch(
        node.clone(),
        hub.clone(),
        reporter.clone(),
        config.poll_interval(),
    ));
    tokio::spawn(admin::serve(admin, Admin::new(hub.clone(), reporter)));
    let served = router(hub, node, protocols)
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gRPC server failed");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use alloy_primitives::{Address, B256, U256};
    use tokio_stream::StreamExt;
    use txgate_proto::rpcproxy::Verdict;
    use txgate_proto::rpcproxy_v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient as RpcProxyClient;
    use txgate_proto::transport_v1::SubscribeResultsRequest;
    use txgate_proto::transport_v1::sidecar_transport_client::SidecarTransportClient;
    use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient;
    use txgate_screen::{AssertionKey, Fingerprint};

    use super::*;
    use crate::results::Executed;

    async fn within<F: std::future::IntoFuture>(d: Duration, f: F) -> Option<F::Output> {
        tokio::time::timeout(d, f).await.ok()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_three_protocols_share_one_port_and_one_hub() {
        let hub = Arc::new(Hub::new(config::Config::default()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        // The node is never asked: nothing here is simulated.
        let router = router(
            hub.clone(),
            node::Node::new("http://127.0.0.1:9"),
            Served::ALL,
        );
        tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));

        let mut v1 = RpcProxyHeuristicsClient::connect(url.clone())
            .await
            .expect("connect");
        let mut reference = RpcProxyClient::connect(url.clone()).await.expect("connect");
        let mut transport = SidecarTransportClient::connect(url).await.expect("connect");
        let mut v1_stream = v1
            .stream_invalidations(txgate_proto::v1::StreamRequest { replay: false })
            .await
            .expect("v1")
            .into_inner();
        let mut reference_stream = reference
            .stream_invalidations(txgate_proto::rpcproxy_v1::Empty {})
            .await
            .expect("rpcproxy")
            .into_inner();
        let mut from_block = vec![0u8; 32];
        from_block[31] = 2;
        let mut results = transport
            .subscribe_results(SubscribeResultsRequest {
                from_block: Some(from_block),
            })
            .await
            .expect("results")
            .into_inner();

        let fp =
            Fingerprint::from_parts(Address::repeat_byte(7), &[1, 2, 3, 4], U256::ZERO, 21_000);
        let key = AssertionKey {
            id: B256::repeat_byte(0xa1),
            version: 1,
        };
        let tx = B256::repeat_byte(0x11);
        assert_eq!(hub.invalidate(&fp, key, Some(tx), None, 3), 2);
        for block in [1, 2] {
            hub.results.publish(Executed {
                block,
                index: 0,
                tx_hash: tx,
                status: 5,
                gas_used: 0,
                error: String::new(),
            });
        }

        let got = within(Duration::from_secs(5), v1_stream.next())
            .await
            .expect("in time")
            .expect("item")
            .expect("ok");
        assert_eq!(
            (got.fingerprint.expect("fp").hash, got.tx_hash),
            (fp.hash.to_vec(), tx.to_vec())
        );
        let got = within(Duration::from_secs(5), reference_stream.next())
            .await
            .expect("in time")
            .expect("item")
            .expect("ok");
        assert_eq!(got.fingerprint.expect("fp").hash, fp.hash.to_vec());
        assert_eq!(got.l2_block_number, 3);
        let got = within(Duration::from_secs(5), results.next())
            .await
            .expect("in time")
            .expect("item")
            .expect("ok");
        let id = got.tx_execution_id.expect("id");
        assert_eq!(id.block_number[31], 2, "block 1 filtered out");

        // ShouldForward in both protocols, from the same judgement.
        let request = txgate_proto::v1::ShouldForwardRequest {
            fingerprint: Some(txgate_proto::fingerprint_message(&fp)),
            ..Default::default()
        };
        let answer = v1.should_forward(request).await.expect("v1").into_inner();
        assert!(!answer.forward);
        let request = txgate_proto::rpcproxy_v1::ShouldForwardRequest {
            fingerprint: Some(txgate_proto::rpcproxy::fingerprint_message(&fp)),
        };
        let answer = reference
            .should_forward(request)
            .await
            .expect("rpcproxy")
            .into_inner();
        assert_eq!(
            txgate_proto::rpcproxy::verdict(&answer),
            Ok(Verdict::Deny(Some(key)))
        );
        // A malformed from_block is refused.
        let refused = transport
            .subscribe_results(SubscribeResultsRequest {
                from_block: Some(vec![0; 33]),
            })
            .await;
        assert_eq!(
            refused.err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
    }
}
