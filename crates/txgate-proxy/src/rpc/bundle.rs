//! `eth_sendBundle` (Flashbots format, `params: [{"txs": ["0x…", …], …}]`)
//! screened as one unit when screening is on: every raw transaction
//! through the stages of a lone `eth_sendRawTransaction`, and the first one
//! refused refuses the whole bundle with what that call would be told, its
//! `bundle_index` and `tx_hash` in `data`. Nothing of a refused bundle
//! reaches the node or is remembered; an honest one is forwarded as the
//! caller wrote it.
//!
//! The params are read strictly ([`parse_txs`]), because the node must see
//! the very list that was screened. Builders read only `txs` of the
//! object; Go's JSON decoding matches keys case-insensitively (Unicode
//! simple folding: `ſ` is an `s`) and lets the last duplicate win, so a
//! `TXS` or a second `txs` would be what a Go upstream reads. Those, and
//! anything but one object holding one array of strings of at most
//! `rpc.max_bundle_txs`, are refused (-32602). An empty `txs` has nothing
//! to screen and is forwarded (some builders cancel a bundle with it).

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::net::IpAddr;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use txgate_jsonrpc::Call;
use txgate_screen::Reason;

use super::Shared;
use crate::metrics::BundleResult;
use crate::rpc::rescue::Refusal;
use crate::screening;

/// The method screened here.
pub const METHOD: &str = "eth_sendBundle";

/// Why a bundle's params are refused before any screening (-32602).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Not `[{…}]`: no params, not an array, no element or more than
    /// one, or its element not an object.
    Shape,
    /// The object has no `txs`.
    NoTxs,
    /// A key that is `txs` to a case-insensitive reader but not to us.
    CaseVariant,
    /// `txs` twice.
    Duplicate,
    /// `txs` is not an array of strings.
    NotStrings,
    /// More transactions than `rpc.max_bundle_txs`.
    TooMany {
        /// The cap.
        max: usize,
    },
}

impl Malformed {
    /// The error message.
    pub fn message(self) -> String {
        match self {
            Malformed::Shape => {
                r#"invalid params: eth_sendBundle expects [{"txs": ["0x…", …], …}]"#.into()
            }
            Malformed::NoTxs => "invalid params: the bundle has no `txs`".into(),
            Malformed::CaseVariant => {
                "invalid params: the bundle has a key that differs from `txs` only in case; \
                 only `txs` is accepted"
                    .into()
            }
            Malformed::Duplicate => "invalid params: the bundle has `txs` more than once".into(),
            Malformed::NotStrings => {
                "invalid params: `txs` must be an array of 0x-prefixed hex strings".into()
            }
            Malformed::TooMany { max } => {
                format!("invalid params: the bundle holds more than {max} transactions")
            }
        }
    }

    /// The label in the error's `data.problem`.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::Shape => "shape",
            Malformed::NoTxs => "no_txs",
            Malformed::CaseVariant => "case_variant",
            Malformed::Duplicate => "duplicate_txs",
            Malformed::NotStrings => "not_strings",
            Malformed::TooMany { .. } => "too_many_txs",
        }
    }
}

/// The raw transactions of an `eth_sendBundle`'s `params`, in order,
/// borrowed where they hold no escapes; see the module docs for what is
/// refused. The entries are not checked as hex here: screening refuses a
/// bad one and names it.
pub fn parse_txs(params: Option<&RawValue>, max: usize) -> Result<Vec<Cow<'_, str>>, Malformed> {
    let params = params.ok_or(Malformed::Shape)?;
    let problem = Cell::new(None);
    let mut de = serde_json::Deserializer::from_str(params.get());
    let parsed = (Seed {
        problem: &problem,
        max,
        part: Part::Params,
    })
    .deserialize(&mut de);
    match parsed {
        Ok(txs) => Ok(txs),
        Err(_) => Err(problem.get().unwrap_or(Malformed::Shape)),
    }
}

/// Whether Go's case-insensitive key matching takes `key` for `txs`:
/// `t`, `x` and `s` in either case, or `ſ` (U+017F, which folds to `s`).
fn folds_to_txs(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(
        (chars.next(), chars.next(), chars.next(), chars.next()),
        (
            Some('t' | 'T'),
            Some('x' | 'X'),
            Some('s' | 'S' | '\u{17f}'),
            None
        )
    )
}

/// Which part of the params a [`Seed`] reads.
#[derive(Clone, Copy)]
enum Part {
    /// `[bundle]`.
    Params,
    /// `{"txs": […], …}`.
    Bundle,
    /// `["0x…", …]`.
    Txs,
}

/// Reads one part; a problem found is left in `problem` (the first one
/// wins), the serde error only unwinds.
struct Seed<'c> {
    problem: &'c Cell<Option<Malformed>>,
    max: usize,
    part: Part,
}

impl Seed<'_> {
    fn fail<E: serde::de::Error>(&self, problem: Malformed) -> E {
        if self.problem.get().is_none() {
            self.problem.set(Some(problem));
        }
        E::custom(problem.as_str())
    }

    fn within(&self, part: Part) -> Self {
        Seed {
            problem: self.problem,
            max: self.max,
            part,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Vec<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let (problem, part) = (self.problem, self.part);
        let read = match part {
            Part::Params | Part::Txs => d.deserialize_seq(self),
            Part::Bundle => d.deserialize_map(self),
        };
        // A value of the wrong type, where serde found it.
        read.inspect_err(|_| {
            if problem.get().is_none() {
                problem.set(Some(match part {
                    Part::Params | Part::Bundle => Malformed::Shape,
                    Part::Txs => Malformed::NotStrings,
                }));
            }
        })
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Vec<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.part {
            Part::Params => "an array holding one bundle object",
            Part::Bundle => "a bundle object",
            Part::Txs => "an array of strings",
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if let Part::Params = self.part {
            let txs = seq
                .next_element_seed(self.within(Part::Bundle))?
                .ok_or_else(|| self.fail(Malformed::Shape))?;
            if seq.next_element::<IgnoredAny>()?.is_some() {
                return Err(self.fail(Malformed::Shape));
            }
            return Ok(txs);
        }
        let mut txs = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(self.max));
        loop {
            let next = seq
                .next_element::<Text<'de>>()
                .map_err(|_| self.fail(Malformed::NotStrings))?;
            let Some(Text(tx)) = next else {
                return Ok(txs);
            };
            if txs.len() == self.max {
                return Err(self.fail(Malformed::TooMany { max: self.max }));
            }
            txs.push(tx);
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut txs = None;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if key == "txs" {
                if txs.is_some() {
                    return Err(self.fail(Malformed::Duplicate));
                }
                txs = Some(map.next_value_seed(self.within(Part::Txs))?);
            } else if folds_to_txs(&key) {
                return Err(self.fail(Malformed::CaseVariant));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        txs.ok_or_else(|| self.fail(Malformed::NoTxs))
    }
}

/// A JSON string, borrowed when it holds no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl Shared {
    /// Screens an `eth_sendBundle` call from `client` as one unit; `Some`
    /// when it is refused (see the module docs). Everything passes
    /// untouched when screening is off; in monitor-only mode what would be
    /// refused is counted, logged and forwarded.
    pub(super) async fn screen_bundle(
        &self,
        call: &Call<'_>,
        client: Option<IpAddr>,
    ) -> Option<Refusal> {
        let screening = self.screening.as_ref()?;
        let started = tokio::time::Instant::now().into_std();
        let metrics = &self.metrics.screen;
        let monitor_only = screening.monitor_only;
        let log = |reason, rejection, param, bundle_index| {
            let refused = screening::Refused {
                reason,
                rejection,
                param,
                bundle_index,
                client,
                monitor_only,
            };
            screening.refusals.refused(started, &refused);
        };
        let txs = match parse_txs(call.params, self.max_bundle_txs) {
            Ok(txs) => txs,
            Err(malformed) => {
                metrics.bundles.count(BundleResult::Malformed);
                metrics.refused(Reason::InvalidTransaction, monitor_only);
                log(Reason::InvalidTransaction, None, None, None);
                return (!monitor_only).then_some(Refusal::MalformedBundle(malformed));
            }
        };
        if txs.is_empty() {
            metrics.bundles.count(BundleResult::Empty);
            return None;
        }
        let now = screening.screen.millis(started);
        let params = txs.iter().map(AsRef::as_ref);
        let probe = screening.probe.as_ref();
        match screening::screen_unit(&screening.screen, probe, params, now).await {
            Ok(cleared) => {
                for tx in &cleared {
                    match tx.sender_cached {
                        true => metrics.sender_cache_hits.inc(),
                        false => metrics.sender_cache_misses.inc(),
                    }
                }
                metrics.bundles.count(BundleResult::Forwarded);
                None
            }
            Err(refused) => {
                let reason = refused.rejection.reason();
                metrics.refused(reason, monitor_only);
                metrics.bundles.count(match monitor_only {
                    true => BundleResult::WouldRefuse,
                    false => BundleResult::Refused,
                });
                let param = txs.get(refused.index).map(AsRef::as_ref);
                log(reason, Some(&refused.rejection), param, Some(refused.index));
                (!monitor_only).then_some(Refusal::Bundle(refused))
            }
        }
    }
}

#[cfg(test)]
mod tests;
