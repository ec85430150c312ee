//! The checks on `eth_sendRawTransactionConditional` that come before
//! everything else the call costs, with screening on or off, cheapest
//! first: the switch (`conditional.enabled`), the condition's shape and
//! cost in state lookups (one pass over its JSON, no decoding:
//! `txgate_conditional`), then the target allow-list (the envelope decoded
//! for its `to`, never an ECDSA recovery). Only then does the screening
//! stack run, so a bad condition never costs a sender recovery.
//!
//! The codes and messages are op-geth's and op-txproxy's: a condition over
//! `conditional.max_cost` is -32005 "conditional cost, N, exceeded max: M"
//! (op-geth); a malformed one -32003 "failed conditional validation: …";
//! a target off the list -32003 "only 4337 Entrypoint contract support"
//! and a disabled method -32003 "endpoint disabled" (op-txproxy). A call
//! without its condition is -32602, as op-geth answers a missing argument.
//!
//! Last, a call that passed is charged its condition's cost against one
//! token bucket in lookups for the whole instance (`rate_per_sec`,
//! `burst`; GCRA on an atomic, shared by every worker): over it, HTTP 429
//! with `Retry-After` and -32005 "rate limited" (op-txproxy's code and
//! message), at once. op-txproxy waits for tokens instead; a proxy that
//! held calls open while it waited would run out of connections and
//! in-flight slots under exactly the load the limit is for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use alloy_primitives::Address;
use prometheus::{IntCounter, IntGauge};
use serde_json::value::RawValue;
use txgate_conditional::{Reason, Refusal as Invalid};
use txgate_config::ConditionalConfig;
use txgate_limits::{Rate, SharedRate};

use crate::ops::metrics::Metrics;

/// The method these checks are for.
pub const METHOD: &str = "eth_sendRawTransactionConditional";

/// Why a conditional call is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionRefusal {
    /// `conditional.enabled` is false.
    Disabled,
    /// No condition, or not `[raw, condition]`.
    Missing,
    /// The condition is malformed or costs too much.
    Condition(Invalid),
    /// The raw transaction does not decode (so its target is unknown).
    Undecodable(txgate_screen::DecodeError),
    /// The target is not on `conditional.targets` (or a creation).
    Target,
    /// Over the instance's rate of lookups.
    RateLimited {
        /// When the same cost would fit.
        retry_after_ms: u64,
    },
}

impl ConditionRefusal {
    /// The label it is counted under.
    pub fn as_str(&self) -> &'static str {
        REFUSALS[self.index()]
    }

    /// Its position in [`REFUSALS`].
    fn index(&self) -> usize {
        match self {
            ConditionRefusal::Disabled => 0,
            ConditionRefusal::Missing => 1,
            ConditionRefusal::Condition(Invalid::Invalid(_)) => 2,
            ConditionRefusal::Condition(Invalid::CostExceeded { .. }) => 3,
            ConditionRefusal::Undecodable(_) => 4,
            ConditionRefusal::Target => 5,
            ConditionRefusal::RateLimited { .. } => 6,
        }
    }
}

/// The checks, built once from `[conditional]`.
#[derive(Debug)]
pub struct Conditions {
    /// The switch, flipped by SIGHUP ([`Conditions::set_enabled`]).
    enabled: AtomicBool,
    max_cost: u64,
    /// Empty: any target.
    targets: Vec<Address>,
    /// Lookups a second for the instance (`None`: no limit).
    rate: Option<SharedRate>,
    /// Time zero of the rate's clock.
    epoch: Instant,
    counters: Counters,
    enabled_gauge: IntGauge,
    switches: IntCounter,
}

#[derive(Debug)]
struct Counters {
    accepted: IntCounter,
    would_refuse: IntCounter,
    refused: [IntCounter; 7],
    invalid: Vec<IntCounter>,
}

/// The labels of the refusals, by [`ConditionRefusal::index`]; with
/// `accepted` and `would_refuse`, the `result` label of
/// `txgate_conditional_total`.
pub const REFUSALS: [&str; 7] = [
    "disabled",
    "missing",
    "invalid",
    "cost_exceeded",
    "undecodable",
    "target",
    "rate_limited",
];

impl Conditions {
    /// The checks `config` asks for (validated: the targets parse).
    pub fn new(config: &ConditionalConfig, metrics: &Metrics) -> Conditions {
        let m = &metrics.conditional;
        Conditions {
            enabled: AtomicBool::new(config.enabled),
            max_cost: config.max_cost,
            targets: config
                .target_addresses()
                .unwrap_or_default()
                .into_iter()
                .map(Address::from)
                .collect(),
            rate: Rate::new(config.rate_per_sec, config.burst).map(SharedRate::new),
            epoch: Instant::now(),
            enabled_gauge: {
                m.enabled.set(i64::from(config.enabled));
                m.enabled.clone()
            },
            switches: m.switches.clone(),
            counters: Counters {
                accepted: m.calls.with_label_values(&["accepted"]),
                would_refuse: m.calls.with_label_values(&["would_refuse"]),
                refused: REFUSALS.map(|r| m.calls.with_label_values(&[r])),
                invalid: Reason::ALL
                    .iter()
                    .map(|r| m.invalid.with_label_values(&[r.as_str()]))
                    .collect(),
            },
        }
    }

    /// Checks a call's params (`[raw, condition]`) at `now`; counts the
    /// outcome. In monitor-only mode a refusal (other than the switch) is
    /// counted as `would_refuse` and `Ok` (nothing is charged to the rate
    /// then).
    pub fn check(
        &self,
        params: Option<&RawValue>,
        now: Instant,
        monitor_only: bool,
    ) -> Result<(), ConditionRefusal> {
        let c = &self.counters;
        let verdict = self.verdict(params).and_then(|cost| {
            if monitor_only {
                return Ok(());
            }
            self.charge(cost, now)
        });
        match verdict {
            Ok(()) => {
                c.accepted.inc();
                Ok(())
            }
            Err(refusal) => {
                if let ConditionRefusal::Condition(Invalid::Invalid(reason)) = &refusal {
                    c.invalid[*reason as usize].inc();
                }
                // Monitor-only watches the checks; the switch is the
                // operator's own decision and holds.
                if monitor_only && refusal != ConditionRefusal::Disabled {
                    c.would_refuse.inc();
                    return Ok(());
                }
                let index = refusal.index();
                c.refused[index].inc();
                Err(refusal)
            }
        }
    }

    /// Turns the method on or off for every worker at once (the operator's
    /// switch, read again on SIGHUP); whether it was on.
    pub fn set_enabled(&self, on: bool) -> bool {
        let was = self.enabled.swap(on, Ordering::Relaxed);
        self.enabled_gauge.set(i64::from(on));
        if was != on {
            self.switches.inc();
        }
        was
    }

    /// Whether the method is on.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Charges `cost` lookups to the instance's rate at `now`.
    fn charge(&self, cost: u64, now: Instant) -> Result<(), ConditionRefusal> {
        let Some(rate) = &self.rate else {
            return Ok(());
        };
        let nanos =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        // Costs are at most `MAX_MAX_COST`, far inside u32.
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        rate.charge(nanos, cost)
            .map_err(|wait| ConditionRefusal::RateLimited {
                retry_after_ms: wait.div_ceil(1_000_000),
            })
    }

    /// The checks that need no state; the condition's cost when it passes.
    fn verdict(&self, params: Option<&RawValue>) -> Result<u64, ConditionRefusal> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(ConditionRefusal::Disabled);
        }
        let (_, condition) = params
            .and_then(|p| serde_json::from_str::<(&RawValue, &RawValue)>(p.get()).ok())
            .ok_or(ConditionRefusal::Missing)?;
        let cost = txgate_conditional::check(condition.get(), self.max_cost)
            .map_err(ConditionRefusal::Condition)?
            .cost;
        if self.targets.is_empty() {
            return Ok(cost);
        }
        let raw = crate::screening::raw_param(params).ok_or(ConditionRefusal::Missing)?;
        let tx = txgate_screen::decode_hex(&raw)
            .and_then(|bytes| txgate_screen::decode(&bytes))
            .map_err(ConditionRefusal::Undecodable)?;
        match tx.to {
            Some(to) if self.targets.contains(&to) => Ok(cost),
            _ => Err(ConditionRefusal::Target),
        }
    }
}

#[cfg(test)]
mod tests;
