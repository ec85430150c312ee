//! The request body as read: flat, borrowed, no value buffered.
//!
//! Every field of a transaction is an optional string (`null` reads as
//! absent); the lists are the only nested shapes. Unknown keys (`blobs`,
//! `commitments`, `proofs`, op-geth's deposit keys, anything newer) are
//! checked as JSON and skipped without being kept. A key repeated inside a
//! transaction, or a value of the wrong JSON type, fails the parse. The
//! `txs` map is read entry by entry: each transaction is checked and
//! hashed as soon as it is read, and the count is enforced before the
//! next one is read. The JSON itself is read by [`Scanner`].

use std::borrow::Cow;

use super::scan::{Bad, Scanner};
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

/// One transaction object: go-ethereum's JSON plus proxyd's `from`.
#[derive(Debug, Default)]
pub(super) struct Fields<'a> {
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

/// `{"address", "storageKeys"}`; both keys required (`null` still reads
/// as absent, refused when hashed), others skipped. A key missing fails
/// the parse at that entry: no list of empty entries is collected, so a
/// list holds at most about 8 times its bytes in memory (a 24-byte
/// reference per 3-byte `"",` element).
#[derive(Debug, Default)]
pub(super) struct AccessTuple<'a> {
    pub(super) address: Option<Text<'a>>,
    pub(super) storage_keys: Option<Vec<Text<'a>>>,
}

/// An EIP-7702 authorization; every key required, as for
/// [`AccessTuple`].
#[derive(Debug, Default)]
pub(super) struct Authorization<'a> {
    pub(super) chain_id: Option<Text<'a>>,
    pub(super) address: Option<Text<'a>>,
    pub(super) nonce: Option<Text<'a>>,
    pub(super) y_parity: Option<Text<'a>>,
    pub(super) r: Option<Text<'a>>,
    pub(super) s: Option<Text<'a>>,
}

/// What the read collects.
pub(super) struct State<'a> {
    pub(super) txs: Vec<HookTx<'a>>,
    max_txs: usize,
    rlp: Writer,
}

impl<'a> State<'a> {
    /// `body_len` sizes the list: proxyd's transactions take 800 bytes
    /// or more each.
    pub(super) fn new(max_txs: usize, body_len: usize) -> Self {
        State {
            txs: Vec::with_capacity(max_txs.min(body_len / 800 + 1)),
            max_txs,
            rlp: Writer::default(),
        }
    }
}

impl From<Bad> for Invalid {
    fn from(_: Bad) -> Self {
        Invalid::Malformed
    }
}

/// Containers around a transaction's values: the body, `txs`, the
/// transaction.
const TX_DEPTH: usize = 3;

/// The body: an object with exactly one `txs` (other keys skipped), and
/// nothing after it.
pub(super) fn body<'a>(text: &'a str, state: &mut State<'a>) -> Result<(), Invalid> {
    let mut s = Scanner::new(text);
    s.expect(b'{')?;
    let (mut first, mut seen) = (true, false);
    while s.next_member(b'}', &mut first)? {
        if s.key()? != "txs" {
            s.skip_at(1)?;
            continue;
        }
        if seen {
            return Err(Invalid::Malformed);
        }
        seen = true;
        txs(&mut s, state)?;
    }
    s.end()?;
    if seen {
        Ok(())
    } else {
        Err(Invalid::Malformed)
    }
}

/// The `txs` map, checked entry by entry.
fn txs<'a>(s: &mut Scanner<'a>, state: &mut State<'a>) -> Result<(), Invalid> {
    s.expect(b'{')?;
    let mut first = true;
    while s.next_member(b'}', &mut first)? {
        // The key is answered as sent, so it is borrowed: a key written
        // with escapes is refused (no hash needs one).
        let Cow::Borrowed(key) = s.key()? else {
            return Err(Invalid::Malformed);
        };
        if state.txs.len() == state.max_txs {
            return Err(Invalid::TooMany);
        }
        let fields = transaction(s)?;
        state.txs.push(build(key, &fields, &mut state.rlp)?);
    }
    Ok(())
}

/// Reads a string-or-null into `slot`, which must still be empty (a key
/// given twice is malformed, even when the first was `null`).
fn text<'a>(s: &mut Scanner<'a>, slot: &mut Option<Text<'a>>, seen: &mut bool) -> Result<(), Bad> {
    if std::mem::replace(seen, true) {
        return Err(Bad);
    }
    *slot = if s.null()? {
        None
    } else {
        Some(Text(s.string()?))
    };
    Ok(())
}

/// A list-or-null of `item`s into `slot`, once.
fn list<'a, T>(
    s: &mut Scanner<'a>,
    slot: &mut Option<Vec<T>>,
    seen: &mut bool,
    mut item: impl FnMut(&mut Scanner<'a>) -> Result<T, Bad>,
) -> Result<(), Bad> {
    if std::mem::replace(seen, true) {
        return Err(Bad);
    }
    if s.null()? {
        *slot = None;
        return Ok(());
    }
    s.expect(b'[')?;
    let mut items = Vec::new();
    let mut first = true;
    while s.next_member(b']', &mut first)? {
        items.push(item(s)?);
    }
    *slot = Some(items);
    Ok(())
}

/// A string in a list (`null` is not one).
fn list_text<'a>(s: &mut Scanner<'a>) -> Result<Text<'a>, Bad> {
    s.string().map(Text)
}

/// An object's members, each handed to `member` with its key (after the
/// colon, before the value, which `member` reads).
fn object<'a>(
    s: &mut Scanner<'a>,
    mut member: impl FnMut(&mut Scanner<'a>, &str) -> Result<(), Bad>,
) -> Result<(), Bad> {
    s.expect(b'{')?;
    let mut first = true;
    while s.next_member(b'}', &mut first)? {
        let key = s.key()?;
        member(s, &key)?;
    }
    Ok(())
}

/// One transaction object.
fn transaction<'a>(s: &mut Scanner<'a>) -> Result<Fields<'a>, Bad> {
    let mut f = Fields::default();
    // One flag per field, in the order of the match below.
    let mut seen = [false; 20];
    object(s, |s, key| {
        match key {
            "type" => text(s, &mut f.ty, &mut seen[0])?,
            "chainId" => text(s, &mut f.chain_id, &mut seen[1])?,
            "nonce" => text(s, &mut f.nonce, &mut seen[2])?,
            "gasPrice" => text(s, &mut f.gas_price, &mut seen[3])?,
            "maxPriorityFeePerGas" => text(s, &mut f.max_priority_fee_per_gas, &mut seen[4])?,
            "maxFeePerGas" => text(s, &mut f.max_fee_per_gas, &mut seen[5])?,
            "maxFeePerBlobGas" => text(s, &mut f.max_fee_per_blob_gas, &mut seen[6])?,
            "gas" => text(s, &mut f.gas, &mut seen[7])?,
            "to" => text(s, &mut f.to, &mut seen[8])?,
            "value" => text(s, &mut f.value, &mut seen[9])?,
            "input" => text(s, &mut f.input, &mut seen[10])?,
            "accessList" => list(s, &mut f.access_list, &mut seen[11], access_tuple)?,
            "blobVersionedHashes" => {
                list(s, &mut f.blob_versioned_hashes, &mut seen[12], list_text)?;
            }
            "authorizationList" => {
                list(s, &mut f.authorization_list, &mut seen[13], authorization)?;
            }
            "v" => text(s, &mut f.v, &mut seen[14])?,
            "r" => text(s, &mut f.r, &mut seen[15])?,
            "s" => text(s, &mut f.s, &mut seen[16])?,
            "yParity" => text(s, &mut f.y_parity, &mut seen[17])?,
            "hash" => text(s, &mut f.hash, &mut seen[18])?,
            "from" => text(s, &mut f.from, &mut seen[19])?,
            _ => s.skip_at(TX_DEPTH)?,
        }
        Ok(())
    })?;
    Ok(f)
}

/// `{"address", "storageKeys"}`.
fn access_tuple<'a>(s: &mut Scanner<'a>) -> Result<AccessTuple<'a>, Bad> {
    let mut t = AccessTuple::default();
    let mut seen = [false; 2];
    object(s, |s, key| {
        match key {
            "address" => text(s, &mut t.address, &mut seen[0])?,
            "storageKeys" => list(s, &mut t.storage_keys, &mut seen[1], list_text)?,
            _ => s.skip_at(TX_DEPTH + 2)?,
        }
        Ok(())
    })?;
    if seen.contains(&false) {
        return Err(Bad);
    }
    Ok(t)
}

/// `{"chainId", "address", "nonce", "yParity", "r", "s"}`.
fn authorization<'a>(s: &mut Scanner<'a>) -> Result<Authorization<'a>, Bad> {
    let mut a = Authorization::default();
    let mut seen = [false; 6];
    object(s, |s, key| {
        match key {
            "chainId" => text(s, &mut a.chain_id, &mut seen[0])?,
            "address" => text(s, &mut a.address, &mut seen[1])?,
            "nonce" => text(s, &mut a.nonce, &mut seen[2])?,
            "yParity" => text(s, &mut a.y_parity, &mut seen[3])?,
            "r" => text(s, &mut a.r, &mut seen[4])?,
            "s" => text(s, &mut a.s, &mut seen[5])?,
            _ => s.skip_at(TX_DEPTH + 2)?,
        }
        Ok(())
    })?;
    if seen.contains(&false) {
        return Err(Bad);
    }
    Ok(a)
}
