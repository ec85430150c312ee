//! Processes and HTTP for the load tools: children killed on drop, free
//! loopback ports, a JSON-RPC POST, a GET, waiting for an endpoint to
//! answer, a figure of a Prometheus text.

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

/// A free loopback port below the kernel's ephemeral range, for a server
/// that is killed and started again on the same port: no outgoing
/// connection (nor a `bind(:0)`, as [`free_port`]) can take it while the
/// server is down. Counted from an offset of this process's id, so that no
/// two calls of one run return the same port; the kernel's choice where
/// the range leaves no room below it.
pub fn restartable_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    if ephemeral_low > 12_000 {
        let (low, span) = (ephemeral_low - 10_000, 9_999);
        let start = std::process::id() % span;
        for _ in 0..span {
            let port = (low + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    free_port()
}

/// Starts a child; with `TXGATE_BENCH_LOGS=DIR`, its stderr goes to
/// `DIR/<name>.log` at info level.
pub fn spawn(program: &Path, args: &[&str]) -> Proc {
    let name = program
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    let mut command = Command::new(program);
    command.args(args);
    spawn_command(command, &name)
}

/// Starts `command` (a program made ready elsewhere: on a network host, for
/// one); with `TXGATE_BENCH_LOGS=DIR`, its stderr goes to `DIR/<name>.log`
/// at info level.
pub fn spawn_command(mut command: Command, name: &str) -> Proc {
    command.stdout(Stdio::null());
    match std::env::var_os("TXGATE_BENCH_LOGS") {
        Some(dir) => {
            let file = std::fs::File::create(Path::new(&dir).join(format!("{name}.log")))
                .unwrap_or_else(|e| panic!("log file: {e}"));
            let level = std::env::var("TXGATE_BENCH_RUST_LOG").unwrap_or_else(|_| "info".into());
            command.env("RUST_LOG", level).stderr(file);
        }
        None => {
            command.env("RUST_LOG", "warn").stderr(Stdio::null());
        }
    }
    Proc(command.spawn().unwrap_or_else(|e| panic!("{name}: {e}")))
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

/// Context switches of a process so far, voluntary and not, summed over
/// its threads (`/proc/<pid>/task/*/status`): each is a thread put to
/// sleep or pre-empted, and woken again.
pub fn context_switches(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
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

/// GETs `url`; its body as text, whatever the status (`None` when no
/// answer came).
pub async fn get_text(client: &HttpClient, url: &str) -> Option<String> {
    let request = hyper::Request::get(url)
        .body(Full::new(Bytes::new()))
        .ok()?;
    let response = client.request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
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

/// Waits until `url` answers a GET, whatever the status (10 s at most):
/// an admin listener's `/healthz`.
pub async fn wait_get(client: &HttpClient, url: &str) {
    for _ in 0..400 {
        if get_text(client, url).await.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} did not come up");
}

/// The value of `series` (a name and its labels, as printed) in a
/// Prometheus text; `None` when it is not there.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Every series of `name` in a Prometheus text: its labels as printed
/// (`{reason="connect"}`, empty for none) and its value.
pub fn metric_series(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(labelled) => {
                    let (labels, value) = labelled.rsplit_once('}')?;
                    (format!("{{{labels}}}"), value)
                }
                None => (String::new(), rest),
            };
            Some((labels, value.strip_prefix(' ')?.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of every series of `name` (whatever its labels): a counter's
/// total over its labels; 0 when there is none.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric_series(text, name).iter().map(|(_, v)| v).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_the_series_of_one_name_only() {
        let text = "# TYPE x_total counter\nx_total{reason=\"a\"} 2\nx_total{reason=\"b\"} 3\n\
                    x_total_more 7\ny 1\n";
        assert_eq!(metric_sum(text, "x_total"), 5.0);
        assert_eq!(metric_sum(text, "y"), 1.0);
        assert_eq!(metric_sum(text, "z"), 0.0);
        assert_eq!(metric(text, "x_total{reason=\"b\"}"), Some(3.0));
        assert_eq!(
            metric_series(text, "x_total"),
            [
                ("{reason=\"a\"}".to_string(), 2.0),
                ("{reason=\"b\"}".to_string(), 3.0)
            ]
        );
    }
}
