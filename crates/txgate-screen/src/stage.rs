//! The screening stages and their order, written once.
//!
//! A stage is a type naming one `Screen::stage_*` step. [`Stages`] lists
//! them cheapest first as a type-level list; [`Screen::screen`] runs it in a
//! row, and the proxy folds the same list into its tower stack, so a new
//! stage is added here and nowhere else.
//!
//! The first step, hex and the tx hash, makes the [`Candidate`] the stages
//! work on ([`Screen::candidate`]); the last, for a call that passed, is
//! [`Screen::commit`] (a cooldown's trickle slot taken, the pending
//! attribution). A unit of calls (a bundle) runs [`Cheap`] over every
//! call, then [`Costly`] over every call ([`Screen::check_unit`]), and is
//! committed all or none ([`Screen::commit_unit`]).

use crate::engine::{Admitted, Candidate, Rejection, Screen, UnitRejection};
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

/// A sender charged with too many invalidations waits.
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

/// The stages that need no sender, cheapest first: a unit's first sweep.
///
/// The fingerprint checks (denied set, cooldown, shaping) come before the
/// sender's recovery: they need the decoded transaction, not its sender,
/// and cost a few keccaks against a libsecp256k1 recovery's tens of
/// microseconds. Under an attack of fresh EOAs on a call in cooldown, the
/// recovery of calls that the cooldown then refused was 44% of txgate's
/// CPU (PERFORMANCE.md). For a unit, a ban at its last call costs no
/// recovery at all.
pub type Cheap = (FastReject, (DecodeEnvelope, (CheckFingerprint, ())));

/// The stages that need the sender: a unit's second sweep. Backpressure
/// needs the sender, so it comes last.
pub type Costly = (RecoverSender, (SenderBackpressure, ()));

/// The stages after hex, cheapest first: [`Cheap`], then [`Costly`], the
/// one place their order is written.
///
/// The fingerprint stage only peeks at a cooldown's trickle slot; the
/// commit ([`Screen::commit`]) takes it once every check passed, so a call
/// refused in between never uses it up. (Not a stage of its own: each
/// layer of the stack adds to the compile time of its higher-ranked
/// service bounds.)
pub type Stages = <Cheap as Then<Costly>>::List;

/// Type-level concatenation of stage lists: `A` then `B`.
pub trait Then<B> {
    /// The stages of `Self`, then those of `B`.
    type List;
}

impl<B> Then<B> for () {
    type List = B;
}

impl<H, T: Then<B>, B> Then<B> for (H, T) {
    type List = (H, <T as Then<B>>::List);
}

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
    /// tower stack does), then the commit.
    pub fn screen(&self, param: &str, now: Millis) -> Result<Admitted, Rejection> {
        let mut c = self.candidate(param, now)?;
        Stages::run(self, &mut c)?;
        self.commit(&c)
    }

    /// The checks of a unit of calls (a bundle's transactions) at `now`,
    /// none committed: the candidate and [`Cheap`] for every call in
    /// order, then [`Costly`] for every call in order. `Err` names the
    /// first call refused (in that order: a call the first sweep refuses
    /// is named before any the second would). What passes is committed
    /// with [`Screen::commit_unit`], once anything else to ask about it
    /// (the proxy's ShouldForward probe) is answered.
    pub fn check_unit<'p>(
        &self,
        params: impl IntoIterator<Item = &'p str>,
        now: Millis,
    ) -> Result<Vec<Candidate>, Box<UnitRejection>> {
        let mut unit = Vec::new();
        for (index, param) in params.into_iter().enumerate() {
            let refused = |tx_hash, rejection| {
                Box::new(UnitRejection {
                    index,
                    tx_hash,
                    rejection,
                })
            };
            let mut c = self
                .candidate(param, now)
                .map_err(|rejection| refused(None, rejection))?;
            Cheap::run(self, &mut c).map_err(|rejection| refused(Some(c.hash), rejection))?;
            unit.push(c);
        }
        for (index, c) in unit.iter_mut().enumerate() {
            Costly::run(self, c).map_err(|rejection| {
                Box::new(UnitRejection {
                    index,
                    tx_hash: Some(c.hash),
                    rejection,
                })
            })?;
        }
        Ok(unit)
    }

    /// A unit's checks, then its commit: what the proxy does for a bundle
    /// when no ShouldForward question is asked.
    pub fn screen_unit<'p>(
        &self,
        params: impl IntoIterator<Item = &'p str>,
        now: Millis,
    ) -> Result<Vec<Admitted>, Box<UnitRejection>> {
        let unit = self.check_unit(params, now)?;
        self.commit_unit(&unit)
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
    fn cheapest_first_and_the_sweeps_of_a_unit_make_up_the_stages() {
        let names = |run: fn(&mut Vec<&'static str>)| {
            let mut out = Vec::new();
            run(&mut out);
            out
        };
        let (cheap, costly) = (names(Cheap::names), names(Costly::names));
        assert_eq!([cheap, costly].concat(), stage_names());
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
