//! Real processes for the end-to-end tests: anvil, geth and op-geth, the
//! txgate binary, and a deliberately slow upstream for fault injection.
//! Every process is killed by PID when its handle drops.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

mod hosts;
mod nodes;
pub mod relay;
pub use hosts::Hosts;
pub use nodes::*;

/// Anvil's first default account.
pub const KEY0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// Anvil's second default account.
pub const ADDR1: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A foundry tool: `$TXGATE_FOUNDRY_BIN/<name>` or `.tools/bin/<name>`.
pub fn foundry_tool(name: &str) -> PathBuf {
    let dir = std::env::var_os("TXGATE_FOUNDRY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/bin"));
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: run scripts/install-foundry.sh (or set TXGATE_FOUNDRY_BIN)",
        path.display()
    );
    path
}

/// Runs a real client script from `crates/txgate/tests/clients` (viem
/// under node, web3.py from `.tools/py`, both installed by
/// scripts/install-ws-clients.sh) with `args`; returns its last stdout
/// line, parsed as JSON. Fails the test if the client failed.
pub fn client_script(script: &str, args: &[&str]) -> serde_json::Value {
    let dir = workspace_root().join("crates/txgate/tests/clients");
    let (program, installed) = if script.ends_with(".py") {
        let python = workspace_root().join(".tools/py/bin/python");
        (python.clone(), python.exists())
    } else {
        (
            PathBuf::from("node"),
            dir.join("node_modules/viem").exists(),
        )
    };
    assert!(
        installed,
        "{script}'s client is not installed: run scripts/install-ws-clients.sh"
    );
    let out = Command::new(program)
        .arg(dir.join(script))
        .args(args)
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{script} printed {last:?}: {e}"))
}

/// A free loopback port for a child process to bind (bound once here to
/// see that it is free, then released).
///
/// Ports are taken below the kernel's ephemeral range, from a counter that
/// starts at an offset of this process's id: a port that `bind(:0)` or an
/// outgoing connection picked (anvil's, txgate's, a test server's) comes
/// from the ephemeral range, so none of them can take the port in the
/// window between this release and the child's bind, and no two calls in
/// this process return the same port. Where the range leaves no room below
/// it, the kernel's choice is used.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    if ephemeral_low > 12_000 {
        let low = ephemeral_low - 10_000;
        let span = 10_000 - 1;
        let start = std::process::id() % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (low + (start + n) % span) as u16;
            if StdListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A child process killed on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Takes ownership of a spawned child: killed on drop.
    pub fn new(child: Child) -> Proc {
        Proc { child }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for exit up to `limit`.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Resident memory in bytes, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: plain kill(2) on the PID of a child we spawned and have
        // not reaped, so the PID cannot have been reused.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill({}) failed", self.child.id());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A directory removed (with everything in it) on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "txgate-it-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The receipt of `hash` from `url`, waiting up to `limit` for it. geth
/// answers -32000 "transaction indexing is in progress" for a moment after
/// each new block, before its indexer has caught up: that counts as not yet.
pub async fn receipt(url: &str, hash: &str, limit: Duration) -> serde_json::Value {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1,
        "method": "eth_getTransactionReceipt", "params": [hash]})
    .to_string();
    let deadline = Instant::now() + limit;
    loop {
        let (status, answer) = rpc_json(url, &body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let indexing = answer["error"]["message"] == "transaction indexing is in progress";
        assert!(
            answer.get("error").is_none() || indexing,
            "receipt of {hash}: {answer}"
        );
        if !answer["result"].is_null() && answer.get("result").is_some() {
            return answer["result"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no receipt of {hash} within {limit:?}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The txgate binary under test.
pub fn txgate_binary() -> &'static str {
    env!("CARGO_BIN_EXE_txgate")
}

/// A running txgate binary.
pub struct Txgate {
    pub proc: Proc,
    pub url: String,
    pub rpc_addr: SocketAddr,
    pub admin_url: String,
    logs: mpsc::Receiver<String>,
    startup: std::sync::Mutex<Vec<String>>,
}

impl Txgate {
    /// Starts txgate in front of `upstream` with ports chosen by the OS.
    pub fn start(upstream: &str, extra: &[&str]) -> Txgate {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        Txgate::spawn(&args)
    }

    pub fn spawn(args: &[&str]) -> Txgate {
        let mut command = Command::new(txgate_binary());
        command.args(args);
        Txgate::spawn_command(command)
    }

    /// `command` (the txgate binary, or `ip netns exec … txgate`, with its
    /// arguments), started and waited for until it reports listening. Its
    /// `url` is on the address it listens on.
    pub fn spawn_command(mut command: Command) -> Txgate {
        let child = command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn txgate");
        let mut proc = Proc { child };
        let stderr = proc.child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut startup = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!("txgate did not report listening: {}", startup.join("\n"))
            });
            startup.push(line.clone());
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["message"] == "listening" {
                let rpc_addr: SocketAddr = v["rpc"].as_str().expect("rpc").parse().expect("addr");
                let admin = v["admin"].as_str().expect("admin").to_string();
                return Txgate {
                    proc,
                    url: format!("http://{rpc_addr}"),
                    rpc_addr,
                    admin_url: format!("http://{admin}"),
                    logs: rx,
                    startup: std::sync::Mutex::new(startup),
                };
            }
        }
    }

    /// The same instance reached at `ip` (one started on a network host,
    /// listening on every address: its client and admin URLs on that
    /// host's address).
    pub fn reached_at(mut self, ip: std::net::Ipv4Addr) -> Txgate {
        let admin_port = self
            .admin_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .expect("admin port");
        self.rpc_addr = SocketAddr::from((ip, self.rpc_addr.port()));
        self.url = format!("http://{}", self.rpc_addr);
        self.admin_url = format!("http://{ip}:{admin_port}");
        self
    }

    /// Log lines printed so far (the startup lines on the first call).
    pub fn drain_logs(&self) -> Vec<String> {
        let mut lines = std::mem::take(&mut *self.startup.lock().unwrap());
        lines.extend(self.logs.try_iter());
        lines
    }

    /// Waits up to `limit` for the log lines printed so far to satisfy
    /// `done`, and returns them all (the startup lines first, as
    /// `drain_logs` would) whether or not it held: the caller asserts. The
    /// lines reach the test through a reader thread, so a line txgate has
    /// already written can arrive a moment later; a single `drain_logs`
    /// right after an action can miss it.
    pub async fn logs_until(
        &self,
        limit: Duration,
        mut done: impl FnMut(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut lines = self.drain_logs();
        loop {
            if done(&lines) || Instant::now() >= deadline {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            lines.extend(self.logs.try_iter());
        }
    }

    /// Waits up to `limit` for the line that marks each (re)connect of the
    /// fleet's ban log reader; fails the test, with the lines seen, if it
    /// never comes.
    pub async fn assert_reads_ban_log(&self, limit: Duration) {
        const LINE: &str = "reading the fleet's ban log";
        let seen = self
            .logs_until(limit, |lines| lines.iter().any(|l| l.contains(LINE)))
            .await;
        assert!(
            seen.iter().any(|l| l.contains(LINE)),
            "{} never read the fleet's ban log: {seen:?}",
            self.url
        );
    }

    /// The Prometheus text from `/metrics`.
    pub async fn metrics(&self) -> String {
        let (status, _, body) = get(&format!("{}/metrics", self.admin_url)).await;
        assert_eq!(status, StatusCode::OK);
        String::from_utf8(body.to_vec()).expect("utf8")
    }
}

/// When txgate wrote a JSON log line: its `timestamp` (RFC 3339, UTC, as
/// tracing's JSON format writes it) as time since the Unix epoch. Two
/// lines of one instance compare on its own clock, free of the pipe and
/// the test's scheduling.
pub fn logged_at(line: &str) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let stamp = v["timestamp"].as_str()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.split('-').map(|n| n.parse::<i64>());
    let (y, m, d) = (ymd.next()?.ok()?, ymd.next()?.ok()?, ymd.next()?.ok()?);
    let mut hms = time.split(':');
    let (h, min) = (
        hms.next()?.parse::<u64>().ok()?,
        hms.next()?.parse::<u64>().ok()?,
    );
    let secs: f64 = hms.next()?.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date.
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(Duration::from_secs(days * 86_400 + h * 3600 + min * 60) + Duration::from_secs_f64(secs))
}

/// The time between an instance's "listening" line and its first refusal
/// line for the transaction `raw` (both on its own clock), waiting up to
/// 5 s for that refusal line to arrive. Panics if either line is missing.
pub async fn listening_to_refusal(txgate: &Txgate, raw: &str) -> Duration {
    let hash =
        alloy_primitives::keccak256(alloy_primitives::hex::decode(raw).expect("hex")).to_string();
    let is_refusal = |l: &String| {
        serde_json::from_str::<serde_json::Value>(l)
            .is_ok_and(|v| v["target"] == "txgate::refusal" && v["tx_hash"] == hash.as_str())
    };
    let lines = txgate
        .logs_until(Duration::from_secs(5), |lines| lines.iter().any(is_refusal))
        .await;
    let listening = lines
        .iter()
        .find(|l| l.contains("\"message\":\"listening\""))
        .and_then(|l| logged_at(l))
        .expect("a timed \"listening\" line");
    let refused = lines
        .iter()
        .find(|l| is_refusal(l))
        .and_then(|l| logged_at(l))
        .unwrap_or_else(|| panic!("no refusal line for {hash}: {lines:#?}"));
    refused
        .checked_sub(listening)
        .expect("refused before listening")
}

/// The value of a metric line `name{labels} value`, or 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map(|v| v.trim().parse().expect("number"))
        .unwrap_or(0.0)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response: status, headers, body.
pub type Answer = (StatusCode, HeaderMap, Bytes);

/// How long any call of the helpers below may take, connect to last byte,
/// before it fails the test saying so: a test must fail, never hang. The
/// longest wait a test makes on purpose through them (a sync call held to
/// its timeout) is about a third of it.
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Sends `req` with `client` and reads the whole answer, within
/// [`CALL_LIMIT`].
async fn exchange(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<Answer, String> {
    let uri = req.uri().clone();
    let call = async {
        let response = client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .unwrap_or_else(|_| Err(format!("no whole answer from {uri} within {CALL_LIMIT:?}")))
}

/// POSTs with the given content type.
pub async fn post(
    url: &str,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> Result<Answer, String> {
    let mut req = Request::post(url);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req
        .body(Full::new(body.into()))
        .map_err(|e| e.to_string())?;
    exchange(&client(), req).await
}

/// POSTs a JSON-RPC body from the loopback address `from` (127.0.0.2,
/// 127.0.0.3…: distinct clients) with extra headers.
pub async fn rpc_from(
    url: &str,
    from: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from.parse().map_err(|e| format!("{e}"))?));
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut req = Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    exchange(&client, req).await
}

/// POSTs a JSON-RPC body.
pub async fn rpc(url: &str, body: &str) -> Result<Answer, String> {
    post(url, Some("application/json"), body.to_string()).await
}

/// POSTs a JSON-RPC body and parses the answer; panics on transport errors.
pub async fn rpc_json(url: &str, body: &str) -> (StatusCode, serde_json::Value) {
    let (status, _, bytes) = rpc(url, body).await.expect("transport");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

/// GET that reports transport errors instead of panicking.
pub async fn try_get(url: &str) -> Result<Answer, String> {
    let req = Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    exchange(&client(), req).await
}

pub async fn get(url: &str) -> Answer {
    try_get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// Runs cast with arguments; returns stdout, panics with stderr on failure.
pub fn cast(args: &[&str]) -> String {
    let out = Command::new(foundry_tool("cast"))
        .args(args)
        .output()
        .expect("spawn cast");
    assert!(
        out.status.success(),
        "cast {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

/// `cast send` from `key` through `url` (`args`: the recipient and its
/// options, or `--create` and init code), waited for until mined; returns
/// the receipt, asserted successful.
///
/// cast sends, then takes the receipt apart: its own wait gives up on the
/// first error, and geth answers a receipt lookup with -32000 "transaction
/// indexing is in progress" for a moment after each block, which here
/// counts as not yet (as in [`receipt`]).
pub fn cast_send(url: &str, key: &str, args: &[&str]) -> serde_json::Value {
    let mut send = vec!["send", "--async", "--rpc-url", url, "--private-key", key];
    send.extend_from_slice(args);
    let hash = cast(&send);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(foundry_tool("cast"))
            .args(["receipt", "--json", "--rpc-url", url, &hash])
            .output()
            .expect("spawn cast");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            let receipt: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("cast printed a receipt");
            assert_eq!(receipt["status"], "0x1", "{receipt}");
            return receipt;
        }
        assert!(
            stderr.contains("transaction indexing is in progress") && Instant::now() < deadline,
            "cast receipt {hash} failed: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An upstream that answers every POST after `delay` with a JSON-RPC result
/// echoing nothing but `"0x1"`: fault injection for timeouts and drains.
pub struct SlowUpstream {
    pub url: String,
    release: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowUpstream {
    /// Answers every call `"0x1"` under its id after `delay`.
    pub async fn start(delay: Duration) -> SlowUpstream {
        SlowUpstream::start_holding(delay, None).await
    }

    /// As [`SlowUpstream::start`], and calls of the method `hold` are then
    /// held until [`SlowUpstream::release`]: the test decides how long they
    /// stay in flight, however slow the machine.
    pub async fn start_holding(delay: Duration, hold: Option<&'static str>) -> SlowUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (release, released) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let released = released.clone();
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let mut released = released.clone();
                            async move {
                                let body = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                tokio::time::sleep(delay).await;
                                let call = serde_json::from_slice::<serde_json::Value>(&body)
                                    .unwrap_or_default();
                                if hold.is_some_and(|method| call["method"] == method) {
                                    let _ = released.wait_for(|released| *released).await;
                                }
                                let answer = serde_json::json!(
                                    {"jsonrpc":"2.0","id":call["id"],"result":"0x1"}
                                )
                                .to_string();
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from(answer),
                                )))
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        SlowUpstream { url, release, task }
    }

    /// Answers the held calls, and every later one without holding it.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

impl Drop for SlowUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An upstream that records every body POSTed to it and answers each
/// call (or batch) with a result per id: what reached the node, byte for
/// byte. Anything else (a lane's WebSocket upgrade: this node has no
/// WebSocket) is answered 405 and not recorded: it carries no call.
pub struct RecordingUpstream {
    pub url: String,
    pub bodies: std::sync::Arc<std::sync::Mutex<Vec<Bytes>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingUpstream {
    pub async fn start() -> RecordingUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = bodies.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let seen = seen.clone();
                            async move {
                                if req.method() != hyper::Method::POST {
                                    let mut refused = hyper::Response::new(Full::new(Bytes::new()));
                                    *refused.status_mut() = hyper::StatusCode::METHOD_NOT_ALLOWED;
                                    return Ok::<_, std::convert::Infallible>(refused);
                                }
                                let body = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                seen.lock().expect("bodies").push(body.clone());
                                let answer = |call: &serde_json::Value| {
                                    serde_json::json!({"jsonrpc": "2.0", "id": call["id"],
                                    "result": "0x01"})
                                };
                                let parsed: serde_json::Value =
                                    serde_json::from_slice(&body).unwrap_or_default();
                                let reply = match &parsed {
                                    serde_json::Value::Array(calls) => {
                                        serde_json::Value::Array(calls.iter().map(answer).collect())
                                    }
                                    call => answer(call),
                                };
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from(reply.to_string()),
                                )))
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        RecordingUpstream { url, bodies, task }
    }

    /// The bodies received so far.
    pub fn received(&self) -> Vec<Bytes> {
        self.bodies.lock().expect("bodies").clone()
    }
}

impl Drop for RecordingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A file removed on drop.
pub struct TempFile {
    pub path: PathBuf,
}

impl TempFile {
    pub fn new(contents: &str) -> TempFile {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "txgate-it-{}-{}.toml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, contents).expect("write temp file");
        TempFile { path }
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().expect("utf8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// txgate run in this process, so that a test can apply invalidations
/// through the same function the sidecar stream uses. Stopped (drained) on
/// drop.
pub struct InProcess {
    pub url: String,
    pub admin_url: String,
    pub invalidations: txgate_proxy::Invalidations,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    /// Starts txgate in front of `upstream` with `config` (TOML text; its
    /// listen addresses are replaced by free loopback ports).
    pub fn start(upstream: &str, config: &str) -> InProcess {
        let mut config = txgate_config::Config::from_toml(config).expect("test config");
        config.upstream.url = upstream.to_string();
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        config.admin.listen = "127.0.0.1:0".parse().unwrap();
        // Two workers unless the test names its count.
        if config.server.workers == 0 {
            config.server.workers = 2;
        }
        config.shutdown.grace_period = std::time::Duration::from_secs(1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listeners = txgate_proxy::Listeners::bind(
                    config.server.listen,
                    config.admin.listen,
                    config.server.workers,
                )
                .expect("bind");
                let addrs = (
                    listeners.rpc_addr().unwrap(),
                    listeners.admin_addr().unwrap(),
                );
                let proxy = txgate_proxy::Proxy::new(
                    txgate_config::Settings::new(config).expect("settings"),
                )
                .expect("proxy");
                let invalidations = proxy.invalidations().expect("screening on");
                ready_tx.send((addrs, invalidations)).unwrap();
                proxy
                    .run(listeners, async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        let ((rpc, admin), invalidations) = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("in-process txgate started");
        InProcess {
            url: format!("http://{rpc}"),
            admin_url: format!("http://{admin}"),
            invalidations,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub async fn metrics(&self) -> String {
        let (_, _, body) = get(&format!("{}/metrics", self.admin_url)).await;
        String::from_utf8(body.to_vec()).unwrap()
    }

    /// Starts the drain, as SIGTERM does (the grace period is 1 s); the
    /// drop then waits for it to end.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An externally owned account for signing test transactions.
pub struct Eoa {
    key: secp256k1::SecretKey,
    pub address: alloy_primitives::Address,
}

impl Eoa {
    /// A deterministic account from a seed (distinct seeds, distinct keys).
    pub fn new(seed: u64) -> Eoa {
        let mut bytes = [0x5au8; 32];
        bytes[24..].copy_from_slice(&seed.to_be_bytes());
        Eoa::from_secret(bytes)
    }

    /// The account of a `0x`-hex private key (one of [`ANVIL_KEYS`]).
    pub fn from_key(key: &str) -> Eoa {
        let bytes: [u8; 32] = alloy_primitives::hex::decode(key)
            .expect("hex key")
            .try_into()
            .expect("32 bytes");
        Eoa::from_secret(bytes)
    }

    fn from_secret(bytes: [u8; 32]) -> Eoa {
        let key = secp256k1::SecretKey::from_byte_array(bytes).expect("key");
        let public = key.public_key(secp256k1::SECP256K1);
        let address =
            alloy_primitives::Address::from_raw_public_key(&public.serialize_uncompressed()[1..]);
        Eoa { key, address }
    }

    /// A signed EIP-1559 call on anvil's chain (31337), `0x`-hex.
    pub fn sign(
        &self,
        nonce: u64,
        to: alloy_primitives::Address,
        input: &[u8],
        value: u128,
        tip: u128,
    ) -> String {
        self.sign_tx(alloy_consensus::TxEip1559 {
            chain_id: 31337,
            nonce,
            gas_limit: 100_000,
            max_fee_per_gas: 20_000_000_000 + tip,
            max_priority_fee_per_gas: tip,
            to: alloy_primitives::TxKind::Call(to),
            value: alloy_primitives::U256::from(value),
            access_list: Default::default(),
            input: alloy_primitives::Bytes::copy_from_slice(input),
        })
    }

    /// `tx` signed, `0x`-hex: any chain, gas and fees (what a node's own
    /// refusals need).
    pub fn sign_tx(&self, tx: alloy_consensus::TxEip1559) -> String {
        use alloy_consensus::SignableTransaction;
        use alloy_eips::eip2718::Encodable2718;
        let digest = secp256k1::Message::from_digest(tx.signature_hash().0);
        let (id, compact) = secp256k1::SECP256K1
            .sign_ecdsa_recoverable(digest, &self.key)
            .serialize_compact();
        let signature = alloy_primitives::Signature::new(
            alloy_primitives::U256::from_be_slice(&compact[..32]),
            alloy_primitives::U256::from_be_slice(&compact[32..]),
            i32::from(id) == 1,
        );
        let envelope: alloy_consensus::TxEnvelope = tx.into_signed(signature).into();
        format!(
            "0x{}",
            alloy_primitives::hex::encode(envelope.encoded_2718())
        )
    }
}

/// `eth_sendRawTransaction` of `raw`: HTTP status and the whole answer.
pub async fn send_raw(url: &str, raw: &str) -> (StatusCode, serde_json::Value) {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction",
        "params": [raw]});
    rpc_json(url, &body.to_string()).await
}

/// Asserts a successful submission; returns the tx hash.
pub fn accepted(answer: &(StatusCode, serde_json::Value)) -> String {
    let (status, body) = answer;
    assert_eq!(*status, StatusCode::OK, "{body}");
    let hash = body["result"]
        .as_str()
        .unwrap_or_else(|| panic!("not accepted: {body}"));
    assert_eq!(hash.len(), 66, "{body}");
    hash.to_string()
}

/// Asserts a screening refusal with `code` and `reason`; returns `data`.
pub fn refused(
    answer: &(StatusCode, serde_json::Value),
    status: u16,
    code: i64,
    reason: &str,
) -> serde_json::Value {
    let (got_status, body) = answer;
    assert_eq!(got_status.as_u16(), status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["data"]["reason"], reason, "{body}");
    body["error"]["data"].clone()
}

/// The workspace's example-sidecar binary (built by scripts/test.sh, or
/// `$TXGATE_SIDECAR_BIN`).
pub fn sidecar_binary() -> PathBuf {
    let path = std::env::var_os("TXGATE_SIDECAR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/example-sidecar"));
    assert!(
        path.exists(),
        "{} not found: run `cargo build -p example-sidecar` (scripts/test.sh does)",
        path.display()
    );
    path
}

/// A running example sidecar.
pub struct Sidecar {
    pub proc: Proc,
    pub grpc_url: String,
    pub admin_url: String,
    pub grpc_port: u16,
}

impl Sidecar {
    /// Starts the example sidecar on `grpc_port` (0: a free one) watching
    /// `node`, with the assertions in `config` (TOML text).
    pub async fn start(node: &str, config: &TempFile, grpc_port: u16) -> Sidecar {
        Sidecar::start_with(node, config, grpc_port, &[]).await
    }

    /// [`Sidecar::start`] with more flags (`--report-url`, `--protocols`…).
    pub async fn start_with(
        node: &str,
        config: &TempFile,
        grpc_port: u16,
        extra: &[&str],
    ) -> Sidecar {
        let grpc_port = if grpc_port == 0 {
            free_port()
        } else {
            grpc_port
        };
        let admin_port = free_port();
        let child = Command::new(sidecar_binary())
            .args([
                "--listen",
                &format!("127.0.0.1:{grpc_port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin_port}"),
                "--node",
                node,
                "--config",
                config.arg(),
            ])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn example-sidecar");
        let sidecar = Sidecar {
            proc: Proc { child },
            grpc_url: format!("http://127.0.0.1:{grpc_port}"),
            admin_url: format!("http://127.0.0.1:{admin_port}"),
            grpc_port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let health = format!("{}/healthz", sidecar.admin_url);
            let probe = try_get(&health);
            if let Ok(Ok((StatusCode::OK, _, _))) =
                tokio::time::timeout(Duration::from_secs(1), probe).await
            {
                return sidecar;
            }
            assert!(Instant::now() < deadline, "example-sidecar did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Injects invalidations (`POST /invalidations`); returns the answer.
    pub async fn inject(&self, body: serde_json::Value) -> serde_json::Value {
        let (status, _, bytes) = post(
            &format!("{}/invalidations", self.admin_url),
            Some("application/json"),
            body.to_string(),
        )
        .await
        .expect("inject");
        let answer: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer
    }
}

/// The example sidecar's shipped config (config/example-sidecar.toml).
pub fn example_sidecar_config() -> TempFile {
    TempFile::new(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config/example-sidecar.toml"),
        )
        .expect("config/example-sidecar.toml"),
    )
}

/// Waits until the node's pool holds no pending transaction. A receipt is
/// readable as soon as its block is on the chain, a moment before the pool
/// has taken the block in: until then the mined transaction is still
/// "already known" to it, and another with its nonce is a replacement.
pub async fn nothing_pending(url: &str) {
    let status = r#"{"jsonrpc":"2.0","id":1,"method":"txpool_status","params":[]}"#;
    let settled = eventually(Duration::from_secs(10), || async {
        rpc_json(url, status).await.1["result"]["pending"] == "0x0"
    })
    .await;
    assert!(
        settled,
        "the pool still holds a pending transaction after 10 s"
    );
}

/// Waits up to `limit` for `check` to hold, polling every 20 ms.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deploys `initcode` through `url` from anvil's first account (cast send
/// --create); returns the contract address.
pub fn deploy(url: &str, initcode: &str) -> alloy_primitives::Address {
    let receipt = cast_send(url, KEY0, &["--create", initcode]);
    receipt["contractAddress"]
        .as_str()
        .expect("contract address")
        .parse()
        .expect("address")
}

/// A failure report as the Credible Layer sidecar posts it to the Aeges
/// report endpoint: the transaction `tx_hash` (`0x`-hex) from `caller` to
/// `target` with calldata `data`, EIP-1559 at 2 gwei, 100,000 gas.
pub fn failure_report(
    tx_hash: &str,
    caller: alloy_primitives::Address,
    target: alloy_primitives::Address,
    data: &[u8],
    nonce: u64,
) -> String {
    serde_json::json!([tx_hash, {
        "tx_type": 2, "caller": caller.to_string(), "gas_limit": 100000,
        "gas_price": 2000000000u64, "kind": target.to_string(), "value": "0x0",
        "data": format!("0x{}", alloy_primitives::hex::encode(data)), "nonce": nonce,
        "chain_id": 31337, "access_list": [], "gas_priority_fee": 1000000000u64,
        "blob_hashes": [], "max_fee_per_blob_gas": 0, "authorization_list": []
    }])
    .to_string()
}

/// POSTs `report` (a [`failure_report`]) to the Aeges report endpoint at
/// `url`; asserts it was taken (200).
pub async fn post_report(url: &str, report: String) {
    let (status, _, body) = post(url, Some("application/json"), report)
        .await
        .expect("the report listener answers");
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}
