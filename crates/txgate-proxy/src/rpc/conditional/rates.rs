//! The rates conditional calls are charged against, in state lookups (a
//! call costs its condition's cost): one bucket for the instance (for the
//! fleet when Redis is configured), and one per signed caller when
//! `conditional.caller_rate_per_sec` is set.
//!
//! Each is a GCRA bucket in a [`Table`] (the per-client limits' table), so
//! the fleet sync (`limits::sync`) reports what this instance admitted and
//! takes the fleet's debt back, off the call's path: every instance
//! decides alone, at once, and a fleet over its rate is refused everywhere
//! one sync later. While Redis is configured but not up, each instance
//! enforces `redis.local_share` of each rate alone.
//!
//! A caller is charged before the instance: a caller over its own rate is
//! refused without spending the instance's budget; a call the instance's
//! bucket then refuses has spent its caller's (the caller is asked to back
//! off either way).

use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::Address;
use txgate_config::{ConditionalConfig, RedisConfig};
use txgate_limits::{Limits, Nanos, Spans, Table, Usage};

use crate::limits::sync::Kind;
use crate::limits::sync::{FleetLink, Synced};
use crate::metrics::Metrics;
use prometheus::IntGauge;

/// The instance's (or fleet's) bucket's key in its table.
const ALL: u128 = 0;

/// Which rate refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The instance's (or fleet's) rate.
    All,
    /// The signed caller's own rate.
    Caller,
}

/// The buckets.
#[derive(Debug)]
pub struct Rates {
    all: Table,
    all_limits: Limits,
    all_local: Limits,
    callers: Table,
    caller_limits: Limits,
    caller_local: Limits,
    /// The fleet's link; while it is not up, the local shares apply.
    fleet: Option<Arc<FleetLink>>,
    epoch: Instant,
    /// `txgate_limit_tracked_clients{kind="caller"}`.
    tracked: IntGauge,
}

/// `per_sec` lookups a second with bursts of `burst`, times `share` (the
/// per-client limits' rounding).
fn lookups(per_sec: u32, burst: u32, share: f64) -> Limits {
    Limits {
        calls: crate::limits::clients::rate(per_sec, burst, share),
        txs: None,
    }
}

/// A caller's key: the same on every instance.
fn caller_key(caller: &Address) -> u128 {
    let mut hasher = alloy_primitives::Keccak256::new();
    hasher.update(b"txgate.conditional-caller\0");
    hasher.update(caller);
    let digest = hasher.finalize();
    u128::from_be_bytes(digest[..16].try_into().unwrap_or([0; 16]))
}

impl Rates {
    /// From the validated `[conditional]` and `[redis]`; `fleet` is the
    /// link to Redis when one is configured (the tables then keep their
    /// usage for the sync). `None` when no rate is set.
    pub fn new(
        config: &ConditionalConfig,
        redis: &RedisConfig,
        fleet: Option<Arc<FleetLink>>,
        metrics: &Metrics,
    ) -> Option<Rates> {
        let all_limits = lookups(config.rate_per_sec, config.burst, 1.0);
        let caller_limits = lookups(config.caller_rate_per_sec, config.caller_burst, 1.0);
        if all_limits.is_unlimited() && caller_limits.is_unlimited() {
            return None;
        }
        let table = |max| match fleet {
            Some(_) => Table::fleet(max),
            None => Table::new(max),
        };
        Some(Rates {
            all: table(1),
            all_limits,
            all_local: lookups(config.rate_per_sec, config.burst, redis.local_share),
            callers: table(config.max_callers),
            caller_limits,
            caller_local: lookups(
                config.caller_rate_per_sec,
                config.caller_burst,
                redis.local_share,
            ),
            fleet,
            epoch: Instant::now(),
            tracked: metrics
                .limits
                .tracked
                .with_label_values(&[Kind::Caller.as_str()]),
        })
    }

    /// Charges `cost` lookups at `now` to `caller` (when signed) and then
    /// to the instance; the refusing rate and the wait until the same cost
    /// would fit.
    pub fn charge(
        &self,
        caller: Option<&Address>,
        cost: u32,
        now: Instant,
    ) -> Result<(), (Scope, Nanos)> {
        let now = self.nanos(now);
        let local = self.fleet.as_ref().is_some_and(|link| !link.up());
        if let Some(caller) = caller {
            let limits = if local {
                &self.caller_local
            } else {
                &self.caller_limits
            };
            if !limits.is_unlimited() {
                let (_, charged) = self
                    .callers
                    .charge(caller_key(caller), now, limits, cost, 0);
                charged.map_err(|r| (Scope::Caller, r.wait))?;
            }
        }
        let limits = if local {
            &self.all_local
        } else {
            &self.all_limits
        };
        let (_, charged) = self.all.charge(ALL, now, limits, cost, 0);
        charged.map_err(|r| (Scope::All, r.wait))
    }

    /// Callers tracked now.
    pub fn tracked_callers(&self) -> usize {
        self.callers.len()
    }

    fn nanos(&self, at: Instant) -> Nanos {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Synced for Rates {
    fn now(&self) -> Nanos {
        self.nanos(Instant::now())
    }

    fn drain_unsynced(&self, out: &mut Vec<(Kind, Usage)>, max: usize) {
        let tables = [
            (Kind::Conditional, &self.all),
            (Kind::Caller, &self.callers),
        ];
        crate::limits::sync::drain_tables(&tables, out, max);
    }

    fn merge_fleet(&self, kind: Kind, key: u128, now: Nanos, ahead: Spans) {
        match kind {
            Kind::Conditional => self.all.merge_fleet(key, now, ahead),
            Kind::Caller => self.callers.merge_fleet(key, now, ahead),
            Kind::Ip | Kind::Key => {}
        }
    }

    fn update_gauges(&self) {
        self.tracked.set(self.callers.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(rate: u32, caller_rate: u32) -> ConditionalConfig {
        ConditionalConfig {
            rate_per_sec: rate,
            burst: rate,
            caller_rate_per_sec: caller_rate,
            caller_burst: caller_rate,
            ..ConditionalConfig::default()
        }
    }

    #[test]
    fn no_rate_no_buckets() {
        assert!(
            Rates::new(
                &config(0, 0),
                &RedisConfig::default(),
                None,
                &Metrics::new()
            )
            .is_none()
        );
    }

    #[test]
    fn a_caller_is_refused_on_its_own_rate_before_the_instance_pays() {
        let rates = Rates::new(
            &config(1000, 100),
            &RedisConfig::default(),
            None,
            &Metrics::new(),
        )
        .unwrap();
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let t = Instant::now();
        assert_eq!(rates.charge(Some(&a), 100, t), Ok(()));
        assert_eq!(rates.charge(Some(&a), 1, t).unwrap_err().0, Scope::Caller);
        // b has its own bucket; unsigned calls only the instance's.
        assert_eq!(rates.charge(Some(&b), 100, t), Ok(()));
        assert_eq!(rates.charge(None, 800, t), Ok(()));
        let (scope, wait) = rates.charge(None, 1, t).unwrap_err();
        assert_eq!(scope, Scope::All);
        assert_eq!(wait, 1_000_000);
        // A second later the instance has 1000 again, a caller 100.
        let later = t + Duration::from_secs(1);
        assert_eq!(rates.charge(Some(&a), 100, later), Ok(()));
        assert_eq!(rates.charge(None, 900, later), Ok(()));
        assert_eq!(rates.tracked_callers(), 2);
        rates.update_gauges();
        assert_eq!(rates.tracked.get(), 2);
    }

    #[test]
    fn fleet_usage_is_reported_and_the_fleets_debt_taken_back() {
        let link = Arc::new(FleetLink::default());
        let rates = Rates::new(
            &config(1000, 0),
            &RedisConfig::default(),
            Some(link),
            &Metrics::new(),
        )
        .unwrap();
        let t = Instant::now();
        // Link not up: the local share (a quarter by default) applies.
        let share = RedisConfig::default().local_share;
        let local = (1000.0 * share).ceil() as u32;
        assert_eq!(rates.charge(None, local, t), Ok(()));
        assert!(rates.charge(None, 1, t).is_err());
        let mut out = Vec::new();
        rates.drain_unsynced(&mut out, 10);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Kind::Conditional);
        // A local charge spans cost / local rate.
        assert!(out[0].1.spans.calls > 0);
        // The fleet says the bucket is 5 s in debt: refused well after
        // the local debt is paid.
        let now = rates.nanos(t);
        rates.merge_fleet(
            Kind::Conditional,
            ALL,
            now,
            Spans {
                calls: 5_000_000_000,
                txs: 0,
            },
        );
        assert!(rates.charge(None, 1, t + Duration::from_secs(4)).is_err());
    }
}
