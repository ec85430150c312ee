//! example-sidecar: a real sidecar for txgate's demo and end-to-end tests.
//!
//! - A tonic gRPC server of `txgate.sidecar.v1.RpcProxyHeuristics`
//!   ([`service`]): `StreamInvalidations` streams every invalidation to
//!   every subscriber; `ShouldForward` answers from what it judged, and for
//!   a call to a protected contract it has not judged, simulates it with
//!   `eth_call`.
//! - A watcher of the local node ([`watch`], over the JSON-RPC client
//!   [`node`]): each new block's transactions to a protected contract are
//!   judged by the configured assertions ("no call may revert": the
//!   receipt's status; "selector S is forbidden": the calldata), and each
//!   violation is streamed as an invalidation whose fingerprint, tx hash
//!   and sender come from txgate's own library.
//! - An HTTP admin endpoint for tests ([`admin`]): `POST /invalidations`
//!   with `{"raw_tx": "0x…", "assertion_id": "0x…", "assertion_version": 1}`
//!   (or an array of them; or `{"synthetic": N, ...}` for N random
//!   fingerprints), `GET /healthz`.
//!
//! The state between them is the [`hub`]: what was judged (bounded by
//! [`judged`]: a TTL and a maximum of fingerprints) and the broadcast
//! stream of invalidations (bounded per subscriber). Dependencies go one
//! way: `node` and `judged` know nothing of the others; `hub` uses
//! `judged`; `watch`, `service` and `admin` use `hub` (and `node`).
//! Assertions and limits come from [`config`].

mod admin;
mod config;
mod hub;
mod judged;
mod node;
mod service;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use txgate_proto::v1::rpc_proxy_heuristics_server::RpcProxyHeuristicsServer;

use crate::hub::Hub;
use crate::service::Service;

/// A sidecar that judges transactions on a local node.
#[derive(Debug, Parser)]
#[command(name = "example-sidecar", version, about)]
struct Cli {
    /// gRPC listen address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Admin HTTP listen address (POST /invalidations, GET /healthz).
    #[arg(long, default_value = "127.0.0.1:50052")]
    admin_listen: SocketAddr,
    /// The node's JSON-RPC URL.
    #[arg(long, default_value = "http://127.0.0.1:8545")]
    node: String,
    /// Assertions (TOML).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
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
    tracing::info!(grpc = %grpc_addr, admin = %admin_addr, node = %cli.node,
        assertions = config.assertion.len(), "listening");

    tokio::spawn(watch::watch(
        node.clone(),
        hub.clone(),
        config.poll_interval(),
    ));
    tokio::spawn(admin::serve(admin, hub.clone()));
    let served = tonic::transport::Server::builder()
        .add_service(RpcProxyHeuristicsServer::new(Service::new(hub, node)))
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
