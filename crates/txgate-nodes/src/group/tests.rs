use super::*;
use crate::health::{PASSIVE_AFTER, Reason};

const CHAIN: u64 = 10;

fn rules() -> HealthRules {
    HealthRules {
        fail_after: 3,
        recover_after: 2,
        max_block_lag: 5,
        max_head_age: 10_000,
        chain_ids: vec![CHAIN],
        passive_after: PASSIVE_AFTER,
    }
}

fn ok(head: u64) -> Probe {
    Probe::Ok {
        chain_id: CHAIN,
        head,
        syncing: false,
    }
}

fn group(n: usize) -> Group {
    Group::new(rules(), (0..n).map(|_| (Role::Replica, 1)))
}

fn reason(g: &Group, i: usize) -> Status {
    g.state(i)
        .map(|s| s.status)
        .unwrap_or(Status::Out(Reason::Never))
}

/// Probes every node with its head at `now`, `times` times, a second
/// apart; returns the time after.
fn round(g: &mut Group, now: Millis, heads: &[u64], times: u32) -> Millis {
    let mut now = now;
    for _ in 0..times {
        for (i, &h) in heads.iter().enumerate() {
            let _ = g.probe(i, now, ok(h));
        }
        now += 1_000;
    }
    now
}

#[test]
fn a_node_that_never_reported_a_head_is_out() {
    let mut g = group(2);
    assert!(!g.is_in(0));
    assert_eq!(reason(&g, 0), Status::Out(Reason::Never));
    for now in 0..10 {
        let u = g.probe(0, now * 1_000, Probe::Failed);
        assert!(!u.changed);
    }
    assert_eq!(reason(&g, 0), Status::Out(Reason::Never));
    assert_eq!(g.best_head(), None);
    assert_eq!(g.agreed_head(), None);
    let snap = g.snapshot();
    assert!(!snap.is_in(0) && !snap.eligible(0));
    let state = g.state(1).unwrap();
    assert_eq!((state.head, state.lag, state.eligible), (None, None, false));
}

#[test]
fn in_after_recover_after_good_probes_in_a_row() {
    let mut g = group(1);
    let u = g.probe(0, 0, ok(100));
    assert!(!g.is_in(0) && !u.changed);
    // Still Never while the first run counts.
    assert_eq!(reason(&g, 0), Status::Out(Reason::Never));
    let u = g.probe(0, 1_000, ok(101));
    assert!(g.is_in(0) && u.changed);
    assert_eq!(g.agreed_head(), Some(101));
    // A failure between good probes restarts the run.
    let mut g = group(1);
    let _ = g.probe(0, 0, ok(100));
    let _ = g.probe(0, 1_000, Probe::Failed);
    let _ = g.probe(0, 2_000, ok(100));
    assert!(!g.is_in(0));
    let _ = g.probe(0, 3_000, ok(100));
    assert!(g.is_in(0));
}

#[test]
fn out_after_fail_after_failed_probes() {
    let mut g = group(1);
    let now = round(&mut g, 0, &[100], 2);
    assert!(g.is_in(0));
    for k in 0..2 {
        let u = g.probe(0, now + k, Probe::Failed);
        assert!(g.is_in(0) && !u.changed);
    }
    let u = g.probe(0, now + 2, Probe::Failed);
    assert!(u.changed);
    assert_eq!(reason(&g, 0), Status::Out(Reason::Failing));
    // A failing node's head no longer counts.
    assert_eq!(g.best_head(), None);
    // Back after recover_after good probes.
    let _ = g.probe(0, now + 3, ok(101));
    assert!(!g.is_in(0));
    assert_eq!(g.best_head(), Some(101));
    let u = g.probe(0, now + 4, ok(102));
    assert!(g.is_in(0) && u.changed);
}

#[test]
fn failures_that_are_not_in_a_row_do_not_take_a_node_out() {
    let mut g = group(1);
    let mut now = round(&mut g, 0, &[100], 2);
    for k in 0..50 {
        let probe = if k % 3 == 2 {
            ok(100 + k)
        } else {
            Probe::Failed
        };
        let _ = g.probe(0, now, probe);
        now += 1_000;
        assert!(g.is_in(0), "{k}");
    }
}

#[test]
fn syncing_takes_a_node_out_at_once() {
    let mut g = group(1);
    let now = round(&mut g, 0, &[100], 2);
    let syncing = Probe::Ok {
        chain_id: CHAIN,
        head: 100,
        syncing: true,
    };
    let u = g.probe(0, now, syncing);
    assert!(u.changed);
    assert_eq!(reason(&g, 0), Status::Out(Reason::Syncing));
    // Syncing probes never bring it back.
    let _ = g.probe(0, now + 1_000, syncing);
    let _ = g.probe(0, now + 2_000, syncing);
    assert!(!g.is_in(0));
    round(&mut g, now + 3_000, &[101], 2);
    assert!(g.is_in(0));
}

#[test]
fn a_syncing_first_answer_replaces_never() {
    let mut g = group(1);
    let _ = g.probe(
        0,
        0,
        Probe::Ok {
            chain_id: CHAIN,
            head: 5,
            syncing: true,
        },
    );
    assert_eq!(reason(&g, 0), Status::Out(Reason::Syncing));
}

#[test]
fn lagging_node_goes_out_on_another_nodes_probe_and_back_when_caught_up() {
    let mut g = group(3);
    let now = round(&mut g, 0, &[100, 100, 100], 2);
    assert!((0..3).all(|i| g.is_in(i)));
    // Node 2 stays at 100; the others reach 105: within the lag.
    let now = round(&mut g, now, &[105, 105, 100], 1);
    assert!(g.is_in(2));
    assert_eq!(g.state(2).unwrap().lag, Some(5));
    // Node 0 reaches 106: node 2 is out on node 0's probe.
    let u = g.probe(0, now, ok(106));
    assert!(u.changed);
    assert_eq!(reason(&g, 2), Status::Out(Reason::Lagging));
    assert_eq!(g.state(2).unwrap().lag, Some(6));
    // Catching up takes recover_after good probes.
    let _ = g.probe(2, now + 1, ok(106));
    assert!(!g.is_in(2));
    let _ = g.probe(2, now + 2, ok(106));
    assert!(g.is_in(2));
}

#[test]
fn lag_is_judged_against_nodes_that_are_neither_failing_nor_wrong_chain() {
    let mut g = group(3);
    let now = round(&mut g, 0, &[100, 100, 100], 2);
    // Node 0 runs ahead, then fails: its head stops counting.
    let _ = g.probe(0, now, ok(200));
    assert!(!g.is_in(1) && !g.is_in(2));
    for k in 1..=3 {
        let _ = g.probe(0, now + k, Probe::Failed);
    }
    assert_eq!(g.best_head(), Some(100));
    let now = now + 1_000;
    for k in 0..2 {
        let _ = g.probe(1, now + k, ok(100));
        let _ = g.probe(2, now + k, ok(100));
    }
    assert!(g.is_in(1) && g.is_in(2) && !g.is_in(0));
    // A wrong-chain node's head never counts.
    let wrong = Probe::Ok {
        chain_id: 11,
        head: 1_000,
        syncing: false,
    };
    let mut g = group(2);
    let _ = g.probe(0, 0, wrong);
    let _ = g.probe(1, 0, ok(50));
    let _ = g.probe(1, 1, ok(50));
    assert_eq!(g.best_head(), Some(50));
    assert!(g.is_in(1));
}

#[test]
fn stale_only_while_another_node_advanced() {
    let mut g = group(2);
    let mut now = round(&mut g, 0, &[100, 100], 2);
    // A halted chain: nobody is stale, however long.
    for _ in 0..30 {
        now = round(&mut g, now, &[100, 100], 1);
    }
    assert!(g.is_in(0) && g.is_in(1));
    // Node 1 advances by one block (within the lag) and keeps advancing;
    // node 0 stands still at 100.
    let still_since = now;
    let _ = g.probe(1, now, ok(101));
    let mut head = 101;
    while now < still_since + 20_000 {
        now += 1_000;
        head += u64::from(now.is_multiple_of(3_000)); // slowly: never more than the lag
        let _ = g.probe(0, now, ok(100));
        let _ = g.probe(1, now, ok(head.min(105)));
        let age = now - g.nodes[0].health.head().unwrap().changed_at;
        assert_eq!(g.is_in(0), age < 10_000, "at {now}");
    }
    assert_eq!(reason(&g, 0), Status::Out(Reason::Stale));
    // It moves again: back after recover_after good probes.
    let _ = g.probe(0, now + 1, ok(105));
    let _ = g.probe(0, now + 2, ok(105));
    assert!(g.is_in(0));
}

#[test]
fn staleness_is_found_by_the_other_nodes_probes() {
    let mut g = group(2);
    let now = round(&mut g, 0, &[100, 100], 2);
    // Node 0 is no longer probed at all (its probes are slow); node 1
    // advances past it.
    let _ = g.probe(1, now, ok(101));
    assert!(g.is_in(0));
    let u = g.probe(1, now + 10_000, ok(101));
    assert!(u.changed);
    assert_eq!(reason(&g, 0), Status::Out(Reason::Stale));
}

#[test]
fn wrong_chain_is_never_in_and_said_once() {
    let mut g = group(2);
    let wrong = Probe::Ok {
        chain_id: 11,
        head: 100,
        syncing: false,
    };
    let u = g.probe(0, 0, wrong);
    assert!(u.newly_wrong_chain);
    assert_eq!(reason(&g, 0), Status::Out(Reason::WrongChain));
    assert!(!g.probe(0, 1, wrong).newly_wrong_chain);
    // Right answers later do not bring it back.
    for k in 0..10 {
        let u = g.probe(0, 2 + k, ok(100));
        assert!(!u.newly_wrong_chain);
        let _ = g.passive(0, 2 + k, Passive::Ok);
    }
    assert_eq!(reason(&g, 0), Status::Out(Reason::WrongChain));
    assert_eq!(g.state(0).unwrap().head, None);
}

#[test]
fn without_chain_ids_the_first_chain_seen_is_the_groups() {
    let rules = HealthRules {
        chain_ids: vec![],
        ..rules()
    };
    let mut g = Group::new(rules, [(Role::Sequencer, 1), (Role::Replica, 1)]);
    assert_eq!(g.chain_id(), None);
    let _ = g.probe(
        1,
        0,
        Probe::Ok {
            chain_id: 8453,
            head: 1,
            syncing: false,
        },
    );
    assert_eq!(g.chain_id(), Some(8453));
    let u = g.probe(
        0,
        0,
        Probe::Ok {
            chain_id: 10,
            head: 1,
            syncing: false,
        },
    );
    assert!(u.newly_wrong_chain);
    assert_eq!(reason(&g, 0), Status::Out(Reason::WrongChain));
}

#[test]
fn a_refused_connection_takes_a_node_out_at_once() {
    let mut g = group(1);
    let now = round(&mut g, 0, &[100], 2);
    let u = g.passive(0, now, Passive::ConnectFailed);
    assert!(u.changed);
    assert_eq!(reason(&g, 0), Status::Out(Reason::Passive));
    // The head still counts: the node is out, not failing probes.
    assert_eq!(g.best_head(), Some(100));
    round(&mut g, now, &[100], 2);
    assert!(g.is_in(0));
}

#[test]
fn a_run_of_passive_failures_takes_a_node_out() {
    let mut g = group(1);
    let now = round(&mut g, 0, &[100], 2);
    // Runs of 4 broken by an answer never take it out.
    for _ in 0..10 {
        for _ in 0..PASSIVE_AFTER - 1 {
            let _ = g.passive(0, now, Passive::Failed);
        }
        let _ = g.passive(0, now, Passive::Ok);
        assert!(g.is_in(0));
    }
    for k in 0..PASSIVE_AFTER {
        assert!(g.is_in(0));
        let u = g.passive(0, now, Passive::Failed);
        assert_eq!(u.changed, k == PASSIVE_AFTER - 1);
    }
    assert_eq!(reason(&g, 0), Status::Out(Reason::Passive));
}

#[test]
fn agreed_head_is_a_quorums_and_never_goes_down() {
    let mut g = group(3);
    let now = round(&mut g, 0, &[100, 101, 102], 2);
    assert_eq!(g.agreed_head(), Some(101));
    assert!(!g.eligible(0) && g.eligible(1) && g.eligible(2));
    let snap = g.snapshot();
    assert!(snap.is_in(0) && !snap.eligible(0) && snap.eligible(1));
    assert_eq!(snap.agreed_head(), Some(101));
    // Node 2 fails away: the two left agree on 100, the agreed head stays
    // at 101.
    for k in 0..3 {
        let _ = g.probe(2, now + k, Probe::Failed);
    }
    assert_eq!(g.agreed_head(), Some(101));
    assert!(!g.eligible(0) && g.eligible(1) && !g.eligible(2));
    // A move the agreed head does not see is no change.
    let u = g.probe(1, now + 5, ok(103));
    assert_eq!(g.agreed_head(), Some(101));
    assert!(!u.changed);
    let u = g.probe(0, now + 6, ok(102));
    assert_eq!(g.agreed_head(), Some(102));
    assert!(u.changed);
    // Everyone below it (a reorg, a restart on an older snapshot): no node
    // is eligible until reset_head.
    let _ = g.probe(0, now + 7, ok(101));
    let _ = g.probe(1, now + 7, ok(101));
    assert!(g.is_in(0) && g.is_in(1));
    assert_eq!(g.agreed_head(), Some(102));
    assert!(!g.eligible(0) && !g.eligible(1));
    let u = g.reset_head();
    assert!(u.changed);
    assert_eq!(g.agreed_head(), Some(101));
    assert!(g.eligible(0) && g.eligible(1));
    assert!(!g.reset_head().changed);
}

#[test]
fn the_leader_is_in_the_snapshot() {
    let mut g = group(2);
    assert!(g.set_leader(Some(1)).changed);
    assert!(!g.set_leader(Some(1)).changed);
    assert_eq!(g.snapshot().leader(), Some(1));
    assert!(g.set_leader(None).changed);
    assert_eq!(g.leader(), None);
}

#[test]
fn an_index_out_of_range_changes_nothing() {
    let mut g = group(1);
    assert_eq!(g.probe(5, 0, ok(1)), Update::default());
    assert_eq!(g.passive(5, 0, Passive::ConnectFailed), Update::default());
    assert!(!g.is_in(5) && !g.eligible(5) && g.state(5).is_none());
    let snap = g.snapshot();
    assert!(!snap.is_in(5) && snap.role(5).is_none() && snap.weight(5) == 0);
}

#[test]
fn state_reports_role_weight_head_and_lag() {
    let mut g = Group::new(rules(), [(Role::Sequencer, 3), (Role::Builder, 1)]);
    round(&mut g, 0, &[100, 97], 2);
    let s = g.state(1).unwrap();
    assert_eq!(
        s,
        NodeState {
            role: Role::Builder,
            weight: 1,
            status: Status::In,
            head: Some(97),
            lag: Some(3),
            eligible: false,
        }
    );
    assert_eq!(g.state(0).unwrap().weight, 3);
    assert_eq!(g.len(), 2);
    assert!(!g.is_empty());
}

/// Random probes, failures and passive signals on a group of five: the
/// rules hold after every update.
#[test]
fn property_invariants_hold_under_random_inputs() {
    let mut seed = 0x1234_5678_9abc_def1_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..50 {
        let mut g = group(5);
        let mut heads = [100u64; 5];
        let mut now = 0;
        let mut agreed = None;
        let mut view = g.snapshot();
        for _ in 0..400 {
            now += next() % 2_000;
            let i = (next() % 5) as usize;
            let r = next() % 100;
            let u = match r {
                0..=59 => {
                    heads[i] += next() % 3;
                    let chain_id = if r == 0 { 11 } else { CHAIN };
                    let syncing = r == 1;
                    g.probe(
                        i,
                        now,
                        Probe::Ok {
                            chain_id,
                            head: heads[i],
                            syncing,
                        },
                    )
                }
                60..=84 => g.probe(i, now, Probe::Failed),
                85..=92 => g.passive(i, now, Passive::Failed),
                93..=96 => g.passive(i, now, Passive::Ok),
                _ => g.passive(i, now, Passive::ConnectFailed),
            };
            // The change flag is exactly "the snapshot changed".
            let snap = g.snapshot();
            assert_eq!(u.changed, snap != view);
            view = snap;
            // The agreed head never goes down.
            assert!(g.agreed_head() >= agreed);
            agreed = g.agreed_head();
            let best = g.best_head();
            for j in 0..5 {
                let s = g.state(j).unwrap();
                if s.status.is_in() {
                    let h = s.head.unwrap();
                    // No in-node lags past the rule, or sits on the
                    // wrong chain.
                    assert!(best.unwrap() - h <= 5);
                    assert!(!g.nodes[j].health.is_wrong_chain());
                } else {
                    assert!(!s.eligible);
                }
                if s.head.is_none() {
                    assert!(!s.status.is_in());
                }
                assert_eq!(
                    s.eligible,
                    s.status.is_in() && agreed.is_none_or(|a| s.head.unwrap() >= a)
                );
            }
        }
    }
}
