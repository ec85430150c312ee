//! The start-up of the load tools: anvil, the example sidecar, txgate, the
//! sink and nginx on free loopback ports, each waited for until it
//! answers (txgate on request: some tools time its start), each stopped
//! when dropped; the builds they run and a scratch folder for their files.

use std::path::{Path, PathBuf};

use alloy_primitives::Address;
use serde_json::{Value, json};

use crate::procs::{HttpClient, Nginx, Proc, free_port, post, root, spawn, wait_get, wait_up};

/// anvil's flags for a node that mines as a sequencer does: a block a
/// second, room for a load's transactions in it, in the order they came.
pub const SEQUENCER: &[&str] = &[
    "--block-time",
    "1",
    "--gas-limit",
    "3000000000",
    "--order",
    "fifo",
];

/// A program of this workspace's release build.
pub fn release(name: &str) -> PathBuf {
    root().join("target/release").join(name)
}

/// The txgate a tool runs: `TXGATE_BIN`, or the release build.
pub fn txgate_bin() -> PathBuf {
    std::env::var_os("TXGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| release("txgate"))
}

/// A program of the pinned tools (anvil, cast).
pub fn tool(name: &str) -> PathBuf {
    root().join(".tools/bin").join(name)
}

/// The example sidecar's shipped config.
pub fn sidecar_config() -> PathBuf {
    root().join("config/example-sidecar.toml")
}

/// A folder of the run's own files (configs, nginx's), removed on drop:
/// `txgate-<tool>-<pid>` in the temporary folder.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates the folder of `tool`'s run.
    pub fn new(tool: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("txgate-{tool}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to the file `name` in it; its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The path of `path` as an argument.
pub fn arg(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("not UTF-8: {}", path.display()))
}

/// Starts anvil on a free loopback port with `extra` flags (`--silent`
/// always); its URL, once it answers. Stops when the process is dropped.
pub async fn anvil(client: &HttpClient, extra: &[&str]) -> (Proc, String) {
    anvil_on(client, free_port(), extra).await
}

/// [`anvil`] on `port` (a node started again where it was).
pub async fn anvil_on(client: &HttpClient, port: u16, extra: &[&str]) -> (Proc, String) {
    let port = port.to_string();
    let mut args = vec!["--host", "127.0.0.1", "--silent", "--port", &port];
    args.extend_from_slice(extra);
    let proc = spawn(&tool("anvil"), &args);
    let url = format!("http://127.0.0.1:{port}");
    wait_up(client, &url).await;
    (proc, url)
}

/// Gives each of `addresses` 100 ether on anvil, in one batch.
pub async fn fund(client: &HttpClient, node: &str, addresses: impl IntoIterator<Item = Address>) {
    fund_with(client, node, addresses, "0x56bc75e2d63100000").await;
}

/// Sets the balance of each of `addresses` to `wei` (hex) on anvil, in one
/// batch.
pub async fn fund_with(
    client: &HttpClient,
    node: &str,
    addresses: impl IntoIterator<Item = Address>,
    wei: &str,
) {
    let calls: Vec<Value> = addresses
        .into_iter()
        .enumerate()
        .map(|(i, address)| {
            json!({"jsonrpc": "2.0", "id": i, "method": "anvil_setBalance",
                "params": [format!("{address}"), wei]})
        })
        .collect();
    post(client, node, Value::Array(calls).to_string())
        .await
        .unwrap_or_else(|e| panic!("funding on {node}: {e}"));
}

/// The example sidecar (release build) and where it answers.
#[derive(Debug)]
pub struct Sidecar {
    /// Its process.
    pub proc: Proc,
    /// Its gRPC endpoint, for txgate's `--sidecar`.
    pub grpc: String,
    /// Its admin listener (`/invalidations`, `/healthz`).
    pub admin: String,
}

/// Starts the example sidecar watching `node` with `config`, on free
/// loopback ports; returns once its admin listener answers.
pub async fn sidecar(client: &HttpClient, node: &str, config: &Path) -> Sidecar {
    let (grpc, admin) = (free_port(), free_port());
    let proc = spawn(
        &release("example-sidecar"),
        &[
            "--listen",
            &format!("127.0.0.1:{grpc}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--node",
            node,
            "--config",
            arg(config),
        ],
    );
    let admin = format!("http://127.0.0.1:{admin}");
    wait_get(client, &format!("{admin}/healthz")).await;
    Sidecar {
        proc,
        grpc: format!("http://127.0.0.1:{grpc}"),
        admin,
    }
}

/// A txgate and its loopback ports.
#[derive(Debug)]
pub struct Txgate {
    /// Its process.
    pub proc: Proc,
    /// Its client port (JSON-RPC).
    pub port: u16,
    /// Its admin port (`/metrics`, `/healthz`, `/readyz`).
    pub admin_port: u16,
}

impl Txgate {
    /// Starts `bin` in front of `upstream`, its client and admin listeners
    /// on free loopback ports, `args` after; does not wait for it.
    pub fn spawn(bin: &Path, upstream: &str, args: &[&str]) -> Txgate {
        let mut all = vec!["--upstream", upstream];
        all.extend_from_slice(args);
        Txgate::spawn_with(bin, &all)
    }

    /// Starts `bin` with its client and admin listeners on free loopback
    /// ports, `args` after (its upstream from `--config`: a node group);
    /// does not wait for it.
    pub fn spawn_with(bin: &Path, args: &[&str]) -> Txgate {
        let (port, admin_port) = (free_port(), free_port());
        let (listen, admin) = (
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{admin_port}"),
        );
        let mut all = vec!["--listen", &listen, "--admin-listen", &admin];
        all.extend_from_slice(args);
        Txgate {
            proc: spawn(bin, &all),
            port,
            admin_port,
        }
    }

    /// [`Txgate::spawn`], then waits until a JSON-RPC call through it
    /// (to its upstream) is answered.
    pub async fn start(client: &HttpClient, bin: &Path, upstream: &str, args: &[&str]) -> Txgate {
        let txgate = Txgate::spawn(bin, upstream, args);
        wait_up(client, &txgate.url()).await;
        txgate
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its admin URL.
    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// Starts the sink (`src/bin/sink.rs`, release build) in front of `node`
/// on a free loopback port; its URL, once it answers.
pub async fn sink(client: &HttpClient, node: &str) -> (Proc, String) {
    let port = free_port();
    let proc = spawn(
        &release("sink"),
        &["--listen", &format!("127.0.0.1:{port}"), "--node", node],
    );
    let url = format!("http://127.0.0.1:{port}");
    wait_up(client, &url).await;
    (proc, url)
}

/// Starts nginx (`/usr/sbin/nginx`, in the foreground) with its files in
/// `dir`: `workers` worker processes, and `http` in its `http` block after
/// the settings every run shares (no access log, temporary files in
/// `dir`, 8192 connections a worker). Returns once `answers` answers a
/// JSON-RPC call.
pub async fn nginx(
    client: &HttpClient,
    dir: &Path,
    workers: &str,
    http: &str,
    answers: &str,
) -> Nginx {
    let d = dir.display();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes {workers};\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             worker_rlimit_nofile 16384;\nevents {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             {http}}}\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
    let nginx = Nginx(spawn(
        Path::new("/usr/sbin/nginx"),
        &["-c", arg(&conf), "-p", arg(dir)],
    ));
    wait_up(client, answers).await;
    nginx
}
