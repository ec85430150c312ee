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
    flaps: u64,
    last_logged: bool,
}

/// What to do after an end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Wait this long (before jitter) and reconnect.
    pub delay: Duration,
    /// Links in a row that opened and ended before they were stable (0
    /// for an attempt that did not open; 1 for the first end after a
    /// stable link).
    pub flaps: u64,
    /// Whether this end gets its log lines: always for an attempt that did
    /// not open (the readiness logs those once per reason) and for the end
    /// of a stable link; for a flapping one, the 2nd, 4th, 8th… end.
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
            flaps: 0,
            last_logged: true,
        }
    }

    /// The link opened at `now`.
    pub fn opened(&mut self, now: Instant) {
        self.opened = Some(now);
    }

    /// Whether the opening of the link is worth a line: not when it follows
    /// an end that was not logged (a flapping link; the next line is due at
    /// the next power of two).
    pub fn log_open(&self) -> bool {
        self.last_logged
    }

    /// The link ended, or an attempt failed, at `now`.
    pub fn ended(&mut self, now: Instant) -> Retry {
        let (log, flaps) = match self.opened.take() {
            Some(opened) if now.saturating_duration_since(opened) >= self.stable => {
                self.delay = self.initial;
                self.flaps = 1;
                (true, 1)
            }
            Some(_) => {
                self.flaps += 1;
                (self.flaps.is_power_of_two(), self.flaps)
            }
            None => (true, 0),
        };
        self.last_logged = log;
        let retry = Retry {
            delay: self.delay,
            flaps,
            log,
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
                logged.push(retry.flaps);
            }
            assert_eq!(r.log_open(), retry.log);
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
                flaps: 1,
                log: true
            }
        );
    }

    /// A sidecar restarting: attempts that fail back off but are not
    /// flaps, and are always handed to the readiness to log (once per
    /// reason), so the reopening after them is logged whatever their
    /// number.
    #[test]
    fn failed_attempts_back_off_and_never_silence_the_recovery() {
        let mut r = Reconnect::new(100 * MS, 400 * MS);
        let mut now = Instant::now();
        r.opened(now);
        now += Duration::from_secs(10);
        assert!(r.ended(now).log);
        for (attempt, want) in [200, 400, 400, 400, 400, 400].into_iter().enumerate() {
            let retry = r.ended(now);
            assert_eq!(retry.delay.as_millis(), want, "attempt {attempt}");
            assert!(retry.log);
            assert!(r.log_open(), "attempt {attempt}");
        }
        // Up less than a second: a flap even when `max` is shorter.
        r.opened(now);
        let retry = r.ended(now + 500 * MS);
        assert_eq!((retry.flaps, retry.log), (2, true));
    }
}
