//! The per-call screening stack for `eth_sendRawTransaction`,
//! `eth_sendRawTransactionConditional` and `eth_sendRawTransactionSync`.
//!
//! Each stage of [`txgate_screen::Screen`] is one tower layer ([`Check`]),
//! stacked cheapest first; the first rejection ends the call without
//! touching the layers below it. The innermost service ([`Probe`]) asks
//! the sidecar if configured, records the forward for attribution and
//! answers [`Passed`]; the caller forwards the call. The state shared by every worker rides in the [`Submission`],
//! so the stack itself is zero-sized.
//!
//! ```text
//! Check<Hex>           0x-hex → bytes, tx hash from the raw bytes
//! Check<FastReject>    tx hash in the recent-failure cache → -32003
//! Check<Decode>        EIP-2718 envelope, chain-id allow-list → -32602
//! Check<Recover>       sender: cache by tx hash, else libsecp256k1 → -32602
//! Check<Backpressure>  sender backed off → 429, -32005
//! Check<Fingerprint>   denied (bloom, then map), cooldown, shaping → -32003
//! Probe                optional ShouldForward to the sidecar (hard deadline),
//!                      then pending attribution; the caller forwards
//! ```
//!
//! Every stage but the probe is synchronous, so each of their futures is
//! ready at once; the probe, when enabled, is the one that awaits.

mod check;
mod probe;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tower::{Service, ServiceBuilder};
use txgate_screen::{Admitted, Candidate, Millis, Rejection, Screen};

pub use check::{Check, CheckLayer, ResponseFuture};
pub use probe::{Probe, ProbeClient, ProbeFuture, admit};

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
    /// The raw transaction param (`0x…`).
    pub param: &'a str,
    /// Decision time.
    pub now: Millis,
    /// What the stages learned so far (boxed: the submission moves
    /// through every layer, and a decoded transaction is large).
    pub candidate: Option<Box<Candidate>>,
}

impl<'a> Submission<'a> {
    /// A submission of `param` at `now`.
    pub fn new(screen: &'a Screen, param: &'a str, now: Millis) -> Submission<'a> {
        Submission {
            screen,
            param,
            now,
            candidate: None,
        }
    }

    fn candidate(&mut self) -> Result<(&'a Screen, &mut Candidate), Rejection> {
        let screen = self.screen;
        self.candidate
            .as_deref_mut()
            .map(|c| (screen, c))
            .ok_or(Rejection::Invalid(txgate_screen::DecodeError::Empty))
    }
}

/// One step of the stack.
pub trait Stage {
    /// Checks, and adds what it learns to the submission.
    fn check(submission: &mut Submission<'_>) -> Result<(), Rejection>;
}

/// Hex, and the tx hash from the raw bytes.
#[derive(Debug)]
pub enum Hex {}
impl Stage for Hex {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        s.candidate = Some(Box::new(s.screen.stage_hex(s.param, s.now)?));
        Ok(())
    }
}

/// Recent-failure cache, before any decoding or ECDSA.
#[derive(Debug)]
pub enum FastReject {}
impl Stage for FastReject {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        let (screen, c) = s.candidate()?;
        screen.stage_fast_reject(c)
    }
}

/// Envelope and chain id.
#[derive(Debug)]
pub enum Decode {}
impl Stage for Decode {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        let (screen, c) = s.candidate()?;
        screen.stage_decode(c)
    }
}

/// Sender, cached or recovered.
#[derive(Debug)]
pub enum Recover {}
impl Stage for Recover {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        let (screen, c) = s.candidate()?;
        screen.stage_recover(c)
    }
}

/// Sender backpressure.
#[derive(Debug)]
pub enum Backpressure {}
impl Stage for Backpressure {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        let (screen, c) = s.candidate()?;
        screen.stage_backpressure(c)
    }
}

/// Denied fingerprints, cooldowns, shaping.
#[derive(Debug)]
pub enum Fingerprint {}
impl Stage for Fingerprint {
    fn check(s: &mut Submission<'_>) -> Result<(), Rejection> {
        let (screen, c) = s.candidate()?;
        screen.stage_fingerprint(c)
    }
}

/// What the stack answers for a call it lets through.
#[derive(Debug)]
pub struct Passed {
    /// What the forward carries on.
    pub admitted: Admitted,
    /// Whether the sender came from the cache.
    pub sender_cached: bool,
}

/// The assembled stack.
pub type Stack = Check<
    Hex,
    Check<
        FastReject,
        Check<Decode, Check<Recover, Check<Backpressure, Check<Fingerprint, Probe>>>>,
    >,
>;

/// Builds the stack, outermost (cheapest) first; `probe` asks the sidecar
/// about fingerprints with no local verdict (`None`: never).
pub fn stack(probe: Option<Arc<ProbeClient>>) -> Stack {
    ServiceBuilder::new()
        // 0x-hex, and the tx hash straight from the bytes.
        .layer(CheckLayer::<Hex>::new())
        // A tx hash that failed recently: refused before any decoding.
        .layer(CheckLayer::<FastReject>::new())
        // The EIP-2718 envelope and the chain-id allow-list.
        .layer(CheckLayer::<Decode>::new())
        // The sender: cached by tx hash, else one libsecp256k1 recovery.
        .layer(CheckLayer::<Recover>::new())
        // A sender charged with too many invalidations waits.
        .layer(CheckLayer::<Backpressure>::new())
        // Denied fingerprint, assertion cooldown, suspect shaping.
        .layer(CheckLayer::<Fingerprint>::new())
        // Optional: ask the sidecar about a fingerprint it never judged;
        // then record the forward for attribution.
        .service(Probe { client: probe })
}

/// Runs `stack` on one submission. Every stage is synchronous, so the
/// future is ready at the first poll; a pending stage would be awaited.
pub async fn run(stack: &Stack, submission: Submission<'_>) -> Result<Passed, Rejection> {
    let mut stack = stack.clone();
    std::future::poll_fn(|cx| Service::<Submission<'_>>::poll_ready(&mut stack, cx)).await?;
    stack.call(submission).await
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
mod tests;
