//! The params of an `eth_sendBundle`, read strictly: one object holding
//! one array `txs` of strings, at most `rpc.max_bundle_txs`; a key Go would
//! read as `txs` but that is not `txs`, or a second `txs`, refused (see
//! [`super`]). Apart from the screening so that the refusal rendering
//! ([`crate::rpc::rescue`]) can name [`Malformed`] without importing the
//! screening that returns refusals.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

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
