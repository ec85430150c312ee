//! The txgate daemon.
//!
//! Reads the config (file, then `TXGATE_*` environment, then flags), checks
//! every setting with the same parsers `check-config` uses, binds the
//! client and admin listeners (and the Aeges listener when set), serves until SIGTERM or SIGINT, drains the
//! calls in flight and exits 0.
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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use txgate_config::{Config, LogFormat, ShouldForwardScope};
use txgate_proxy::server::Drained;
use txgate_proxy::{Exit, Listeners, Proxy};

/// A setting that cannot work.
const EXIT_CONFIG: u8 = 2;
/// A part txgate cannot serve without failed, or could not start.
const EXIT_FAILED: u8 = 1;

/// A screening JSON-RPC proxy in front of a rollup sequencer.
#[derive(Debug, Parser)]
#[command(name = "txgate", version, about)]
struct Cli {
    /// Config file (TOML). Without it, defaults and the flags below apply.
    #[arg(long, short = 'c', env = "TXGATE_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Address for JSON-RPC clients [server.listen].
    #[arg(long, env = "TXGATE_LISTEN", global = true)]
    listen: Option<SocketAddr>,
    /// Upstream node URL, http://host:port[/path] or https://... [upstream.url].
    #[arg(long, env = "TXGATE_UPSTREAM", global = true)]
    upstream: Option<String>,
    /// Address for /metrics, /healthz, /readyz [admin.listen].
    #[arg(long, env = "TXGATE_ADMIN_LISTEN", global = true)]
    admin_listen: Option<SocketAddr>,
    /// Log format: human or json [log.format].
    #[arg(long, env = "TXGATE_LOG_FORMAT", global = true)]
    log_format: Option<LogFormat>,
    /// Log filter in RUST_LOG syntax [log.level].
    #[arg(long, env = "TXGATE_LOG_LEVEL", global = true)]
    log_level: Option<String>,
    /// Requests in flight at most [admission.max_in_flight].
    #[arg(long, env = "TXGATE_MAX_IN_FLIGHT", global = true)]
    max_in_flight: Option<usize>,
    /// Shutdown grace period in milliseconds [shutdown.grace_period_ms].
    #[arg(long, env = "TXGATE_GRACE_PERIOD_MS", global = true)]
    grace_period_ms: Option<u64>,
    /// Sidecar gRPC endpoint, http://host:port [sidecar.url].
    #[arg(long, env = "TXGATE_SIDECAR", global = true)]
    sidecar: Option<String>,
    /// Ban snapshot file, written periodically and at shutdown, read at
    /// start [screen.snapshot_path].
    #[arg(long, env = "TXGATE_BAN_SNAPSHOT", global = true)]
    ban_snapshot: Option<String>,
    /// Address for the Aeges listener, where the Credible Layer sidecar
    /// posts failure reports; empty: off [aeges.listen]. Whoever can reach
    /// it can ban traffic: keep it internal.
    #[arg(long, env = "TXGATE_AEGES_LISTEN", global = true)]
    aeges_listen: Option<String>,
    /// Token an Aeges report must carry; empty: none [aeges.report_token].
    /// Prefer the environment: a flag shows in the process list.
    #[arg(
        long,
        env = "TXGATE_AEGES_REPORT_TOKEN",
        global = true,
        hide_env_values = true
    )]
    aeges_report_token: Option<String>,
    /// The fleet's Redis, redis://[user:password@]host:port, sharing the
    /// per-client limits across instances; empty: per instance
    /// [redis.url]. Prefer the environment when it carries a password.
    #[arg(long, env = "TXGATE_REDIS_URL", global = true, hide_env_values = true)]
    redis_url: Option<String>,
    /// File holding the bearer token of the admin listener's ban
    /// endpoints [admin.token_file].
    #[arg(long, env = "TXGATE_ADMIN_TOKEN_FILE", global = true)]
    admin_token_file: Option<PathBuf>,
    /// JSON-RPC over WebSocket on the client port: true or false
    /// [websocket.enabled].
    #[arg(
        long,
        env = "TXGATE_WEBSOCKET",
        global = true,
        value_name = "true|false"
    )]
    websocket: Option<bool>,
    /// Hold the refusals of clients that keep sending refused transactions:
    /// true or false [screen.pacing.enabled].
    #[arg(long, env = "TXGATE_PACING", global = true, value_name = "true|false")]
    pacing: Option<bool>,
    /// The node's WebSocket endpoint, ws://host:port[/path]; empty: ws://
    /// and the host, port and path of the upstream URL
    /// [websocket.upstream_url].
    #[arg(
        long,
        env = "TXGATE_WEBSOCKET_UPSTREAM",
        global = true,
        value_name = "URL"
    )]
    websocket_upstream: Option<String>,
    /// PEM certificate chain for TLS on the client port; with --tls-key,
    /// the port speaks HTTPS and WSS [server.tls.cert_chain_path].
    #[arg(long, env = "TXGATE_TLS_CERT", global = true, value_name = "PATH")]
    tls_cert: Option<String>,
    /// PEM private key of that certificate [server.tls.key_path].
    #[arg(long, env = "TXGATE_TLS_KEY", global = true, value_name = "PATH")]
    tls_key: Option<String>,
    /// PEM file of the CAs an https:// upstream's certificate must chain
    /// to; empty: the system's roots [upstream.tls.ca_path].
    #[arg(long, env = "TXGATE_UPSTREAM_CA", global = true, value_name = "PATH")]
    upstream_ca: Option<String>,
    /// Screen, count and log, but forward everything [screen.monitor_only].
    #[arg(long, env = "TXGATE_MONITOR_ONLY", global = true)]
    monitor_only: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the configuration, print the effective settings, and exit.
    CheckConfig,
    /// Look up, lift, export and import bans on a running instance,
    /// through its admin listener.
    Bans(bans::Bans),
}

impl Cli {
    /// File, then environment and flags (clap merges those two, flags win).
    fn load(&self) -> Result<Config, String> {
        let mut config = match &self.config {
            Some(path) => {
                Config::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => Config::default(),
        };
        if let Some(v) = self.listen {
            config.server.listen = v;
        }
        if let Some(v) = &self.upstream {
            config.upstream.url = v.clone();
        }
        if let Some(v) = self.admin_listen {
            config.admin.listen = v;
        }
        if let Some(v) = self.log_format {
            config.log.format = v;
        }
        if let Some(v) = &self.log_level {
            config.log.level = v.clone();
        }
        if let Some(v) = self.max_in_flight {
            config.admission.max_in_flight = v;
        }
        if let Some(v) = self.grace_period_ms {
            config.shutdown.grace_period_ms = v;
        }
        if self.monitor_only {
            config.screen.monitor_only = true;
        }
        if let Some(v) = &self.sidecar {
            config.sidecar.url = v.clone();
        }
        if let Some(v) = &self.ban_snapshot {
            config.screen.snapshot_path = v.clone();
        }
        if let Some(v) = &self.aeges_listen {
            config.aeges.listen = v.clone();
        }
        if let Some(v) = &self.aeges_report_token {
            config.aeges.report_token = v.clone();
        }
        if let Some(v) = &self.redis_url {
            config.redis.url = v.clone();
        }
        if let Some(v) = &self.admin_token_file {
            config.admin.token_file = Some(v.clone());
        }
        if let Some(v) = self.websocket {
            config.websocket.enabled = v;
        }
        if let Some(v) = self.pacing {
            config.screen.pacing.enabled = v;
        }
        if let Some(v) = &self.websocket_upstream {
            config.websocket.upstream_url = v.clone();
        }
        if let Some(v) = &self.tls_cert {
            config.server.tls.cert_chain_path = v.clone();
        }
        if let Some(v) = &self.tls_key {
            config.server.tls.key_path = v.clone();
        }
        if let Some(v) = &self.upstream_ca {
            config.upstream.tls.ca_path = v.clone();
        }
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

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
    let cli = Cli::parse();
    let config = match cli.load() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("txgate: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let command = cli.command;
    if let Some(Command::Bans(bans)) = command {
        return bans.run(&config);
    }
    if let Some(Command::CheckConfig) = command {
        // The files TLS needs are read as starting would read them.
        if let Err(e) = txgate_proxy::check_tls(&config) {
            eprintln!("txgate: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
        println!("configuration ok");
        println!("  listen        {}", config.server.listen);
        println!("  tls           {}", tls_line(&config));
        println!("  clients       {}", client_identity(&config));
        println!("  upstream      {}", upstream_line(&config));
        println!(
            "  admin         {} (ban endpoints: {})",
            config.admin.listen,
            if config.admin.token_file.is_some() {
                "bearer token"
            } else {
                "loopback only"
            }
        );
        println!(
            "  max_in_flight {} ({} for eth_sendRawTransactionSync, upstream wait {} ms)",
            config.admission.max_in_flight,
            config.admission.effective_max_sync_in_flight(),
            config.upstream.sync_call_timeout_ms
        );
        println!(
            "  policy        {:?} {:?}",
            config.rpc.policy, config.rpc.methods
        );
        println!("  screening     {}", screening_mode(&config));
        let sources = sidecar_sources(&config);
        if sources.is_empty() {
            println!("  sidecar       none");
        }
        for (n, source) in sources.iter().enumerate() {
            let label = if n == 0 { "sidecar" } else { "" };
            println!("  {label:<13} {source}");
        }
        println!("  aeges         {}", aeges_listener(&config));
        println!("  conditional   {}", conditional_checks(&config));
        println!("  redis         {}", redis_link(&config));
        println!("  websocket     {}", websocket_link(&config));
        return ExitCode::SUCCESS;
    }
    init_logging(&config);
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
    let code = runtime.block_on(run(config, cli.config.clone()));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

async fn run(config: Config, config_path: Option<PathBuf>) -> ExitCode {
    let workers = config.server.effective_workers();
    let (listen, admin) = (config.server.listen, config.admin.listen);
    let upstream_url = config.upstream.url.clone();
    let screening = screening_mode(&config);
    let sidecar = match sidecar_sources(&config) {
        sources if sources.is_empty() => "none".to_string(),
        sources => sources.join(", "),
    };
    let aeges = aeges_listener(&config);
    let clients = client_identity(&config);
    // Everything that can refuse a setting runs before anything listens.
    let proxy = match Proxy::new(config) {
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
    let shutdown = shutdown_signal();
    tokio::spawn(reload_on_sighup(
        hangups(),
        proxy.key_reloader(),
        proxy.tls(),
        Switches {
            config: config_path,
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

fn screening_mode(config: &Config) -> &'static str {
    match (config.screen.enabled, config.screen.monitor_only) {
        (false, _) => "off",
        (true, true) => "monitor-only",
        (true, false) => "on",
    }
}

/// The sidecar sources, one line each: URL, protocol, and whether it is
/// asked ShouldForward, about what. The config is validated: the list
/// parses.
fn sidecar_sources(config: &Config) -> Vec<String> {
    let sidecar = &config.sidecar;
    let scope = match sidecar.should_forward_scope {
        ShouldForwardScope::Hot => format!(
            " should_forward (new fingerprints on calls an invalidation named within {} ms)",
            sidecar.hot_window_ms
        ),
        ShouldForwardScope::All => " should_forward (every new fingerprint)".to_string(),
    };
    sidecar
        .sources()
        .unwrap_or_default()
        .iter()
        .map(|source| {
            format!(
                "http://{} {}{}",
                source.url.authority(),
                source.protocol,
                if source.should_forward { &scope } else { "" }
            )
        })
        .collect()
}

/// Who the clients are: the TCP peer, or, from trusted proxies, the PROXY
/// protocol source and the forwarding header.
fn client_identity(config: &Config) -> String {
    let server = &config.server;
    let trusted = server.trusted_proxies().unwrap_or_default();
    if trusted.is_empty() {
        return "the TCP peer (no trusted proxies)".to_string();
    }
    let trusted: Vec<String> = trusted.iter().map(ToString::to_string).collect();
    format!(
        "from trusted proxies [{}]: PROXY protocol {:?}, header {:?}",
        trusted.join(", "),
        server.proxy_protocol,
        server.forwarded_header
    )
}

/// What `eth_sendRawTransactionConditional` is checked against.
fn conditional_checks(config: &Config) -> String {
    let c = &config.conditional;
    if !c.enabled {
        return "off (every call refused: endpoint disabled)".to_string();
    }
    let per_sec = |rate: u32| {
        if rate == 0 {
            "no limit".to_string()
        } else {
            format!("{rate} lookups/s")
        }
    };
    format!(
        "max cost {}; targets {}; callers {}; rate {}{}, per caller {}",
        c.max_cost,
        if c.targets.is_empty() {
            "any".to_string()
        } else {
            c.targets.len().to_string()
        },
        if c.callers.is_empty() {
            "open (signatures checked when present)".to_string()
        } else {
            format!("{} listed (signature required)", c.callers.len())
        },
        per_sec(c.rate_per_sec),
        if config.redis.enabled() && c.rate_per_sec > 0 {
            " for the fleet"
        } else {
            ""
        },
        per_sec(c.caller_rate_per_sec)
    )
}

/// The fleet's Redis (never its password) and what it shares; "off".
fn redis_link(config: &Config) -> String {
    let redis = &config.redis;
    if !redis.enabled() {
        return "off (per-client limits are per instance)".to_string();
    }
    format!(
        "{} shares the per-client limits and conditional rates, sync every {} ms; {}% of each limit per instance while down",
        redis.redacted_url(),
        redis.sync_interval_ms,
        (redis.local_share * 100.0).round()
    )
}

/// TLS on the client port: the files, versions and groups; "off".
fn tls_line(config: &Config) -> String {
    let tls = &config.server.tls;
    if !tls.enabled() {
        return "off (cleartext HTTP and WebSocket)".to_string();
    }
    let reread = match tls.reload_interval_ms {
        0 => "reread on SIGHUP only".to_string(),
        ms => format!("reread every {ms} ms and on SIGHUP"),
    };
    format!(
        "on, certificate {} ({reread}), TLS {}, groups {} (the client's choice among them), tickets {}",
        tls.cert_chain_path,
        if tls.allows_tls12() {
            "1.3 and 1.2"
        } else {
            "1.3 only"
        },
        tls.groups.join(", "),
        if tls.session_tickets { "on" } else { "off" }
    )
}

/// The node, and for https:// what it is trusted by.
fn upstream_line(config: &Config) -> String {
    let up = &config.upstream;
    match up.endpoint() {
        Ok(url) if url.is_tls() => format!(
            "{} (TLS, CA {}{})",
            up.url,
            if up.tls.ca_path.is_empty() {
                "the system's roots"
            } else {
                &up.tls.ca_path
            },
            if up.tls.has_client_cert() {
                ", client certificate"
            } else {
                ""
            }
        ),
        _ => up.url.clone(),
    }
}

/// WebSocket: the node's endpoint and the main limits; "off".
fn websocket_link(config: &Config) -> String {
    let ws = &config.websocket;
    if !ws.enabled {
        return "off".to_string();
    }
    // The config is validated: the endpoint parses.
    let upstream = match config.websocket_upstream() {
        Ok(url) => format!(
            "{}://{}{}",
            if url.is_tls() { "wss" } else { "ws" },
            url.authority(),
            url.path()
        ),
        Err(e) => e.to_string(),
    };
    format!(
        "on, upstream {upstream}, {} subscriptions per connection ({} in all), {}-byte messages",
        ws.max_subscriptions_per_connection, ws.max_subscriptions, ws.max_message_bytes
    )
}

/// The Aeges listener: its address, whether a token is set (never the
/// token) and the allowed networks; "off" without one.
fn aeges_listener(config: &Config) -> String {
    let aeges = &config.aeges;
    let Ok(Some(listen)) = aeges.listen_addr() else {
        return "off".to_string();
    };
    let nets = |nets: Vec<txgate_config::IpNet>| {
        nets.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{listen} reports: token {} allow [{}]; pool questions: allow [{}]",
        if aeges.report_token.is_empty() {
            "none"
        } else {
            "set"
        },
        nets(aeges.allow().unwrap_or_default()),
        nets(aeges.verify_allow().unwrap_or_default()),
    )
}

/// The SIGHUP stream, its handler installed now.
fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|_| {
            tracing::error!(
                "cannot install the SIGHUP handler; API keys and switches are not reloaded"
            );
        })
        .ok()
}

/// What SIGHUP switches without a restart: `conditional.enabled`, read
/// again from the config file. Applied only when the file's value changed
/// since it was last read: a SIGHUP sent for another reason (API keys)
/// does not undo a switch made on the admin listener.
struct Switches {
    config: Option<PathBuf>,
    conditions: std::sync::Arc<txgate_proxy::rpc::conditional::Conditions>,
    /// The file's `conditional.enabled` when last read.
    file_enabled: std::sync::atomic::AtomicBool,
}

impl Switches {
    /// Reads the config file again and applies its switches; a file that
    /// does not load or validate changes nothing.
    fn reload(&self) {
        let Some(path) = &self.config else {
            return;
        };
        let loaded = Config::from_file(path).and_then(|config| {
            config.validate()?;
            Ok(config)
        });
        match loaded {
            Ok(config) => {
                let on = config.conditional.enabled;
                let was_in_file = self
                    .file_enabled
                    .swap(on, std::sync::atomic::Ordering::Relaxed);
                if was_in_file == on {
                    return;
                }
                if self.conditions.set_enabled(on) != on {
                    tracing::warn!(
                        enabled = on,
                        "eth_sendRawTransactionConditional switched by SIGHUP"
                    );
                }
            }
            Err(e) => tracing::error!(
                path = %path.display(),
                error = %e,
                "config not read again on SIGHUP; the switches in force stay"
            ),
        }
    }
}

/// On every SIGHUP: the API keys (when per-client limits are on) and the
/// switches of the config file.
async fn reload_on_sighup(
    hup: Option<tokio::signal::unix::Signal>,
    reloader: Option<txgate_proxy::KeyReloader>,
    tls: Option<txgate_proxy::server::tls::Tls>,
    switches: Switches,
) {
    let Some(mut hup) = hup else {
        return;
    };
    while hup.recv().await.is_some() {
        if let Some(reloader) = &reloader {
            reloader.reload();
        }
        if let Some(tls) = &tls {
            // Logged and counted by the reload itself.
            let tls = tls.clone();
            let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
        }
        switches.reload();
    }
}

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when the future is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = signals else {
            tracing::error!("cannot install signal handlers; shutdown only by kill");
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
