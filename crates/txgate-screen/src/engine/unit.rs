//! The commit of a unit of calls (a bundle): all of them or none.
//!
//! A unit is screened in two sweeps over its calls (see
//! `crate::stage::Screen::check_unit`), each through the same stages as a
//! lone call, and nothing of it is remembered until every call passed
//! every stage. Then [`Screen::commit_unit`] applies what a lone call's
//! commit would, for all of them at once: the checks that depend on the
//! other calls of the unit first (two forwards of one suspect fingerprint,
//! two calls on one cooldown's trickle slot), then the trickle slots taken
//! together under one lock, then every forward remembered. A refused unit
//! leaves no trace: no slot taken, nothing admitted.

use alloy_primitives::B256;

use super::{Admitted, Candidate, Rejection, Screen, UnitRejection};
use crate::assertion::CallKey;

impl Screen {
    /// Commits `unit`, every call of which passed every stage; `Err`
    /// names the first call refused (boxed: a rare, large answer), and
    /// nothing is changed.
    ///
    /// Within the unit, a suspect fingerprint gets one forward, as it
    /// gets one per `shaping_hold` across calls (a second transaction
    /// with it is refused as `Shaped`), and a cooldown's trickle slot
    /// lets one call through (a second on it is refused as `Cooldown`).
    pub fn commit_unit(&self, unit: &[Candidate]) -> Result<Vec<Admitted>, Box<UnitRejection>> {
        let refused = |index: usize, rejection| {
            Box::new(UnitRejection {
                index,
                tx_hash: Some(unit[index].hash),
                rejection,
            })
        };
        for (index, c) in unit.iter().enumerate() {
            if let (true, Some(fp)) = (c.suspect, c.fingerprint)
                && unit[..index]
                    .iter()
                    .any(|o| o.suspect && fingerprint(o) == Some(fp.hash) && o.hash != c.hash)
            {
                let rejection = Rejection::Shaped {
                    fingerprint: fp.hash,
                    retry_after: self.settings.shaping_hold,
                };
                return Err(refused(index, rejection));
            }
        }
        let trickles: Vec<(usize, CallKey)> = unit
            .iter()
            .enumerate()
            .filter_map(|(index, c)| match (c.trickle, c.fingerprint) {
                (true, Some(fp)) => Some((index, (fp.target, fp.selector))),
                _ => None,
            })
            .collect();
        if let Some(first) = unit.first()
            && !trickles.is_empty()
        {
            let calls: Vec<CallKey> = trickles.iter().map(|(_, call)| *call).collect();
            if let Err((at, assertion, retry_after)) =
                self.assertions.take_trickles(&calls, first.now)
            {
                let index = trickles[at].0;
                let fp = fingerprint(&unit[index]).unwrap_or_default();
                return Err(refused(
                    index,
                    self.cooldown_refusal(fp, assertion, retry_after),
                ));
            }
        }
        Ok(unit.iter().map(|c| self.admit(c)).collect())
    }
}

fn fingerprint(c: &Candidate) -> Option<B256> {
    c.fingerprint.map(|fp| fp.hash)
}

#[cfg(test)]
mod tests;
