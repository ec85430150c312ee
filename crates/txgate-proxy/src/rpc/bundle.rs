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

pub mod parse;

use std::net::IpAddr;

use txgate_jsonrpc::Call;
use txgate_screen::Reason;

use super::Shared;
use crate::metrics::BundleResult;
use crate::rpc::rescue::Refusal;
use crate::screening;

pub use parse::{METHOD, Malformed, parse_txs};

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
