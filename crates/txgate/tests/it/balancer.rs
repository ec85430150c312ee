//! HAProxy (Debian's package) in front of txgate instances, on free
//! loopback ports, stopped by PID on drop.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Proc, TempFile, free_port};

/// A running HAProxy.
pub struct Haproxy {
    _proc: Proc,
    pub url: String,

    _config: TempFile,
}

/// How HAProxy talks to the instances.
#[derive(Clone, Copy)]
pub enum Send {
    /// `send-proxy-v2` on every server line.
    ProxyV2,
    /// `send-proxy` (v1).
    ProxyV1,
    /// No PROXY header; `option forwardfor` adds X-Forwarded-For.
    ForwardedFor,
}

/// An instance behind the balancer: its client and admin addresses.
#[derive(Clone, Copy)]
pub struct Backend {
    pub rpc: SocketAddr,
    /// Health-checked at `/readyz` when set.
    pub admin: Option<SocketAddr>,
}

impl Haproxy {
    /// HAProxy in HTTP mode, round robin over `instances`, no health check.
    pub fn start(instances: &[SocketAddr], send: Send) -> Haproxy {
        let backends: Vec<Backend> = instances
            .iter()
            .map(|rpc| Backend {
                rpc: *rpc,
                admin: None,
            })
            .collect();
        Haproxy::start_with(&backends, send)
    }

    /// HAProxy over `backends`; those with an admin address are checked on
    /// `/readyz` every 100 ms (out after 2 failures, back after 1 success),
    /// as deploy/haproxy does in production at a slower pace.
    pub fn start_with(backends: &[Backend], send: Send) -> Haproxy {
        let instances: Vec<SocketAddr> = backends.iter().map(|b| b.rpc).collect();
        let instances = &instances[..];
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (server_opts, forwardfor) = match send {
            Send::ProxyV2 => ("send-proxy-v2", ""),
            Send::ProxyV1 => ("send-proxy", ""),
            Send::ForwardedFor => ("", "  option forwardfor\n"),
        };
        let servers: String = instances
            .iter()
            .zip(backends)
            .enumerate()
            .map(|(i, (a, b))| {
                let check = b
                    .admin
                    .map(|admin| format!(" check port {} inter 100 fall 2 rise 1", admin.port()))
                    .unwrap_or_default();
                format!("  server t{i} {a} {server_opts}{check}\n")
            })
            .collect();
        let checks = if backends.iter().any(|b| b.admin.is_some()) {
            "  option httpchk GET /readyz\n  http-check expect status 200\n  \
             retries 3\n  option redispatch\n"
        } else {
            ""
        };
        let config = TempFile::new(&format!(
            "global\n  maxconn 4096\n\
             defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  \
             timeout server 30s\n  option http-keep-alive\n\
             frontend rpc\n  bind {addr}\n  default_backend txgate\n\
             backend txgate\n  balance roundrobin\n{forwardfor}{checks}{servers}"
        ));
        let check = Command::new("haproxy")
            .args(["-c", "-q", "-f", config.arg()])
            .output()
            .expect("haproxy is installed (scripts/install-test-tools.sh)");
        assert!(
            check.status.success(),
            "haproxy -c: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let child = Command::new("haproxy")
            .args(["-db", "-f", config.arg()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy");
        let proc = Proc::new(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "haproxy did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Haproxy {
            _proc: proc,
            url: format!("http://{addr}"),

            _config: config,
        }
    }
}
