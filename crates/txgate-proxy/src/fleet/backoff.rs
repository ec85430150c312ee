//! How long to wait before retrying the fleet's Redis.
//!
//! The first retry comes 100 ms after a failure, each further one twice as
//! late up to 5 s (or a shorter longest wait: the ban log's links wait at
//! most 1 s), until a connect succeeds. Each wait is moved by up to
//! ±20% at random, so the instances of a fleet whose Redis comes back do
//! not all reconnect at the same moment.
//!
//! Pure logic: the randomness is an argument of [`Backoff::failed_with`],
//! so the tests need no clock and no sleep.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// The first wait, before jitter.
const FIRST: Duration = Duration::from_millis(100);
/// The longest wait, before jitter.
const LONGEST: Duration = Duration::from_secs(5);

/// One link's retry state.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    longest: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::up_to(LONGEST)
    }
}

impl Backoff {
    /// Waits from 100 ms doubling up to `longest` (before jitter).
    pub fn up_to(longest: Duration) -> Backoff {
        Backoff {
            next: FIRST.min(longest),
            longest,
        }
    }

    /// An attempt failed: how long to wait before the next one.
    pub fn failed(&mut self) -> Duration {
        self.failed_with(random())
    }

    /// [`Backoff::failed`], with `noise` placing the wait within ±20%.
    fn failed_with(&mut self, noise: u64) -> Duration {
        let wait = jittered(self.next, noise);
        self.next = (self.next * 2).min(self.longest);
        wait
    }

    /// A connect succeeded: the next failure waits the first delay again.
    pub fn succeeded(&mut self) {
        self.next = FIRST.min(self.longest);
    }
}

/// `delay` ± 20%, where within that span chosen by `noise`.
fn jittered(delay: Duration, noise: u64) -> Duration {
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX / 2);
    let spread = nanos / 5;
    Duration::from_nanos(nanos - spread + noise % (2 * spread + 1))
}

/// 64 random bits: each `RandomState` has new keys (random per process,
/// then moved on at each call), so hashing one value gives a new number.
fn random() -> u64 {
    RandomState::new().hash_one(0u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_double_from_100_ms_to_5_s_and_start_over_after_a_connect() {
        let mut backoff = Backoff::default();
        // Noise 2 × spread: the top of each span, the wait × 1.2.
        let top = |b: &mut Backoff| {
            let spread = b.next.as_nanos() as u64 / 5;
            b.failed_with(2 * spread).as_millis()
        };
        let waits: Vec<u128> = (0..9).map(|_| top(&mut backoff)).collect();
        assert_eq!(waits, [120, 240, 480, 960, 1920, 3840, 6000, 6000, 6000]);
        backoff.succeeded();
        assert_eq!(backoff.failed_with(0), 80 * MS);
        assert_eq!(backoff.failed_with(0), 160 * MS);
    }

    #[test]
    fn a_shorter_longest_wait_caps_the_doubling() {
        let mut backoff = Backoff::up_to(Duration::from_secs(1));
        let waits: Vec<u128> = (0..6).map(|_| backoff.failed_with(0).as_millis()).collect();
        assert_eq!(waits, [80, 160, 320, 640, 800, 800]);
    }

    #[test]
    fn jitter_stays_within_a_fifth_either_way() {
        let second = Duration::from_secs(1);
        assert_eq!(jittered(second, 0), 800 * MS);
        assert_eq!(jittered(second, 400_000_000), 1200 * MS);
        assert_eq!(jittered(second, 200_000_000), second);
        for noise in [1, 12_345, u64::MAX / 3, u64::MAX] {
            let d = jittered(second, noise);
            assert!(d >= 800 * MS && d <= 1200 * MS, "{d:?}");
        }
        assert_eq!(jittered(Duration::ZERO, u64::MAX), Duration::ZERO);
    }

    /// The fleet spreads: the random waits of one delay are not all one.
    #[test]
    fn random_waits_spread_over_the_span() {
        let waits: Vec<Duration> = (0..64).map(|_| Backoff::default().failed()).collect();
        assert!(waits.iter().all(|d| *d >= 80 * MS && *d <= 120 * MS));
        let (low, high) = (waits.iter().min(), waits.iter().max());
        assert!(
            high.zip(low).is_some_and(|(h, l)| *h - *l > 10 * MS),
            "{waits:?}"
        );
    }
}
