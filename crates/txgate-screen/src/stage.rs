//! The screening stages and their order, written once.
//!
//! A stage is a type naming one `Screen::stage_*` step. [`Stages`] lists
//! them cheapest first as a type-level list; [`Screen::screen`] runs it in a
//! row, and the proxy folds the same list into its tower stack, so a new
//! stage is added here and nowhere else.
//!
//! The first step, hex and the tx hash, makes the [`Candidate`] the stages
//! work on ([`Screen::candidate`]); the last, the pending attribution of a
//! call that passed, is [`Screen::admit`].

use crate::engine::{Admitted, Candidate, Rejection, Screen};
use crate::ttl::Millis;

/// One step of the screening path.
pub trait Stage {
    /// A short name, for docs and traces.
    const NAME: &'static str;

    /// Checks the candidate, and adds what it learns to it.
    fn check(screen: &Screen, candidate: &mut Candidate) -> Result<(), Rejection>;
}

/// The tx hash in the recent-failure cache: refused before any decoding or
/// ECDSA.
#[derive(Debug)]
pub enum FastReject {}

impl Stage for FastReject {
    const NAME: &'static str = "fast_reject";
    fn check(screen: &Screen, c: &mut Candidate) -> Result<(), Rejection> {
        screen.stage_fast_reject(c)
    }
}

/// The EIP-2718 envelope and the chain-id allow-list.
#[derive(Debug)]
pub enum DecodeEnvelope {}

impl Stage for DecodeEnvelope {
    const NAME: &'static str = "decode";
    fn check(screen: &Screen, c: &mut Candidate) -> Result<(), Rejection> {
        screen.stage_decode(c)
    }
}

/// The sender: cached by tx hash, else one libsecp256k1 recovery.
#[derive(Debug)]
pub enum RecoverSender {}

impl Stage for RecoverSender {
    const NAME: &'static str = "recover";
    fn check(screen: &Screen, c: &mut Candidate) -> Result<(), Rejection> {
        screen.stage_recover(c)
    }
}

/// A sender charged with too many invalidations waits; then a call on a
/// cooldown's open trickle slot takes it (see `Screen::stage_backpressure`).
#[derive(Debug)]
pub enum SenderBackpressure {}

impl Stage for SenderBackpressure {
    const NAME: &'static str = "backpressure";
    fn check(screen: &Screen, c: &mut Candidate) -> Result<(), Rejection> {
        screen.stage_backpressure(c)
    }
}

/// Denied fingerprint (bloom, then map), assertion cooldown, shaping of
/// suspect fingerprints.
#[derive(Debug)]
pub enum CheckFingerprint {}

impl Stage for CheckFingerprint {
    const NAME: &'static str = "fingerprint";
    fn check(screen: &Screen, c: &mut Candidate) -> Result<(), Rejection> {
        screen.stage_fingerprint(c)
    }
}

/// The stages after hex, cheapest first: the one place their order is
/// written.
///
/// The fingerprint checks (denied set, cooldown, shaping) come before the
/// sender's recovery: they need the decoded transaction, not its sender,
/// and cost a few keccaks against a libsecp256k1 recovery's tens of
/// microseconds. Under an attack of fresh EOAs on a call in cooldown, the
/// recovery of calls that the cooldown then refused was 44% of txgate's
/// CPU (PERFORMANCE.md). Backpressure needs the sender, so it comes last.
/// The fingerprint stage only peeks at a cooldown's trickle slot; the last
/// stage takes it once its own check passed, so a call refused in between
/// never uses it up. (Not a stage of its own: each layer of the stack adds
/// to the compile time of its higher-ranked service bounds.)
pub type Stages = (
    FastReject,
    (
        DecodeEnvelope,
        (CheckFingerprint, (RecoverSender, (SenderBackpressure, ()))),
    ),
);

/// A type-level list of stages: `()` or `(Stage, StageList)`.
pub trait StageList {
    /// Runs every stage in order, stopping at the first rejection.
    fn run(screen: &Screen, candidate: &mut Candidate) -> Result<(), Rejection>;

    /// The stage names, in order.
    fn names(out: &mut Vec<&'static str>);
}

impl StageList for () {
    #[inline]
    fn run(_: &Screen, _: &mut Candidate) -> Result<(), Rejection> {
        Ok(())
    }

    fn names(_: &mut Vec<&'static str>) {}
}

impl<H: Stage, T: StageList> StageList for (H, T) {
    #[inline]
    fn run(screen: &Screen, candidate: &mut Candidate) -> Result<(), Rejection> {
        H::check(screen, candidate)?;
        T::run(screen, candidate)
    }

    fn names(out: &mut Vec<&'static str>) {
        out.push(H::NAME);
        T::names(out);
    }
}

impl Screen {
    /// Every stage in a row, in the order of [`Stages`] (what the proxy's
    /// tower stack does), then the pending attribution.
    pub fn screen(&self, param: &str, now: Millis) -> Result<Admitted, Rejection> {
        let mut c = self.candidate(param, now)?;
        Stages::run(self, &mut c)?;
        Ok(self.admit(&c))
    }
}

/// The names of [`Stages`], in order.
pub fn stage_names() -> Vec<&'static str> {
    let mut out = Vec::new();
    Stages::names(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cheapest_first() {
        assert_eq!(
            stage_names(),
            [
                "fast_reject",
                "decode",
                "fingerprint",
                "recover",
                "backpressure"
            ]
        );
    }
}
