//! Hot calls: the (target, selector) pairs that drew an invalidation
//! lately.
//!
//! An attacker who had a call invalidated resubmits it with fresh
//! arguments, values or gas from fresh EOAs: every copy is a new
//! fingerprint, unknown to the denied set, and reaches the node until the
//! sidecar has judged enough of them to start the call's cooldown. A call
//! that drew an invalidation within the window is *hot*: the proxy asks the
//! sidecar about a new fingerprint on it (ShouldForward) before forwarding.
//! A call that drew none is *cold* and never asked about, so honest users
//! of other contracts pay nothing.
//!
//! Every invalidation that is applied (not stale) and names a target heats
//! its call until `now + window`; a later one pushes the end back. Bounded
//! like the other caches ([`TtlMap`]: a full map drops its oldest first) and
//! swept by the upkeep. A window of 0 tracks nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::assertion::CallKey;
use crate::ttl::{Millis, TtlMap};

/// See the module docs.
#[derive(Debug)]
pub struct HotCalls {
    window: Millis,
    calls: TtlMap<CallKey, ()>,
    /// The latest end of any call's heat: past it nothing is hot, and the
    /// request path answers "cold" without taking a shard's lock.
    latest: AtomicU64,
}

impl HotCalls {
    /// Calls stay hot `window` ms after their latest invalidation (0: none
    /// is ever hot); about `max_calls` held at most.
    pub fn new(window: Millis, max_calls: usize) -> HotCalls {
        HotCalls {
            window,
            calls: TtlMap::new(if window == 0 { 1 } else { max_calls }),
            latest: AtomicU64::new(0),
        }
    }

    /// Whether calls are tracked at all.
    pub fn enabled(&self) -> bool {
        self.window > 0
    }

    /// Heats every call of a batch at `now`. A run of the same call (a
    /// storm of fresh fingerprints on one function) costs one insert.
    pub fn heat(&self, calls: impl IntoIterator<Item = CallKey>, now: Millis) {
        if !self.enabled() {
            return;
        }
        let until = now.saturating_add(self.window);
        let mut items: Vec<(CallKey, (), Millis)> = Vec::new();
        for call in calls {
            if items.last().is_none_or(|(last, _, _)| *last != call) {
                items.push((call, (), until));
            }
        }
        if !items.is_empty() {
            self.calls.insert_batch(&items);
            self.latest.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Whether `call` drew an invalidation within the window before `now`.
    #[inline]
    pub fn is_hot(&self, call: &CallKey, now: Millis) -> bool {
        self.enabled()
            && now < self.latest.load(Ordering::Relaxed)
            && self.calls.get(call, now).is_some()
    }

    /// When `call` cools down, if it is hot at `now`.
    pub fn hot_until(&self, call: &CallKey, now: Millis) -> Option<Millis> {
        if !self.enabled() {
            return None;
        }
        self.calls.get_entry(call, now).map(|(until, ())| until)
    }

    /// Drops calls cooled down by `now`, `shards` shards at a time.
    pub fn sweep(&self, now: Millis, shards: usize) {
        self.calls.sweep(now, shards);
    }

    /// Calls held (cooled ones included until swept).
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::Address;

    use super::*;

    fn call(i: u8, selector: u8) -> CallKey {
        (Address::repeat_byte(i), [selector; 4])
    }

    #[test]
    fn a_call_is_hot_for_the_window_after_its_latest_invalidation() {
        let hot = HotCalls::new(1_000, 1024);
        hot.heat([call(1, 1)], 100);
        assert!(hot.is_hot(&call(1, 1), 100));
        assert!(hot.is_hot(&call(1, 1), 1_099));
        assert!(!hot.is_hot(&call(1, 1), 1_100));
        // Another selector on the same target, another target: cold.
        assert!(!hot.is_hot(&call(1, 2), 500));
        assert!(!hot.is_hot(&call(2, 1), 500));
        // A later invalidation pushes the end back.
        hot.heat([call(1, 1)], 900);
        assert!(hot.is_hot(&call(1, 1), 1_899));
        assert_eq!(hot.hot_until(&call(1, 1), 1_000), Some(1_900));
        // Swept once cooled.
        hot.sweep(2_000, usize::MAX);
        assert!(hot.is_empty());
    }

    #[test]
    fn a_storm_on_one_call_is_one_entry_and_others_in_the_batch_count_too() {
        let hot = HotCalls::new(1_000, 1024);
        let storm = (0..10_000).map(|i| {
            if i % 1000 == 999 {
                call(2, 2)
            } else {
                call(1, 1)
            }
        });
        hot.heat(storm, 0);
        assert_eq!(hot.len(), 2);
        assert!(hot.is_hot(&call(1, 1), 10));
        assert!(hot.is_hot(&call(2, 2), 10));
    }

    #[test]
    fn a_zero_window_tracks_nothing() {
        let hot = HotCalls::new(0, 1024);
        hot.heat([call(1, 1)], 0);
        assert!(!hot.is_hot(&call(1, 1), 0));
        assert_eq!(hot.hot_until(&call(1, 1), 0), None);
        assert!(hot.is_empty());
    }

    #[test]
    fn bounded_a_flood_of_calls_keeps_about_the_bound() {
        let hot = HotCalls::new(60_000, 256);
        for i in 0..100_000u32 {
            let target = Address::left_padding_from(&i.to_be_bytes());
            hot.heat([(target, [0; 4])], u64::from(i));
        }
        assert!(hot.len() <= 256 + 64, "{}", hot.len());
        let newest = Address::left_padding_from(&99_999u32.to_be_bytes());
        assert!(hot.is_hot(&(newest, [0; 4]), 100_000));
    }
}
