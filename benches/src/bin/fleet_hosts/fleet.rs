//! The fleets the bench compares: three instances sharing bans through one
//! redis-server, on loopback (one host) or each process on a network host
//! of its own (`txgate-hosts`), the links to Redis optionally through a
//! delaying relay.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use txgate_benches::procs::{HttpClient, Proc, free_port, spawn, spawn_command};
use txgate_benches::start::{Scratch, anvil, arg, release, tool};
use txgate_hosts::{Hosts, Relay};

/// The token of every instance's report listener.
const TOKEN: &str = "bench-token";
/// The ban log's key (the default prefix).
pub(crate) const LOG_KEY: &str = "txgate:bans:log";

/// Where the fleet runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Every process on loopback.
    OneHost,
    /// Each process on a network host of its own.
    Hosts,
    /// As [`Layout::Hosts`], each instance's link to Redis through a relay
    /// holding every byte this long each way.
    Delayed(Duration),
}

impl Layout {
    pub(crate) fn name(self) -> String {
        match self {
            Layout::OneHost => "one host (loopback)".into(),
            Layout::Hosts => "namespaced hosts".into(),
            Layout::Delayed(d) => format!("namespaced, Redis {} ms away", d.as_millis()),
        }
    }
}

/// One instance, as the bench reaches it.
#[derive(Debug)]
pub(crate) struct Instance {
    /// Its host's name (`a`, `b`, `c`), also on one host.
    pub(crate) name: &'static str,
    /// Its JSON-RPC URL.
    pub(crate) rpc: String,
    /// Its report endpoint, token included.
    pub(crate) report: String,
    /// Its admin URL (`/metrics`).
    pub(crate) admin: String,
    proc: Proc,
}

impl Instance {
    pub(crate) fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// A running fleet; everything stopped on drop (the fields in order:
/// processes first, then the hosts they ran on).
pub(crate) struct Fleet {
    pub(crate) layout: Layout,
    pub(crate) instances: Vec<Instance>,
    /// Redis, as the bench reaches it (never through a relay).
    pub(crate) redis: SocketAddr,
    _relays: Vec<Relay>,
    _others: Vec<Proc>,
    hosts: Option<Hosts>,
    _scratch: Scratch,
}

pub(crate) const NAMES: [&str; 3] = ["a", "b", "c"];

fn instance_config(redis: SocketAddr, aeges: SocketAddr, max_entries: usize) -> String {
    // Pacing off: every probe of a check ends in a refusal from one
    // client, and paced refusals would be held (the figure would be the
    // hold, not the ban's travel).
    format!(
        "[redis]\nurl = \"redis://{redis}\"\nban_log_max_entries = {max_entries}\n\
         [aeges]\nlisten = \"{aeges}\"\nreport_token = \"{TOKEN}\"\n\
         report_allow = [\"127.0.0.0/8\", \"10.77.0.0/16\"]\n\
         [screen.pacing]\nenabled = false\n"
    )
}

fn redis_args(port: u16, dir: &Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        arg(dir),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl Fleet {
    /// Starts a fleet of three instances laid out as `layout`, the ban log
    /// capped at `max_entries`; returns once every instance answers.
    pub(crate) async fn start(client: &HttpClient, layout: Layout, max_entries: usize) -> Fleet {
        let scratch = Scratch::new("fleet_hosts");
        let txgate = release("txgate");
        let mut others = Vec::new();
        let mut relays = Vec::new();
        let mut instances = Vec::new();
        let hosts = match layout {
            Layout::OneHost => None,
            _ => Some(
                Hosts::new(&["node", "redis", "a", "b", "c"])
                    .unwrap_or_else(|why| panic!("{why}: the namespaced layouts need root")),
            ),
        };
        let (node, redis) = match &hosts {
            None => {
                let (proc, node) = anvil(client, &[]).await;
                others.push(proc);
                let port = free_port();
                let args = redis_args(port, scratch.path());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                others.push(spawn(Path::new("redis-server"), &args));
                (node, SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            }
            Some(hosts) => {
                let mut command = hosts.command("node", arg(&tool("anvil")));
                command.args(["--host", "0.0.0.0", "--port", "8545", "--silent"]);
                others.push(spawn_command(command, "anvil"));
                let mut command = hosts.command("redis", "redis-server");
                command.args(redis_args(6379, scratch.path()));
                others.push(spawn_command(command, "redis-server"));
                (
                    format!("http://{}:8545", hosts.addr("node")),
                    SocketAddr::from((hosts.addr("redis"), 6379)),
                )
            }
        };
        wait_answers(client, &node).await;
        for (i, name) in NAMES.iter().enumerate() {
            // Each instance's own way to Redis.
            let link = match layout {
                Layout::Delayed(one_way) => {
                    let hosts = hosts.as_ref().unwrap_or_else(|| unreachable!());
                    let relay =
                        Relay::start(SocketAddr::from((hosts.bridge_addr(), 0)), redis, one_way)
                            .unwrap_or_else(|e| panic!("relay: {e}"));
                    let addr = relay.addr();
                    relays.push(relay);
                    addr
                }
                _ => redis,
            };
            let (rpc, admin, aeges, mut command) = match &hosts {
                None => {
                    let at = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                    let (rpc, admin, aeges) = (at(free_port()), at(free_port()), at(free_port()));
                    (rpc, admin, aeges, Command::new(&txgate))
                }
                Some(hosts) => {
                    let at = |port| SocketAddr::from((hosts.addr(name), port));
                    (
                        at(8545),
                        at(9545),
                        at(9600),
                        hosts.command(name, arg(&txgate)),
                    )
                }
            };
            let config = scratch.write(
                &format!("{name}.toml"),
                &instance_config(link, aeges, max_entries),
            );
            let listen = |addr: SocketAddr| match hosts {
                None => addr.to_string(),
                Some(_) => format!("0.0.0.0:{}", addr.port()),
            };
            command.args([
                "--listen",
                &listen(rpc),
                "--admin-listen",
                &listen(admin),
                "--upstream",
                &node,
                "-c",
                arg(&config),
            ]);
            let proc = spawn_command(command, &format!("txgate-{name}-{i}"));
            instances.push(Instance {
                name,
                rpc: format!("http://{rpc}"),
                report: format!("http://{aeges}/report?token={TOKEN}"),
                admin: format!("http://{admin}"),
                proc,
            });
        }
        for instance in &instances {
            wait_answers(client, &instance.rpc).await;
        }
        Fleet {
            layout,
            instances,
            redis,
            _relays: relays,
            _others: others,
            hosts,
            _scratch: scratch,
        }
    }

    /// The hosts, where the fleet has them.
    pub(crate) fn hosts(&self) -> Option<&Hosts> {
        self.hosts.as_ref()
    }
}

/// Waits (up to 30 s) until `url` answers a JSON-RPC call.
async fn wait_answers(client: &HttpClient, url: &str) {
    let started = Instant::now();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    while started.elapsed() < Duration::from_secs(30) {
        let call = txgate_benches::procs::post(client, url, body.to_string());
        if let Ok(Ok((200, _))) = tokio::time::timeout(Duration::from_secs(1), call).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never answered");
}

/// What Redis at `redis` answers to `args` (`XLEN` of the ban log, say),
/// through `redis-cli`; `None` while Redis cannot be reached.
pub(crate) fn redis_cli(redis: SocketAddr, args: &[&str]) -> Option<String> {
    // Bounded by `timeout` (redis-cli 7.0 has no timeout of its own): a
    // cut-off Redis is not waited for.
    let out = Command::new("timeout")
        .args(["2", "redis-cli"])
        .args([
            "-h",
            &redis.ip().to_string(),
            "-p",
            &redis.port().to_string(),
        ])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty() && !text.starts_with("ERR")).then_some(text)
}

/// What a process holds in memory, in KiB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resident {
    /// All of it (`VmRSS`).
    pub(crate) all: f64,
    /// Its anonymous memory (`RssAnon`): the heap, stacks.
    pub(crate) anon: f64,
    /// Pages of files (`RssFile`): the binary's code and data as they are
    /// touched, the libraries'.
    pub(crate) file: f64,
}

/// The resident memory of `pid`.
pub(crate) fn resident(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(Resident {
        all: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
    })
}
