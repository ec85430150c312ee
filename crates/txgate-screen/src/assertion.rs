//! The assertion table: versions, and cooldowns with a trickle.
//!
//! Every invalidation names an assertion and its version. A newer version
//! makes the bans of older versions dead (checked when a ban is read, swept
//! later), so a version bump lifts them at once without a scan. An
//! invalidation of an older version than the one known is stale and
//! ignored.
//!
//! Cooldown: once `distinct_fingerprints` new fingerprints fail under one
//! assertion within `window`, calls with the same target and selector as
//! those fingerprints are refused for `duration`, except one every
//! `trickle_interval` (about one per block), so that a fixed contract or a
//! changed assertion can be seen.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use alloy_primitives::{Address, B256};

use crate::denied::AssertionRef;
use crate::keyed::KeyState;
use crate::ttl::{Millis, lock};

/// Target and selector.
pub type CallKey = (Address, [u8; 4]);

/// Calls remembered per assertion for its cooldown.
const MAX_CALLS_PER_ASSERTION: usize = 16;

/// Cooldown settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CooldownSettings {
    /// Distinct failing fingerprints that start a cooldown (0: never).
    pub distinct_fingerprints: usize,
    /// Window in which they are counted, in ms.
    pub window: Millis,
    /// Length of a cooldown, in ms.
    pub duration: Millis,
    /// One call let through per this many ms during a cooldown.
    pub trickle_interval: Millis,
    /// Assertions tracked at most.
    pub max_assertions: usize,
}

#[derive(Debug)]
struct Entry {
    id: B256,
    version: u64,
    recent: VecDeque<Millis>,
    calls: Vec<CallKey>,
    cooldown_until: Millis,
}

#[derive(Debug, Clone, Copy)]
struct Cooled {
    until: Millis,
    next_trickle: Millis,
    assertion: u32,
}

/// What an invalidation's assertion is, against the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The known version (or a first sighting).
    Current(AssertionRef),
    /// A newer version: older bans are dead from now on.
    Bumped(AssertionRef),
    /// An older version than the one known: ignore.
    Stale,
    /// The table is full: ban without an assertion.
    Untracked,
}

/// A cooldown decision for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CooldownCheck {
    /// No cooldown applies.
    Clear,
    /// In cooldown, and this call is the trickle.
    Trickle(u32),
    /// In cooldown: refused; the next trickle slot opens in this many ms.
    Refuse {
        /// Assertion index.
        assertion: u32,
        /// Until the next trickle slot.
        retry_after: Millis,
    },
}

#[derive(Debug, Default)]
struct Table {
    by_id: HashMap<B256, u32, KeyState>,
    entries: Vec<Entry>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Assertions {
    settings: CooldownSettings,
    table: Mutex<Table>,
    cooled: Mutex<HashMap<CallKey, Cooled, KeyState>>,
    active: AtomicUsize,
}

fn version32(version: u64) -> u32 {
    u32::try_from(version).unwrap_or(u32::MAX)
}

impl Assertions {
    /// An empty table.
    pub fn new(settings: CooldownSettings) -> Assertions {
        Assertions {
            settings,
            table: Mutex::new(Table::default()),
            cooled: Mutex::new(HashMap::with_hasher(KeyState::new())),
            active: AtomicUsize::new(0),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        lock(&self.table)
    }

    fn cooled(&self) -> MutexGuard<'_, HashMap<CallKey, Cooled, KeyState>> {
        lock(&self.cooled)
    }

    /// Registers an invalidation's assertion and version.
    pub fn observe(&self, id: B256, version: u64) -> Observed {
        let mut table = self.table();
        if let Some(&index) = table.by_id.get(&id) {
            let entry = &mut table.entries[index as usize];
            if version < entry.version {
                return Observed::Stale;
            }
            let aref = AssertionRef {
                index,
                version: version32(version),
            };
            if version == entry.version {
                return Observed::Current(aref);
            }
            entry.version = version;
            entry.recent.clear();
            entry.calls.clear();
            entry.cooldown_until = 0;
            drop(table);
            let mut cooled = self.cooled();
            cooled.retain(|_, c| c.assertion != index);
            self.active.store(cooled.len(), Ordering::Relaxed);
            return Observed::Bumped(aref);
        }
        if table.entries.len() >= self.settings.max_assertions {
            return Observed::Untracked;
        }
        let index = table.entries.len() as u32;
        table.entries.push(Entry {
            id,
            version,
            recent: VecDeque::new(),
            calls: Vec::new(),
            cooldown_until: 0,
        });
        table.by_id.insert(id, index);
        Observed::Current(AssertionRef {
            index,
            version: version32(version),
        })
    }

    /// Whether a ban under `aref` still belongs to the current version.
    pub fn is_live(&self, aref: AssertionRef) -> bool {
        if !aref.is_some() {
            return true;
        }
        let table = self.table();
        table
            .entries
            .get(aref.index as usize)
            .is_some_and(|e| version32(e.version) == aref.version)
    }

    /// Id and version of the assertion a ban refers to, if the ban still
    /// belongs to its current version.
    pub fn describe(&self, aref: AssertionRef) -> Option<(B256, u64)> {
        let table = self.table();
        let entry = table.entries.get(aref.index as usize)?;
        (version32(entry.version) == aref.version).then_some((entry.id, entry.version))
    }

    /// The id of an assertion.
    pub fn id(&self, index: u32) -> Option<B256> {
        self.table().entries.get(index as usize).map(|e| e.id)
    }

    /// Counts a newly denied fingerprint of call `call` under `index`;
    /// returns true if that starts a cooldown.
    pub fn note_failure(&self, index: u32, call: CallKey, now: Millis) -> bool {
        let s = self.settings;
        if s.distinct_fingerprints == 0 {
            return false;
        }
        let mut table = self.table();
        let Some(entry) = table.entries.get_mut(index as usize) else {
            return false;
        };
        while entry.recent.front().is_some_and(|&t| t + s.window <= now) {
            entry.recent.pop_front();
        }
        if entry.recent.len() >= s.distinct_fingerprints {
            entry.recent.pop_front();
        }
        entry.recent.push_back(now);
        let new_call = !entry.calls.contains(&call);
        if new_call && entry.calls.len() < MAX_CALLS_PER_ASSERTION {
            entry.calls.push(call);
        }
        let in_cooldown = entry.cooldown_until > now;
        let starts = !in_cooldown && entry.recent.len() >= s.distinct_fingerprints;
        if starts {
            entry.cooldown_until = now + s.duration;
        }
        if !(starts || (in_cooldown && new_call)) {
            return false;
        }
        let (until, calls) = (entry.cooldown_until, entry.calls.clone());
        drop(table);
        let mut cooled = self.cooled();
        for call in calls {
            cooled.entry(call).or_insert(Cooled {
                until,
                next_trickle: now + s.trickle_interval,
                assertion: index,
            });
        }
        self.active.store(cooled.len(), Ordering::Relaxed);
        starts
    }

    /// The cooldown decision for a call to `call`.
    #[inline]
    pub fn check(&self, call: &CallKey, now: Millis) -> CooldownCheck {
        if self.active.load(Ordering::Relaxed) == 0 {
            return CooldownCheck::Clear;
        }
        let mut cooled = self.cooled();
        let Some(c) = cooled.get_mut(call) else {
            return CooldownCheck::Clear;
        };
        if c.until <= now {
            cooled.remove(call);
            self.active.store(cooled.len(), Ordering::Relaxed);
            return CooldownCheck::Clear;
        }
        if c.next_trickle <= now {
            c.next_trickle = now + self.settings.trickle_interval;
            return CooldownCheck::Trickle(c.assertion);
        }
        CooldownCheck::Refuse {
            assertion: c.assertion,
            retry_after: c.next_trickle - now,
        }
    }

    /// Ends finished cooldowns.
    pub fn sweep(&self, now: Millis) {
        let mut cooled = self.cooled();
        cooled.retain(|_, c| c.until > now);
        self.active.store(cooled.len(), Ordering::Relaxed);
    }

    /// Calls in cooldown.
    pub fn cooldowns(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Assertions known.
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }

    /// Whether no assertion is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CooldownSettings {
        CooldownSettings {
            distinct_fingerprints: 3,
            window: 10_000,
            duration: 60_000,
            trickle_interval: 2_000,
            max_assertions: 8,
        }
    }

    const ID: B256 = B256::repeat_byte(0xaa);
    const CALL: CallKey = (Address::repeat_byte(1), [0xde, 0xad, 0xbe, 0xef]);

    #[test]
    fn versions_current_bumped_stale() {
        let a = Assertions::new(settings());
        let Observed::Current(v1) = a.observe(ID, 1) else {
            panic!()
        };
        assert!(a.is_live(v1));
        assert_eq!(a.observe(ID, 1), Observed::Current(v1));
        let Observed::Bumped(v2) = a.observe(ID, 2) else {
            panic!()
        };
        assert!(!a.is_live(v1));
        assert!(a.is_live(v2));
        assert_eq!(a.observe(ID, 1), Observed::Stale);
        assert_eq!(a.id(v2.index), Some(ID));
    }

    #[test]
    fn cooldown_after_n_distinct_then_trickle_then_ends() {
        let a = Assertions::new(settings());
        let Observed::Current(r) = a.observe(ID, 1) else {
            panic!()
        };
        assert!(!a.note_failure(r.index, CALL, 0));
        assert!(!a.note_failure(r.index, CALL, 100));
        assert_eq!(a.check(&CALL, 100), CooldownCheck::Clear);
        assert!(a.note_failure(r.index, CALL, 200));
        assert_eq!(
            a.check(&CALL, 300),
            CooldownCheck::Refuse {
                assertion: r.index,
                retry_after: 1_900
            }
        );
        // Other calls are untouched.
        let other = (Address::repeat_byte(2), [0; 4]);
        assert_eq!(a.check(&other, 300), CooldownCheck::Clear);
        // One trickle per interval.
        assert_eq!(a.check(&CALL, 2_200), CooldownCheck::Trickle(r.index));
        assert!(matches!(
            a.check(&CALL, 2_300),
            CooldownCheck::Refuse { .. }
        ));
        assert_eq!(a.check(&CALL, 4_200), CooldownCheck::Trickle(r.index));
        // Over after the duration.
        assert_eq!(a.check(&CALL, 60_200), CooldownCheck::Clear);
        assert_eq!(a.cooldowns(), 0);
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let a = Assertions::new(settings());
        let Observed::Current(r) = a.observe(ID, 1) else {
            panic!()
        };
        assert!(!a.note_failure(r.index, CALL, 0));
        assert!(!a.note_failure(r.index, CALL, 6_000));
        assert!(!a.note_failure(r.index, CALL, 12_000));
        assert!(a.note_failure(r.index, CALL, 13_000));
    }

    #[test]
    fn version_bump_ends_the_cooldown() {
        let a = Assertions::new(settings());
        let Observed::Current(r) = a.observe(ID, 1) else {
            panic!()
        };
        for t in 0..3 {
            a.note_failure(r.index, CALL, t);
        }
        assert!(matches!(a.check(&CALL, 10), CooldownCheck::Refuse { .. }));
        assert!(matches!(a.observe(ID, 2), Observed::Bumped(_)));
        assert_eq!(a.check(&CALL, 10), CooldownCheck::Clear);
    }
}
