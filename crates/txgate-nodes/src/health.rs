//! One node's health: the rules, the inputs, and the state kept per node.
//!
//! A node is [`Status::In`] (it serves) or [`Status::Out`] with a
//! [`Reason`]. The rules, and why:
//!
//! - A node starts out ([`Reason::Never`]): until it has reported a head,
//!   nothing says it serves the chain at all, and a proxy that has just
//!   started must not send calls to a node it has not yet seen answer.
//! - Out → in after `recover_after` good probes in a row. A good probe is
//!   [`Probe::Ok`], not syncing, on the right chain, and, judged against
//!   the other nodes at that moment, neither lagging nor stale. Requiring a
//!   run keeps a flapping node from taking calls between two failures.
//! - In → out after `fail_after` failed probes in a row ([`Reason::Failing`]):
//!   one lost probe is not a dead node. But out at once, with no run, when
//!   the node says it is syncing ([`Reason::Syncing`]), lags the group's
//!   best head by more than `max_block_lag` ([`Reason::Lagging`]), or is
//!   stale ([`Reason::Stale`]): those answer, so the node looks alive, and
//!   every call it takes returns old state.
//! - Stale: the node's head has not changed for `max_head_age` while
//!   another node's head passed it after that. A halted chain (no node
//!   advances) makes no node stale, and a node ahead of the others is not
//!   stale because a slower one moved.
//! - The group's best head is the highest head among the nodes that are
//!   neither on the wrong chain nor failing (`fail_after` failed probes in
//!   a row): a node whose probes fail has a head that says nothing about
//!   now. A node out for another reason still counts: a syncing node's head
//!   is still a head some node has.
//! - Wrong chain ([`Reason::WrongChain`]): a node that answers
//!   `eth_chainId` with an id outside `chain_ids`, or, whether `chain_ids`
//!   is given or not, different from the first accepted id the group saw,
//!   is never used again: it is a misconfiguration (a URL pointing at
//!   another network), not a transient fault, and a transaction signed for
//!   one chain must never reach another's node. The update that finds it
//!   says so once ([`crate::Update::newly_wrong_chain`]) for the caller to
//!   log. With `chain_ids` empty the first node to answer fixes the chain,
//!   so a misconfigured node that answers first shuts out the right ones:
//!   configure `chain_ids`.
//! - Passive signals from real calls: a connection refused
//!   ([`Passive::ConnectFailed`]) takes an in-node out at once
//!   ([`Reason::Passive`]): the node is not listening, and waiting for
//!   `fail_after` probe intervals would fail every call sent meanwhile. A
//!   5xx, a timeout or a reset ([`Passive::Failed`]) may be the call's own
//!   fault; a run of `passive_after` in a row takes the node out, and a
//!   real call answered ([`Passive::Ok`]) ends the run. A node taken out
//!   passively comes back like any other, by `recover_after` good probes.
//!
//! The reason an out-node shows is the latest cause: the one that took it
//! out, replaced by the cause of a later bad probe. [`Reason::Never`] stays
//! while the node has no head (failed probes do not replace it), then
//! until the node is first in or a cause replaces it; and
//! [`Reason::WrongChain`] stays for good.
//!
//! `fail_after`, `recover_after` and `passive_after` of 0 are taken as 1.

use crate::Millis;

/// The default run of failed real calls that takes a node out
/// ([`HealthRules::passive_after`]).
pub const PASSIVE_AFTER: u32 = 5;

/// The rules of health, shared by the nodes of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthRules {
    /// Failed probes in a row that take an in-node out.
    pub fail_after: u32,
    /// Good probes in a row that bring an out-node in.
    pub recover_after: u32,
    /// Blocks a node may be behind the group's best head and stay in.
    pub max_block_lag: u64,
    /// How long a node's head may stand still while another node's passes
    /// it, in milliseconds (0: stale as soon as another node passes it).
    pub max_head_age: Millis,
    /// The accepted chain ids; empty: any, as long as every node agrees
    /// with the first id the group saw.
    pub chain_ids: Vec<u64>,
    /// Failed real calls in a row that take an in-node out
    /// ([`PASSIVE_AFTER`] by default).
    pub passive_after: u32,
}

impl HealthRules {
    /// The rules with every run at least 1.
    pub(crate) fn normalized(mut self) -> HealthRules {
        self.fail_after = self.fail_after.max(1);
        self.recover_after = self.recover_after.max(1);
        self.passive_after = self.passive_after.max(1);
        self
    }

    /// Whether `chain_id` is accepted, given the group's chain so far.
    pub(crate) fn accepts(&self, chain_id: u64, group_chain: Option<u64>) -> bool {
        (self.chain_ids.is_empty() || self.chain_ids.contains(&chain_id))
            && group_chain.is_none_or(|c| c == chain_id)
    }
}

/// The result of one probe of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The node answered all three calls.
    Ok {
        /// `eth_chainId`.
        chain_id: u64,
        /// `eth_blockNumber`.
        head: u64,
        /// `eth_syncing` said the node is syncing.
        syncing: bool,
    },
    /// A call failed: no connection, a timeout, an error or an answer that
    /// does not parse.
    Failed,
}

/// What a real call forwarded to the node saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passive {
    /// The node answered (any JSON-RPC answer, errors included).
    Ok,
    /// A 5xx, a timeout or a reset.
    Failed,
    /// The connection was refused or could not be made.
    ConnectFailed,
}

/// Whether a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The node serves.
    In,
    /// The node does not serve, and why.
    Out(Reason),
}

impl Status {
    /// Whether the node serves.
    pub fn is_in(self) -> bool {
        self == Status::In
    }
}

/// Why a node is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The node has never been in: it has not reported a head, or its
    /// first run of good probes is still counting.
    Never,
    /// `fail_after` failed probes in a row.
    Failing,
    /// The node said it is syncing.
    Syncing,
    /// More than `max_block_lag` blocks behind the group's best head.
    Lagging,
    /// The head stood still for `max_head_age` while another node's passed
    /// it.
    Stale,
    /// The node answered for another chain; it is never used.
    WrongChain,
    /// Real calls failed: a refused connection, or `passive_after` failures
    /// in a row.
    Passive,
}

impl Reason {
    /// The reason's name on `/readyz` and in metrics: `never`, `failing`,
    /// `syncing`, `lagging`, `stale`, `wrong_chain`, `passive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Never => "never",
            Reason::Failing => "failing",
            Reason::Syncing => "syncing",
            Reason::Lagging => "lagging",
            Reason::Stale => "stale",
            Reason::WrongChain => "wrong_chain",
            Reason::Passive => "passive",
        }
    }
}

/// A node's head and when it last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) number: u64,
    pub(crate) changed_at: Millis,
}

/// One node's health state; changed only by [`crate::Group`].
#[derive(Debug, Clone)]
pub(crate) struct Health {
    status: Status,
    good_run: u32,
    fail_run: u32,
    passive_run: u32,
    head: Option<Head>,
    syncing: bool,
    wrong_chain: bool,
}

impl Health {
    /// A node never seen: out, [`Reason::Never`].
    pub(crate) fn new() -> Health {
        Health {
            status: Status::Out(Reason::Never),
            good_run: 0,
            fail_run: 0,
            passive_run: 0,
            head: None,
            syncing: false,
            wrong_chain: false,
        }
    }

    pub(crate) fn status(&self) -> Status {
        self.status
    }

    pub(crate) fn head(&self) -> Option<Head> {
        self.head
    }

    pub(crate) fn is_wrong_chain(&self) -> bool {
        self.wrong_chain
    }

    /// The head this node adds to the group's best head: none when it is
    /// on the wrong chain or failing.
    pub(crate) fn counted_head(&self, rules: &HealthRules) -> Option<Head> {
        if self.wrong_chain || self.fail_run >= rules.fail_after {
            None
        } else {
            self.head
        }
    }

    /// Takes the node out for `reason` and ends its good run. Never stays
    /// while the node has no head, and WrongChain for good.
    fn out(&mut self, reason: Reason) {
        self.good_run = 0;
        if !self.wrong_chain && self.head.is_some() {
            self.status = Status::Out(reason);
        }
    }

    /// The node answered for a chain it must not serve; true the first
    /// time.
    pub(crate) fn wrong_chain(&mut self) -> bool {
        let newly = !self.wrong_chain;
        self.wrong_chain = true;
        self.good_run = 0;
        self.status = Status::Out(Reason::WrongChain);
        newly
    }

    /// A failed probe.
    pub(crate) fn probe_failed(&mut self, rules: &HealthRules) {
        if self.wrong_chain {
            return;
        }
        self.good_run = 0;
        self.fail_run = self.fail_run.saturating_add(1);
        if self.fail_run >= rules.fail_after {
            self.out(Reason::Failing);
        }
    }

    /// An answered probe on the right chain: records the head (its time of
    /// change when it differs) and the syncing flag; the verdict comes
    /// with [`Health::judge`] once the group's best head is known.
    pub(crate) fn probe_answered(&mut self, now: Millis, head: u64, syncing: bool) {
        if self.wrong_chain {
            return;
        }
        self.fail_run = 0;
        self.syncing = syncing;
        if self.head.is_none_or(|h| h.number != head) {
            self.head = Some(Head {
                number: head,
                changed_at: now,
            });
        }
    }

    /// The verdict on an answered probe: `against` is what lag and
    /// staleness say (from [`assess`]). Syncing comes first.
    pub(crate) fn judge(&mut self, rules: &HealthRules, against: Option<Reason>) {
        if self.wrong_chain {
            return;
        }
        let bad = if self.syncing {
            Some(Reason::Syncing)
        } else {
            against
        };
        match bad {
            Some(reason) => self.out(reason),
            None => {
                self.good_run = self.good_run.saturating_add(1);
                if !self.status.is_in() && self.good_run >= rules.recover_after {
                    self.status = Status::In;
                }
            }
        }
    }

    /// Re-judges an in-node against the group between its own probes: lag
    /// and staleness take it out at once. An out-node is judged at its own
    /// probes only.
    pub(crate) fn rejudge(&mut self, against: Option<Reason>) {
        if let (Status::In, Some(reason)) = (self.status, against) {
            self.out(reason);
        }
    }

    /// A passive signal from a real call.
    pub(crate) fn passive(&mut self, rules: &HealthRules, signal: Passive) {
        if self.wrong_chain {
            return;
        }
        let out = match signal {
            Passive::Ok => {
                self.passive_run = 0;
                false
            }
            Passive::Failed => {
                self.passive_run = self.passive_run.saturating_add(1);
                self.passive_run >= rules.passive_after
            }
            Passive::ConnectFailed => true,
        };
        if out {
            self.passive_run = 0;
            if self.status.is_in() {
                self.out(Reason::Passive);
            } else {
                // Out already (its reason stays), but a node failing real
                // calls has not recovered: its good run starts over.
                self.good_run = 0;
            }
        }
    }
}

/// What lag and staleness say of a node with head `own`, against the
/// group's `best` head and the `others`' counted heads at `now`: `None`
/// when neither applies. Lag is reported before staleness.
pub(crate) fn assess(
    rules: &HealthRules,
    now: Millis,
    own: Head,
    best: Option<u64>,
    others: impl IntoIterator<Item = Head>,
) -> Option<Reason> {
    if best.is_some_and(|b| b.saturating_sub(own.number) > rules.max_block_lag) {
        return Some(Reason::Lagging);
    }
    if now.saturating_sub(own.changed_at) >= rules.max_head_age
        && others
            .into_iter()
            .any(|o| o.number > own.number && o.changed_at > own.changed_at)
    {
        return Some(Reason::Stale);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> HealthRules {
        HealthRules {
            fail_after: 3,
            recover_after: 2,
            max_block_lag: 5,
            max_head_age: 10_000,
            chain_ids: vec![],
            passive_after: PASSIVE_AFTER,
        }
        .normalized()
    }

    fn head(number: u64, changed_at: Millis) -> Head {
        Head { number, changed_at }
    }

    #[test]
    fn a_new_node_is_out_never_and_failures_keep_never() {
        let r = rules();
        let mut h = Health::new();
        assert_eq!(h.status(), Status::Out(Reason::Never));
        for _ in 0..10 {
            h.probe_failed(&r);
        }
        assert_eq!(h.status(), Status::Out(Reason::Never));
        h.passive(&r, Passive::ConnectFailed);
        assert_eq!(h.status(), Status::Out(Reason::Never));
    }

    #[test]
    fn recover_after_good_probes_in_a_row() {
        let r = rules();
        let mut h = Health::new();
        h.probe_answered(0, 10, false);
        h.judge(&r, None);
        assert!(!h.status().is_in());
        h.probe_failed(&r); // breaks the run
        h.probe_answered(1, 11, false);
        h.judge(&r, None);
        assert!(!h.status().is_in());
        h.probe_answered(2, 12, false);
        h.judge(&r, None);
        assert_eq!(h.status(), Status::In);
    }

    #[test]
    fn zero_runs_are_taken_as_one() {
        let r = HealthRules {
            fail_after: 0,
            recover_after: 0,
            passive_after: 0,
            ..rules()
        }
        .normalized();
        let mut h = Health::new();
        h.probe_answered(0, 1, false);
        h.judge(&r, None);
        assert!(h.status().is_in());
        h.probe_failed(&r);
        assert_eq!(h.status(), Status::Out(Reason::Failing));
    }

    #[test]
    fn syncing_beats_a_clean_assessment() {
        let r = rules();
        let mut h = Health::new();
        h.probe_answered(0, 10, true);
        h.judge(&r, None);
        assert_eq!(h.status(), Status::Out(Reason::Syncing));
    }

    #[test]
    fn passive_on_an_out_node_restarts_its_run_and_keeps_its_reason() {
        let r = rules();
        let mut h = Health::new();
        h.probe_answered(0, 10, true);
        h.judge(&r, None);
        h.probe_answered(1, 10, false);
        h.judge(&r, None); // good run 1 of 2
        h.passive(&r, Passive::ConnectFailed);
        assert_eq!(h.status(), Status::Out(Reason::Syncing));
        h.probe_answered(2, 11, false);
        h.judge(&r, None);
        assert!(!h.status().is_in(), "the run started over");
        h.probe_answered(3, 12, false);
        h.judge(&r, None);
        assert!(h.status().is_in());
    }

    #[test]
    fn a_failing_node_adds_no_head() {
        let r = rules();
        let mut h = Health::new();
        h.probe_answered(0, 10, false);
        assert_eq!(h.counted_head(&r), Some(head(10, 0)));
        h.probe_failed(&r);
        h.probe_failed(&r);
        assert!(h.counted_head(&r).is_some());
        h.probe_failed(&r);
        assert_eq!(h.counted_head(&r), None);
        h.probe_answered(1, 10, false);
        assert_eq!(
            h.counted_head(&r),
            Some(head(10, 0)),
            "same head, same time"
        );
    }

    #[test]
    fn lag_is_strictly_more_than_max_block_lag() {
        let r = rules();
        assert_eq!(assess(&r, 0, head(95, 0), Some(100), []), None);
        assert_eq!(
            assess(&r, 0, head(94, 0), Some(100), []),
            Some(Reason::Lagging)
        );
        assert_eq!(assess(&r, 0, head(200, 0), Some(100), []), None);
        assert_eq!(assess(&r, 0, head(0, 0), None, []), None);
    }

    #[test]
    fn stale_needs_age_and_another_head_passing_after() {
        let r = rules();
        let own = head(100, 1_000);
        let passed = head(101, 2_000);
        // Young: not stale.
        assert_eq!(assess(&r, 10_999, own, Some(101), [passed]), None);
        assert_eq!(
            assess(&r, 11_000, own, Some(101), [passed]),
            Some(Reason::Stale)
        );
        // Halted chain: nobody ahead.
        assert_eq!(assess(&r, 99_000, own, Some(100), [head(100, 5_000)]), None);
        // Ahead of one that moved.
        assert_eq!(assess(&r, 99_000, own, Some(100), [head(99, 5_000)]), None);
        // Passed before the node's own head changed: it did not stand still
        // while the other moved.
        assert_eq!(assess(&r, 99_000, own, Some(101), [head(101, 500)]), None);
    }

    #[test]
    fn chains_accepted() {
        let any = rules();
        assert!(any.accepts(7, None));
        assert!(any.accepts(7, Some(7)));
        assert!(!any.accepts(8, Some(7)));
        let listed = HealthRules {
            chain_ids: vec![10, 8453],
            ..rules()
        };
        assert!(listed.accepts(10, None));
        assert!(!listed.accepts(1, None));
        assert!(!listed.accepts(8453, Some(10)));
    }
}
