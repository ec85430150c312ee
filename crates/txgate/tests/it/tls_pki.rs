//! What the TLS tests need: a test CA and certificates made by rcgen
//! (ECDSA P-256), written to temp files; rustls clients that offer chosen
//! groups and versions; and nginx (Debian's) with TLS in front of a node.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::support::{Proc, free_port};

/// A directory removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "txgate-it-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir { path }
    }

    pub fn file(&self, name: &str) -> String {
        self.path.join(name).to_str().expect("utf8").to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A test CA.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

/// A certificate and its key, PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "txgate test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("CA");
        Ca {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (host names or IP addresses),
    /// valid from a year ago for `valid_days` more days from now (negative:
    /// expired).
    pub fn leaf(&self, names: &[&str], valid_days: i64) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "txgate test server");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let at =
            |secs: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(secs.max(0) as u64);
        params.not_before = at(now - 365 * 86_400);
        params.not_after = at(now + valid_days * 86_400);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Roots holding this CA.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).expect("CA into roots");
        roots
    }
}

impl Leaf {
    /// Writes `<name>.pem` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &TempDir, name: &str) -> (String, String) {
        let (cert, key) = (
            dir.file(&format!("{name}.pem")),
            dir.file(&format!("{name}.key")),
        );
        std::fs::write(&cert, &self.cert_pem).expect("write cert");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}

/// A rustls client config trusting `ca`, offering `groups` (aws-lc-rs
/// names), `versions`, and `alpn`.
pub fn client_config(
    ca: &Ca,
    groups: &[&'static dyn rustls::crypto::SupportedKxGroup],
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if !groups.is_empty() {
        provider.kx_groups = groups.to_vec();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(ca.roots())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` as `name`.
pub async fn tls_connect(
    addr: SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_string()).expect("server name");
    TlsConnector::from(config).connect(name, tcp).await
}

/// A kept HTTP/1.1 (or HTTP/2, as ALPN agreed) connection over TLS.
pub struct Kept {
    h1: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    h2: Option<hyper::client::conn::http2::SendRequest<Full<Bytes>>>,
    pub peer_cert: CertificateDer<'static>,
    pub alpn: Option<Vec<u8>>,
    pub version: Option<rustls::ProtocolVersion>,
    pub group: Option<rustls::NamedGroup>,
    pub kind: Option<rustls::HandshakeKind>,
}

impl Kept {
    pub async fn open(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Kept {
        let tls = tls_connect(addr, "localhost", config)
            .await
            .expect("TLS handshake");
        let (_, conn) = tls.get_ref();
        let peer_cert = conn.peer_certificates().expect("peer certificate")[0].clone();
        let alpn = conn.alpn_protocol().map(|p| p.to_vec());
        let version = conn.protocol_version();
        let group = conn.negotiated_key_exchange_group().map(|g| g.name());
        let kind = conn.handshake_kind();
        let io = TokioIo::new(tls);
        let (h1, h2) = if alpn.as_deref() == Some(b"h2") {
            let (send, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(connection);
            (None, Some(send))
        } else {
            let (send, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("h1 handshake");
            tokio::spawn(connection);
            (Some(send), None)
        };
        Kept {
            h1,
            h2,
            peer_cert,
            alpn,
            version,
            group,
            kind,
        }
    }

    /// Posts a JSON-RPC body; returns the status and the body as JSON.
    pub async fn call(&mut self, body: &str) -> (StatusCode, serde_json::Value) {
        let req = Request::post("/")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let response = match (&mut self.h1, &mut self.h2) {
            (Some(h1), _) => h1.send_request(req).await,
            (_, Some(h2)) => h2.send_request(req).await,
            _ => unreachable!(),
        }
        .expect("response");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }
}

pub const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// nginx with TLS on a free port in front of `upstream` (an http:// URL),
/// keeping its connections and passing WebSocket upgrades; its access log
/// names each connection.
pub struct Nginx {
    pub port: u16,
    pub dir: TempDir,
    _proc: Proc,
}

/// The nginx binary (Debian's package installs it in /usr/sbin).
fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nginx not found: run scripts/install-test-tools.sh")
}

impl Nginx {
    pub async fn start(upstream: &str, leaf: &Leaf) -> Nginx {
        Nginx::start_with(upstream, leaf, "60s", None).await
    }

    /// With `keepalive_timeout` on the client side (nginx closes a kept
    /// connection idle that long), and, with `client_ca` (PEM), a client
    /// certificate from that CA required (mTLS).
    pub async fn start_with(
        upstream: &str,
        leaf: &Leaf,
        keepalive_timeout: &str,
        client_ca: Option<&str>,
    ) -> Nginx {
        let dir = TempDir::new("nginx");
        let (cert, key) = leaf.write(&dir, "server");
        let port = free_port();
        let upstream = upstream.trim_start_matches("http://");
        let verify = match client_ca {
            Some(pem) => {
                let path = dir.file("client-ca.pem");
                std::fs::write(&path, pem).expect("client CA");
                format!("ssl_client_certificate {path};\n ssl_verify_client on;\n")
            }
            None => String::new(),
        };
        let conf = format!(
            "worker_processes 1;\n\
             pid {dir}/nginx.pid;\n\
             error_log {dir}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {dir}/body;\n\
               proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fastcgi;\n\
               uwsgi_temp_path {dir}/uwsgi;\n\
               scgi_temp_path {dir}/scgi;\n\
               log_format conns '$connection $connection_requests';\n\
               map $http_upgrade $upgrade_or_keep {{ default upgrade; '' ''; }}\n\
               upstream node {{ server {upstream}; keepalive 16; }}\n\
               server {{\n\
                 listen 127.0.0.1:{port} ssl;\n\
                 ssl_certificate {cert};\n\
                 ssl_certificate_key {key};\n\
                 ssl_protocols TLSv1.2 TLSv1.3;\n\
                 {verify}\
                 keepalive_requests 100000;\n\
                 keepalive_timeout {keepalive_timeout};\n\
                 access_log {dir}/access.log conns;\n\
                 location / {{\n\
                   proxy_pass http://node;\n\
                   proxy_http_version 1.1;\n\
                   proxy_set_header Upgrade $http_upgrade;\n\
                   proxy_set_header Connection $upgrade_or_keep;\n\
                   proxy_read_timeout 3600s;\n\
                 }}\n\
               }}\n\
             }}\n",
            dir = dir.path.display()
        );
        let conf_path = dir.file("nginx.conf");
        std::fs::write(&conf_path, conf).expect("nginx.conf");
        let child = Command::new(nginx_binary())
            .args(["-p", dir.path.to_str().unwrap(), "-c", &conf_path])
            .args(["-e", &dir.file("error.log")])
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nginx");
        let nginx = Nginx {
            port,
            dir,
            _proc: Proc::new(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not come up: {}",
                std::fs::read_to_string(nginx.dir.path.join("error.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        nginx
    }

    /// Requests nginx served, and the distinct connections they came on.
    pub fn served(&self) -> (usize, usize) {
        let log = std::fs::read_to_string(self.dir.path.join("access.log")).unwrap_or_default();
        let mut connections: Vec<&str> = log
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let requests = connections.len();
        connections.sort_unstable();
        connections.dedup();
        (requests, connections.len())
    }
}

/// Writes `contents` to `path` through a rename, as a deployment tool
/// swaps a certificate (a reader never sees half a file).
pub fn replace_file(path: &str, contents: &str) {
    let tmp = format!("{path}.new");
    std::fs::write(&tmp, contents).expect("write");
    std::fs::rename(&tmp, Path::new(path)).expect("rename");
}
