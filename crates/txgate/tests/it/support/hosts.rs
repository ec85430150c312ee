//! Separate network hosts for the fleet tests (`txgate-hosts`: network
//! namespaces joined by veth pairs to one bridge), with the launchers the
//! tests start on them. Where namespaces are not allowed, [`Hosts::new`]
//! returns `None` and the test says why it did not run, unless
//! `TXGATE_REQUIRE_NETNS` is set (as `.ci/run` sets it): then it fails.

use std::process::Stdio;

/// The test's hosts, removed on drop.
pub struct Hosts(txgate_hosts::Hosts);

impl std::ops::Deref for Hosts {
    type Target = txgate_hosts::Hosts;

    fn deref(&self) -> &txgate_hosts::Hosts {
        &self.0
    }
}

impl Hosts {
    /// One host per name on a new bridge; `None` (with the reason printed)
    /// where namespaces cannot be made here.
    pub fn new(names: &[&str]) -> Option<Hosts> {
        match txgate_hosts::Hosts::new(names) {
            Ok(hosts) => Some(Hosts(hosts)),
            Err(why) => {
                assert!(
                    std::env::var_os("TXGATE_REQUIRE_NETNS").is_none(),
                    "{why}, and TXGATE_REQUIRE_NETNS is set"
                );
                eprintln!("{why}: test not run");
                None
            }
        }
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
}
