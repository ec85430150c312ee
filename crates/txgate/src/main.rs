//! The txgate daemon.
//!
//! Reads the config (file, then `TXGATE_*` environment, then flags:
//! [`cli`]), checks and parses every setting once (the same step
//! `check-config` runs; [`summary`] prints what it found), binds the
//! client and admin listeners (and the Aeges listener when set), serves
//! until SIGTERM or SIGINT ([`signals`]), drains the calls in flight and
//! exits 0.
//!
//! Exit codes:
//! - 0: stopped by SIGTERM or SIGINT (calls in flight drained, or cut at
//!   the end of the grace period);
//! - 1: a part txgate cannot serve without failed (a worker thread, a
//!   listener, the admin listener), or a listener could not be bound; the
//!   log says which;
//! - 2: a setting cannot work; one line names the setting and the value.

#[cfg(not(target_env = "msvc"))]
mod allocator;
// The process allocator (jemalloc), linked here whatever `allocator` comes
// to use of it.
#[cfg(not(target_env = "msvc"))]
use txgate_alloc as _;
mod bans;
mod cli;
mod signals;
mod summary;

use std::process::ExitCode;

use clap::Parser;
use txgate_config::{Config, LogFormat, Settings};
use txgate_proxy::server::Drained;
use txgate_proxy::{Exit, Listeners, Proxy};

use cli::{Cli, Command};

/// A setting that cannot work.
const EXIT_CONFIG: u8 = 2;
/// A part txgate cannot serve without failed, or could not start.
const EXIT_FAILED: u8 = 1;

fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match config.log.format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let settings = match cli.load() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("txgate: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let command = cli.command.take();
    if let Some(Command::Bans(bans)) = command {
        return bans.run(&settings);
    }
    if let Some(Command::CheckConfig) = command {
        // The files TLS needs are read as starting would read them.
        if let Err(e) = txgate_proxy::check_tls(&settings) {
            eprintln!("txgate: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
        summary::print(&settings);
        return ExitCode::SUCCESS;
    }
    init_logging(&settings);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("txgate: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = runtime.block_on(run(settings, cli));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

async fn run(settings: Settings, cli: Cli) -> ExitCode {
    let config = &settings;
    let workers = config.server.effective_workers();
    let (listen, admin) = (config.server.listen, config.admin.listen);
    let upstream_url = summary::node_names(config).unwrap_or_else(|| config.upstream.url.clone());
    let screening = summary::screening_mode(config);
    let sidecar = match summary::sidecar_sources(config) {
        sources if sources.is_empty() => "none".to_string(),
        sources => sources.join(", "),
    };
    let aeges = summary::aeges_listener(config);
    let clients = summary::client_identity(config);
    // Everything that can refuse a setting runs before anything listens.
    let proxy = match Proxy::new(settings) {
        Ok(proxy) => proxy,
        Err(e) => {
            eprintln!("txgate: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    #[cfg(not(target_env = "msvc"))]
    allocator::register(proxy.metrics().registry());
    let listeners = match Listeners::bind(listen, admin, workers) {
        Ok(listeners) => listeners,
        Err(e) => {
            tracing::error!(rpc = %listen, admin = %admin, error = %e, "cannot bind");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let (Ok(rpc_addr), Ok(admin_addr)) = (listeners.rpc_addr(), listeners.admin_addr()) else {
        tracing::error!("listeners have no local address");
        return ExitCode::from(EXIT_FAILED);
    };
    // The handlers are installed before "listening" is said: a signal sent
    // the moment txgate is up must not meet the default action (which
    // ends the process without draining or writing the last snapshot).
    // SIGHUP is always handled, for the same reason.
    let shutdown = signals::shutdown_signal();
    tokio::spawn(signals::reload_on_sighup(
        signals::hangups(),
        proxy.key_reloader(),
        proxy.tls(),
        signals::Switches {
            cli,
            file_enabled: std::sync::atomic::AtomicBool::new(proxy.conditions().enabled()),
            conditions: proxy.conditions(),
        },
    ));
    let tls = proxy.tls().is_some();
    tracing::info!(rpc = %rpc_addr, tls, admin = %admin_addr, upstream = %upstream_url, workers, screening, clients = %clients, sidecar = %sidecar, aeges = %aeges, "listening");
    let Exit { drained, fatal } = proxy.run(listeners, shutdown).await;
    match drained {
        Drained::Clean => tracing::info!("drained; exiting"),
        Drained::TimedOut => tracing::warn!("grace period over; closing remaining connections"),
    }
    match fatal {
        None => ExitCode::SUCCESS,
        Some(fatal) => {
            tracing::error!(part = %fatal.part, error = %fatal.error, "exiting after a failure");
            ExitCode::from(EXIT_FAILED)
        }
    }
}
