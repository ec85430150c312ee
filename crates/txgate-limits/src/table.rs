//! The bounded table of clients and what each owes.
//!
//! Sharded (a lock per shard, so workers rarely meet), each shard capped
//! at its share of `max_clients`. A client whose debt is paid (its TATs are
//! in the past) is exactly a client never seen, so it can be dropped
//! without changing any answer: that is the only eviction. When a shard is
//! full, it is swept of paid-up clients, at most once per time one of its
//! clients becomes paid up (so a flood of new addresses cannot make every
//! insert a scan). A shard full of clients still in debt takes newcomers
//! into one shared bucket with the same rates: an attacker rotating
//! addresses can neither grow the table nor push out a client that is
//! backed off, and what it gains by rotating is a share of one bucket.
//!
//! A table built with [`Table::fleet`] also keeps, per client, the time its
//! admitted calls added to its TATs since they were last reported
//! ([`Table::drain_unsynced`]), and takes the fleet's TATs back
//! ([`Table::merge_fleet`]): every instance decides alone, at once, and the
//! fleet's shared TAT catches it up a sync interval later (see
//! `txgate-proxy`'s `limits::sync`). A client with usage not yet reported
//! is never swept.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::gcra::{Nanos, Rate};
use crate::shards::Shards;

/// The rates that apply to one subject (an IP's, or its key tier's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Every call, batch elements each.
    pub calls: Option<Rate>,
    /// Raw-transaction submissions.
    pub txs: Option<Rate>,
}

impl Limits {
    /// Whether nothing is limited.
    pub fn is_unlimited(&self) -> bool {
        self.calls.is_none() && self.txs.is_none()
    }
}

/// Which rate refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The rate of all calls.
    Calls,
    /// The rate of raw-transaction submissions.
    Txs,
}

/// A refusal: which rate, and how long until the call would fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The rate that refused.
    pub which: Which,
    /// Time until the same charge would pass.
    pub wait: Nanos,
}

/// Where a charge landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The client's own entry.
    Own,
    /// The shared bucket of a full shard.
    Shared,
}

/// Time admitted calls added to a client's two TATs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spans {
    /// Added to the TAT of all calls.
    pub calls: Nanos,
    /// Added to the TAT of submissions.
    pub txs: Nanos,
}

impl Spans {
    fn is_zero(&self) -> bool {
        self.calls == 0 && self.txs == 0
    }
}

/// One client's usage since its last report to the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The client's table key.
    pub key: u128,
    /// What its admitted calls added to its TATs.
    pub spans: Spans,
}

#[derive(Debug, Clone, Copy, Default)]
struct Debt {
    calls: Nanos,
    txs: Nanos,
    /// Spans not yet reported to the fleet (fleet tables only).
    unsynced: Spans,
}

impl Debt {
    /// When this client is paid up.
    fn paid_at(&self) -> Nanos {
        self.calls.max(self.txs)
    }

    /// Charges both rates, or neither; what the charge added to each TAT.
    fn charge(
        &mut self,
        now: Nanos,
        limits: &Limits,
        calls: u32,
        txs: u32,
    ) -> Result<Spans, Refused> {
        let mut next = *self;
        if let Some(rate) = &limits.calls {
            rate.charge(&mut next.calls, now, calls)
                .map_err(|wait| Refused {
                    which: Which::Calls,
                    wait,
                })?;
        }
        if let Some(rate) = &limits.txs {
            rate.charge(&mut next.txs, now, txs)
                .map_err(|wait| Refused {
                    which: Which::Txs,
                    wait,
                })?;
        }
        // A TAT moves from max(TAT, now) to its new value.
        let spans = Spans {
            calls: next.calls - self.calls.max(now).min(next.calls),
            txs: next.txs - self.txs.max(now).min(next.txs),
        };
        *self = next;
        Ok(spans)
    }

    /// Whether the table may drop it at `now` without changing an answer
    /// or losing usage the fleet has not heard of.
    fn droppable(&self, now: Nanos) -> bool {
        self.paid_at() <= now && self.unsynced.is_zero()
    }
}

#[derive(Debug, Default)]
struct Shard {
    clients: HashMap<u128, Debt>,
    shared: Debt,
    /// No client can be paid up before this: no sweep before it.
    next_sweep: Nanos,
    /// Clients with unsynced spans, each once (fleet tables only).
    dirty: Vec<u128>,
}

impl Shard {
    /// Records `spans` as unsynced usage of the client `key`.
    fn note(&mut self, key: u128, spans: Spans) {
        if spans.is_zero() {
            return;
        }
        let Some(debt) = self.clients.get_mut(&key) else {
            return;
        };
        if debt.unsynced.is_zero() {
            self.dirty.push(key);
        }
        debt.unsynced.calls = debt.unsynced.calls.saturating_add(spans.calls);
        debt.unsynced.txs = debt.unsynced.txs.saturating_add(spans.txs);
    }
}

/// The table of tracked clients.
#[derive(Debug)]
pub struct Table {
    shards: Shards<Shard>,
    per_shard: usize,
    /// Keeps unsynced usage for the fleet.
    fleet: bool,
}

impl Table {
    /// A table of at most `max_clients` clients (rounded up to a whole
    /// number per shard; at least one per shard).
    pub fn new(max_clients: usize) -> Table {
        let (shards, per_shard) = Shards::for_clients(max_clients);
        Table {
            shards,
            per_shard,
            fleet: false,
        }
    }

    /// A table that also keeps each client's usage not yet reported to the
    /// fleet, for [`Table::drain_unsynced`]. Someone must drain it: a
    /// client with unsynced usage is never swept.
    pub fn fleet(max_clients: usize) -> Table {
        Table {
            fleet: true,
            ..Table::new(max_clients)
        }
    }

    /// The most clients it tracks.
    pub fn capacity(&self) -> usize {
        self.per_shard * self.shards.len()
    }

    /// Clients tracked now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.clients.len()))
            .sum()
    }

    /// Whether no client is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Charges `calls` calls and `txs` submissions to client `key` at
    /// `now` under `limits`: both or neither.
    pub fn charge(
        &self,
        key: u128,
        now: Nanos,
        limits: &Limits,
        calls: u32,
        txs: u32,
    ) -> (Slot, Result<(), Refused>) {
        let mut shard = self.shards.lock(key);
        if let Some(debt) = shard.clients.get_mut(&key) {
            let charged = debt.charge(now, limits, calls, txs);
            return (Slot::Own, self.noted(&mut shard, key, charged));
        }
        if shard.clients.len() >= self.per_shard && now >= shard.next_sweep {
            shard.clients.retain(|_, debt| !debt.droppable(now));
            shard.next_sweep = shard.clients.values().map(Debt::paid_at).min().unwrap_or(0);
        }
        if shard.clients.len() < self.per_shard {
            let mut debt = Debt::default();
            let charged = debt.charge(now, limits, calls, txs);
            // A newcomer refused at once (a cost beyond its burst on
            // arrival cannot happen: a new bucket is full) owes nothing.
            if charged.is_ok() && debt.paid_at() > now {
                shard.next_sweep = shard.next_sweep.min(debt.paid_at());
                shard.clients.insert(key, debt);
            }
            return (Slot::Own, self.noted(&mut shard, key, charged));
        }
        // The shared bucket is this instance's own: never reported.
        let charged = shard.shared.charge(now, limits, calls, txs);
        (Slot::Shared, charged.map(|_| ()))
    }

    fn noted(
        &self,
        shard: &mut Shard,
        key: u128,
        charged: Result<Spans, Refused>,
    ) -> Result<(), Refused> {
        let spans = charged?;
        if self.fleet {
            shard.note(key, spans);
        }
        Ok(())
    }

    /// Moves up to `max` clients' unsynced usage into `out` (appended) and
    /// zeroes it; the rest stays for the next call. Fleet tables only
    /// (a plain table never has any).
    pub fn drain_unsynced(&self, out: &mut Vec<Usage>, max: usize) {
        let start = out.len();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            while out.len() - start < max {
                let Some(key) = shard.dirty.pop() else {
                    break;
                };
                if let Some(debt) = shard.clients.get_mut(&key) {
                    let spans = std::mem::take(&mut debt.unsynced);
                    if !spans.is_zero() {
                        out.push(Usage { key, spans });
                    }
                }
            }
            if out.len() - start >= max {
                return;
            }
        }
    }

    /// Takes the fleet's view of client `key` at `now`: how far ahead of
    /// now its two TATs are across the fleet. A TAT only moves forward; a
    /// client this table no longer tracks is taken in when there is room
    /// (it is in debt somewhere in the fleet).
    pub fn merge_fleet(&self, key: u128, now: Nanos, ahead: Spans) {
        let mut shard = self.shards.lock(key);
        let calls = now.saturating_add(ahead.calls);
        let txs = now.saturating_add(ahead.txs);
        if let Some(debt) = shard.clients.get_mut(&key) {
            debt.calls = debt.calls.max(calls);
            debt.txs = debt.txs.max(txs);
            return;
        }
        if ahead.is_zero() || shard.clients.len() >= self.per_shard {
            return;
        }
        let debt = Debt {
            calls,
            txs,
            unsynced: Spans::default(),
        };
        shard.next_sweep = shard.next_sweep.min(debt.paid_at());
        shard.clients.insert(key, debt);
    }
}

/// The table key of a client address: an IPv4 address whole, an IPv6
/// address by its first `v6_prefix` bits (one subscriber usually holds a
/// whole /64, so limiting single IPv6 addresses limits nothing).
pub fn ip_key(ip: IpAddr, v6_prefix: u8) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => {
                let bits = u32::from(v6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                u128::from(v6) & mask
            }
        },
    }
}

#[cfg(test)]
mod tests;
