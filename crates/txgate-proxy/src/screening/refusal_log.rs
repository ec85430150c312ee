//! The refusal log: one structured line per refused screened call, target
//! `txgate::refusal`, at most `log.refusals_per_sec` lines a second per
//! reason (burst `log.refusals_burst`), so an attack cannot flood the log
//! nor hide one reason behind another. The lines not written are counted
//! (`txgate_refusal_log_suppressed_total{reason}`) and the next line of the
//! same reason says how many it stands for.
//!
//! Fields, for log pipelines (JSON with `--log-format json`):
//!
//! | field | what |
//! |---|---|
//! | `reason` | the decision's reason, as in `txgate_screen_decisions_total` |
//! | `tx_hash` | keccak256 of the raw transaction (absent: not hex) |
//! | `fingerprint` | the call's fingerprint (absent: undecodable, or a creation) |
//! | `sender` | the recovered sender (absent: undecodable or bad signature) |
//! | `client` | the client's address (behind a trusted balancer, the one it named) |
//! | `assertions` | the assertion ids the refusal names, comma-separated |
//! | `bundle_index` | an `eth_sendBundle`'s: the refused transaction's position in `txs` (the other fields are that transaction's) |
//! | `monitor_only` | true: the call was forwarded (monitor-only mode) |
//! | `suppressed` | lines of this reason left out since the previous one |
//!
//! The details are worked out again from the raw param, for the sampled
//! lines only (the request path keeps none of them for this): at most one
//! ECDSA recovery per line written.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Instant;

use alloy_primitives::B256;
use prometheus::IntCounter;
use txgate_config::LogConfig;
use txgate_limits::{Rate, Sampler};
use txgate_screen::{Fingerprint, Reason, Rejection, decode, decode_hex, recover_sender, tx_hash};

use crate::metrics::ScreenMetrics;

/// See the module docs.
#[derive(Debug)]
pub struct RefusalLog {
    sampler: Sampler,
    epoch: Instant,
    suppressed: Vec<IntCounter>,
}

impl RefusalLog {
    /// A log at `config`'s rate, counting in `metrics`.
    pub fn new(config: &LogConfig, metrics: &ScreenMetrics) -> RefusalLog {
        RefusalLog {
            sampler: Sampler::new(
                Rate::new(config.refusals_per_sec, config.refusals_burst),
                Reason::ALL.len(),
            ),
            epoch: Instant::now(),
            suppressed: metrics.refusal_log_suppressed.clone(),
        }
    }

    /// One refusal at `at`: written if its reason is under its rate, else
    /// counted. `param` is the raw transaction, when there was one.
    pub fn refused(&self, at: Instant, refusal: &Refused<'_>) {
        let reason = refusal.reason;
        let now =
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let Some(suppressed) = self.sampler.sample(reason.index(), now) else {
            if let Some(counter) = self.suppressed.get(reason.index()) {
                counter.inc();
            }
            return;
        };
        let details = Details::of(refusal.param, refusal.rejection);
        tracing::info!(
            target: "txgate::refusal",
            reason = reason.as_str(),
            tx_hash = details.tx_hash.map(tracing::field::display),
            fingerprint = details.fingerprint.map(tracing::field::display),
            sender = details.sender.map(tracing::field::display),
            client = refusal.client.map(tracing::field::display),
            assertions = details.assertions.as_deref(),
            bundle_index = refusal.bundle_index,
            monitor_only = refusal.monitor_only,
            suppressed,
            "{}",
            if refusal.monitor_only { "would refuse" } else { "refused" }
        );
    }
}

/// What a refusal line is about.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// Why.
    pub reason: Reason,
    /// The stage's rejection (`None`: no raw param to screen).
    pub rejection: Option<&'a Rejection>,
    /// The raw transaction param (a bundle's: the refused transaction).
    pub param: Option<&'a str>,
    /// A bundle's: the refused transaction's position in it (`None`: a
    /// lone call, or a malformed bundle).
    pub bundle_index: Option<usize>,
    /// The client.
    pub client: Option<IpAddr>,
    /// Forwarded anyway (monitor-only mode).
    pub monitor_only: bool,
}

/// The facts of one refused call, as far as they can be read.
#[derive(Debug, Default, PartialEq, Eq)]
struct Details {
    tx_hash: Option<B256>,
    fingerprint: Option<B256>,
    sender: Option<alloy_primitives::Address>,
    assertions: Option<String>,
}

impl Details {
    fn of(param: Option<&str>, rejection: Option<&Rejection>) -> Details {
        let mut details = Details::default();
        let mut named = Vec::new();
        match rejection {
            Some(Rejection::Denied {
                fingerprint,
                assertions,
            }) => {
                details.fingerprint = Some(*fingerprint);
                named.extend(assertions.iter().copied());
            }
            Some(Rejection::Cooldown {
                fingerprint,
                assertion,
                ..
            }) => {
                details.fingerprint = Some(*fingerprint);
                named.extend(*assertion);
            }
            Some(Rejection::Shaped { fingerprint, .. }) => {
                details.fingerprint = Some(*fingerprint);
            }
            Some(Rejection::RecentFailure { assertion, .. }) => named.extend(*assertion),
            _ => {}
        }
        if !named.is_empty() {
            let mut text = String::with_capacity(named.len() * 67);
            for (i, id) in named.iter().enumerate() {
                let _ = write!(text, "{}{id}", if i == 0 { "" } else { "," });
            }
            details.assertions = Some(text);
        }
        let Some(raw) = param.and_then(|p| decode_hex(p).ok()) else {
            return details;
        };
        details.tx_hash = Some(tx_hash(&raw));
        if let Ok(tx) = decode(&raw) {
            if details.fingerprint.is_none() {
                details.fingerprint = Fingerprint::of(&tx).map(|f| f.hash);
            }
            details.sender = recover_sender(&tx).ok();
        }
        details
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_come_from_the_rejection_and_the_raw_param() {
        let fingerprint = B256::repeat_byte(7);
        let denied = Rejection::Denied {
            fingerprint,
            assertions: vec![B256::repeat_byte(1), B256::repeat_byte(2)],
        };
        let d = Details::of(Some("0xzz"), Some(&denied));
        assert_eq!(d.fingerprint, Some(fingerprint));
        assert_eq!(d.tx_hash, None);
        let ids = d.assertions.unwrap_or_default();
        assert_eq!(ids.split(',').count(), 2);
        assert!(ids.starts_with(&format!("{}", B256::repeat_byte(1))));
        // Undecodable bytes still have a hash.
        let d = Details::of(Some("0x01"), None);
        assert_eq!(d.tx_hash, Some(tx_hash(&[1])));
        assert_eq!((d.sender, d.fingerprint), (None, None));
        assert_eq!(Details::of(None, None), Details::default());
    }

    #[test]
    fn a_flood_of_one_reason_writes_its_rate_and_counts_the_rest() {
        let metrics = crate::metrics::Metrics::new();
        let config = LogConfig {
            refusals_per_sec: 5,
            refusals_burst: 5,
            ..LogConfig::default()
        };
        let log = RefusalLog::new(&config, &metrics.screen);
        let at = Instant::now();
        let refused = |reason| Refused {
            reason,
            rejection: None,
            param: None,
            bundle_index: None,
            client: None,
            monitor_only: false,
        };
        for _ in 0..1000 {
            log.refused(at, &refused(Reason::DeniedFingerprint));
        }
        log.refused(at, &refused(Reason::RecentFailure));
        let suppressed = &metrics.screen.refusal_log_suppressed;
        assert_eq!(suppressed[Reason::DeniedFingerprint.index()].get(), 995);
        assert_eq!(suppressed[Reason::RecentFailure.index()].get(), 0);
    }
}
