//! Pacing of refused submissions: how long to hold the answer to a
//! client that keeps sending what screening refuses.
//!
//! A client that sends refused transactions in a loop (the same denied
//! payload from fresh EOAs, fresh calldata on a call in cooldown) costs the
//! proxy a parse, a decode and a few hash probes per call, and each of those
//! calls takes a turn on the workers that honest calls wait for. A loop that
//! waits for each answer before it sends the next (a script, a bot, the
//! connections of a pool) is slowed by holding its refusals: after `after`
//! refusals in a row from one client, with no submission taken between
//! them, each further refusal is answered `initial` later, doubling per
//! refusal up to `max` ([`Pacing`]). A submission taken ends the streak
//! (the caller decides what counts: the proxy asks for the node's
//! result), and so does `window` without a refusal.
//!
//! Only answers that carry refusals are held (an answer of accepted calls
//! never is). The streaks are kept per client ([`Streaks`]: a bounded
//! table, so a client cannot escape by opening a new connection per call),
//! and only for clients refused within the window: a client never refused
//! has no entry, and while the table is empty (no client refused within
//! the window, once the owner's sweep has passed), an accepted submission
//! costs one atomic load.
//!
//! ```
//! use std::time::Duration;
//! use txgate_limits::Pacing;
//! let pacing = Pacing::new(8, Duration::from_millis(1), Duration::from_millis(64));
//! assert_eq!(pacing.hold(8), None);
//! assert_eq!(pacing.hold(9), Some(Duration::from_millis(1)));
//! assert_eq!(pacing.hold(10), Some(Duration::from_millis(2)));
//! assert_eq!(pacing.hold(1_000), Some(Duration::from_millis(64)));
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::gcra::Nanos;
use crate::shards::Shards;

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    after: u32,
    initial: Duration,
    max: Duration,
}

impl Pacing {
    /// Holds after `after` refusals in a row, from `initial` doubling to
    /// `max` (`initial` is raised to at least 1 µs, `max` to at least
    /// `initial`).
    pub fn new(after: u32, initial: Duration, max: Duration) -> Pacing {
        let initial = initial.max(Duration::from_micros(1));
        Pacing {
            after,
            initial,
            max: max.max(initial),
        }
    }

    /// How long to hold the answer to a client's `streak`-th refusal in a
    /// row (counting this one); `None`: answer at once.
    pub fn hold(&self, streak: u32) -> Option<Duration> {
        let over = streak.checked_sub(self.after)?.checked_sub(1)?;
        // 2^over, saturating: past 2^31 the cap has long been reached.
        let factor = 1u32.checked_shl(over.min(31)).unwrap_or(u32::MAX);
        Some(self.initial.saturating_mul(factor).min(self.max))
    }
}

/// One client's streak.
#[derive(Debug, Clone, Copy)]
struct Streak {
    refusals: u32,
    /// The last refusal.
    last: Nanos,
}

#[derive(Debug, Default)]
struct Shard {
    clients: HashMap<u128, Streak>,
    /// No streak can end by the window before this: no sweep before it.
    next_sweep: Nanos,
}

/// The clients' streaks of refusals, bounded (see the module docs).
#[derive(Debug)]
pub struct Streaks {
    shards: Shards<Shard>,
    per_shard: usize,
    window: Nanos,
    len: AtomicUsize,
    /// The shard [`Streaks::sweep_next`] sweeps next.
    cursor: AtomicUsize,
}

/// A refusal from a client the table had no room for (every shard entry a
/// streak younger than the window): not paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Untracked;

impl Streaks {
    /// At most `max_clients` streaks (rounded up to a whole number per
    /// shard), each forgotten `window` after its last refusal.
    pub fn new(max_clients: usize, window: Duration) -> Streaks {
        let (shards, per_shard) = Shards::for_clients(max_clients);
        Streaks {
            shards,
            per_shard,
            window: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            len: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
        }
    }

    /// Clients with a streak now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no client has a streak.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Client `key` was refused `n` more times at `now`: its streak after
    /// them.
    pub fn refused(&self, key: u128, n: u32, now: Nanos) -> Result<u32, Untracked> {
        let mut shard = self.shards.lock(key);
        let window = self.window;
        if let Some(streak) = shard.clients.get_mut(&key) {
            // A streak whose window passed starts over.
            let kept = if now.saturating_sub(streak.last) >= window {
                0
            } else {
                streak.refusals
            };
            *streak = Streak {
                refusals: kept.saturating_add(n),
                last: now,
            };
            return Ok(streak.refusals);
        }
        if shard.clients.len() >= self.per_shard && now >= shard.next_sweep {
            self.sweep(&mut shard, now);
        }
        if shard.clients.len() >= self.per_shard {
            return Err(Untracked);
        }
        shard.clients.insert(
            key,
            Streak {
                refusals: n,
                last: now,
            },
        );
        let end = now.saturating_add(window);
        if shard.clients.len() == 1 || end < shard.next_sweep {
            shard.next_sweep = end;
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(n)
    }

    /// Drops the shard's streaks whose window ended.
    fn sweep(&self, shard: &mut Shard, now: Nanos) {
        let window = self.window;
        let before = shard.clients.len();
        shard
            .clients
            .retain(|_, s| now.saturating_sub(s.last) < window);
        self.len
            .fetch_sub(before - shard.clients.len(), Ordering::Relaxed);
        shard.next_sweep = shard
            .clients
            .values()
            .map(|s| s.last.saturating_add(window))
            .min()
            .unwrap_or(0);
    }

    /// Sweeps the next shard in turn (the owner calls it on a timer: every
    /// shard once per `shards` calls), so that streaks whose window ended
    /// leave the table even when no refusal comes to make room.
    pub fn sweep_next(&self, now: Nanos) {
        let index = self.cursor.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        let mut shard = self.shards.lock_at(index);
        if !shard.clients.is_empty() && now >= shard.next_sweep {
            self.sweep(&mut shard, now);
        }
    }

    /// Shards in the table (one [`Streaks::sweep_next`] each).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Client `key` had a submission accepted: its streak ends.
    pub fn cleared(&self, key: u128) {
        if self.is_empty() {
            return;
        }
        if self.shards.lock(key).clients.remove(&key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nothing_held_up_to_the_threshold() {
        let p = Pacing::new(8, ms(1), ms(64));
        for streak in 0..=8 {
            assert_eq!(p.hold(streak), None, "streak {streak}");
        }
    }

    #[test]
    fn doubles_from_initial_to_the_cap() {
        let p = Pacing::new(8, ms(1), ms(64));
        let held: Vec<_> = (9..=17).map(|s| p.hold(s).unwrap()).collect();
        assert_eq!(
            held,
            [1, 2, 4, 8, 16, 32, 64, 64, 64].map(ms).to_vec(),
            "doubling, then capped"
        );
        assert_eq!(p.hold(u32::MAX), Some(ms(64)), "no overflow at the end");
    }

    #[test]
    fn zero_threshold_holds_from_the_first_refusal() {
        let p = Pacing::new(0, ms(5), ms(20));
        assert_eq!(p.hold(0), None, "no refusal, nothing to hold");
        assert_eq!(p.hold(1), Some(ms(5)));
        assert_eq!(p.hold(3), Some(ms(20)));
    }

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_streak_grows_per_client_and_ends_when_cleared() {
        let t = Streaks::new(1_000, Duration::from_secs(60));
        assert_eq!(t.refused(1, 1, 0), Ok(1));
        assert_eq!(t.refused(1, 3, MS), Ok(4), "a batch counts each refusal");
        assert_eq!(t.refused(2, 1, MS), Ok(1), "another client has its own");
        assert_eq!(t.len(), 2);
        t.cleared(1);
        assert_eq!(t.len(), 1);
        assert_eq!(t.refused(1, 1, 2 * MS), Ok(1), "started over");
        t.cleared(7);
        assert_eq!(
            t.len(),
            2,
            "clearing a client with no streak changes nothing"
        );
    }

    #[test]
    fn a_streak_ends_after_the_window_without_a_refusal() {
        let t = Streaks::new(1_000, Duration::from_millis(100));
        assert_eq!(t.refused(1, 5, 0), Ok(5));
        assert_eq!(t.refused(1, 1, 99 * MS), Ok(6), "inside the window");
        assert_eq!(t.refused(1, 1, 199 * MS), Ok(1), "the window passed");
    }

    #[test]
    fn a_full_table_makes_room_from_ended_streaks_only() {
        // Two streaks per shard (64 shards); three clients of one shard.
        let t = Streaks::new(2 * 64, Duration::from_millis(100));
        let same_shard: Vec<u128> = {
            let mut keys = Vec::new();
            let mut k = 0u128;
            while keys.len() < 3 {
                if t.shards.index(k) == 0 {
                    keys.push(k);
                }
                k += 1;
            }
            keys
        };
        let (a, b, c) = (same_shard[0], same_shard[1], same_shard[2]);
        assert_eq!(t.refused(a, 1, 0), Ok(1));
        assert_eq!(t.refused(b, 1, 50 * MS), Ok(1));
        // Full of live streaks: the newcomer is not tracked, and a flood
        // of newcomers cannot push out a client's streak.
        assert_eq!(t.refused(c, 1, 60 * MS), Err(Untracked));
        assert_eq!(t.refused(a, 1, 70 * MS), Ok(2), "a is kept");
        // a's last refusal was at 70 ms: b's streak ends first (150 ms).
        assert_eq!(
            t.refused(c, 1, 160 * MS),
            Ok(1),
            "b's ended streak made room"
        );
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.refused(b, 1, 161 * MS),
            Err(Untracked),
            "b starts over only with room"
        );
    }

    #[test]
    fn the_sweep_empties_the_table_of_ended_streaks() {
        let t = Streaks::new(1_000, Duration::from_millis(100));
        for key in 0..50u64 {
            t.refused(u128::from(key), 1, key * MS).unwrap();
        }
        assert_eq!(t.len(), 50);
        // At 125 ms the windows of the keys refused at 0..=25 ms ended.
        for _ in 0..t.shards() {
            t.sweep_next(125 * MS);
        }
        assert_eq!(t.len(), 24);
        for _ in 0..t.shards() {
            t.sweep_next(150 * MS);
        }
        assert!(t.is_empty(), "every window ended: {}", t.len());
        // Empty, an accepted submission touches no shard.
        t.cleared(30);
        assert!(t.is_empty());
    }

    #[test]
    fn degenerate_bounds_are_raised() {
        let p = Pacing::new(1, Duration::ZERO, Duration::ZERO);
        assert_eq!(p.hold(2), Some(Duration::from_micros(1)));
        let p = Pacing::new(1, ms(10), ms(2));
        assert_eq!(p.hold(5), Some(ms(10)), "the cap is at least the start");
    }
}
