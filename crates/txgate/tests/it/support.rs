//! Real processes for the end-to-end tests: anvil, the txgate binary, and a
//! deliberately slow upstream for fault injection. Every process is killed
//! by PID when its handle drops.

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

/// A free loopback port (bound and released; the caller binds it next).
pub fn free_port() -> u16 {
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

/// A running anvil on a free loopback port.
pub struct Anvil {
    pub proc: Proc,
    pub url: String,
}

impl Anvil {
    pub async fn start() -> Anvil {
        let port = free_port();
        let child = Command::new(foundry_tool("anvil"))
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--silent",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn anvil");
        let anvil = Anvil {
            proc: Proc { child },
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let probe = rpc(
                &anvil.url,
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#,
            );
            if let Ok(Ok((StatusCode::OK, _, _))) =
                tokio::time::timeout(Duration::from_secs(1), probe).await
            {
                return anvil;
            }
            assert!(
                Instant::now() < deadline,
                "anvil did not come up on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A running txgate binary.
pub struct Txgate {
    pub proc: Proc,
    pub url: String,
    pub rpc_addr: SocketAddr,
    pub admin_url: String,
    logs: mpsc::Receiver<String>,
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
        let child = Command::new(env!("CARGO_BIN_EXE_txgate"))
            .args(args)
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
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("txgate did not report listening"));
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
                };
            }
        }
    }

    /// Log lines printed so far.
    pub fn drain_logs(&self) -> Vec<String> {
        self.logs.try_iter().collect()
    }

    /// The Prometheus text from `/metrics`.
    pub async fn metrics(&self) -> String {
        let (status, _, body) = get(&format!("{}/metrics", self.admin_url)).await;
        assert_eq!(status, StatusCode::OK);
        String::from_utf8(body.to_vec()).expect("utf8")
    }
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
    let response = client().request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, parts.headers, body))
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

pub async fn get(url: &str) -> Answer {
    let req = Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = client().request(req).await.expect("GET");
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.expect("body").to_bytes(),
    )
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

/// An upstream that answers every POST after `delay` with a JSON-RPC result
/// echoing nothing but `"0x1"`: fault injection for timeouts and drains.
pub struct SlowUpstream {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl SlowUpstream {
    pub async fn start(delay: Duration) -> SlowUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: Request<hyper::body::Incoming>| async move {
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            tokio::time::sleep(delay).await;
                            let id = serde_json::from_slice::<serde_json::Value>(&body)
                                .ok()
                                .and_then(|v| v.get("id").cloned())
                                .unwrap_or(serde_json::Value::Null);
                            let answer =
                                serde_json::json!({"jsonrpc":"2.0","id":id,"result":"0x1"})
                                    .to_string();
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(answer),
                            )))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        SlowUpstream { url, task }
    }
}

impl Drop for SlowUpstream {
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
