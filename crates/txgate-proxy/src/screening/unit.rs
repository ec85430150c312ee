//! A unit of raw transactions (a bundle) screened as one: every
//! transaction through the same stages as a lone call, in the screening
//! crate's two sweeps (`Screen::check_unit`: the stages that need no
//! sender for every transaction, then those that do), the ShouldForward
//! questions of those that pass, then one commit of all of them or none
//! (`Screen::commit_unit`). Nothing of a refused unit is remembered: no
//! forward admitted, no trickle slot taken.

use std::sync::Arc;

use futures_util::future::join_all;
use txgate_screen::{Millis, Screen, UnitRejection};

use super::{Cleared, ProbeClient};

/// Screens `params` (the unit's raw transactions, in order) at `now`,
/// asking `probe` (`None`: never) about the transactions it would ask
/// about alone, all at once. `Err` names the first transaction refused.
pub async fn screen_unit<'p>(
    screen: &Screen,
    probe: Option<&Arc<ProbeClient>>,
    params: impl IntoIterator<Item = &'p str>,
    now: Millis,
) -> Result<Vec<Cleared>, Box<UnitRejection>> {
    let unit = screen.check_unit(params, now)?;
    if let Some(probe) = probe {
        let questions = unit
            .iter()
            .enumerate()
            .filter_map(|(index, c)| Some((index, probe.question(screen, c)?)));
        let (indices, asked): (Vec<usize>, Vec<_>) = questions.unzip();
        let answers = join_all(asked).await;
        if let Some((index, rejection)) = indices
            .into_iter()
            .zip(answers)
            .find_map(|(index, answer)| Some((index, answer.err()?)))
        {
            return Err(Box::new(UnitRejection {
                index,
                tx_hash: Some(unit[index].hash),
                rejection,
            }));
        }
    }
    let admitted = screen.commit_unit(&unit)?;
    Ok(admitted
        .into_iter()
        .zip(&unit)
        .map(|(admitted, c)| Cleared {
            admitted,
            sender_cached: c.sender_cached,
        })
        .collect())
}
