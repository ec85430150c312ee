//! Separate network hosts on one machine, for the fleet's tests and
//! benches: Linux network namespaces joined by veth pairs to one bridge,
//! each host with its own address, made and torn down by their user.
//!
//! A [`Hosts`] is a bridge `txg<pid>x<n>br` in the caller's own namespace,
//! with the address `10.77.<s>.1/24`, and one namespace per host,
//! `txg<pid>x<n>-<name>`, whose `eth0` (the far end of a veth pair whose
//! near end is on the bridge) has `10.77.<s>.<2 + i>/24`. The caller
//! reaches every host through the bridge; the hosts reach each other
//! through it. A partition sets a host's near end down (its processes keep
//! running, cut off); healing sets it up again. Latency, where it is
//! wanted, comes from a [`Relay`] (the kernels this runs on may have no
//! netem).
//!
//! Names carry the creating process's id: a run that died without cleaning
//! up leaves namespaces whose process is gone, and the next run stops what
//! still runs in them (by the PIDs the kernel lists for each such
//! namespace) and removes them before it makes its own. Namespaces need
//! root and iproute2; where they are not allowed, [`Hosts::new`] says so.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

mod relay;

pub use relay::Relay;

/// A set of network hosts on one bridge, removed on drop.
#[derive(Debug)]
pub struct Hosts {
    tag: String,
    subnet: u8,
    names: Vec<String>,
}

/// Why no hosts could be made here.
#[derive(Debug)]
pub struct Unavailable;

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("network namespaces are not allowed here (needs root and iproute2)")
    }
}

impl std::error::Error for Unavailable {}

/// `ip` with `args`; whether it succeeded.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ip` with `args`, which must succeed.
#[allow(clippy::expect_used)]
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

fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
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
        if pid.is_some_and(gone) {
            // What a dead run left running on its hosts: stopped by the
            // PIDs in that namespace, then the namespace removed.
            if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<i32>() {
                        // SAFETY: kill(2) on a PID the kernel lists in a
                        // namespace made by a run now gone.
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
            let dead = name
                .strip_prefix("txg")
                .and_then(|r| r.split('x').next())
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(gone);
            if dead {
                ip(&["link", "del", name]);
            }
        }
    }
}

impl Hosts {
    /// One host per name on a new bridge, or why they cannot be made here.
    pub fn new(names: &[&str]) -> Result<Hosts, Unavailable> {
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
            return Err(Unavailable);
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
        Ok(hosts)
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

    /// The caller's own address on the bridge.
    pub fn bridge_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 1)
    }

    /// One more address of the caller's own on the bridge
    /// (`10.77.<s>.<last>`, `last` from 200): a client distinct from the
    /// others.
    pub fn client_addr(&self, last: u8) -> Ipv4Addr {
        assert!(last >= 200, "client addresses start at .200");
        let addr = Ipv4Addr::new(10, 77, self.subnet, last);
        let bridge = format!("{}br", self.tag);
        ip(&["addr", "add", &format!("{addr}/24"), "dev", &bridge]);
        addr
    }

    /// `program`, to be run on host `name` (`ip netns exec`, which execs
    /// it: the child's PID is the program's).
    pub fn command(&self, name: &str, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.namespace(name), program]);
        command
    }

    /// Cuts host `name` off the network (its link to the bridge down).
    pub fn partition(&self, name: &str) {
        run(&["link", "set", &self.near_end(name), "down"]);
    }

    /// Joins host `name` to the network again.
    pub fn heal(&self, name: &str) {
        run(&["link", "set", &self.near_end(name), "up"]);
    }

    fn near_end(&self, name: &str) -> String {
        format!("{}n{}", self.tag, self.index(name))
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
