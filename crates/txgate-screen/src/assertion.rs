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
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use alloy_primitives::{Address, B256};

use crate::keyed::KeyState;
use crate::shard::lock;
use crate::ttl::Millis;

/// Target and selector.
pub type CallKey = (Address, [u8; 4]);

/// Calls remembered per assertion for its cooldown.
const MAX_CALLS_PER_ASSERTION: usize = 16;

/// The sweep scans the table for idle assertions at most this often (a
/// scan reads every slot; idleness is counted in minutes).
const IDLE_SCAN_INTERVAL: Millis = 1_000;

/// An assertion as the sidecar names it: its id and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AssertionKey {
    /// Assertion id.
    pub id: B256,
    /// Assertion version; a newer one retires the bans of older ones.
    pub version: u64,
}

impl AssertionKey {
    /// The version that marks a [call key](AssertionKey::of_call).
    pub const CALL_VERSION: u64 = u64::MAX;

    /// The key that failures naming no assertion (the Credible Layer
    /// sidecar's reports and results) are counted under for cooldowns:
    /// the call, `keccak256("txgate.call" ‖ target ‖ selector)`, at
    /// [`AssertionKey::CALL_VERSION`]. It never names a ban and is never
    /// reported as an assertion id.
    pub fn of_call(target: Address, selector: [u8; 4]) -> AssertionKey {
        let mut preimage = [0u8; 11 + 20 + 4];
        preimage[..11].copy_from_slice(b"txgate.call");
        preimage[11..31].copy_from_slice(target.as_slice());
        preimage[31..].copy_from_slice(&selector);
        AssertionKey {
            id: alloy_primitives::keccak256(preimage),
            version: AssertionKey::CALL_VERSION,
        }
    }

    /// Whether this is a call key rather than a sidecar's assertion.
    pub fn is_call(&self) -> bool {
        self.version == AssertionKey::CALL_VERSION
    }
}

/// A ban's link to the assertion table: the slot, and the stamp the slot
/// had when the ban was made. A version bump or an eviction gives the slot
/// a new stamp, so every ban of the old one reads as retired at once,
/// without a scan. Eight bytes; `Option<AssertionRef>` too (the stamp is
/// never zero), which is how a ban says "no assertion".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssertionRef {
    index: u32,
    stamp: NonZeroU32,
}

impl AssertionRef {
    /// A reference made up for tests of the structures that hold one.
    #[cfg(test)]
    pub(crate) fn for_test(index: u32, stamp: u32) -> Option<AssertionRef> {
        Some(AssertionRef {
            index,
            stamp: NonZeroU32::new(stamp)?,
        })
    }
}

/// Cooldown settings, and how long an idle assertion is kept.
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
    /// An assertion no invalidation named for this long, with no cooldown
    /// running, leaves the table (its slot goes to a new assertion). The
    /// engine keeps this above the longest a ban lives, so no ban still in
    /// force loses its assertion.
    pub idle: Millis,
}

#[derive(Debug)]
struct Entry {
    key: AssertionKey,
    stamp: NonZeroU32,
    last_seen: Millis,
    recent: VecDeque<Millis>,
    calls: Vec<CallKey>,
    cooldown_until: Millis,
}

#[derive(Debug, Clone, Copy)]
struct Cooled {
    until: Millis,
    next_trickle: Millis,
    assertion: AssertionRef,
}

/// What an invalidation's assertion is, against the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The known version (or a first sighting).
    Current(AssertionRef),
    /// A newer version: older bans are retired from now on.
    Bumped(AssertionRef),
    /// An older version than the one known: ignore.
    Stale,
    /// The table is full of assertions in use: ban without an assertion.
    Untracked,
}

/// A cooldown decision for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CooldownCheck {
    /// No cooldown applies.
    Clear,
    /// In cooldown, and this call is the trickle.
    Trickle(AssertionRef),
    /// In cooldown: refused; the next trickle slot opens in this many ms.
    Refuse {
        /// The assertion in cooldown.
        assertion: AssertionRef,
        /// Until the next trickle slot.
        retry_after: Millis,
    },
}

#[derive(Debug)]
struct Table {
    by_id: HashMap<B256, u32, KeyState>,
    /// Slots; `None` is free (its index is in `free`).
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// The last stamp handed out.
    stamp: u32,
    live: usize,
    /// Live entries that are call keys (failures naming no assertion).
    calls: usize,
}

impl Table {
    fn next_stamp(&mut self) -> NonZeroU32 {
        // Four billion registrations and bumps before a wrap; skip zero.
        self.stamp = self.stamp.wrapping_add(1).max(1);
        NonZeroU32::new(self.stamp).unwrap_or(NonZeroU32::MIN)
    }

    fn entry(&self, aref: AssertionRef) -> Option<&Entry> {
        self.entries
            .get(aref.index as usize)?
            .as_ref()
            .filter(|e| e.stamp == aref.stamp)
    }

    fn evictable(entry: &Entry, settings: &CooldownSettings, now: Millis) -> bool {
        entry.cooldown_until <= now && entry.last_seen.saturating_add(settings.idle) <= now
    }

    fn evict(&mut self, index: u32) {
        if let Some(entry) = self.entries[index as usize].take() {
            self.by_id.remove(&entry.key.id);
            self.free.push(index);
            self.live -= 1;
            if entry.key.is_call() {
                self.calls -= 1;
            }
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Assertions {
    settings: CooldownSettings,
    table: Mutex<Table>,
    cooled: Mutex<HashMap<CallKey, Cooled, KeyState>>,
    active: AtomicUsize,
    evicted: AtomicUsize,
    /// When the sweep last scanned for idle assertions (+1; 0: never).
    scanned: AtomicU64,
    /// When a full table last found none idle (+1; 0: never).
    full_scan: AtomicU64,
}

impl Assertions {
    /// An empty table.
    pub fn new(settings: CooldownSettings) -> Assertions {
        Assertions {
            settings,
            table: Mutex::new(Table {
                by_id: HashMap::with_hasher(KeyState::new()),
                entries: Vec::new(),
                free: Vec::new(),
                stamp: 0,
                live: 0,
                calls: 0,
            }),
            cooled: Mutex::new(HashMap::with_hasher(KeyState::new())),
            active: AtomicUsize::new(0),
            evicted: AtomicUsize::new(0),
            scanned: AtomicU64::new(0),
            full_scan: AtomicU64::new(0),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        lock(&self.table)
    }

    fn cooled(&self) -> MutexGuard<'_, HashMap<CallKey, Cooled, KeyState>> {
        lock(&self.cooled)
    }

    /// Registers an invalidation's assertion at `now`.
    pub fn observe(&self, key: AssertionKey, now: Millis) -> Observed {
        let mut table = self.table();
        if let Some(&index) = table.by_id.get(&key.id) {
            let slot = index as usize;
            let Some(entry) = table.entries[slot].as_mut() else {
                return Observed::Untracked;
            };
            if key.version < entry.key.version {
                return Observed::Stale;
            }
            entry.last_seen = entry.last_seen.max(now);
            if key.version == entry.key.version {
                return Observed::Current(AssertionRef {
                    index,
                    stamp: entry.stamp,
                });
            }
            let stamp = table.next_stamp();
            let Some(entry) = table.entries[slot].as_mut() else {
                return Observed::Untracked;
            };
            entry.key.version = key.version;
            entry.stamp = stamp;
            entry.recent.clear();
            entry.calls.clear();
            entry.cooldown_until = 0;
            // The bump lifts this assertion's cooldown. A call it held that
            // another assertion's running cooldown also names stays held,
            // by the one that ends last (the table's lock is held, then the
            // cooled map's, the order every path takes them in).
            let mut cooled = self.cooled();
            let mut lifted = Vec::new();
            cooled.retain(|call, c| {
                let held = c.assertion.index != index;
                if !held {
                    lifted.push((*call, c.next_trickle));
                }
                held
            });
            for (call, next_trickle) in lifted {
                let holder = table
                    .entries
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| Some((i, e.as_ref()?)))
                    .filter(|(i, e)| {
                        *i != slot && e.cooldown_until > now && e.calls.contains(&call)
                    })
                    .max_by_key(|(_, e)| e.cooldown_until);
                if let Some((i, e)) = holder {
                    cooled.insert(
                        call,
                        Cooled {
                            until: e.cooldown_until,
                            next_trickle,
                            assertion: AssertionRef {
                                index: i as u32,
                                stamp: e.stamp,
                            },
                        },
                    );
                }
            }
            self.active.store(cooled.len(), Ordering::Relaxed);
            return Observed::Bumped(AssertionRef { index, stamp });
        }
        // Call keys (whose selectors an attacker can vary through a proxy
        // contract) may take at most half the table, so they can never
        // crowd out the sidecar's own assertions.
        if key.is_call() && table.calls >= self.settings.max_assertions / 2 {
            return Observed::Untracked;
        }
        if table.live >= self.settings.max_assertions && !self.make_room(&mut table, now) {
            return Observed::Untracked;
        }
        let stamp = table.next_stamp();
        let entry = Entry {
            key,
            stamp,
            last_seen: now,
            recent: VecDeque::new(),
            calls: Vec::new(),
            cooldown_until: 0,
        };
        let index = match table.free.pop() {
            Some(index) => {
                table.entries[index as usize] = Some(entry);
                index
            }
            None => {
                table.entries.push(Some(entry));
                (table.entries.len() - 1) as u32
            }
        };
        table.by_id.insert(key.id, index);
        table.live += 1;
        if key.is_call() {
            table.calls += 1;
        }
        Observed::Current(AssertionRef { index, stamp })
    }

    /// A full table makes room for a new assertion: the one idle longest
    /// goes, if any is idle enough. A scan reads every slot under the lock
    /// the request path also takes, so a table found with none idle is not
    /// scanned again for `IDLE_SCAN_INTERVAL`: a flood of new ids into a
    /// busy table costs one scan a second, not one per id.
    fn make_room(&self, table: &mut Table, now: Millis) -> bool {
        let last = self.full_scan.load(Ordering::Relaxed);
        if last != 0 && now < (last - 1).saturating_add(IDLE_SCAN_INTERVAL) {
            return false;
        }
        if self.evict_one(table, now) {
            return true;
        }
        self.full_scan
            .store(now.saturating_add(1), Ordering::Relaxed);
        false
    }

    fn evict_one(&self, table: &mut Table, now: Millis) -> bool {
        let oldest = table
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| Table::evictable(e, &self.settings, now))
            .min_by_key(|(_, e)| e.last_seen)
            .map(|(i, _)| i as u32);
        match oldest {
            Some(index) => {
                table.evict(index);
                self.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The version the table holds for assertion `id`, if it holds it.
    pub fn version_of(&self, id: &B256) -> Option<u64> {
        let table = self.table();
        let index = *table.by_id.get(id)?;
        table.entries[index as usize]
            .as_ref()
            .map(|e| e.key.version)
    }

    /// Whether a ban under `aref` still belongs to its assertion's current
    /// version.
    pub fn is_live(&self, aref: AssertionRef) -> bool {
        self.table().entry(aref).is_some()
    }

    /// The assertion a ban refers to, if the ban still belongs to its
    /// current version.
    pub fn describe(&self, aref: AssertionRef) -> Option<AssertionKey> {
        self.table().entry(aref).map(|e| e.key)
    }

    /// Counts a newly denied fingerprint of call `call` under `aref`;
    /// returns true if that starts a cooldown.
    pub fn note_failure(&self, aref: AssertionRef, call: CallKey, now: Millis) -> bool {
        let s = self.settings;
        if s.distinct_fingerprints == 0 {
            return false;
        }
        let mut table = self.table();
        let Some(entry) = table
            .entries
            .get_mut(aref.index as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if entry.stamp != aref.stamp {
            return false;
        }
        while entry.recent.front().is_some_and(|&t| t + s.window <= now) {
            entry.recent.pop_front();
        }
        if entry.recent.len() >= s.distinct_fingerprints {
            entry.recent.pop_front();
        }
        entry.recent.push_back(now);
        // A call the list cannot take is not remembered, so not cooled.
        let joins = !entry.calls.contains(&call) && entry.calls.len() < MAX_CALLS_PER_ASSERTION;
        if joins {
            entry.calls.push(call);
        }
        let in_cooldown = entry.cooldown_until > now;
        let starts = !in_cooldown && entry.recent.len() >= s.distinct_fingerprints;
        // A start cools every call the assertion's failures named; during
        // a cooldown only a call that joins it is added (the others are
        // there already: adding them again cost a lookup each per failure).
        let calls: &[CallKey] = if starts {
            entry.cooldown_until = now + s.duration;
            &entry.calls
        } else if in_cooldown && joins {
            std::slice::from_ref(&call)
        } else {
            return false;
        };
        let fresh = Cooled {
            until: entry.cooldown_until,
            next_trickle: now + s.trickle_interval,
            assertion: aref,
        };
        // The table stays locked while the cooled map is (the order a
        // version bump takes them in too), so the calls are read in place.
        let mut cooled = self.cooled();
        for &call in calls {
            // An entry whose cooldown ended unseen (no check or sweep
            // since) is replaced. A live one keeps its trickle slot and
            // takes the later end (another assertion's cooldown may hold
            // the call for less long).
            cooled
                .entry(call)
                .and_modify(|c| {
                    if c.until <= now {
                        *c = fresh;
                    } else if c.until < fresh.until {
                        c.until = fresh.until;
                        c.assertion = aref;
                    }
                })
                .or_insert(fresh);
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

    /// The cooldown decision [`Assertions::check`] would make, without
    /// making it: an open trickle slot reads as [`CooldownCheck::Trickle`]
    /// and stays open. For questions that must not change what the
    /// request path decides next (the pool's `VerifyTransaction`).
    #[inline]
    pub fn peek(&self, call: &CallKey, now: Millis) -> CooldownCheck {
        if self.active.load(Ordering::Relaxed) == 0 {
            return CooldownCheck::Clear;
        }
        let cooled = self.cooled();
        match cooled.get(call) {
            None => CooldownCheck::Clear,
            Some(c) if c.until <= now => CooldownCheck::Clear,
            Some(c) if c.next_trickle <= now => CooldownCheck::Trickle(c.assertion),
            Some(c) => CooldownCheck::Refuse {
                assertion: c.assertion,
                retry_after: c.next_trickle - now,
            },
        }
    }

    /// The open trickle slots of every call of `calls` taken at once, or
    /// none: under one lock, each call is checked as [`Assertions::check`]
    /// would, and only if none is refused are the slots taken. A call
    /// listed twice needs two slots, so its second listing is refused (one
    /// call per trickle interval). `Err` names the first refused listing
    /// (its position in `calls`), the assertion in cooldown and the time
    /// until the call's next slot.
    pub fn take_trickles(
        &self,
        calls: &[CallKey],
        now: Millis,
    ) -> Result<Vec<usize>, (usize, AssertionRef, Millis)> {
        if calls.is_empty() || self.active.load(Ordering::Relaxed) == 0 {
            return Ok(Vec::new());
        }
        let mut cooled = self.cooled();
        for (i, call) in calls.iter().enumerate() {
            let Some(c) = cooled.get(call).filter(|c| c.until > now) else {
                continue;
            };
            let retry_after = if calls[..i].contains(call) {
                self.settings.trickle_interval
            } else if c.next_trickle > now {
                c.next_trickle - now
            } else {
                continue;
            };
            return Err((i, c.assertion, retry_after));
        }
        let mut taken = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if let Some(c) = cooled.get_mut(call).filter(|c| c.until > now) {
                c.next_trickle = now + self.settings.trickle_interval;
                taken.push(i);
            }
        }
        Ok(taken)
    }

    /// Ends finished cooldowns and evicts idle assertions; returns how
    /// many assertions left the table.
    pub fn sweep(&self, now: Millis) -> usize {
        {
            let mut cooled = self.cooled();
            cooled.retain(|_, c| c.until > now);
            self.active.store(cooled.len(), Ordering::Relaxed);
        }
        let last = self.scanned.load(Ordering::Relaxed);
        if last != 0 && now < (last - 1).saturating_add(IDLE_SCAN_INTERVAL) {
            return 0;
        }
        self.scanned.store(now.saturating_add(1), Ordering::Relaxed);
        let mut table = self.table();
        let idle: Vec<u32> = table
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| Table::evictable(e, &self.settings, now))
            .map(|(i, _)| i as u32)
            .collect();
        for &index in &idle {
            table.evict(index);
        }
        self.evicted.fetch_add(idle.len(), Ordering::Relaxed);
        idle.len()
    }

    /// Calls in cooldown.
    pub fn cooldowns(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Assertions evicted so far (idle, to make room or by the sweep).
    pub fn evicted(&self) -> usize {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Assertions known.
    pub fn len(&self) -> usize {
        self.table().live
    }

    /// Whether no assertion is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
