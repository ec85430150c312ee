//! The node group's metrics: each node's state, head and calls, labelled
//! by the node's name (never its URL, which may carry an API key); the
//! agreed head; failovers and calls with nowhere to go; op-conductor's
//! leader and the answers it did not give.

use std::collections::HashMap;

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::http::{KNOWN_METHODS, LATENCY_BUCKETS};
use super::registrar::Registrar;

/// Why a call went to another node than the first chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    /// The request was never written whole (connect or write failed).
    NotWritten,
    /// A read failed after it was written and was asked again elsewhere.
    ReadRetry,
}

impl Failover {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Failover::NotWritten => "not_written",
            Failover::ReadRetry => "read_retry",
        }
    }
}

/// Why op-conductor named no sequencer of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConductorMiss {
    /// No HTTP answer (refused, timed out, broken), or not a 2xx.
    Call,
    /// An answer that is not a `conductor_leaderWithID` result (an error
    /// object, not JSON).
    Answer,
    /// It knows no leader (an election under way).
    NoLeader,
    /// Its leader is no sequencer's `conductor_id`.
    UnknownId,
}

impl ConductorMiss {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ConductorMiss::Call => "call",
            ConductorMiss::Answer => "answer",
            ConductorMiss::NoLeader => "no_leader",
            ConductorMiss::UnknownId => "unknown_id",
        }
    }
}

/// The node group.
pub struct NodeMetrics {
    up: IntGaugeVec,
    head: IntGaugeVec,
    lag: IntGaugeVec,
    calls: IntCounterVec,
    duration: HistogramVec,
    failovers: IntCounterVec,
    no_healthy: IntCounterVec,
    leader: IntGaugeVec,
    conductor_errors: IntCounterVec,
    /// The group's agreed head (0 before one is known).
    pub agreed_head: IntGauge,
    /// Probes that failed, all nodes.
    pub probe_failures: IntCounter,
    /// Submission log lines left out over `log.submissions_per_sec`.
    pub submission_log_suppressed: IntCounter,
    by_method: HashMap<&'static str, Histogram>,
    other_method: Histogram,
    batch: Histogram,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

/// One node's series, taken once when the group is built.
#[derive(Debug, Clone)]
pub struct NodeSeries {
    /// 1 while the node takes calls.
    pub up: IntGauge,
    /// Its last reported head.
    pub head: IntGauge,
    /// Blocks behind the group's best head.
    pub lag: IntGauge,
    /// Calls sent to it.
    pub calls: IntCounter,
    /// Its round trips.
    pub duration: prometheus::Histogram,
}

impl NodeMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> NodeMetrics {
        let by_method = r.histogram_vec(
            "upstream_method_duration_seconds",
            "Upstream round trips of lone calls by method (unlisted: other; batches: batch), \
             failovers included",
            LATENCY_BUCKETS,
            &["method"],
        );
        let failovers = r.counter_vec(
            "upstream_failovers_total",
            "Calls sent to another node than the first chosen, by reason",
            &["reason"],
        );
        for why in [Failover::NotWritten, Failover::ReadRetry] {
            failovers.with_label_values(&[why.as_str()]);
        }
        let no_healthy = r.counter_vec(
            "upstream_no_healthy_total",
            "Calls answered 503 because no node of their role was healthy, by role",
            &["role"],
        );
        // At 0 from the start, so an alert's rate sees them before the
        // first miss.
        for role in ["sequencer", "replica", "builder"] {
            no_healthy.with_label_values(&[role]);
        }
        NodeMetrics {
            by_method: KNOWN_METHODS
                .iter()
                .map(|m| (*m, by_method.with_label_values(&[*m])))
                .collect(),
            other_method: by_method.with_label_values(&["other"]),
            batch: by_method.with_label_values(&["batch"]),
            submission_log_suppressed: r.counter(
                "submission_log_suppressed_total",
                "Forwarded-submission log lines left out over log.submissions_per_sec",
            ),
            up: r.gauge_vec(
                "upstream_node_up",
                "1 while the node takes calls (healthy, by probe and by its answers)",
                &["node", "role"],
            ),
            head: r.gauge_vec(
                "upstream_node_head",
                "The node's head block, from its last probe",
                &["node"],
            ),
            lag: r.gauge_vec(
                "upstream_node_lag_blocks",
                "Blocks the node's head is behind the group's best head",
                &["node"],
            ),
            calls: r.counter_vec(
                "upstream_node_calls_total",
                "Calls (and batches) sent to the node",
                &["node"],
            ),
            duration: r.histogram_vec(
                "upstream_node_duration_seconds",
                "The node's round trips, request to full body",
                LATENCY_BUCKETS,
                &["node"],
            ),
            failovers,
            no_healthy,
            agreed_head: r.gauge(
                "upstream_agreed_head",
                "The block a quorum of healthy nodes has reached; latest reads are served at it",
            ),
            leader: r.gauge_vec(
                "upstream_leader",
                "1 for the sequencer op-conductor names leader (submissions go to it), 0 for \
                 the others; only with upstream.conductor_url",
                &["node"],
            ),
            conductor_errors: r.counter_vec(
                "upstream_conductor_errors_total",
                "Questions to op-conductor that named no sequencer of the group, by reason \
                 (call, answer, no_leader, unknown_id); the last known leader stays",
                &["reason"],
            ),
            probe_failures: r.counter(
                "upstream_probe_failures_total",
                "Node health probes that failed (error, timeout, or an answer without a result)",
            ),
        }
    }

    /// The series of the node `name` of `role`.
    pub fn node(&self, name: &str, role: &str) -> NodeSeries {
        NodeSeries {
            up: self.up.with_label_values(&[name, role]),
            head: self.head.with_label_values(&[name]),
            lag: self.lag.with_label_values(&[name]),
            calls: self.calls.with_label_values(&[name]),
            duration: self.duration.with_label_values(&[name]),
        }
    }

    /// The round-trip histogram of a lone call of `method`.
    pub fn method(&self, method: &str) -> &Histogram {
        self.by_method.get(method).unwrap_or(&self.other_method)
    }

    /// The round-trip histogram of batches.
    pub fn batch(&self) -> &Histogram {
        &self.batch
    }

    /// Counts one failover.
    pub fn failover(&self, why: Failover) {
        self.failovers.with_label_values(&[why.as_str()]).inc();
    }

    /// The sequencer `name`'s `txgate_upstream_leader` series.
    pub fn leader(&self, name: &str) -> IntGauge {
        self.leader.with_label_values(&[name])
    }

    /// Counts one question to op-conductor that named no sequencer.
    pub fn conductor_error(&self, why: ConductorMiss) {
        self.conductor_errors
            .with_label_values(&[why.as_str()])
            .inc();
    }

    /// Counts one call with no healthy node of `role`.
    pub fn no_healthy(&self, role: &str) {
        self.no_healthy.with_label_values(&[role]).inc();
    }
}
