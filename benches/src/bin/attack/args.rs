//! The attack benchmark's command line.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use txgate_benches::CargoBench;

/// The attack benchmark: honest load with and without attackers, then the
/// time from an invalidation to its first refusal.
#[derive(Parser)]
pub(crate) struct Args {
    /// Child mode: only attack this txgate URL, write the outcomes as JSON
    /// to `--json` (the run starts this mode).
    #[arg(long, hide = true, value_name = "URL")]
    pub(crate) attack_only: Option<String>,
    /// Seconds of each honest phase.
    #[arg(long, default_value_t = 8)]
    pub(crate) seconds: u64,
    /// Honest transactions a second.
    #[arg(long, default_value_t = 200)]
    pub(crate) rate: u64,
    /// Attacker EOAs.
    #[arg(long, default_value_t = 1000)]
    pub(crate) attackers: u64,
    /// The attackers' connections.
    #[arg(long, default_value_t = 32)]
    pub(crate) connections: usize,
    /// Propagation probes.
    #[arg(long, default_value_t = 20)]
    pub(crate) probes: usize,
    /// Also write the summary, with the time series, here.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// How often txgate's decision counters are sampled, in ms.
    #[arg(long, default_value_t = 250)]
    pub(crate) sample_ms: u64,
    /// A running stack to play against instead of starting one.
    #[command(flatten)]
    pub(crate) external: External,
    /// What txgate forwards to: anvil itself, or the sink in front of it.
    #[arg(long, value_enum, default_value_t = Upstream::Anvil)]
    pub(crate) upstream: Upstream,
    /// `sidecar.should_forward_scope` of the txgate started here, or `off`
    /// for no ShouldForward.
    #[arg(long, value_enum, default_value_t = ShouldForward::Off)]
    pub(crate) should_forward: ShouldForward,
    /// Leave out the attacker's first sweep, judged before the attack: the
    /// attacked call is cold when the attack starts.
    #[arg(long)]
    pub(crate) cold_start: bool,
    /// What the honest client sends: pokes of the protected contract (a
    /// call the attack's replays make hot), or zero-value transfers to
    /// fresh addresses (calls no invalidation names).
    #[arg(long, value_enum, default_value_t = HonestCall::Poke)]
    pub(crate) honest_call: HonestCall,
    #[command(flatten)]
    _cargo: CargoBench,
}

/// The URLs of a stack started by someone else (all or none).
#[derive(clap::Args)]
pub(crate) struct External {
    /// The node (a fresh anvil with `--block-time 1`).
    #[arg(long, value_name = "URL")]
    pub(crate) node: Option<String>,
    /// txgate's client URL.
    #[arg(long, value_name = "URL")]
    pub(crate) txgate: Option<String>,
    /// txgate's admin URL.
    #[arg(long, value_name = "URL")]
    pub(crate) txgate_admin: Option<String>,
    /// The sidecar's admin URL.
    #[arg(long, value_name = "URL")]
    pub(crate) sidecar_admin: Option<String>,
}

/// What txgate forwards to.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Upstream {
    /// anvil.
    Anvil,
    /// The sink in front of anvil: raw transactions taken, never mined.
    Sink,
}

/// txgate's ShouldForward probes.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ShouldForward {
    /// None.
    Off,
    /// Calls the sidecar marks hot.
    Hot,
    /// Every call.
    All,
}

/// What the honest client sends.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum HonestCall {
    /// Pokes of the protected contract.
    Poke,
    /// Zero-value transfers to fresh addresses.
    Transfer,
}

/// A setting's name on the command line (and in the summary).
pub(crate) fn name(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}
