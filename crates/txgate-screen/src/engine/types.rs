//! The values the engine hands in and out: a submission as the stages
//! see it ([`Candidate`]) and what they decide ([`Rejection`] and its
//! [`Reason`], or [`Admitted`]); an [`Invalidation`] and what a batch of
//! them did ([`Applied`]); the cache [`Sizes`].

use alloy_primitives::{Address, B256};

use crate::assertion::AssertionKey;
use crate::fingerprint::Fingerprint;
use crate::recover::SignatureError;
use crate::ttl::Millis;
use crate::tx::{DecodeError, Tx};
use crate::wall::UnixMillis;

/// Why a submission is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Bad hex, bad envelope, wrong chain id (-32602).
    Invalid(DecodeError),
    /// Invalid or high-s signature (-32602).
    Signature(SignatureError),
    /// This very transaction failed recently (-32003).
    RecentFailure {
        /// The tx hash.
        tx_hash: B256,
        /// The assertion it failed, when known.
        assertion: Option<B256>,
    },
    /// The sender is backed off (429, -32005).
    SenderBackoff {
        /// Until the backoff ends.
        retry_after: Millis,
    },
    /// The fingerprint is denied (-32003).
    Denied {
        /// The fingerprint.
        fingerprint: B256,
        /// The assertions it failed.
        assertions: Vec<B256>,
    },
    /// The call's assertion is in cooldown and the trickle slot is taken
    /// (-32003).
    Cooldown {
        /// The fingerprint.
        fingerprint: B256,
        /// The assertion.
        assertion: Option<B256>,
        /// Until the next trickle slot.
        retry_after: Millis,
    },
    /// A suspect fingerprint already has a forward outstanding (-32003).
    Shaped {
        /// The fingerprint.
        fingerprint: B256,
        /// Until the outstanding forward's slot ends.
        retry_after: Millis,
    },
}

/// The reason of a decision, a bounded label set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Undecodable transaction.
    InvalidTransaction,
    /// Wrong chain id.
    WrongChainId,
    /// Bad signature.
    InvalidSignature,
    /// Recently failed tx hash.
    RecentFailure,
    /// Sender in backoff.
    SenderBackoff,
    /// Denied fingerprint.
    DeniedFingerprint,
    /// Assertion cooldown.
    AssertionCooldown,
    /// Suspect fingerprint with a forward outstanding.
    SuspectPending,
}

impl Reason {
    /// Every reason, for metric labels created up front.
    pub const ALL: [Reason; 8] = [
        Reason::InvalidTransaction,
        Reason::WrongChainId,
        Reason::InvalidSignature,
        Reason::RecentFailure,
        Reason::SenderBackoff,
        Reason::DeniedFingerprint,
        Reason::AssertionCooldown,
        Reason::SuspectPending,
    ];

    /// Position in [`Reason::ALL`] (its discriminant), for label tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidTransaction => "invalid_transaction",
            Reason::WrongChainId => "wrong_chain_id",
            Reason::InvalidSignature => "invalid_signature",
            Reason::RecentFailure => "recent_failure",
            Reason::SenderBackoff => "sender_backoff",
            Reason::DeniedFingerprint => "denied_fingerprint",
            Reason::AssertionCooldown => "assertion_cooldown",
            Reason::SuspectPending => "suspect_pending",
        }
    }
}

impl Rejection {
    /// The reason label.
    pub fn reason(&self) -> Reason {
        match self {
            Rejection::Invalid(DecodeError::WrongChainId { .. }) => Reason::WrongChainId,
            Rejection::Invalid(_) => Reason::InvalidTransaction,
            Rejection::Signature(_) => Reason::InvalidSignature,
            Rejection::RecentFailure { .. } => Reason::RecentFailure,
            Rejection::SenderBackoff { .. } => Reason::SenderBackoff,
            Rejection::Denied { .. } => Reason::DeniedFingerprint,
            Rejection::Cooldown { .. } => Reason::AssertionCooldown,
            Rejection::Shaped { .. } => Reason::SuspectPending,
        }
    }
}

/// A submission as the stages learn about it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The time of the decision.
    pub now: Millis,
    /// Raw transaction bytes.
    pub raw: Vec<u8>,
    /// Tx hash, from the raw bytes.
    pub hash: B256,
    /// Decoded transaction (after stage 3).
    pub tx: Option<Tx>,
    /// Sender (after stage 4).
    pub sender: Option<Address>,
    /// Fingerprint (after stage 6; `None` for contract creations).
    pub fingerprint: Option<Fingerprint>,
    /// Whether the sender came from the cache.
    pub sender_cached: bool,
    /// Whether the fingerprint was suspect (shaped).
    pub suspect: bool,
    /// Whether its call is in cooldown and the trickle slot was open when
    /// the fingerprint was checked: the slot is taken by the commit, once
    /// every other check passed (a call refused in between, for a bad
    /// signature or a backed-off sender, leaves the slot to the next).
    pub trickle: bool,
}

/// Why a unit of calls (a bundle) is refused as a whole: the first of its
/// calls refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitRejection {
    /// The call's position in the unit.
    pub index: usize,
    /// Its tx hash (`None`: its param is not hex).
    pub tx_hash: Option<B256>,
    /// What the single call would be told.
    pub rejection: Rejection,
}

/// What an admitted submission carries on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Tx hash.
    pub hash: B256,
    /// Sender.
    pub sender: Address,
    /// Fingerprint, `None` for a contract creation.
    pub fingerprint: Option<B256>,
    /// Whether it went through queue shaping.
    pub suspect: bool,
}

/// One verdict from the sidecar: this transaction invalidated this
/// assertion.
///
/// It carries its own start: its ban and its failure's window run from
/// there, wherever and however often it is applied (see [`crate::wall`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalidation {
    /// Fingerprint hash.
    pub fingerprint: B256,
    /// Call target (for cooldowns).
    pub target: Address,
    /// Selector (for cooldowns).
    pub selector: [u8; 4],
    /// The assertion it failed; `None` when the source names none.
    pub assertion: Option<AssertionKey>,
    /// The failing tx, when the sidecar knows it.
    pub tx_hash: Option<B256>,
    /// Its sender, when the sidecar knows it.
    pub sender: Option<Address>,
    /// When the failure was first observed, or the ban issued, at its
    /// origin, on the wall clock (a monotonic time means nothing on
    /// another host): what txgate learns itself is stamped when it learns
    /// it; what another instance or a log hands on keeps the origin's.
    pub started: UnixMillis,
}

impl Invalidation {
    /// An invalidation of `tx` (sender known) under an assertion, if any,
    /// that started at `started`; `None` for a contract creation, which
    /// has no fingerprint.
    pub fn of(
        tx: &Tx,
        sender: Option<Address>,
        assertion: Option<AssertionKey>,
        started: UnixMillis,
    ) -> Option<Self> {
        let fp = Fingerprint::of(tx)?;
        Some(Invalidation {
            fingerprint: fp.hash,
            target: fp.target,
            selector: fp.selector,
            assertion,
            tx_hash: Some(tx.hash),
            sender,
            started,
        })
    }
}

/// What a batch of invalidations did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// New denied fingerprints.
    pub banned: usize,
    /// Invalidations of a fingerprint already denied: its ban ends at the
    /// later of its end and this one's (a repeat or a replay moves
    /// nothing; only a later failure of the fingerprint extends it).
    pub refreshed: usize,
    /// Invalidations whose ban's life was over before they were applied
    /// (a replay, or a ban learned late): nothing applied.
    pub expired: usize,
    /// Invalidations of an outdated assertion version, ignored.
    pub stale: usize,
    /// Assertion versions bumped (older bans lifted).
    pub bumped: usize,
    /// Tx hashes added to the recent-failure cache.
    pub recent_failures: usize,
    /// Invalidations charged to a sender.
    pub charged: usize,
    /// Senders that entered backoff.
    pub backoffs: usize,
    /// Charges lost because the sender table is full of backed-off senders.
    pub untracked: usize,
    /// Cooldowns started.
    pub cooldowns: usize,
    /// Failures already learned (from another source, twice in the batch,
    /// or replayed): by their tx hash while it is a recent failure, else
    /// by a ban they did not extend. Nobody charged again, nothing counted
    /// again.
    pub duplicates: usize,
}

/// Cache sizes, for gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Denied and suspect fingerprints.
    pub denied: usize,
    /// Recently failed tx hashes.
    pub recent_failures: usize,
    /// Cached senders.
    pub senders: usize,
    /// Senders under backpressure.
    pub backpressured: usize,
    /// Pending fingerprints.
    pub pending: usize,
    /// Forwarded tx hashes remembered.
    pub forwarded: usize,
    /// Calls in cooldown.
    pub cooldowns: usize,
    /// Assertions known.
    pub assertions: usize,
    /// Hot calls held.
    pub hot_calls: usize,
}
