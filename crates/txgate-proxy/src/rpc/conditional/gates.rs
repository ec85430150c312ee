//! The checks of a conditional call as a tower stack, one layer per gate,
//! cheapest first, the first refusal ending the call without touching the
//! layers below it (the screening stack's pattern: `screening::Check`):
//!
//! ```text
//! Gate<Switch>     conditional.enabled (SIGHUP, admin)    → -32003 "endpoint disabled"
//! Gate<Condition>  [raw, condition]; shape and cost, one  → -32602, -32003, -32005
//!                  pass over the JSON, no decoding
//! Gate<Target>     envelope decoded for `to` (no ECDSA)   → -32003 "only 4337 Entrypoint…"
//! Gate<Caller>     X-Optimism-Signature (one ECDSA per    → -32003 "invalid/missing
//!                  request), conditional.callers             authentication", "caller not allowed"
//! Gate<Charge>     the caller's and the instance's (or    → 429, -32005 "rate limited"
//!                  fleet's) lookups
//! Passed
//! ```
//!
//! The screening stack runs after it (a conditional call is also a
//! screened submission), so a bad condition, target or caller never costs
//! a sender recovery. The gates are a stack of their own, in front of the
//! screening one rather than layers inside it, because they run with
//! screening off too (the screening stack exists only when it is on).
//! Every gate is synchronous: each future is ready at once.

use std::future::{Ready, ready};
use std::marker::PhantomData;
use std::task::{Context, Poll};
use std::time::Instant;

use alloy_primitives::Address;
use serde_json::value::RawValue;
use tower::{Layer, Service};

use super::{ConditionRefusal, Conditions, Signed};

/// One conditional call travelling down the gates, and what they learned.
#[derive(Debug)]
pub struct Pending<'a> {
    /// The checks' settings and state.
    pub conditions: &'a Conditions,
    /// The call's params.
    pub params: Option<&'a RawValue>,
    /// Its request's signature header over its body.
    pub signed: &'a Signed<'a>,
    /// The decision time.
    pub now: Instant,
    /// Count what would be refused and forward it.
    pub monitor_only: bool,
    /// The condition's cost in lookups (from [`Condition`]).
    pub cost: u64,
    /// The verified caller (from [`Caller`]; `None`: unsigned).
    pub caller: Option<Address>,
}

/// One gate.
pub trait Gate {
    /// A short name, for docs and traces.
    const NAME: &'static str;

    /// Checks the call, and adds what it learns to it.
    fn check(pending: &mut Pending<'_>) -> Result<(), ConditionRefusal>;
}

/// The switch.
#[derive(Debug)]
pub enum Switch {}

impl Gate for Switch {
    const NAME: &'static str = "switch";
    fn check(p: &mut Pending<'_>) -> Result<(), ConditionRefusal> {
        if p.conditions.enabled() {
            Ok(())
        } else {
            Err(ConditionRefusal::Disabled)
        }
    }
}

/// The condition's shape and cost.
#[derive(Debug)]
pub enum Condition {}

impl Gate for Condition {
    const NAME: &'static str = "condition";
    fn check(p: &mut Pending<'_>) -> Result<(), ConditionRefusal> {
        p.cost = p.conditions.condition_cost(p.params)?;
        Ok(())
    }
}

/// The target allow-list.
#[derive(Debug)]
pub enum Target {}

impl Gate for Target {
    const NAME: &'static str = "target";
    fn check(p: &mut Pending<'_>) -> Result<(), ConditionRefusal> {
        p.conditions.check_target(p.params)
    }
}

/// The caller's signature and the list of callers.
#[derive(Debug)]
pub enum Caller {}

impl Gate for Caller {
    const NAME: &'static str = "caller";
    fn check(p: &mut Pending<'_>) -> Result<(), ConditionRefusal> {
        p.caller = p.conditions.caller(p.signed)?;
        Ok(())
    }
}

/// The rates of lookups. In monitor-only mode too: a call over a rate is
/// counted as one that would be refused (and forwarded, uncharged), so
/// the count says what enforcing would refuse.
#[derive(Debug)]
pub enum Charge {}

impl Gate for Charge {
    const NAME: &'static str = "charge";
    fn check(p: &mut Pending<'_>) -> Result<(), ConditionRefusal> {
        p.conditions.charge(p.caller.as_ref(), p.cost, p.now)
    }
}

/// Builds [`GateService`]s for gate `G`.
#[derive(Debug)]
pub struct GateLayer<G> {
    _gate: PhantomData<fn() -> G>,
}

impl<G> GateLayer<G> {
    /// A layer for gate `G`.
    pub const fn new() -> Self {
        GateLayer { _gate: PhantomData }
    }
}

impl<G> Default for GateLayer<G> {
    fn default() -> Self {
        GateLayer::new()
    }
}

impl<G, I> Layer<I> for GateLayer<G> {
    type Service = GateService<G, I>;

    fn layer(&self, inner: I) -> GateService<G, I> {
        GateService {
            inner,
            _gate: PhantomData,
        }
    }
}

/// Runs gate `G`, then the inner service if it passed.
#[derive(Debug)]
pub struct GateService<G, I> {
    inner: I,
    _gate: PhantomData<fn() -> G>,
}

impl<G, I: Clone> Clone for GateService<G, I> {
    fn clone(&self) -> Self {
        GateService {
            inner: self.inner.clone(),
            _gate: PhantomData,
        }
    }
}

/// What the gates answer for a call they let through.
type Verdict = Ready<Result<(), ConditionRefusal>>;

impl<'a, G, I> Service<Pending<'a>> for GateService<G, I>
where
    G: Gate,
    I: Service<Pending<'a>, Response = (), Error = ConditionRefusal, Future = Verdict>,
{
    type Response = ();
    type Error = ConditionRefusal;
    type Future = Verdict;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConditionRefusal>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut pending: Pending<'a>) -> Verdict {
        match G::check(&mut pending) {
            Ok(()) => self.inner.call(pending),
            Err(refusal) => ready(Err(refusal)),
        }
    }
}

/// The innermost service: every gate passed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Passed;

impl<'a> Service<Pending<'a>> for Passed {
    type Response = ();
    type Error = ConditionRefusal;
    type Future = Verdict;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConditionRefusal>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _pending: Pending<'a>) -> Verdict {
        ready(Ok(()))
    }
}

/// The gates, outermost (cheapest) first.
pub type Gates = GateService<
    Switch,
    GateService<Condition, GateService<Target, GateService<Caller, GateService<Charge, Passed>>>>,
>;

/// Builds [`Gates`]; zero-sized, so a clone per call costs nothing.
pub fn gates() -> Gates {
    tower::ServiceBuilder::new()
        .layer(GateLayer::<Switch>::new())
        .layer(GateLayer::<Condition>::new())
        .layer(GateLayer::<Target>::new())
        .layer(GateLayer::<Caller>::new())
        .layer(GateLayer::<Charge>::new())
        .service(Passed)
}

/// The gates' names, in order.
pub const NAMES: [&str; 5] = [
    Switch::NAME,
    Condition::NAME,
    Target::NAME,
    Caller::NAME,
    Charge::NAME,
];

/// Runs `pending` through `gates`; ready at once (every gate is always
/// ready, and its future complete when returned).
pub fn run(gates: &Gates, pending: Pending<'_>) -> Result<(), ConditionRefusal> {
    let mut gates = gates.clone();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Service::<Pending<'_>>::poll_ready(&mut gates, &mut cx) {
        Poll::Ready(Ok(())) => gates.call(pending).into_inner(),
        Poll::Ready(Err(refusal)) => Err(refusal),
        // Never: no gate waits.
        Poll::Pending => Ok(()),
    }
}
