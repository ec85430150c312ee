//! Processes and HTTP for the load tools: children killed on drop, free
//! loopback ports, a JSON-RPC POST, waiting for an endpoint to answer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// A child process, killed and reaped on drop.
#[derive(Debug)]
pub struct Proc(Child);

impl Proc {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// nginx's master, stopped with SIGTERM on drop so that it takes its
/// workers down with it (a killed master leaves them running).
#[derive(Debug)]
pub struct Nginx(pub Proc);

impl Drop for Nginx {
    fn drop(&mut self) {
        let pid = self.0.pid();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        // Up to 5 s: the master exits once its workers have.
        for _ in 0..250 {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A free loopback port (bound and released; the caller binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Starts a child; with `TXGATE_BENCH_LOGS=DIR`, its stderr goes to
/// `DIR/<name>.log` at info level.
pub fn spawn(program: &Path, args: &[&str]) -> Proc {
    let mut command = Command::new(program);
    command.args(args).stdout(Stdio::null());
    match std::env::var_os("TXGATE_BENCH_LOGS") {
        Some(dir) => {
            let name = program
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let file = std::fs::File::create(Path::new(&dir).join(format!("{name}.log")))
                .unwrap_or_else(|e| panic!("log file: {e}"));
            let level = std::env::var("TXGATE_BENCH_RUST_LOG").unwrap_or_else(|_| "info".into());
            command.env("RUST_LOG", level).stderr(file);
        }
        None => {
            command.env("RUST_LOG", "warn").stderr(Stdio::null());
        }
    }
    Proc(
        command
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display())),
    )
}

/// CPU time a process has used (user + system), in ms, from
/// `/proc/<pid>/stat` (fields 14 and 15, in clock ticks of 10 ms).
pub fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name is in parentheses and may hold spaces: count from
    // after it, where the state is the first field, so utime and stime
    // are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) * 10.0
}

/// CPU time of a process and its direct children (nginx's workers), in ms.
pub fn tree_cpu_ms(pid: u32) -> f64 {
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            rest.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
                == Some(pid)
        })
        .map(cpu_ms)
        .sum();
    cpu_ms(pid) + children
}

/// Starts anvil on a free loopback port with `extra` flags (`--silent`
/// always); its URL, once it answers. Stops when the process is dropped.
pub async fn anvil(client: &HttpClient, extra: &[&str]) -> (Proc, String) {
    let port = free_port();
    let mut args = vec!["--host", "127.0.0.1", "--silent", "--port"];
    let port_arg = port.to_string();
    args.push(&port_arg);
    args.extend_from_slice(extra);
    let proc = spawn(&root().join(".tools/bin/anvil"), &args);
    let url = format!("http://127.0.0.1:{port}");
    wait_up(client, &url).await;
    (proc, url)
}

/// Gives each of `addresses` 100 ether on anvil, in one batch.
pub async fn fund(
    client: &HttpClient,
    node: &str,
    addresses: impl IntoIterator<Item = alloy_primitives::Address>,
) {
    let calls: Vec<Value> = addresses
        .into_iter()
        .enumerate()
        .map(|(i, address)| {
            json!({"jsonrpc": "2.0", "id": i, "method": "anvil_setBalance",
                "params": [format!("{address}"), "0x56bc75e2d63100000"]})
        })
        .collect();
    post(client, node, Value::Array(calls).to_string())
        .await
        .unwrap_or_else(|e| panic!("funding on {node}: {e}"));
}

/// The HTTP client of the load tools.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client keeping up to `idle` connections per host.
pub fn client(idle: usize) -> HttpClient {
    // Idle connections are dropped before txgate's 5 s header timeout
    // closes them, so a call never races a close on a reused connection.
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(idle)
        .pool_idle_timeout(Duration::from_secs(4))
        .build_http()
}

/// [`client`], its connections from the loopback address `from`
/// (127.0.0.2, 127.0.0.3…: a distinct client to the proxy).
pub fn client_from(idle: usize, from: std::net::IpAddr) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(idle)
        .pool_idle_timeout(Duration::from_secs(4))
        .build(connector)
}

/// POSTs a JSON body; the status and the parsed answer (null if not JSON).
pub async fn post(client: &HttpClient, url: &str, body: String) -> Result<(u16, Value), String> {
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = client.request(req).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// Waits until `url` answers a JSON-RPC call (10 s at most).
pub async fn wait_up(client: &HttpClient, url: &str) {
    for _ in 0..400 {
        if post(
            client,
            url,
            json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}).to_string(),
        )
        .await
        .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} did not come up");
}
