//! One pass over the condition's JSON with serde visitors that count and
//! check as they go, keeping nothing of it.

use std::fmt;

use alloy_primitives::U256;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// What a valid condition costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// State lookups (op-geth's `Cost()`).
    pub cost: u64,
    /// Known accounts.
    pub accounts: u64,
}

/// Why a condition is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed: a value op-geth's RPC layer cannot decode (-32602
    /// "invalid argument 1: …"), or one its validation refuses (-32003
    /// "failed conditional validation: …"), or one txgate is stricter
    /// about (-32003 as well); see [`Reason::undecodable`].
    Invalid(Reason),
    /// Too many lookups (op-geth: -32005, this message).
    CostExceeded {
        /// What it costs.
        cost: u64,
        /// The most allowed.
        max: u64,
    },
}

impl Refusal {
    /// The JSON-RPC code op-geth answers with.
    pub fn code(&self) -> i64 {
        match self {
            Refusal::Invalid(reason) if reason.undecodable() => crate::INVALID_ARGUMENT_CODE,
            Refusal::Invalid(_) => crate::REJECTED_CODE,
            Refusal::CostExceeded { .. } => crate::COST_EXCEEDED_CODE,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // op-geth's prefixes; what follows is txgate's own naming of
            // the defect (op-geth's is Go's decoder error).
            Refusal::Invalid(reason) if reason.undecodable() => {
                write!(f, "invalid argument 1: {reason}")
            }
            Refusal::Invalid(reason) => write!(f, "failed conditional validation: {reason}"),
            Refusal::CostExceeded { cost, max } => {
                write!(f, "conditional cost, {cost}, exceeded max: {max}")
            }
        }
    }
}

impl std::error::Error for Refusal {}

/// What is wrong with a malformed condition; a bounded set, for metric
/// labels and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Not JSON, or not an object.
    NotAnObject,
    /// A field the condition does not have.
    UnknownField,
    /// A field or key given twice.
    Duplicate,
    /// `knownAccounts` is not an object of accounts.
    BadAccounts,
    /// An account key is not 20 bytes of 0x-hex.
    BadAddress,
    /// An account is neither a 32-byte root nor an object of slots.
    BadAccount,
    /// A slot or its value is not 32 bytes of 0x-hex.
    BadSlot,
    /// A block-number bound is not a number of at most 256 bits.
    BadBlockNumber,
    /// A timestamp bound is not a number of at most 64 bits.
    BadTimestamp,
    /// `blockNumberMin` above `blockNumberMax`.
    BlockRange,
    /// `timestampMin` above `timestampMax`.
    TimestampRange,
}

impl Reason {
    /// Whether op-geth could not even decode such a condition: a value of
    /// the wrong JSON type, hex or length. Its RPC layer answers those
    /// -32602 before any check runs, and so does txgate. The rest (a range
    /// the wrong way round; an unknown field, a key given twice, which
    /// op-geth accepts and txgate refuses on purpose) are -32003.
    pub fn undecodable(self) -> bool {
        matches!(
            self,
            Reason::NotAnObject
                | Reason::BadAccounts
                | Reason::BadAddress
                | Reason::BadAccount
                | Reason::BadSlot
                | Reason::BadBlockNumber
                | Reason::BadTimestamp
        )
    }

    /// Every reason, for metric labels created up front.
    pub const ALL: [Reason; 11] = [
        Reason::NotAnObject,
        Reason::UnknownField,
        Reason::Duplicate,
        Reason::BadAccounts,
        Reason::BadAddress,
        Reason::BadAccount,
        Reason::BadSlot,
        Reason::BadBlockNumber,
        Reason::BadTimestamp,
        Reason::BlockRange,
        Reason::TimestampRange,
    ];

    /// A short label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAnObject => "not_an_object",
            Reason::UnknownField => "unknown_field",
            Reason::Duplicate => "duplicate",
            Reason::BadAccounts => "bad_accounts",
            Reason::BadAddress => "bad_address",
            Reason::BadAccount => "bad_account",
            Reason::BadSlot => "bad_slot",
            Reason::BadBlockNumber => "bad_block_number",
            Reason::BadTimestamp => "bad_timestamp",
            Reason::BlockRange => "block_range",
            Reason::TimestampRange => "timestamp_range",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::NotAnObject => "the condition must be a JSON object",
            Reason::UnknownField => {
                "unknown field (knownAccounts, blockNumberMin, blockNumberMax, timestampMin, \
                 timestampMax)"
            }
            Reason::Duplicate => "a field or key is given twice",
            Reason::BadAccounts => "knownAccounts must be an object of accounts",
            Reason::BadAddress => "an account key is not a 0x-prefixed 20-byte address",
            Reason::BadAccount => {
                "an account must be a 0x-prefixed 32-byte storage root or an object of slots"
            }
            Reason::BadSlot => "a slot or its value is not 0x-prefixed 32 bytes",
            Reason::BadBlockNumber => "a block number bound is not a number of at most 256 bits",
            Reason::BadTimestamp => "a timestamp bound is not a number of at most 64 bits",
            Reason::BlockRange => "block number minimum constraint must be less than the maximum",
            Reason::TimestampRange => "timestamp minimum constraint must be less than the maximum",
        })
    }
}

/// Checks a condition (the JSON text of the param) against a cost of at
/// most `max` lookups.
pub fn check(json: &str, max: u64) -> Result<Checked, Refusal> {
    let mut state = State::default();
    let mut de = serde_json::Deserializer::from_str(json);
    let parsed = Condition { state: &mut state }
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if parsed.is_err() {
        return Err(Refusal::Invalid(
            state.reason.unwrap_or(Reason::NotAnObject),
        ));
    }
    let mut cost = state.lookups;
    let blocks = (state.block_min, state.block_max);
    if blocks.0.is_some() || blocks.1.is_some() {
        cost += 1;
    }
    if let (Some(min), Some(max)) = blocks
        && min > max
    {
        return Err(Refusal::Invalid(Reason::BlockRange));
    }
    let times = (state.time_min, state.time_max);
    if times.0.is_some() || times.1.is_some() {
        cost += 1;
    }
    if let (Some(min), Some(max)) = times
        && min > max
    {
        return Err(Refusal::Invalid(Reason::TimestampRange));
    }
    if cost > max {
        return Err(Refusal::CostExceeded { cost, max });
    }
    Ok(Checked {
        cost,
        accounts: state.accounts,
    })
}

/// What the pass learns.
#[derive(Debug, Default)]
struct State {
    /// Account lookups: 1 per account, plus its root or its slots.
    lookups: u64,
    accounts: u64,
    block_min: Option<U256>,
    block_max: Option<U256>,
    time_min: Option<u64>,
    time_max: Option<u64>,
    /// Why the pass failed, when a visitor knew.
    reason: Option<Reason>,
}

impl State {
    fn fail<E: de::Error>(&mut self, reason: Reason) -> E {
        self.reason.get_or_insert(reason);
        E::custom(reason)
    }
}

/// A string that may borrow from the input.
fn text<'de, A: MapAccess<'de>>(
    map: &mut A,
) -> Result<Option<std::borrow::Cow<'de, str>>, A::Error> {
    map.next_key::<CowStr<'de>>().map(|k| k.map(|k| k.0))
}

struct CowStr<'a>(std::borrow::Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// `0x` and exactly `N` bytes of hex, any case.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
        let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// The condition object.
struct Condition<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for Condition<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Condition<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a condition object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.state;
        let mut seen = [false; 5];
        while let Some(key) = text(&mut map)? {
            let field = match key.as_ref() {
                "knownAccounts" => 0,
                "blockNumberMin" => 1,
                "blockNumberMax" => 2,
                "timestampMin" => 3,
                "timestampMax" => 4,
                _ => return Err(state.fail(Reason::UnknownField)),
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(state.fail(Reason::Duplicate));
            }
            match field {
                0 => map.next_value_seed(Accounts { state: &mut *state })?,
                1 | 2 => {
                    let n =
                        map.next_value_seed(Number::<U256>::new(Reason::BadBlockNumber, state))?;
                    if field == 1 {
                        state.block_min = n;
                    } else {
                        state.block_max = n;
                    }
                }
                _ => {
                    let n = map.next_value_seed(Number::<u64>::new(Reason::BadTimestamp, state))?;
                    if field == 3 {
                        state.time_min = n;
                    } else {
                        state.time_max = n;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `knownAccounts`: an object of accounts, or null.
struct Accounts<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for Accounts<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Accounts<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of accounts")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.state;
        let mut keys: Vec<[u8; 20]> = Vec::new();
        while let Some(key) = text(&mut map)? {
            let Some(address) = hex::<20>(&key) else {
                return Err(state.fail(Reason::BadAddress));
            };
            keys.push(address);
            state.accounts += 1;
            state.lookups += 1;
            map.next_value_seed(Account { state: &mut *state })?;
        }
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(state.fail(Reason::Duplicate));
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccounts))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccounts))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccounts))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccounts))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccounts))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.state.fail(Reason::BadAccounts))
    }
}

/// One account: a storage root (a string), or an object of slots.
struct Account<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for Account<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Account<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a storage root or an object of slots")
    }

    fn visit_str<E: de::Error>(self, root: &str) -> Result<(), E> {
        if hex::<32>(root).is_none() {
            return Err(self.state.fail(Reason::BadAccount));
        }
        self.state.lookups += 1;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.state;
        let mut slots: Vec<[u8; 32]> = Vec::new();
        while let Some(key) = text(&mut map)? {
            let Some(slot) = hex::<32>(&key) else {
                return Err(state.fail(Reason::BadSlot));
            };
            let value = map
                .next_value::<CowStr<'de>>()
                .map_err(|_| state.fail::<A::Error>(Reason::BadSlot))?;
            if hex::<32>(&value.0).is_none() {
                return Err(state.fail(Reason::BadSlot));
            }
            slots.push(slot);
            state.lookups += 1;
        }
        slots.sort_unstable();
        if slots.windows(2).any(|w| w[0] == w[1]) {
            return Err(state.fail(Reason::Duplicate));
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccount))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccount))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccount))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccount))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.state.fail(Reason::BadAccount))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.state.fail(Reason::BadAccount))
    }
}

/// A bound: null (unset), a JSON number, or a string of hex (`0x…`) or
/// decimal digits, as op-geth's `math.HexOrDecimal` reads them.
trait Bound: Sized {
    fn from_u64(v: u64) -> Self;
    fn parse(s: &str) -> Option<Self>;
}

impl Bound for u64 {
    fn from_u64(v: u64) -> u64 {
        v
    }
    fn parse(s: &str) -> Option<u64> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                u64::from_str_radix(h, 16).ok()
            }
            Some(_) => None,
            None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
            None => None,
        }
    }
}

impl Bound for U256 {
    fn from_u64(v: u64) -> U256 {
        U256::from(v)
    }
    fn parse(s: &str) -> Option<U256> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                U256::from_str_radix(h, 16).ok()
            }
            Some(_) => None,
            None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                U256::from_str_radix(s, 10).ok()
            }
            None => None,
        }
    }
}

struct Number<'s, T> {
    reason: Reason,
    state: &'s mut State,
    _t: std::marker::PhantomData<T>,
}

impl<'s, T> Number<'s, T> {
    fn new(reason: Reason, state: &'s mut State) -> Self {
        Number {
            reason,
            state,
            _t: std::marker::PhantomData,
        }
    }
}

impl<'de, T: Bound> DeserializeSeed<'de> for Number<'_, T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Bound> Visitor<'de> for Number<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, hex or decimal")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<T>, E> {
        Ok(Some(T::from_u64(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<T>, E> {
        match T::parse(v) {
            Some(n) => Ok(Some(n)),
            None => Err(self.state.fail(self.reason)),
        }
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<T>, E> {
        Err(self.state.fail(self.reason))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<T>, E> {
        Err(self.state.fail(self.reason))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<T>, E> {
        Err(self.state.fail(self.reason))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Option<T>, A::Error> {
        Err(self.state.fail(self.reason))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Option<T>, A::Error> {
        Err(self.state.fail(self.reason))
    }
}

#[cfg(test)]
mod tests;
