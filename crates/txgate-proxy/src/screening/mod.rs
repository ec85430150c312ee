//! The per-call screening stack for `eth_sendRawTransaction`,
//! `eth_sendRawTransactionConditional` and `eth_sendRawTransactionSync`.
//!
//! The raw param is turned into a [`Candidate`] first (0x-hex and the tx
//! hash from the raw bytes: [`Screen::candidate`]); then each stage of
//! [`txgate_screen::stage::Stages`] is one tower layer ([`Check`]), built
//! from that list, so the order is written once, in the screening crate.
//! The first rejection ends the call without touching the layers below it.
//! The innermost service ([`Probe`]) asks the sidecar if configured,
//! records the forward for attribution and answers [`Cleared`]; the
//! caller forwards the call. The state shared by every worker rides in the
//! [`Submission`], so the stack itself is zero-sized.
//!
//! ```text
//! Screen::candidate          0x-hex → bytes, tx hash from the raw bytes → -32602
//! Check<FastReject>          tx hash in the recent-failure cache → -32003
//! Check<DecodeEnvelope>      EIP-2718 envelope, chain-id allow-list → -32602
//! Check<CheckFingerprint>    denied (bloom, then map), cooldown, shaping → -32003
//! Check<RecoverSender>       sender: cache by tx hash, else libsecp256k1 → -32602
//! Check<SenderBackpressure>  sender backed off → 429, -32005; then a
//!                            cooldown's open trickle slot taken → -32003
//!                            if another call took it meanwhile
//! Probe                      optional ShouldForward to the sidecar on hot
//!                            calls (hard deadline), then pending attribution
//! ```
//!
//! Every stage but the probe is synchronous, so each of their futures is
//! ready at once; the probe, when enabled, is the one that awaits.
//!
//! A bundle's raw transactions are screened as one unit ([`screen_unit`]):
//! the same stages, in the same order, for each, and one commit of all of
//! them or none.

mod check;
mod probe;
pub mod refusal_log;
pub mod state;
mod unit;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use prometheus::Histogram;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tower::{Layer, Service};
use txgate_screen::stage::{Stage, Stages};
use txgate_screen::{Admitted, Candidate, Millis, Rejection, Screen};

pub use check::{Check, CheckLayer, ResponseFuture};
pub use probe::{Probe, ProbeClient, ProbeFuture, VerdictCache};
pub use refusal_log::{RefusalLog, Refused};
pub use unit::screen_unit;

/// The methods that are screened.
pub const SCREENED_METHODS: [&str; 3] = [
    "eth_sendRawTransaction",
    "eth_sendRawTransactionConditional",
    "eth_sendRawTransactionSync",
];

/// Whether `method` is screened.
#[inline]
pub fn is_screened(method: &str) -> bool {
    method.starts_with("eth_sendRawTransaction") && SCREENED_METHODS.contains(&method)
}

/// One screened call travelling down the stack, with the state it is
/// screened against.
#[derive(Debug)]
pub struct Submission<'a> {
    /// The screening state.
    pub screen: &'a Screen,
    /// What the stages learned so far (boxed: the submission moves
    /// through every layer, and a decoded transaction is large).
    pub candidate: Box<Candidate>,
    /// The time each stage takes.
    pub laps: Laps<'a>,
}

/// The time of each step of the stack, observed in the histograms of
/// [`stage_labels`], in order: one clock read per step, the gap since the
/// previous read going to the step that just ended. The steps run in a
/// fixed order, so the next histogram is found by position, never by name.
#[derive(Debug)]
pub struct Laps<'a> {
    histograms: &'a [Histogram],
    mark: Instant,
    next: usize,
}

impl<'a> Laps<'a> {
    /// Laps from `start`, observed in `histograms` (one per label of
    /// [`stage_labels`]; empty: not timed, and no clock is read).
    pub fn new(histograms: &'a [Histogram], start: Instant) -> Laps<'a> {
        Laps {
            histograms,
            mark: start,
            next: 0,
        }
    }

    /// Ends the current step.
    #[inline]
    pub fn lap(&mut self) {
        let Some(histogram) = self.histograms.get(self.next) else {
            return;
        };
        let now = Instant::now();
        histogram.observe(now.saturating_duration_since(self.mark).as_secs_f64());
        self.mark = now;
        self.next += 1;
    }
}

pub use crate::metrics::screen::stage_labels;

/// What the stack answers for a call it lets through.
#[derive(Debug)]
pub struct Cleared {
    /// What the forward carries on.
    pub admitted: Admitted,
    /// Whether the sender came from the cache.
    pub sender_cached: bool,
}

/// A list of stages ([`txgate_screen::stage::StageList`]'s shape) folded
/// into nested [`Check`] layers around an inner service.
pub trait Layered {
    /// The stack around `I`.
    type Stack<I>;

    /// Wraps `inner` in one [`Check`] per stage, the list's first
    /// outermost.
    fn layer<I>(inner: I) -> Self::Stack<I>;
}

impl Layered for () {
    type Stack<I> = I;

    fn layer<I>(inner: I) -> I {
        inner
    }
}

impl<H: Stage, T: Layered> Layered for (H, T) {
    type Stack<I> = Check<H, T::Stack<I>>;

    fn layer<I>(inner: I) -> Self::Stack<I> {
        CheckLayer::<H>::new().layer(T::layer(inner))
    }
}

/// The assembled stack: [`Stages`] around the [`Probe`].
pub type Stack = <Stages as Layered>::Stack<Probe>;

/// Builds the stack, outermost (cheapest) first; `probe` asks the sidecar
/// about fingerprints with no local verdict (`None`: never).
pub fn stack(probe: Option<Arc<ProbeClient>>) -> Stack {
    <Stages as Layered>::layer(Probe { client: probe })
}

/// Screens one raw-transaction param at `now`: the candidate, then
/// `stack`, each step timed by `laps`. Every stage is synchronous, so the
/// future is ready at the first poll unless the probe asks the sidecar.
pub async fn screen<S>(
    stack: &S,
    screen: &Screen,
    param: &str,
    now: Millis,
    mut laps: Laps<'_>,
) -> Result<Cleared, Rejection>
where
    S: for<'a> Service<Submission<'a>, Response = Cleared, Error = Rejection> + Clone,
{
    let candidate = screen.candidate(param, now);
    laps.lap();
    let candidate = Box::new(candidate?);
    let mut stack = stack.clone();
    std::future::poll_fn(|cx| Service::<Submission<'_>>::poll_ready(&mut stack, cx)).await?;
    stack
        .call(Submission {
            screen,
            candidate,
            laps,
        })
        .await
}

/// The raw transaction of a screened call: the first positional param, a
/// string. `None` when missing or not a string.
pub fn raw_param(params: Option<&RawValue>) -> Option<Cow<'_, str>> {
    struct First;
    impl<'de> Visitor<'de> for First {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array whose first element is a string")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<CowStr<'de>>()?;
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first.map(|s| s.0))
        }
    }
    struct CowStr<'a>(Cow<'a, str>);
    impl<'de> serde::Deserialize<'de> for CowStr<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = CowStr<'de>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(CowStr(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(CowStr(Cow::Owned(v.to_owned())))
                }
            }
            d.deserialize_str(V)
        }
    }
    let raw = params?.get();
    let mut de = serde_json::Deserializer::from_str(raw);
    de.deserialize_seq(First).ok().flatten()
}

#[cfg(test)]
pub(crate) mod tests;
