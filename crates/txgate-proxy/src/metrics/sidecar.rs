//! Sidecar metrics: the invalidation stream, its queue and batches, and
//! the ShouldForward probe.

use prometheus::{Gauge, Histogram, IntCounter, IntGauge, IntGaugeVec};
use txgate_proto::results::Status;

use super::registrar::Registrar;

/// Lag buckets in seconds, 1 ms to 10 s.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Why a sidecar link went down:
/// `txgate_sidecar_stream_ends_total{reason}`, and the source's `error` in
/// `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The sidecar ended the stream.
    Ended,
    /// The stream failed (reset, gRPC error status).
    Broken,
    /// A message over `sidecar.max_message_bytes` (refused from its length
    /// prefix, before it is read).
    TooLarge,
    /// A message that is not protobuf of the expected type.
    Undecodable,
    /// Connect or subscribe failed.
    Unreachable,
    /// The server does not serve the configured protocol.
    Unimplemented,
}

impl StreamEnd {
    /// Every reason, in label order.
    pub const ALL: [StreamEnd; 6] = [
        StreamEnd::Ended,
        StreamEnd::Broken,
        StreamEnd::TooLarge,
        StreamEnd::Undecodable,
        StreamEnd::Unreachable,
        StreamEnd::Unimplemented,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamEnd::Ended => "ended",
            StreamEnd::Broken => "broken",
            StreamEnd::TooLarge => "too_large",
            StreamEnd::Undecodable => "undecodable",
            StreamEnd::Unreachable => "unreachable",
            StreamEnd::Unimplemented => "unimplemented",
        }
    }

    /// How a stream that failed with `status` ended. tonic answers a
    /// length prefix over the cap with OUT_OF_RANGE and a protobuf it
    /// cannot decode with INTERNAL (a server's own INTERNAL is read as
    /// broken: its message does not start like a decode error).
    pub fn broken(status: &tonic::Status) -> StreamEnd {
        match status.code() {
            tonic::Code::OutOfRange if status.message().contains("too large") => {
                StreamEnd::TooLarge
            }
            tonic::Code::Internal if status.message().starts_with("failed to decode") => {
                StreamEnd::Undecodable
            }
            _ => StreamEnd::Broken,
        }
    }
}

/// `txgate_should_forward_total{result}`: ShouldForward probes by outcome.
#[derive(Debug)]
pub struct ProbeCounters {
    /// The sidecar said forward.
    pub forward: IntCounter,
    /// The sidecar said deny.
    pub deny: IntCounter,
    /// No answer within the deadline: forwarded.
    pub timeout: IntCounter,
    /// The call failed: forwarded.
    pub error: IntCounter,
    /// Not asked: `sidecar.max_probes_in_flight` questions were in flight.
    pub saturated: IntCounter,
    /// The sidecar had no opinion (`rpcproxy.v1` UNKNOWN): forwarded.
    pub unknown: IntCounter,
    /// `txgate_should_forward_cold_total`: not asked, the call is cold
    /// (`sidecar.should_forward_scope = "hot"`).
    pub cold: IntCounter,
}

/// The result stream (`sidecar.transport.v1`).
#[derive(Debug)]
pub struct ResultCounters {
    /// `txgate_sidecar_results_total{status}`, indexed by [`Status::index`].
    pub by_status: [IntCounter; Status::ALL.len()],
    /// Assertion failures of a hash txgate forwarded (banned, charged).
    pub known: IntCounter,
    /// Assertion failures of a hash txgate did not forward or no longer
    /// remembers (refused by hash only).
    pub unknown: IntCounter,
    /// Assertion failures without a 32-byte tx hash.
    pub malformed: IntCounter,
}

/// `txgate_fleet_bans_total{event}`: bans shared with the fleet's other
/// instances through the ban log in Redis, and the log's gauges.
#[derive(Debug)]
pub struct FleetBanCounters {
    /// Learned here from a source only this instance hears, and appended
    /// (Redis confirmed).
    pub appended: IntCounter,
    /// Appends that failed (their bans stay in the outbox and are retried).
    pub append_failed: IntCounter,
    /// Appends through Sentinel that no replica had yet when first asked
    /// (`WAIT`): confirmed once one has, or after 2 s on the primary
    /// alone.
    pub unreplicated: IntCounter,
    /// Appends whose trim (`XTRIM`) the server refused: the append stands,
    /// and the log is only trimmed by age.
    pub trim_failed: IntCounter,
    /// Not appended: the outbox full, or still waiting at stop (the ban
    /// holds here).
    pub dropped: IntCounter,
    /// Read from another instance's entry and applied.
    pub received: IntCounter,
    /// Of those, read from entries that were in the log when this
    /// instance connected (a replay after a start, a reconnect or a reset).
    pub replayed: IntCounter,
    /// Entries that did not parse (not applied).
    pub malformed: IntCounter,
    /// Connections to Redis for the log that failed or ended.
    pub reconnects: IntCounter,
    /// Reconnects that found unread entries cut while live (bans possibly
    /// never learned here).
    pub gaps: IntCounter,
    /// Reconnects that found this instance ahead of the log (a failover to
    /// a replica that missed entries): the log is read again whole.
    pub resets: IntCounter,
    /// `txgate_fleet_ban_log_outbox`: bans waiting to be appended.
    pub outbox: IntGauge,
    /// `txgate_fleet_ban_log_lag_seconds`: how far behind the log's end the
    /// reader is, by the age of the last entry it applied (0 when caught
    /// up).
    pub lag_seconds: Gauge,
    /// `txgate_fleet_ban_log_lag_entries`: entries appended to the log that
    /// this instance has not read (measured each second).
    pub lag_entries: IntGauge,
}

/// Sidecar link metrics.
pub struct SidecarMetrics {
    /// Sources whose stream is open.
    pub up: IntGauge,
    /// 1 while a source's stream is open, by protocol and url.
    pub source_up: IntGaugeVec,
    /// Stream (re)connection attempts that failed or streams that ended.
    pub reconnects: IntCounter,
    /// The same, by reason ([`StreamEnd`] order).
    pub stream_ends: Vec<IntCounter>,
    /// Invalidations of a newer schema version than this build speaks
    /// (applied: the fields it knows keep their meaning).
    pub newer_schema: IntCounter,
    /// Invalidations received.
    pub received: IntCounter,
    /// 1 once a replaying source has sent its live set (caught up), by
    /// protocol and url; 0 while it replays or is down.
    pub caught_up: IntGaugeVec,
    /// Invalidations received as a replay of the sidecar's live set.
    pub replayed: IntCounter,
    /// Replayed invalidations older than txgate's ban TTL: not applied
    /// (already expired on the instances that learned them live).
    pub replayed_expired: IntCounter,
    /// Invalidations refused as malformed (counted and logged, not applied).
    pub malformed: IntCounter,
    /// Times the queue was full and the stream waited for room.
    pub queue_full: IntCounter,
    /// Invalidations queued, not yet applied.
    pub queue_depth: IntGauge,
    /// Batches applied.
    pub batches: IntCounter,
    /// Sidecar's observation to txgate reading it, seconds.
    pub lag: Histogram,
    /// ShouldForward outcomes.
    pub probe: ProbeCounters,
    /// The result stream.
    pub results: ResultCounters,
    /// Bans shared with the fleet.
    pub fleet_bans: FleetBanCounters,
}

impl std::fmt::Debug for SidecarMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarMetrics").finish_non_exhaustive()
    }
}

impl SidecarMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> SidecarMetrics {
        let probe = r.counter_vec(
            "should_forward_total",
            "ShouldForward probes by outcome",
            &["result"],
        );
        let result = |name: &str| probe.with_label_values(&[name]);
        let statuses = r.counter_vec(
            "sidecar_results_total",
            "Transaction results from the sidecar's result stream, by status",
            &["status"],
        );
        let failures = r.counter_vec(
            "sidecar_result_failures_total",
            "Assertion failures from the result stream, by what txgate knew of the hash",
            &["hash"],
        );
        let fleet = r.counter_vec(
            "fleet_bans_total",
            "Bans shared with the fleet's other instances through the ban log in Redis, by event",
            &["event"],
        );
        let event = |name: &str| fleet.with_label_values(&[name]);
        SidecarMetrics {
            fleet_bans: FleetBanCounters {
                appended: event("appended"),
                append_failed: event("append_failed"),
                unreplicated: event("unreplicated"),
                trim_failed: event("trim_failed"),
                dropped: event("dropped"),
                received: event("received"),
                replayed: event("replayed"),
                malformed: event("malformed"),
                reconnects: event("reconnect"),
                gaps: event("gap"),
                resets: event("reset"),
                outbox: r.gauge("fleet_ban_log_outbox", "Bans waiting to be appended to the fleet's ban log"),
                lag_seconds: r.float_gauge(
                    "fleet_ban_log_lag_seconds",
                    "How far behind the fleet's ban log this instance reads (age of the last entry applied; 0 when caught up)",
                ),
                lag_entries: r.gauge(
                    "fleet_ban_log_lag_entries",
                    "Entries of the fleet's ban log this instance has not read",
                ),
            },
            up: r.gauge("sidecar_up", "Sidecar sources whose stream is open"),
            source_up: r.gauge_vec(
                "sidecar_source_up",
                "1 while this sidecar source's stream is open",
                &["protocol", "url"],
            ),
            reconnects: r.counter(
                "sidecar_reconnects_total",
                "Sidecar connection attempts that failed and streams that ended",
            ),
            stream_ends: {
                let ends = r.counter_vec(
                    "sidecar_stream_ends_total",
                    "Sidecar links that went down, by reason",
                    &["reason"],
                );
                StreamEnd::ALL
                    .iter()
                    .map(|e| ends.with_label_values(&[e.as_str()]))
                    .collect()
            },
            newer_schema: r.counter(
                "sidecar_invalidations_newer_schema_total",
                "Invalidations of a newer schema version than this build speaks (applied by the fields it knows)",
            ),
            received: r.counter(
                "sidecar_invalidations_received_total",
                "Invalidations received from the sidecar",
            ),
            caught_up: r.gauge_vec(
                "sidecar_caught_up",
                "1 once this source has replayed its live invalidations (txgate.v1 with replay)",
                &["protocol", "url"],
            ),
            replayed: r.counter(
                "sidecar_invalidations_replayed_total",
                "Invalidations received as a replay of the sidecar's live set on subscription",
            ),
            replayed_expired: r.counter(
                "sidecar_invalidations_replayed_expired_total",
                "Replayed invalidations older than the ban TTL, not applied",
            ),
            malformed: r.counter(
                "sidecar_invalidations_malformed_total",
                "Invalidations refused as malformed (not applied)",
            ),
            queue_full: r.counter(
                "sidecar_queue_full_total",
                "Times the invalidation queue was full and the stream waited for room",
            ),
            queue_depth: r.gauge(
                "sidecar_queue_depth",
                "Invalidations received and not yet applied",
            ),
            batches: r.counter("sidecar_batches_total", "Batches of invalidations applied"),
            lag: r.histogram(
                "sidecar_lag_seconds",
                "From the sidecar observing an invalidation to txgate reading it",
                LAG_BUCKETS,
            ),
            probe: ProbeCounters {
                forward: result("forward"),
                deny: result("deny"),
                timeout: result("timeout"),
                error: result("error"),
                saturated: result("saturated"),
                unknown: result("unknown"),
                cold: r.counter(
                    "should_forward_cold_total",
                    "Calls with a fingerprint not asked about with ShouldForward: their call is cold",
                ),
            },
            results: ResultCounters {
                by_status: Status::ALL.map(|s| statuses.with_label_values(&[s.as_str()])),
                known: failures.with_label_values(&["forwarded"]),
                unknown: failures.with_label_values(&["unknown"]),
                malformed: failures.with_label_values(&["malformed"]),
            },
        }
    }
}
