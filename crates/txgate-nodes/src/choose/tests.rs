use super::*;
use crate::group::Group;
use crate::health::{HealthRules, Passive, Probe};

#[test]
fn prefers_the_less_loaded_node() {
    let c = [(0, 1, 5), (1, 1, 2), (2, 1, 9)];
    assert_eq!(choose(c, &[], 0), Some(1));
    assert_eq!(choose(c, &[1], 0), Some(0));
    assert_eq!(choose(c, &[0, 1, 2], 0), None);
    assert_eq!(choose([], &[], 0), None);
}

#[test]
fn prefers_the_heavier_node_at_equal_load() {
    // (0 + 1) / 3 < (0 + 1) / 1.
    assert_eq!(choose([(0, 1, 0), (1, 3, 0)], &[], 7), Some(1));
    // (2 + 1) / 3 = 1 < (1 + 1) / 1 = 2.
    assert_eq!(choose([(0, 1, 1), (1, 3, 2)], &[], 7), Some(1));
    // (5 + 1) / 3 = 2 > (0 + 1) / 1 = 1.
    assert_eq!(choose([(0, 1, 0), (1, 3, 5)], &[], 7), Some(0));
}

#[test]
fn weight_zero_is_never_chosen() {
    assert_eq!(choose([(0, 0, 0)], &[], 0), None);
    assert_eq!(choose([(0, 0, 0), (1, 1, 1_000)], &[], 0), Some(1));
}

#[test]
fn extreme_loads_do_not_overflow() {
    let c = [(0, u32::MAX, u64::MAX), (1, 1, u64::MAX - 1)];
    assert_eq!(choose(c, &[], 0), Some(0));
}

#[test]
fn ties_are_deterministic_and_spread_by_the_tiebreak() {
    let c = [(0, 1, 0), (1, 1, 0), (2, 1, 0), (3, 2, 3)];
    let mut counts = [0; 4];
    for t in 0..3_000u64 {
        let a = choose(c, &[], t);
        assert_eq!(a, choose(c, &[], t));
        counts[a.unwrap()] += 1;
    }
    // Node 3 has (3 + 1) / 2 = 2: never chosen over a 1.
    assert_eq!(counts[3], 0);
    for n in &counts[..3] {
        assert!(*n > 800, "{counts:?}");
    }
}

/// Simulated dispatch: calls arrive and each node finishes its calls at
/// its own speed; the slow node ends up with fewer calls, and weights
/// split an even load in proportion.
#[test]
fn a_slow_node_gets_less_and_weights_share_in_proportion() {
    // A call per tick; node 0 finishes a call per tick, node 1 one every
    // 4 ticks.
    let mut outstanding = [0u64; 2];
    let mut served = [0u64; 2];
    for tick in 0..10_000u64 {
        let c = (0..2).map(|i| (i, 1, outstanding[i]));
        let i = choose(c, &[], tick).unwrap();
        outstanding[i] += 1;
        served[i] += 1;
        outstanding[0] = outstanding[0].saturating_sub(1);
        if tick % 4 == 0 {
            outstanding[1] = outstanding[1].saturating_sub(1);
        }
    }
    assert!(served[0] > 3 * served[1], "{served:?}");

    // Equal speed, weights 1 and 3: one call in flight at a time each
    // time, so only weights decide.
    let mut served = [0u64; 2];
    let mut outstanding = [0u64; 2];
    for t in 0..4_000u64 {
        let c = [(0, 1, outstanding[0]), (1, 3, outstanding[1])];
        let i = choose(c, &[], t).unwrap();
        outstanding[i] += 1;
        served[i] += 1;
        if outstanding.iter().sum::<u64>() == 4 {
            outstanding = [0, 0];
        }
    }
    assert_eq!(served[1], 3 * served[0], "{served:?}");
}

fn rules() -> HealthRules {
    HealthRules {
        fail_after: 1,
        recover_after: 1,
        max_block_lag: 100,
        max_head_age: 1_000_000,
        chain_ids: vec![10],
        passive_after: 5,
    }
}

fn ok(head: u64) -> Probe {
    Probe::Ok {
        chain_id: 10,
        head,
        syncing: false,
    }
}

/// A group with `roles`, every node in at head 100.
fn all_in(roles: &[Role]) -> Group {
    let mut g = Group::new(rules(), roles.iter().map(|&r| (r, 1)));
    for i in 0..roles.len() {
        let _ = g.probe(i, 0, ok(100));
    }
    g
}

fn down(g: &mut Group, i: usize) {
    let _ = g.passive(i, 0, Passive::ConnectFailed);
}

fn routed(role: Role, g: &Group, at_head: bool) -> Vec<usize> {
    route(role, &g.snapshot(), at_head).collect()
}

use Role::{Builder, Replica, Sequencer};

#[test]
fn reads_go_to_replicas_then_to_sequencers() {
    let mut g = all_in(&[Sequencer, Replica, Replica, Builder]);
    assert_eq!(routed(Replica, &g, false), [1, 2]);
    down(&mut g, 1);
    assert_eq!(routed(Replica, &g, false), [2]);
    down(&mut g, 2);
    assert_eq!(routed(Replica, &g, false), [0]);
    // With a leader set, reads still fall back to any in-sequencer.
    let mut g = all_in(&[Sequencer, Sequencer, Replica]);
    let _ = g.set_leader(Some(1));
    down(&mut g, 2);
    assert_eq!(routed(Replica, &g, false), [0, 1]);
    // Nothing in: no candidate.
    down(&mut g, 0);
    down(&mut g, 1);
    assert!(routed(Replica, &g, false).is_empty());
}

#[test]
fn bundles_fall_back_to_sequencers_only_without_builder_nodes() {
    let mut g = all_in(&[Sequencer, Replica, Builder, Builder]);
    assert_eq!(routed(Builder, &g, false), [2, 3]);
    down(&mut g, 2);
    down(&mut g, 3);
    assert!(routed(Builder, &g, false).is_empty(), "no healthy upstream");
    let mut g = all_in(&[Sequencer, Replica, Sequencer]);
    assert_eq!(routed(Builder, &g, false), [0, 2]);
    let _ = g.set_leader(Some(2));
    assert_eq!(routed(Builder, &g, false), [2]);
}

#[test]
fn submissions_go_to_sequencers_only_and_to_the_leader_when_set() {
    let mut g = all_in(&[Sequencer, Replica, Sequencer, Builder]);
    assert_eq!(routed(Sequencer, &g, false), [0, 2]);
    let _ = g.set_leader(Some(2));
    assert_eq!(routed(Sequencer, &g, false), [2]);
    // The leader out: no candidate, not the standby.
    down(&mut g, 2);
    assert!(routed(Sequencer, &g, false).is_empty());
    // A leader out of range leaves submissions no node.
    let _ = g.set_leader(Some(9));
    assert!(routed(Sequencer, &g, false).is_empty());
    let _ = g.set_leader(None);
    assert_eq!(routed(Sequencer, &g, false), [0]);
    // No sequencer in: no candidate, replicas are never used.
    down(&mut g, 0);
    assert!(routed(Sequencer, &g, false).is_empty());
}

#[test]
fn at_head_routes_only_to_nodes_at_the_agreed_head() {
    let mut g = Group::new(
        rules(),
        [(Sequencer, 1), (Replica, 1), (Replica, 1), (Replica, 1)],
    );
    // All in at 100, then three move on.
    for i in 0..4 {
        let _ = g.probe(i, 0, ok(100));
    }
    for (i, h) in [(0, 102), (2, 102), (3, 101)] {
        let _ = g.probe(i, 1, ok(h));
    }
    assert_eq!(g.agreed_head(), Some(101));
    assert_eq!(routed(Replica, &g, true), [2, 3]);
    assert_eq!(routed(Replica, &g, false), [1, 2, 3]);
    // No replica at the head: the sequencer, which is.
    down(&mut g, 2);
    down(&mut g, 3);
    assert_eq!(routed(Replica, &g, true), [0]);
    assert_eq!(routed(Replica, &g, false), [1]);
}

#[test]
fn route_and_choose_together() {
    let g = Group::new(rules(), [(Sequencer, 1), (Replica, 1), (Replica, 4)]);
    let mut g = g;
    for i in 0..3 {
        let _ = g.probe(i, 0, ok(100));
    }
    let snap = g.snapshot();
    let outstanding = [0u64, 0, 3];
    let pick = |exclude: &[usize]| {
        choose(
            route(Replica, &snap, true).map(|i| (i, snap.weight(i), outstanding[i])),
            exclude,
            0,
        )
    };
    // (3 + 1) / 4 = 1 = (0 + 1) / 1: a tie; either replica, never the
    // sequencer.
    assert!(matches!(pick(&[]), Some(1 | 2)));
    assert_eq!(pick(&[1]), Some(2));
    assert_eq!(pick(&[1, 2]), None);
}
