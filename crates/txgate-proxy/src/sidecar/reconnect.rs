//! When a sidecar link is retried, and when its ends are worth a log line.
//!
//! A link that stayed up for a while and then ended is retried after the
//! first delay, and its end is logged. A link that keeps ending soon after
//! it opens (a sidecar that crashes on start, a proxy in between that cuts
//! streams, a message txgate cannot read sent first on every stream) is
//! *flapping*: each retry waits twice as long as the one before, up to the
//! longest delay, and only the 1st, 2nd, 4th, 8th… end in a row is logged,
//! with the count. Without this, a stream that ends every 10 ms would be
//! reopened ten times a second and logged as often.
//!
//! Pure logic with injected time: [`Reconnect`] is told when the link
//! opened and when it ended, and answers how long to wait.

use std::time::{Duration, Instant};

/// One link's retry state.
#[derive(Debug, Clone)]
pub struct Reconnect {
    initial: Duration,
    max: Duration,
    stable: Duration,
    delay: Duration,
    opened: Option<Instant>,
    in_a_row: u64,
}

/// What to do after an end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Wait this long (before jitter) and reconnect.
    pub delay: Duration,
    /// Ends in a row without a stable period (1 after a stable link).
    pub in_a_row: u64,
    /// Whether this end gets a log line (the 1st, 2nd, 4th, 8th… in a row).
    pub log: bool,
}

impl Reconnect {
    /// Retries start at `initial` and double up to `max`; a link up for
    /// `max` (at least one second) counts as stable.
    pub fn new(initial: Duration, max: Duration) -> Reconnect {
        let max = max.max(initial);
        Reconnect {
            initial,
            max,
            stable: max.max(Duration::from_secs(1)),
            delay: initial,
            opened: None,
            in_a_row: 0,
        }
    }

    /// The link opened at `now`.
    pub fn opened(&mut self, now: Instant) {
        self.opened = Some(now);
    }

    /// Whether the last end was not logged (the link is flapping and the
    /// next line is due at the next power of two): its reopening is not
    /// logged either.
    pub fn flapping(&self) -> bool {
        self.in_a_row > 0 && !self.in_a_row.is_power_of_two()
    }

    /// The link ended (or could not be opened) at `now`.
    pub fn ended(&mut self, now: Instant) -> Retry {
        if let Some(opened) = self.opened.take()
            && now.saturating_duration_since(opened) >= self.stable
        {
            self.delay = self.initial;
            self.in_a_row = 0;
        }
        self.in_a_row += 1;
        let retry = Retry {
            delay: self.delay,
            in_a_row: self.in_a_row,
            log: self.in_a_row.is_power_of_two(),
        };
        self.delay = (self.delay * 2).min(self.max);
        retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_flapping_link_backs_off_and_logs_at_powers_of_two() {
        let mut r = Reconnect::new(100 * MS, 5000 * MS);
        let mut now = Instant::now();
        let mut delays = Vec::new();
        let mut logged = Vec::new();
        for _ in 0..40 {
            r.opened(now);
            now += 10 * MS;
            let retry = r.ended(now);
            delays.push(retry.delay.as_millis());
            if retry.log {
                logged.push(retry.in_a_row);
            }
            now += retry.delay;
        }
        assert_eq!(&delays[..8], &[100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert!(delays[8..].iter().all(|&d| d == 5000));
        assert_eq!(logged, vec![1, 2, 4, 8, 16, 32]);
    }

    #[test]
    fn a_stable_link_starts_over() {
        let mut r = Reconnect::new(100 * MS, 5000 * MS);
        let mut now = Instant::now();
        for _ in 0..5 {
            r.opened(now);
            now += 10 * MS;
            now += r.ended(now).delay;
        }
        r.opened(now);
        now += Duration::from_secs(5);
        let retry = r.ended(now);
        assert_eq!(
            retry,
            Retry {
                delay: 100 * MS,
                in_a_row: 1,
                log: true
            }
        );
    }

    #[test]
    fn failed_attempts_back_off_too() {
        let mut r = Reconnect::new(100 * MS, 400 * MS);
        let now = Instant::now();
        let delays: Vec<_> = (0..4).map(|_| r.ended(now).delay.as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 400]);
        // Up less than a second: not stable even when `max` is shorter.
        r.opened(now);
        assert_eq!(r.ended(now + 500 * MS).delay, 400 * MS);
    }
}
