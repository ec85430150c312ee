//! The stack the story plays against: started here (anvil mining a block a
//! second, the example sidecar, the sink with `--upstream sink`, txgate),
//! or one already running, named on the command line.

use txgate_benches::procs::{HttpClient, Proc};
use txgate_benches::start::{
    SEQUENCER, Scratch, Sidecar, Txgate, anvil, arg, sidecar, sidecar_config, sink, txgate_bin,
};

use crate::args::{Args, External, ShouldForward, Upstream, name};

/// Where the node, txgate and the sidecar answer.
pub(crate) struct Stack {
    /// txgate's process id, when this tool started it.
    pub(crate) txgate_pid: Option<u32>,
    pub(crate) node: String,
    /// Where set-up transactions go to be mined: txgate when its upstream
    /// is the node, the node when it is the sink (which mines nothing).
    pub(crate) setup: String,
    pub(crate) txgate: String,
    pub(crate) txgate_admin: String,
    pub(crate) sidecar_admin: String,
}

/// The processes of a stack started here, stopped when dropped (txgate
/// first, anvil last).
pub(crate) struct Started {
    _sink: Option<Proc>,
    _txgate: Txgate,
    _sidecar: Sidecar,
    _anvil: Proc,
    _scratch: Scratch,
}

impl Stack {
    /// The stack named on the command line, if one is.
    pub(crate) fn external(e: &External) -> Option<Stack> {
        let given = [&e.node, &e.txgate, &e.txgate_admin, &e.sidecar_admin];
        if given.iter().all(|u| u.is_none()) {
            return None;
        }
        let url = |u: &Option<String>| {
            u.clone()
                .expect("--node, --txgate, --txgate-admin and --sidecar-admin go together")
                .trim_end_matches('/')
                .to_string()
        };
        Some(Stack {
            node: url(&e.node),
            setup: url(&e.txgate),
            txgate: url(&e.txgate),
            txgate_admin: url(&e.txgate_admin),
            txgate_pid: None,
            sidecar_admin: url(&e.sidecar_admin),
        })
    }

    /// Starts anvil (a block per second), the example sidecar, the sink
    /// with `--upstream sink`, and txgate (`TXGATE_BIN`: another build,
    /// for a same-run comparison) on free loopback ports; they stop when
    /// [`Started`] is dropped. txgate is not waited for.
    pub(crate) async fn start(client: &HttpClient, a: &Args) -> (Started, Stack) {
        let (anvil, node) = anvil(client, SEQUENCER).await;
        let sidecar = sidecar(client, &node, &sidecar_config()).await;
        let (sink, upstream) = match a.upstream {
            Upstream::Sink => {
                let (proc, url) = sink(client, &node).await;
                (Some(proc), url)
            }
            Upstream::Anvil => (None, node.clone()),
        };
        let scratch = Scratch::new("attack");
        let config = scratch.write(
            "txgate.toml",
            &match a.should_forward {
                ShouldForward::Off => String::new(),
                scope => format!(
                    "[sidecar]\nshould_forward = true\nshould_forward_scope = \"{}\"\n",
                    name(scope)
                ),
            },
        );
        let txgate = Txgate::spawn(
            &txgate_bin(),
            &upstream,
            &[
                "--config",
                arg(&config),
                "--sidecar",
                &sidecar.grpc,
                "--max-in-flight",
                "4096",
            ],
        );
        let stack = Stack {
            setup: match a.upstream {
                Upstream::Sink => node.clone(),
                Upstream::Anvil => txgate.url(),
            },
            node,
            txgate: txgate.url(),
            txgate_admin: txgate.admin(),
            txgate_pid: Some(txgate.pid()),
            sidecar_admin: sidecar.admin.clone(),
        };
        let started = Started {
            _sink: sink,
            _txgate: txgate,
            _sidecar: sidecar,
            _anvil: anvil,
            _scratch: scratch,
        };
        (started, stack)
    }
}
