//! Separate network hosts for the fleet tests: Linux network namespaces
//! joined by veth pairs to one bridge, each host with its own address,
//! made and torn down by the test itself.
//!
//! A [`Hosts`] is a bridge `txg<n>br` in the test's own namespace, with the
//! address `10.77.<n>.1/24`, and one namespace per host, `txg<n>-<name>`,
//! whose `eth0` (the far end of a veth pair whose near end is on the
//! bridge) has `10.77.<n>.<2 + i>/24`. The test reaches every host through
//! the bridge; the hosts reach each other through it. A partition sets a
//! host's near end down (its processes keep running, cut off); healing sets
//! it up again.
//!
//! Names carry the creating process's id: a run that died without cleaning
//! up leaves namespaces whose process is gone, and the next run stops what
//! still runs in them (by the PIDs the kernel lists for each such
//! namespace) and removes them before it makes its own. Namespaces need
//! root (CI runs as root); where they are not allowed, [`Hosts::new`]
//! returns `None` and the test says why it did not run, unless
//! `TXGATE_REQUIRE_NETNS` is set (as `.ci/run` sets it): then it fails.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A set of network hosts on one bridge, removed on drop.
pub struct Hosts {
    tag: String,
    subnet: u8,
    names: Vec<String>,
}

/// `ip` with `args`; whether it succeeded.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes the namespaces and bridges of earlier runs whose process is gone.
fn sweep() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix("txg") else {
            continue;
        };
        let pid: Option<u32> = rest.split(['-', 'x']).next().and_then(|p| p.parse().ok());
        if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
            // What a dead run left running on its hosts: stopped by the
            // PIDs in that namespace, then the namespace removed.
            if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<i32>() {
                        // SAFETY: kill(2) on a PID the kernel lists in a
                        // namespace this harness made for a run now gone.
                        #[allow(unsafe_code)]
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                }
            }
            ip(&["netns", "del", name]);
        }
    }
    if let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split(':').nth(1).unwrap_or_default().trim();
            let Some(pid) = name
                .strip_prefix("txg")
                .and_then(|r| r.split('x').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                ip(&["link", "del", name]);
            }
        }
    }
}

impl Hosts {
    /// One host per name on a new bridge; `None` (with the reason printed)
    /// where namespaces cannot be made here.
    pub fn new(names: &[&str]) -> Option<Hosts> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        sweep();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface names are at most 15 bytes: txg<pid>x<n>br, with a
        // PID of up to 7 digits and n below 10.
        let tag = format!("txg{pid}x{}", n % 10);
        let subnet = ((pid + n) % 200 + 20) as u8;
        let bridge = format!("{tag}br");
        if !ip(&["link", "add", &bridge, "type", "bridge"]) {
            let why = "network namespaces are not allowed here (needs root and iproute2)";
            assert!(
                std::env::var_os("TXGATE_REQUIRE_NETNS").is_none(),
                "{why}, and TXGATE_REQUIRE_NETNS is set"
            );
            eprintln!("{why}: test not run");
            return None;
        }
        let hosts = Hosts {
            tag: tag.clone(),
            subnet,
            names: names.iter().map(|s| s.to_string()).collect(),
        };
        run(&[
            "addr",
            "add",
            &format!("10.77.{subnet}.1/24"),
            "dev",
            &bridge,
        ]);
        run(&["link", "set", &bridge, "up"]);
        for (i, name) in names.iter().enumerate() {
            let ns = hosts.namespace(name);
            let (near, far) = (format!("{tag}n{i}"), format!("{tag}f{i}"));
            run(&["netns", "add", &ns]);
            run(&["link", "add", &near, "type", "veth", "peer", "name", &far]);
            run(&["link", "set", &near, "master", &bridge]);
            run(&["link", "set", &near, "up"]);
            run(&["link", "set", &far, "netns", &ns]);
            let addr = format!("{}/24", hosts.addr(name));
            for args in [
                vec!["link", "set", far.as_str(), "name", "eth0"],
                vec!["addr", "add", addr.as_str(), "dev", "eth0"],
                vec!["link", "set", "eth0", "up"],
                vec!["link", "set", "lo", "up"],
            ] {
                let mut full = vec!["netns", "exec", ns.as_str(), "ip"];
                full.extend(args);
                run(&full);
            }
        }
        Some(hosts)
    }

    /// The namespace of host `name`.
    pub fn namespace(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// Host `name`'s address.
    pub fn addr(&self, name: &str) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 2 + self.index(name) as u8)
    }

    /// The test's own address on the bridge.
    pub fn bridge_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 1)
    }

    /// One more address of the test's own on the bridge (`10.77.<n>.<last>`,
    /// `last` from 200): a client distinct from the others.
    pub fn client_addr(&self, last: u8) -> Ipv4Addr {
        assert!(last >= 200, "client addresses start at .200");
        let addr = Ipv4Addr::new(10, 77, self.subnet, last);
        let bridge = format!("{}br", self.tag);
        ip(&["addr", "add", &format!("{addr}/24"), "dev", &bridge]);
        addr
    }

    /// `program` with `args`, run on host `name`.
    pub fn command(&self, name: &str, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.namespace(name), program]);
        command
    }

    /// `program` with `args` on host `name`, its output discarded; stopped
    /// (by its PID) when the handle drops.
    pub fn spawn(&self, name: &str, program: &str, args: &[&str]) -> super::Proc {
        let child = self
            .command(name, program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} on {name}: {e}"));
        super::Proc::new(child)
    }

    /// anvil on host `name`, port 8545 on every address; its URL.
    pub fn anvil(&self, name: &str) -> (super::Proc, String) {
        let anvil = super::foundry_tool("anvil");
        let proc = self.spawn(
            name,
            anvil.to_str().expect("a UTF-8 path"),
            &["--host", "0.0.0.0", "--port", "8545", "--silent"],
        );
        (proc, format!("http://{}:8545", self.addr(name)))
    }

    /// A redis-server on host `name`, port 6379 on every address, no
    /// persistence, working in `dir`; `extra` after the launcher's own
    /// arguments (a replica: `--replicaof <ip> 6379`).
    pub fn redis(&self, name: &str, dir: &std::path::Path, extra: &[&str]) -> super::Proc {
        let dir = dir.to_str().expect("a UTF-8 path");
        let mut args = vec![
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir,
        ];
        args.extend_from_slice(extra);
        self.spawn(name, "redis-server", &args)
    }

    /// A txgate instance on host `name` in front of `node` with `config`,
    /// listening on every address there, on the same ports on every host
    /// (each host its own network; a restarted one comes back where it
    /// was): 8545 for clients, 9545 for the admin listener.
    pub fn txgate(&self, name: &str, node: &str, config: &super::TempFile) -> super::Txgate {
        let mut command = self.command(name, super::txgate_binary());
        command.args([
            "--listen",
            "0.0.0.0:8545",
            "--admin-listen",
            "0.0.0.0:9545",
            "--upstream",
            node,
            "--log-format",
            "json",
            "-c",
            config.arg(),
        ]);
        super::Txgate::spawn_command(command).reached_at(self.addr(name))
    }

    /// Cuts host `name` off the network (its link to the bridge down).
    pub fn partition(&self, name: &str) {
        run(&[
            "link",
            "set",
            &format!("{}n{}", self.tag, self.index(name)),
            "down",
        ]);
    }

    /// Joins host `name` to the network again.
    pub fn heal(&self, name: &str) {
        run(&[
            "link",
            "set",
            &format!("{}n{}", self.tag, self.index(name)),
            "up",
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for name in &self.names {
            ip(&["netns", "del", &self.namespace(name)]);
        }
        ip(&["link", "del", &format!("{}br", self.tag)]);
    }
}
