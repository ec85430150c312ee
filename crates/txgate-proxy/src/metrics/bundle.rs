//! `txgate_screen_bundles_total{result}`: what screening did with each
//! `eth_sendBundle` (the refusing transaction's reason is counted in
//! `txgate_screen_decisions_total`, as a lone call's).

use prometheus::IntCounter;

use super::registrar::Registrar;

/// What became of one bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleResult {
    /// Every transaction passed: forwarded.
    Forwarded,
    /// A transaction refused it: answered here, nothing forwarded.
    Refused,
    /// A transaction would have refused it (monitor-only mode): forwarded.
    WouldRefuse,
    /// Its params are not one bundle object with one `txs` array of
    /// strings within `rpc.max_bundle_txs`: refused with -32602
    /// (forwarded in monitor-only mode).
    Malformed,
    /// An empty `txs` (nothing to screen; a cancellation for some
    /// builders): forwarded.
    Empty,
}

impl BundleResult {
    /// Every result, for the label set created up front.
    const ALL: [BundleResult; 5] = [
        BundleResult::Forwarded,
        BundleResult::Refused,
        BundleResult::WouldRefuse,
        BundleResult::Malformed,
        BundleResult::Empty,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            BundleResult::Forwarded => "forwarded",
            BundleResult::Refused => "refused",
            BundleResult::WouldRefuse => "would_refuse",
            BundleResult::Malformed => "malformed",
            BundleResult::Empty => "empty",
        }
    }
}

/// Bundle counters, one per result.
#[derive(Debug)]
pub struct BundleMetrics {
    results: Vec<IntCounter>,
}

impl BundleMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> BundleMetrics {
        let results = r.counter_vec(
            "screen_bundles_total",
            "eth_sendBundle calls screened, by result (forwarded, refused, would_refuse in \
             monitor-only mode, malformed, empty)",
            &["result"],
        );
        BundleMetrics {
            results: BundleResult::ALL
                .iter()
                .map(|result| results.with_label_values(&[result.as_str()]))
                .collect(),
        }
    }

    /// Counts one bundle.
    pub fn count(&self, result: BundleResult) {
        self.results[result as usize].inc();
    }
}
