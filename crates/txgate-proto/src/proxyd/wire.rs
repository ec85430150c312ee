//! The request body as serde reads it: flat, borrowed, no value buffered.
//!
//! Every field of a transaction is an optional string (`null` reads as
//! absent); the lists are the only nested shapes. Unknown keys (`blobs`,
//! `commitments`, `proofs`, op-geth's deposit keys, anything newer) are
//! skipped without being kept. A key repeated inside a transaction, or a
//! value of the wrong JSON type, fails the parse. The `txs` map is visited
//! entry by entry: each transaction is checked and hashed as soon as it is
//! read, and the count is enforced before the next one is parsed.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::{HookTx, Invalid, build, rlp::Writer};

/// A JSON string, borrowed from the body unless it holds escapes (geth
/// writes none, but an escaped hex digit is still valid JSON).
#[derive(Debug)]
pub(super) struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Str;
        impl<'de> Visitor<'de> for Str {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Str)
    }
}

/// One transaction object: go-ethereum's JSON plus proxyd's `from`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
pub(super) struct Fields<'a> {
    #[serde(rename = "type")]
    pub(super) ty: Option<Text<'a>>,
    pub(super) chain_id: Option<Text<'a>>,
    pub(super) nonce: Option<Text<'a>>,
    pub(super) gas_price: Option<Text<'a>>,
    pub(super) max_priority_fee_per_gas: Option<Text<'a>>,
    pub(super) max_fee_per_gas: Option<Text<'a>>,
    pub(super) max_fee_per_blob_gas: Option<Text<'a>>,
    pub(super) gas: Option<Text<'a>>,
    pub(super) to: Option<Text<'a>>,
    pub(super) value: Option<Text<'a>>,
    pub(super) input: Option<Text<'a>>,
    pub(super) access_list: Option<Vec<AccessTuple<'a>>>,
    pub(super) blob_versioned_hashes: Option<Vec<Text<'a>>>,
    pub(super) authorization_list: Option<Vec<Authorization<'a>>>,
    pub(super) v: Option<Text<'a>>,
    pub(super) r: Option<Text<'a>>,
    pub(super) s: Option<Text<'a>>,
    pub(super) y_parity: Option<Text<'a>>,
    pub(super) hash: Option<Text<'a>>,
    pub(super) from: Option<Text<'a>>,
}

/// `{"address", "storageKeys"}`; both required. A key missing fails the
/// parse at that entry (`deserialize_with` makes an `Option` field
/// required; `null` still reads as absent, refused when hashed): no list
/// of empty entries is collected, so a list holds at most about 8 times
/// its bytes in memory (a 24-byte reference per 3-byte `"",` element).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
pub(super) struct AccessTuple<'a> {
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) address: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) storage_keys: Option<Vec<Text<'a>>>,
}

/// An EIP-7702 authorization; every field required.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
pub(super) struct Authorization<'a> {
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) chain_id: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) address: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) nonce: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) y_parity: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) r: Option<Text<'a>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) s: Option<Text<'a>>,
}

/// What the visit collects, and why it stopped when the reason is not
/// bad JSON.
pub(super) struct State<'a> {
    pub(super) txs: Vec<HookTx<'a>>,
    pub(super) failure: Option<Invalid>,
    max_txs: usize,
    rlp: Writer,
}

impl<'a> State<'a> {
    /// `body_len` sizes the list: proxyd's transactions take 800 bytes
    /// or more each.
    pub(super) fn new(max_txs: usize, body_len: usize) -> Self {
        State {
            txs: Vec::with_capacity(max_txs.min(body_len / 800 + 1)),
            failure: None,
            max_txs,
            rlp: Writer::default(),
        }
    }

    /// Records why the visit stops, as a serde error that carries nothing.
    fn fail<E: de::Error>(&mut self, why: Invalid) -> E {
        self.failure = Some(why);
        E::custom(why.code())
    }
}

/// The body: an object with exactly one `txs` (other keys skipped).
pub(super) struct Body<'s, 'a>(pub(super) &'s mut State<'a>);

impl<'a> Visitor<'a> for Body<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with txs")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = false;
        while let Some(key) = map.next_key::<Text<'a>>()? {
            if &*key != "txs" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if seen {
                return Err(de::Error::duplicate_field("txs"));
            }
            seen = true;
            map.next_value_seed(Txs(&mut *self.0))?;
        }
        if seen {
            Ok(())
        } else {
            Err(de::Error::missing_field("txs"))
        }
    }
}

/// The `txs` map, checked entry by entry.
struct Txs<'s, 'a>(&'s mut State<'a>);

impl<'a> DeserializeSeed<'a> for Txs<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'a>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'a> Visitor<'a> for Txs<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of transactions by hash")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        // The key is answered as sent, so it is borrowed: a key written
        // with escapes fails here (no hash needs one).
        while let Some(key) = map.next_key::<&'a str>()? {
            if state.txs.len() == state.max_txs {
                return Err(state.fail(Invalid::TooMany));
            }
            let fields: Fields<'a> = map.next_value()?;
            match build(key, &fields, &mut state.rlp) {
                Ok(tx) => state.txs.push(tx),
                Err(why) => return Err(state.fail(why)),
            }
        }
        Ok(())
    }
}
