//! [`Sampler`]: at most a rate of events per key let through (a log line
//! per refusal reason, say), the others counted as suppressed, so a flood
//! of one kind can neither fill a log nor hide the other kinds.
//!
//! Lock-free: one GCRA TAT per key, moved by compare-and-swap, and one
//! counter of what was suppressed since the last event let through (the
//! next one carries it, so no count is lost).
//!
//! ```
//! use txgate_limits::{Rate, Sampler};
//! let sampler = Sampler::new(Rate::new(1, 2), 3);
//! let now = 1_000_000_000;
//! assert_eq!(sampler.sample(0, now), Some(0));
//! assert_eq!(sampler.sample(0, now), Some(0));
//! assert_eq!(sampler.sample(0, now), None); // over the burst
//! assert_eq!(sampler.sample(1, now), Some(0)); // another key, its own rate
//! assert_eq!(sampler.sample(0, now + 1_000_000_000), Some(1)); // one suppressed since
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use crate::gcra::{Nanos, Rate, SharedRate};

/// See the module docs.
#[derive(Debug)]
pub struct Sampler {
    /// One rate per key; empty when nothing is let through.
    rates: Box<[SharedRate]>,
    suppressed: Box<[AtomicU64]>,
}

impl Sampler {
    /// `keys` keys (0..keys), each let through at `rate` (`None`: never).
    pub fn new(rate: Option<Rate>, keys: usize) -> Sampler {
        Sampler {
            rates: rate
                .map(|rate| (0..keys).map(|_| SharedRate::new(rate)).collect())
                .unwrap_or_default(),
            suppressed: (0..keys).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// One event of `key` at `now`: `Some(n)` when it is let through, `n`
    /// the events of that key suppressed since the last one let through;
    /// `None` when suppressed (and counted). An unknown key is suppressed.
    pub fn sample(&self, key: usize, now: Nanos) -> Option<u64> {
        let (Some(rate), Some(suppressed)) = (self.rates.get(key), self.suppressed.get(key)) else {
            return None;
        };
        match rate.charge(now, 1) {
            Ok(()) => Some(suppressed.swap(0, Ordering::Relaxed)),
            Err(_) => {
                suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn a_flood_passes_at_the_rate_and_no_count_is_lost() {
        let sampler = Sampler::new(Rate::new(10, 20), 2);
        let (mut passed, mut reported) = (0u64, 0u64);
        // 10 000 events over 10 s on key 0.
        for i in 0..10_000u64 {
            if let Some(n) = sampler.sample(0, 100 * S + i * S / 1000) {
                passed += 1;
                reported += n;
            }
        }
        // The burst, then 10 a second.
        assert!((110..=121).contains(&passed), "{passed}");
        // Every event is either let through or reported by a later one,
        // except those after the last let through.
        assert!(passed + reported <= 10_000);
        assert!(passed + reported >= 10_000 - 100, "{passed} {reported}");
        // The other key kept its whole burst.
        for _ in 0..20 {
            assert_eq!(sampler.sample(1, 110 * S), Some(0));
        }
        assert_eq!(sampler.sample(1, 110 * S), None);
    }

    #[test]
    fn no_rate_lets_nothing_through_and_unknown_keys_are_suppressed() {
        let off = Sampler::new(None, 1);
        assert_eq!(off.sample(0, S), None);
        let on = Sampler::new(Rate::new(1, 1), 1);
        assert_eq!(on.sample(1, S), None);
        assert_eq!(on.sample(0, S), Some(0));
    }

    #[test]
    fn threads_share_one_rate() {
        let sampler = std::sync::Arc::new(Sampler::new(Rate::new(1, 50), 1));
        let passed: u64 = (0..4)
            .map(|_| {
                let sampler = sampler.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| sampler.sample(0, 5 * S).is_some())
                        .count() as u64
                })
            })
            .map(|t| t.join().unwrap_or(0))
            .collect::<Vec<_>>()
            .iter()
            .sum();
        assert_eq!(passed, 50);
    }
}
