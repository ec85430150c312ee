//! Wall-clock time, for what crosses hosts and restarts.
//!
//! The engine's clock ([`Millis`]) is monotonic and local: it means
//! nothing on another host, or in the next process. A ban's start, which
//! an [`Invalidation`](crate::Invalidation) carries from wherever it was
//! issued (another instance, a sidecar, a log read back after a restart),
//! is wall-clock time instead: milliseconds since the Unix epoch
//! ([`UnixMillis`]). The engine never reads a clock: whoever applies a batch
//! says what the wall clock reads, and [`remaining`] turns a start into
//! what is left of a life, which the engine counts from its own `now`.
//!
//! So a ban runs from its start wherever it is applied, however often: a
//! repeat or a replay gets only what is left of its life, never a new one.
//! The hosts' wall clocks need to agree (NTP); a start ahead of the local
//! wall clock by more than [`MAX_CLOCK_SKEW`] is taken as "now".

use std::time::{SystemTime, UNIX_EPOCH};

use crate::ttl::Millis;

/// Wall-clock milliseconds since the Unix epoch.
pub type UnixMillis = u64;

/// How far ahead of the local wall clock a start may be and still count
/// as given; beyond, it counts as "now". NTP keeps a fleet's hosts within
/// milliseconds of each other, so 2 s is far more than honest skew, and
/// small beside a ban's life (128 s by default): a ban issued on a host
/// whose clock runs ahead lasts here at most 2 s longer than its life, and
/// a host whose clock is hours ahead cannot make its bans last hours.
pub const MAX_CLOCK_SKEW: Millis = 2_000;

/// `at` in wall-clock milliseconds since the Unix epoch (0 before it).
pub fn unix_millis(at: SystemTime) -> UnixMillis {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| {
        UnixMillis::try_from(d.as_millis()).unwrap_or(UnixMillis::MAX)
    })
}

/// What is left, when the wall clock reads `wall`, of a life of `life` ms
/// that started at `started`; `None` when it is over. A start ahead of
/// `wall` by at most [`MAX_CLOCK_SKEW`] counts as given (the life runs up
/// to that much longer); a start further ahead counts as `wall`.
pub fn remaining(started: UnixMillis, life: Millis, wall: UnixMillis) -> Option<Millis> {
    let started = if started > wall.saturating_add(MAX_CLOCK_SKEW) {
        wall
    } else {
        started
    };
    let end = started.saturating_add(life);
    (end > wall).then(|| end - wall)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_life_runs_from_its_start() {
        assert_eq!(remaining(1_000, 500, 1_000), Some(500));
        assert_eq!(remaining(1_000, 500, 1_400), Some(100));
        assert_eq!(remaining(1_000, 500, 1_500), None, "over at its end");
        assert_eq!(remaining(1_000, 500, 9_000), None);
    }

    #[test]
    fn a_start_ahead_counts_as_given_within_the_skew_and_as_now_beyond() {
        let wall = 10_000;
        assert_eq!(
            remaining(wall + MAX_CLOCK_SKEW, 500, wall),
            Some(500 + MAX_CLOCK_SKEW)
        );
        assert_eq!(remaining(wall + MAX_CLOCK_SKEW + 1, 500, wall), Some(500));
        assert_eq!(remaining(u64::MAX, 500, wall), Some(500));
    }

    #[test]
    fn the_wall_clock_in_unix_milliseconds() {
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1_234_567);
        assert_eq!(unix_millis(at), 1_234_567);
        assert_eq!(
            unix_millis(UNIX_EPOCH - std::time::Duration::from_secs(1)),
            0
        );
    }
}
