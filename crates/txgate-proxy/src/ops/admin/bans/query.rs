//! What a lookup or a lift names, read from a JSON object or a query
//! string ([`Query`]), and what a lookup learns from it ([`Facts`]): a raw
//! transaction gives its hash, fingerprint, call and sender; a tx hash this
//! instance forwarded gives its fingerprint and sender.

use std::str::FromStr;

use alloy_primitives::{Address, B256};
use serde::Deserialize;
use txgate_screen::{Fingerprint, Millis, Screen, decode, decode_hex, recover_sender, tx_hash};

use super::Refused;

/// What a lookup or a lift names (JSON object or query string); hex
/// strings, `0x` optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Query {
    pub(super) tx_hash: Option<String>,
    pub(super) fingerprint: Option<String>,
    pub(super) sender: Option<String>,
    pub(super) raw: Option<String>,
}

impl Query {
    pub(super) fn from_query(query: &str) -> Result<Query, Refused> {
        let mut q = Query::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match key {
                "tx_hash" => &mut q.tx_hash,
                "fingerprint" => &mut q.fingerprint,
                "sender" => &mut q.sender,
                "raw" => &mut q.raw,
                _ => {
                    return Err(Refused::bad(format!(
                        "unknown parameter `{}` (tx_hash, fingerprint, sender, raw)",
                        key.chars().take(32).collect::<String>()
                    )));
                }
            };
            *slot = Some(value.to_owned());
        }
        Ok(q)
    }
}

/// What a lookup learns from its query.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub(super) tx_hash: Option<B256>,
    pub(super) fingerprint: Option<B256>,
    pub(super) sender: Option<Address>,
    pub(super) call: Option<(Address, [u8; 4])>,
    /// The forwarded map's entry for the tx hash.
    pub(super) forwarded: Option<(B256, Address)>,
}

impl Facts {
    pub(super) fn of(q: &Query, screen: &Screen, now: Millis) -> Result<Facts, Refused> {
        if q.tx_hash.is_none() && q.fingerprint.is_none() && q.sender.is_none() && q.raw.is_none() {
            return Err(Refused::bad(
                "name a tx_hash, fingerprint, sender or raw transaction",
            ));
        }
        let mut f = Facts {
            tx_hash: q.tx_hash.as_deref().map(b256("tx_hash")).transpose()?,
            fingerprint: q
                .fingerprint
                .as_deref()
                .map(b256("fingerprint"))
                .transpose()?,
            sender: q.sender.as_deref().map(address).transpose()?,
            ..Facts::default()
        };
        if let Some(raw) = &q.raw {
            let bytes = decode_hex(raw).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            let tx = decode(&bytes).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            f.tx_hash.get_or_insert(tx_hash(&bytes));
            if let Some(fp) = Fingerprint::of(&tx) {
                f.fingerprint.get_or_insert(fp.hash);
                f.call = Some((fp.target, fp.selector));
            }
            let sender = recover_sender(&tx).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            f.sender.get_or_insert(sender);
        }
        // A tx hash this instance forwarded names its fingerprint and
        // sender too.
        if let Some(forward) = f.tx_hash.and_then(|h| screen.forwarded(&h, now)) {
            f.forwarded = Some((forward.fingerprint.hash, forward.sender));
            f.fingerprint.get_or_insert(forward.fingerprint.hash);
            f.sender.get_or_insert(forward.sender);
            f.call
                .get_or_insert((forward.fingerprint.target, forward.fingerprint.selector));
        }
        Ok(f)
    }
}

pub(super) fn b256(what: &'static str) -> impl Fn(&str) -> Result<B256, Refused> {
    move |text| {
        B256::from_str(text.trim())
            .map_err(|_| Refused::bad(format!("{what} is not 32 bytes of hex")))
    }
}

pub(super) fn address(text: &str) -> Result<Address, Refused> {
    Address::from_str(text.trim()).map_err(|_| Refused::bad("sender is not 20 bytes of hex"))
}
