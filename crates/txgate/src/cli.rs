//! The command line: flags and their environment variables, each over
//! one setting of the config file, and the subcommands. [`Cli::load`]
//! reads the file, applies the flags, and validates and parses the result
//! once ([`Settings`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use txgate_config::{Config, LogFormat, Settings};

use crate::bans;

/// A screening JSON-RPC proxy in front of a rollup sequencer.
#[derive(Debug, Parser)]
#[command(name = "txgate", version, about)]
pub(crate) struct Cli {
    /// Config file (TOML). Without it, defaults and the flags below apply.
    #[arg(long, short = 'c', env = "TXGATE_CONFIG", global = true)]
    pub(crate) config: Option<PathBuf>,
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
    pub(crate) command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check the configuration, print the effective settings, and exit.
    CheckConfig,
    /// Look up, lift, export and import bans on a running instance,
    /// through its admin listener.
    Bans(bans::Bans),
}

impl Cli {
    /// File, then environment and flags (clap merges those two, flags
    /// win), checked and parsed once.
    pub(crate) fn load(&self) -> Result<Settings, String> {
        let mut config = match &self.config {
            Some(path) => {
                Config::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => Config::default(),
        };
        self.apply(&mut config);
        Settings::new(config).map_err(|e| e.to_string())
    }

    /// Each flag given over its setting: one line a flag.
    fn apply(&self, c: &mut Config) {
        set(&mut c.server.listen, self.listen);
        set(&mut c.upstream.url, self.upstream.clone());
        set(&mut c.admin.listen, self.admin_listen);
        set(&mut c.log.format, self.log_format);
        set(&mut c.log.level, self.log_level.clone());
        set(&mut c.admission.max_in_flight, self.max_in_flight);
        set(
            &mut c.shutdown.grace_period,
            self.grace_period_ms.map(std::time::Duration::from_millis),
        );
        set(
            &mut c.screen.monitor_only,
            self.monitor_only.then_some(true),
        );
        set(&mut c.sidecar.url, self.sidecar.clone());
        set(&mut c.screen.snapshot_path, self.ban_snapshot.clone());
        set(&mut c.aeges.listen, self.aeges_listen.clone());
        set(&mut c.aeges.report_token, self.aeges_report_token.clone());
        set(&mut c.redis.url, self.redis_url.clone());
        set(
            &mut c.admin.token_file,
            self.admin_token_file.clone().map(Some),
        );
        set(&mut c.websocket.enabled, self.websocket);
        set(&mut c.screen.pacing.enabled, self.pacing);
        set(
            &mut c.websocket.upstream_url,
            self.websocket_upstream.clone(),
        );
        set(&mut c.server.tls.cert_chain_path, self.tls_cert.clone());
        set(&mut c.server.tls.key_path, self.tls_key.clone());
        set(&mut c.upstream.tls.ca_path, self.upstream_ca.clone());
    }
}

/// A flag, when given, over its setting.
fn set<T>(setting: &mut T, flag: Option<T>) {
    if let Some(value) = flag {
        *setting = value;
    }
}
