//! [`Registrar`]: makes a metric and registers it in one step, so every
//! domain's struct of handles reads as a list of names and helps.

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Registers metrics in one registry. A name registers once and every
/// name and help is a literal, so a failure here is a programming error
/// caught by the first test that builds [`crate::metrics::Metrics`].
pub(crate) struct Registrar<'a> {
    registry: &'a Registry,
}

impl<'a> Registrar<'a> {
    pub(crate) fn new(registry: &'a Registry) -> Self {
        Registrar { registry }
    }

    fn register<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        self.registry
            .register(Box::new(collector.clone()))
            .unwrap_or_else(|e| unreachable!("metric registers once: {e}"));
        collector
    }

    pub(crate) fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).unwrap_or_else(|e| unreachable!("{e}")))
    }

    pub(crate) fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).unwrap_or_else(|e| unreachable!("{e}")))
    }

    pub(crate) fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help).unwrap_or_else(|e| unreachable!("{e}")))
    }

    pub(crate) fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(Histogram::with_opts(opts).unwrap_or_else(|e| unreachable!("{e}")))
    }

    pub(crate) fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        labels: &[&str],
    ) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(HistogramVec::new(opts, labels).unwrap_or_else(|e| unreachable!("{e}")))
    }

    pub(crate) fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(
            IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|e| unreachable!("{e}")),
        )
    }

    pub(crate) fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(
            IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable!("{e}")),
        )
    }
}
