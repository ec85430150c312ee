//! `txgate bans …`: the ban endpoints of a running instance's admin
//! listener, from the command line (see `txgate_proxy::ops::admin::bans`).
//!
//! The instance is found from the same config as the daemon's
//! (`admin.listen`, `admin.token_file`; `-c`, `TXGATE_*` and the global
//! flags apply), or `--admin URL` and `--token-file`. Exit 0 on success;
//! 1 when the instance refuses (its JSON error on stderr) or cannot be
//! reached; 2 on a bad argument.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use bytes::Bytes;
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};
use txgate_config::Config;

/// `txgate bans`.
#[derive(Debug, Args)]
pub(crate) struct Bans {
    /// The instance's admin listener, http://host:port (default: from
    /// admin.listen).
    #[arg(long)]
    admin: Option<String>,
    /// A file holding the admin bearer token (default: admin.token_file).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

/// What to do.
#[derive(Debug, Subcommand)]
enum Action {
    /// Why is this refused? What is held against a raw transaction, a tx
    /// hash, a fingerprint or a sender, and which rule refuses it now.
    Lookup(Names),
    /// Lift a fingerprint's ban, a sender's backoff, a failed tx hash.
    Lift(Names),
    /// Every ban in force or suspect, as JSON (for `import`).
    Export {
        /// Write here instead of standard output.
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
    },
    /// Add the bans of an export (a file, or - for standard input).
    Import {
        /// The export.
        file: PathBuf,
    },
}

/// What a lookup or a lift names.
#[derive(Debug, Args)]
struct Names {
    /// A tx hash (32 bytes of hex).
    #[arg(long)]
    tx_hash: Option<String>,
    /// A fingerprint (32 bytes of hex).
    #[arg(long)]
    fingerprint: Option<String>,
    /// A sender (20 bytes of hex).
    #[arg(long)]
    sender: Option<String>,
    /// A raw signed transaction, 0x-hex (lookup only): its hash,
    /// fingerprint, sender and call.
    #[arg(long)]
    raw: Option<String>,
}

impl Names {
    fn json(&self) -> Value {
        let mut out = Map::new();
        for (key, value) in [
            ("tx_hash", &self.tx_hash),
            ("fingerprint", &self.fingerprint),
            ("sender", &self.sender),
            ("raw", &self.raw),
        ] {
            if let Some(value) = value {
                out.insert(key.into(), json!(value));
            }
        }
        Value::Object(out)
    }
}

/// Bans posted to `/bans/import` at once: about 4 MB of JSON, well under
/// the listener's default cap.
const IMPORT_CHUNK: usize = 20_000;
/// How long the instance has to answer one request.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A failure, and the exit code it gets.
struct Failed(u8, String);

impl Bans {
    /// Runs the command against the instance `config` names.
    pub(crate) fn run(self, config: &Config) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => return fail(&Failed(1, format!("cannot start the runtime: {e}"))),
        };
        match runtime.block_on(self.act(config)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(failed) => fail(&failed),
        }
    }

    async fn act(self, config: &Config) -> Result<(), Failed> {
        let target = match &self.admin {
            Some(url) => parse_admin(url)?,
            None => reachable(config.admin.listen),
        };
        // The same reader, and checks, as the daemon's.
        let admin = txgate_config::AdminConfig {
            token_file: self.token_file.clone().or(config.admin.token_file.clone()),
            ..txgate_config::AdminConfig::default()
        };
        let token = admin.token().map_err(|e| Failed(2, e.to_string()))?;
        let client = Client { target, token };
        match self.action {
            Action::Lookup(names) => print(&client.json("/bans/lookup", &names.json()).await?),
            Action::Lift(names) => print(&client.json("/bans/lift", &names.json()).await?),
            Action::Import { file } => {
                let body = if file.as_os_str() == "-" {
                    let mut body = Vec::new();
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)
                        .map_err(|e| Failed(1, format!("cannot read standard input: {e}")))?;
                    body
                } else {
                    std::fs::read(&file)
                        .map_err(|e| Failed(2, format!("cannot read {}: {e}", file.display())))?
                };
                print(&client.import(&body).await?)
            }
            Action::Export { output } => client.export(output).await,
        }
    }
}

fn fail(failed: &Failed) -> ExitCode {
    eprintln!("txgate bans: {}", failed.1);
    ExitCode::from(failed.0)
}

fn print(value: &Value) -> Result<(), Failed> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    println!("{text}");
    Ok(())
}

/// `http://host:port` (a path is not allowed: the endpoints are fixed).
fn parse_admin(url: &str) -> Result<SocketAddr, Failed> {
    let bad = || Failed(2, format!("--admin {url}: expected http://host:port"));
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    use std::net::ToSocketAddrs;
    rest.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(bad)
}

/// The admin listener's address as a client reaches it: an unspecified
/// address (0.0.0.0, ::) is reached on loopback.
fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    }
}

struct Client {
    target: SocketAddr,
    token: Option<String>,
}

impl Client {
    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, Failed> {
        let unreachable = |e: &dyn std::fmt::Display| {
            Failed(
                1,
                format!("cannot reach the admin listener at {}: {e}", self.target),
            )
        };
        let stream = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(self.target))
            .await
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> Result<http::Request<Full<Bytes>>, Failed> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, self.target.to_string())
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        builder
            .body(Full::new(body))
            .map_err(|e| Failed(2, format!("bad request: {e}")))
    }

    async fn json(&self, path: &str, body: &Value) -> Result<Value, Failed> {
        self.send("POST", path, Bytes::from(body.to_string())).await
    }

    /// Sends a request; the JSON answer on success, its error otherwise.
    async fn send(&self, method: &str, path: &str, body: Bytes) -> Result<Value, Failed> {
        let mut sender = self.connect().await?;
        let exchange = async {
            let response = sender
                .send_request(self.request(method, path, body)?)
                .await
                .map_err(|e| Failed(1, format!("the admin listener did not answer: {e}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| Failed(1, format!("the answer broke off: {e}")))?
                .to_bytes();
            Ok::<_, Failed>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| Failed(1, format!("no answer within {} s", TIMEOUT.as_secs())))??;
        let value: Value = serde_json::from_slice(&body).unwrap_or_else(
            |_| json!({ "error": String::from_utf8_lossy(&body).trim().to_string() }),
        );
        if status.is_success() {
            return Ok(value);
        }
        let message = value["error"].as_str().unwrap_or("no reason given");
        Err(Failed(1, format!("{status}: {message}")))
    }

    /// Posts an export in chunks of [`IMPORT_CHUNK`] bans (a full
    /// instance's export is larger than a listener takes at once); the
    /// answers added up.
    async fn import(&self, export: &[u8]) -> Result<Value, Failed> {
        let mut list: Value = serde_json::from_slice(export)
            .map_err(|e| Failed(2, format!("not an export (JSON): {e}")))?;
        let Some(bans) = list
            .get_mut("bans")
            .and_then(Value::as_array_mut)
            .map(std::mem::take)
        else {
            return Err(Failed(2, "not an export: no \"bans\" list".into()));
        };
        let (mut imported, mut skipped) = (0u64, 0u64);
        for chunk in bans.chunks(IMPORT_CHUNK) {
            list["bans"] = Value::Array(chunk.to_vec());
            let answer = self
                .send("POST", "/bans/import", Bytes::from(list.to_string()))
                .await?;
            imported += answer["imported"].as_u64().unwrap_or(0);
            skipped += answer["skipped"].as_u64().unwrap_or(0);
        }
        Ok(json!({ "imported": imported, "skipped": skipped }))
    }

    /// Streams `GET /bans` to `output` (standard output by default).
    async fn export(&self, output: Option<PathBuf>) -> Result<(), Failed> {
        let mut sender = self.connect().await?;
        let response = tokio::time::timeout(
            TIMEOUT,
            sender.send_request(self.request("GET", "/bans", Bytes::new())?),
        )
        .await
        .map_err(|_| Failed(1, format!("no answer within {} s", TIMEOUT.as_secs())))?
        .map_err(|e| Failed(1, format!("the admin listener did not answer: {e}")))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.into_body().collect().await.map(|c| c.to_bytes());
            let body = body.unwrap_or_default();
            let value: Value = serde_json::from_slice(&body).unwrap_or_default();
            let message = value["error"].as_str().unwrap_or("no reason given");
            return Err(Failed(1, format!("{status}: {message}")));
        }
        let mut out: Box<dyn std::io::Write> = match &output {
            Some(path) => Box::new(std::io::BufWriter::new(
                std::fs::File::create(path)
                    .map_err(|e| Failed(2, format!("cannot write {}: {e}", path.display())))?,
            )),
            None => Box::new(std::io::stdout().lock()),
        };
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Failed(1, format!("the export broke off: {e}")))?;
            if let Ok(data) = frame.into_data() {
                out.write_all(&data)
                    .map_err(|e| Failed(1, format!("cannot write the export: {e}")))?;
            }
        }
        out.flush()
            .map_err(|e| Failed(1, format!("cannot write the export: {e}")))
    }
}
