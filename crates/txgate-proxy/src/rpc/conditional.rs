//! The checks on `eth_sendRawTransactionConditional` that come before
//! everything else the call costs, with screening on or off, cheapest
//! first, each a layer of one tower stack ([`gates`]): the switch (`conditional.enabled`), the condition's shape and
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
//! Then the caller (op-txproxy's authentication, `caller`): an
//! `X-Optimism-Signature` header is verified when present (one ECDSA
//! recovery per request, however many conditional calls its batch holds);
//! a bad one is -32003 "invalid authentication", whatever is wrong with it
//! (the reason is counted, not told). With `conditional.callers` set, a
//! call without the header is -32003 "missing authentication" and a signer
//! off the list -32003 "caller not allowed"; with no list, unsigned callers
//! pass and signed and unsigned calls are counted apart.
//!
//! Last, a call that passed is charged its condition's cost in lookups
//! ([`rates`]): to its signed caller's bucket when
//! `conditional.caller_rate_per_sec` is set, then to the instance's (the
//! fleet's, with Redis). Over either, HTTP 429 with `Retry-After` and
//! -32005 "rate limited" (op-txproxy's code and message), at once.
//! op-txproxy waits for tokens instead; a proxy that held calls open while
//! it waited would run out of connections and in-flight slots under
//! exactly the load the limit is for.

pub mod gates;
mod rates;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use alloy_primitives::Address;
use prometheus::{IntCounter, IntGauge};
use serde_json::value::RawValue;
use txgate_conditional::Refusal as Invalid;
use txgate_conditional::caller::CallerError;
use txgate_config::ConditionalConfig;

use crate::metrics::Metrics;
use crate::metrics::conditional::{ConditionalCounters, REFUSALS};
pub use rates::{Rates, Scope};

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
    /// No `X-Optimism-Signature` while `conditional.callers` is set.
    Unauthenticated,
    /// An `X-Optimism-Signature` that does not verify.
    BadAuthentication(CallerError),
    /// A verified signer not on `conditional.callers`.
    CallerDenied,
    /// Over a rate of lookups.
    RateLimited {
        /// The instance's (fleet's) rate or the caller's.
        scope: Scope,
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
            ConditionRefusal::Unauthenticated => 6,
            ConditionRefusal::BadAuthentication(_) => 7,
            ConditionRefusal::CallerDenied => 8,
            ConditionRefusal::RateLimited {
                scope: Scope::All, ..
            } => 9,
            ConditionRefusal::RateLimited {
                scope: Scope::Caller,
                ..
            } => 10,
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
    /// Empty: any caller, signed or not.
    callers: HashSet<Address>,
    /// The rates of lookups (`None`: no limit).
    rates: Option<Arc<Rates>>,
    /// The checks, as a tower stack.
    gates: gates::Gates,
    counters: ConditionalCounters,
    enabled_gauge: IntGauge,
    switches: IntCounter,
}

/// What the caller check needs from a request: its signature header and
/// the body it signs. Verified at most once, when a conditional call of the
/// request first needs it (a batch of them costs one recovery; a request
/// without one costs none).
#[derive(Debug)]
pub struct Signed<'a> {
    header: Option<&'a [u8]>,
    body: &'a [u8],
    verified: OnceLock<Result<Address, CallerError>>,
}

impl<'a> Signed<'a> {
    /// The request's `X-Optimism-Signature` (if any) over `body`.
    pub fn new(header: Option<&'a [u8]>, body: &'a [u8]) -> Signed<'a> {
        Signed {
            header,
            body,
            verified: OnceLock::new(),
        }
    }

    /// `None` without a header, else what verifying it says.
    fn caller(&self) -> Option<Result<Address, CallerError>> {
        let header = self.header?;
        Some(
            *self
                .verified
                .get_or_init(|| txgate_conditional::caller::verify(header, self.body)),
        )
    }
}

impl Conditions {
    /// The checks `config` asks for, with its `targets` and `callers`
    /// parsed, and `rates` built from it ([`Rates::new`]).
    pub fn new(
        config: &ConditionalConfig,
        targets: &[[u8; 20]],
        callers: &[[u8; 20]],
        rates: Option<Arc<Rates>>,
        metrics: &Metrics,
    ) -> Conditions {
        let m = &metrics.conditional;
        Conditions {
            enabled: AtomicBool::new(config.enabled),
            max_cost: config.max_cost,
            targets: targets.iter().copied().map(Address::from).collect(),
            callers: callers.iter().copied().map(Address::from).collect(),
            rates,
            gates: gates::gates(),
            enabled_gauge: {
                m.enabled.set(i64::from(config.enabled));
                m.enabled.clone()
            },
            switches: m.switches.clone(),
            counters: m.counters(),
        }
    }

    /// Checks a call's params (`[raw, condition]`) at `now`; counts the
    /// outcome. In monitor-only mode a refusal (other than the switch) is
    /// counted as `would_refuse` and `Ok` (nothing is charged to the rate
    /// then).
    pub fn check(
        &self,
        params: Option<&RawValue>,
        signed: &Signed<'_>,
        now: Instant,
        monitor_only: bool,
    ) -> Result<(), ConditionRefusal> {
        let c = &self.counters;
        let pending = gates::Pending {
            conditions: self,
            params,
            signed,
            now,
            monitor_only,
            cost: 0,
            caller: None,
        };
        match gates::run(&self.gates, pending) {
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

    /// The rates, for the fleet sync.
    pub fn rates(&self) -> Option<Arc<Rates>> {
        self.rates.clone()
    }

    /// The verified caller (`None`: unsigned and allowed), counted.
    pub(crate) fn caller(&self, signed: &Signed<'_>) -> Result<Option<Address>, ConditionRefusal> {
        let c = &self.counters;
        let caller = match signed.caller() {
            None if self.callers.is_empty() => None,
            None => return Err(ConditionRefusal::Unauthenticated),
            Some(Err(e)) => {
                c.auth_failures[e as usize].inc();
                return Err(ConditionRefusal::BadAuthentication(e));
            }
            Some(Ok(address)) => {
                if !self.callers.is_empty() && !self.callers.contains(&address) {
                    return Err(ConditionRefusal::CallerDenied);
                }
                Some(address)
            }
        };
        c.callers[usize::from(caller.is_some())].inc();
        Ok(caller)
    }

    /// Charges `cost` lookups to the rates at `now`.
    pub(crate) fn charge(
        &self,
        caller: Option<&Address>,
        cost: u64,
        now: Instant,
    ) -> Result<(), ConditionRefusal> {
        let Some(rates) = &self.rates else {
            return Ok(());
        };
        // Costs are at most `MAX_MAX_COST`, far inside u32.
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        rates
            .charge(caller, cost, now)
            .map_err(|(scope, wait)| ConditionRefusal::RateLimited {
                scope,
                retry_after_ms: wait.div_ceil(1_000_000),
            })
    }

    /// The cost of the call's condition (`params` is `[raw, condition]`)
    /// when it is well formed and within `max_cost`.
    pub(crate) fn condition_cost(
        &self,
        params: Option<&RawValue>,
    ) -> Result<u64, ConditionRefusal> {
        let (_, condition) = params
            .and_then(|p| serde_json::from_str::<(&RawValue, &RawValue)>(p.get()).ok())
            .ok_or(ConditionRefusal::Missing)?;
        Ok(txgate_conditional::check(condition.get(), self.max_cost)
            .map_err(ConditionRefusal::Condition)?
            .cost)
    }

    /// Whether the raw transaction's target is on the list (any, when the
    /// list is empty); the envelope is decoded for `to`, never recovered.
    pub(crate) fn check_target(&self, params: Option<&RawValue>) -> Result<(), ConditionRefusal> {
        if self.targets.is_empty() {
            return Ok(());
        }
        let raw = crate::screening::raw_param(params).ok_or(ConditionRefusal::Missing)?;
        let tx = txgate_screen::decode_hex(&raw)
            .and_then(|bytes| txgate_screen::decode(&bytes))
            .map_err(ConditionRefusal::Undecodable)?;
        match tx.to {
            Some(to) if self.targets.contains(&to) => Ok(()),
            _ => Err(ConditionRefusal::Target),
        }
    }
}

#[cfg(test)]
mod tests;
