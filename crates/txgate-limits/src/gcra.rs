//! GCRA (the generic cell rate algorithm): a token bucket kept as one
//! number per client, the theoretical arrival time (TAT) of its next call.
//!
//! A rate of `r` calls per second with a burst of `b` lets `b` calls through
//! at once and then one every `1/r` s. A call of cost `c` is allowed when
//! `max(TAT, now) + c/r - now <= b/r`; it moves the TAT to that sum. A
//! client whose TAT is in the past holds no debt: its state is the same as
//! a client never seen, which is what makes the table's eviction safe.

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

/// One rate: calls per second and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Time one call adds to the TAT.
    interval: Nanos,
    /// How far ahead of now the TAT may run: burst × interval.
    tolerance: Nanos,
}

impl Rate {
    /// `per_sec` calls per second with bursts of `burst` (at least 1);
    /// `None` when `per_sec` is 0 (no limit).
    pub fn new(per_sec: u32, burst: u32) -> Option<Rate> {
        if per_sec == 0 {
            return None;
        }
        let interval = 1_000_000_000 / u64::from(per_sec);
        Some(Rate {
            interval: interval.max(1),
            tolerance: interval.max(1) * u64::from(burst.max(1)),
        })
    }

    /// Charges `cost` calls to `tat` at `now`: `Ok` and the TAT moved, or
    /// `Err(wait)` with the time until the calls would fit (the TAT
    /// untouched). A cost larger than the burst (a big batch) passes only
    /// on a full bucket and leaves the client in debt for the excess, so
    /// the long-run rate holds and the batch is not refused forever.
    pub fn charge(&self, tat: &mut Nanos, now: Nanos, cost: u32) -> Result<(), Nanos> {
        if cost == 0 {
            return Ok(());
        }
        let start = (*tat).max(now);
        let span = self.interval.saturating_mul(u64::from(cost));
        let next = start.saturating_add(span);
        if next - now <= self.tolerance || (span > self.tolerance && *tat <= now) {
            *tat = next;
            return Ok(());
        }
        let wait = if span > self.tolerance {
            *tat - now
        } else {
            next - now - self.tolerance
        };
        Err(wait.max(1))
    }
}

/// One [`Rate`] shared by every thread: the TAT in an atomic, moved by
/// compare-and-swap, so a charge never takes a lock.
#[derive(Debug)]
pub struct SharedRate {
    rate: Rate,
    tat: std::sync::atomic::AtomicU64,
}

impl SharedRate {
    /// A full bucket at `rate`.
    pub fn new(rate: Rate) -> SharedRate {
        SharedRate {
            rate,
            tat: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// [`Rate::charge`] on the shared TAT.
    pub fn charge(&self, now: Nanos, cost: u32) -> Result<(), Nanos> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut current = self.tat.load(Relaxed);
        loop {
            let mut next = current;
            self.rate.charge(&mut next, now, cost)?;
            match self
                .tat
                .compare_exchange_weak(current, next, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn zero_is_no_limit() {
        assert_eq!(Rate::new(0, 10), None);
    }

    #[test]
    fn a_burst_passes_at_once_then_one_per_interval() {
        let rate = Rate::new(10, 5).unwrap();
        let mut tat = 0;
        let now = 100 * S;
        for _ in 0..5 {
            rate.charge(&mut tat, now, 1).unwrap();
        }
        let wait = rate.charge(&mut tat, now, 1).unwrap_err();
        assert_eq!(wait, S / 10);
        // 100 ms later exactly one more fits.
        rate.charge(&mut tat, now + S / 10, 1).unwrap();
        assert!(rate.charge(&mut tat, now + S / 10, 1).is_err());
        // A long idle refills the whole burst, never more.
        let later = now + 10 * S;
        for _ in 0..5 {
            rate.charge(&mut tat, later, 1).unwrap();
        }
        assert!(rate.charge(&mut tat, later, 1).is_err());
    }

    #[test]
    fn a_cost_is_all_or_nothing() {
        let rate = Rate::new(10, 5).unwrap();
        let mut tat = 0;
        let now = S;
        rate.charge(&mut tat, now, 3).unwrap();
        let before = tat;
        assert!(rate.charge(&mut tat, now, 3).is_err());
        assert_eq!(tat, before, "a refused charge leaves no debt");
        rate.charge(&mut tat, now, 2).unwrap();
    }

    #[test]
    fn a_cost_beyond_the_burst_passes_on_a_full_bucket_and_pays_later() {
        let rate = Rate::new(10, 5).unwrap();
        let mut tat = 0;
        rate.charge(&mut tat, S, 1).unwrap();
        // Not full: refused, told to wait until it is.
        let wait = rate.charge(&mut tat, S, 20).unwrap_err();
        assert_eq!(wait, S / 10);
        // Full: passes, and the next 2 s (20 calls at 10/s) are owed.
        rate.charge(&mut tat, S + S / 10, 20).unwrap();
        assert!(rate.charge(&mut tat, S + S / 10 + S, 1).is_err());
        // 2 s later the debt is paid and the bucket full again.
        let paid = S + S / 10 + 2 * S;
        assert!(rate.charge(&mut tat, paid - S / 10, 5).is_err());
        for _ in 0..5 {
            rate.charge(&mut tat, paid, 1).unwrap();
        }
        assert!(rate.charge(&mut tat, paid, 1).is_err());
    }

    #[test]
    fn the_long_run_rate_holds_under_a_steady_hammer() {
        // 50/s with a burst of 10, hammered every millisecond for 10 s:
        // at most 10 + 50 × 10 pass.
        let rate = Rate::new(50, 10).unwrap();
        let mut tat = 0;
        let passed = (0..10_000u64)
            .filter(|ms| rate.charge(&mut tat, S + ms * 1_000_000, 1).is_ok())
            .count();
        assert!((500..=510).contains(&passed), "{passed}");
    }

    #[test]
    fn a_shared_rate_holds_across_threads() {
        // 1000 a second, burst 100: four threads at once get the burst,
        // and nothing more at the same instant.
        let shared = std::sync::Arc::new(SharedRate::new(Rate::new(1000, 100).unwrap()));
        let passed: u64 = (0..4)
            .map(|_| {
                let shared = shared.clone();
                std::thread::spawn(move || (0..100).filter(|_| shared.charge(S, 1).is_ok()).count())
            })
            .map(|t| t.join().unwrap_or(0) as u64)
            .sum();
        assert_eq!(passed, 100);
        // A cost weighs its share: 10 ms later, 10 units fit, 11 do not.
        assert!(shared.charge(S + S / 100, 11).is_err());
        shared.charge(S + S / 100, 10).unwrap();
    }
}
