//! The ban endpoints of the admin listener: requests by endpoint and
//! result, and every change they made.

use prometheus::IntCounter;

use super::registrar::Registrar;

/// A ban endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/bans/lookup`.
    Lookup,
    /// `/bans` (export).
    Export,
    /// `/bans/lift`.
    Lift,
    /// `/bans/import`.
    Import,
}

impl Endpoint {
    const ALL: [Endpoint; 4] = [
        Endpoint::Lookup,
        Endpoint::Export,
        Endpoint::Lift,
        Endpoint::Import,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Endpoint::Lookup => "lookup",
            Endpoint::Export => "export",
            Endpoint::Lift => "lift",
            Endpoint::Import => "import",
        }
    }
}

/// How a ban request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Served.
    Ok,
    /// Malformed (400, 405, 413, 408).
    BadRequest,
    /// Missing or wrong token (401).
    Unauthorized,
    /// No token configured and not from loopback (403).
    Forbidden,
    /// Screening is off: nothing to inspect (503).
    Unavailable,
}

impl Answered {
    const ALL: [Answered; 5] = [
        Answered::Ok,
        Answered::BadRequest,
        Answered::Unauthorized,
        Answered::Forbidden,
        Answered::Unavailable,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Answered::Ok => "ok",
            Answered::BadRequest => "bad_request",
            Answered::Unauthorized => "unauthorized",
            Answered::Forbidden => "forbidden",
            Answered::Unavailable => "unavailable",
        }
    }
}

/// A change made by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A fingerprint's ban lifted.
    LiftFingerprint,
    /// A sender's backoff lifted.
    LiftSender,
    /// A tx hash taken out of the recent failures.
    LiftTxHash,
    /// A ban imported.
    Import,
}

impl Change {
    const ALL: [Change; 4] = [
        Change::LiftFingerprint,
        Change::LiftSender,
        Change::LiftTxHash,
        Change::Import,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::LiftFingerprint => "lift_fingerprint",
            Change::LiftSender => "lift_sender",
            Change::LiftTxHash => "lift_tx_hash",
            Change::Import => "import",
        }
    }
}

/// See the module docs.
pub struct AdminMetrics {
    requests: Vec<IntCounter>,
    changes: Vec<IntCounter>,
}

impl std::fmt::Debug for AdminMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminMetrics").finish_non_exhaustive()
    }
}

impl AdminMetrics {
    pub(crate) fn new(r: &Registrar<'_>) -> AdminMetrics {
        let requests = r.counter_vec(
            "admin_ban_requests_total",
            "Requests to the admin listener's ban endpoints, by endpoint and result",
            &["endpoint", "result"],
        );
        let changes = r.counter_vec(
            "admin_ban_changes_total",
            "Changes made through the ban endpoints, by action (import: bans imported)",
            &["action"],
        );
        AdminMetrics {
            requests: Endpoint::ALL
                .iter()
                .flat_map(|e| {
                    Answered::ALL
                        .iter()
                        .map(|a| requests.with_label_values(&[e.as_str(), a.as_str()]))
                })
                .collect(),
            changes: Change::ALL
                .iter()
                .map(|c| changes.with_label_values(&[c.as_str()]))
                .collect(),
        }
    }

    /// Counts a request.
    pub fn request(&self, endpoint: Endpoint, answered: Answered) {
        self.requests[endpoint as usize * Answered::ALL.len() + answered as usize].inc();
    }

    /// The counter of a change.
    pub fn change(&self, change: Change) -> &IntCounter {
        &self.changes[change as usize]
    }
}
