//! The fabric simulator end to end: every tick of every node reaches the
//! gateway exactly once, also when a relay dies mid-run and its children
//! fail over to their backup parents.

use canopy_benches::fabric::{self, Kill, PhaseMode, SimConfig, host_name};
use canopy_topology::{Peer, PlanParams, Role, plan};

fn small(replicas: usize, kill: Option<Kill>) -> SimConfig {
    SimConfig {
        nodes: 64,
        subtrees: 4,
        replicas,
        ticks: 20,
        kill,
        ..SimConfig::default()
    }
}

/// A relay with children that is not a subtree top, and the hosts whose
/// home path to the gateway runs through it.
fn victim(replicas: usize) -> (String, Vec<usize>) {
    let hosts: Vec<String> = (0..64).map(host_name).collect();
    let p = plan(
        &hosts,
        PlanParams {
            subtrees: 4,
            replicas,
            arity: 2,
        },
    )
    .expect("plan");
    let v = p
        .hosts()
        .iter()
        .find(|h| {
            let l = &h.links[0];
            l.role == Role::Interior && l.depth == 2 && l.children.len() == 2
        })
        .expect("a depth-2 relay with two children");
    let below: Vec<usize> = p
        .hosts()
        .iter()
        .enumerate()
        .filter(|(_, h)| {
            h.links.iter().any(|l| {
                p.ancestors(l)
                    .any(|a| matches!(a, Peer::Host(n) if *n == v.name))
            })
        })
        .map(|(i, _)| i)
        .collect();
    (v.name.clone(), below)
}

#[test]
fn every_tick_of_every_node_arrives_exactly_once() {
    let r = fabric::run(small(2, None)).expect("run");
    let e = &r.exactness;
    assert_eq!(e.nodes, 64);
    assert_eq!(e.expected, 64 * 20);
    assert_eq!(e.got, e.expected, "{e:?}");
    assert_eq!(e.missing, 0);
    assert_eq!(e.out_of_sequence, 0);
    assert_eq!(e.rejected_records, 0);
    assert!(e.ok(), "{e:?}");
    // R = 2: every sample came twice, the gateway kept one.
    assert!(
        r.gateway.duplicates >= r.gateway.accepted / 2,
        "duplicates {} accepted {}",
        r.gateway.duplicates,
        r.gateway.accepted
    );
    assert!(r.freshness.samples > 0);
    assert!(
        r.series_per_node > 20.0,
        "a realistic mix: {}",
        r.series_per_node
    );
    assert!(r.links.top.links == 4 && r.links.leaf.links == 64);
}

#[test]
fn killed_relay_loses_nothing_with_two_replicas() {
    let (name, below) = victim(2);
    let kill = Kill {
        node: name.clone(),
        at_tick: 8,
    };
    // Random phases (each process's timer starts with it, as `canopy
    // node` does): the path that failed over overtakes the intact one, and
    // the gateway's hole filling keeps the tick it skipped (see the module
    // docs of `fabric`). Staggered phases, where nothing overtakes, too.
    for phase in [PhaseMode::Random, PhaseMode::Staggered] {
        killed_relay_run(&name, &below, phase, kill.clone());
    }
}

fn killed_relay_run(name: &str, below: &[usize], phase: PhaseMode, kill: Kill) {
    let cfg = SimConfig {
        phase,
        ..small(2, Some(kill))
    };
    let r = fabric::run(cfg).expect("run");
    let e = &r.exactness;
    let v = (0..64)
        .position(|i| host_name(i) == name)
        .expect("victim index");
    // The victim's ticks before its death, everyone else's all.
    assert_eq!(e.expected_per_node[v], 9);
    assert_eq!(e.expected, 63 * 20 + 9);
    assert_eq!(e.missing, 0, "{e:?}");
    assert!(e.ok(), "{e:?}");
    // Its children kept sending until they noticed, then moved.
    assert!(e.lost_records > 0);
    assert!(e.failovers >= 2, "failovers {}", e.failovers);
    assert!(below.len() >= 2);
}

#[test]
fn with_one_replica_failover_alone_brings_the_children_back() {
    let (name, below) = victim(1);
    let kill = Kill {
        node: name.clone(),
        at_tick: 8,
    };
    let r = fabric::run(small(1, Some(kill))).expect("run");
    let e = &r.exactness;
    let v = (0..64)
        .position(|i| host_name(i) == name)
        .expect("victim index");
    assert!(e.failovers >= 2, "failovers {}", e.failovers);
    assert_eq!(e.rejected_records, 0);
    // One path only: what the victim held when it died is gone.
    let dead = e.per_node[v];
    assert!(dead.got + 2 >= e.expected_per_node[v] && dead.out_of_sequence == 0);
    for i in (0..64).filter(|&i| i != v) {
        let (got, want) = (e.per_node[i], e.expected_per_node[i]);
        if below.contains(&i) {
            // Ticks in flight through the victim and until the failover
            // are lost, then the backup parent carries the rest.
            let missing = want - got.got;
            assert!((1..=6).contains(&missing), "node {i}: {missing} missing");
            assert_eq!(got.out_of_sequence, 1, "node {i}: one gap");
            assert_eq!(got.last, want, "node {i}: last tick after failover");
        } else {
            assert_eq!(got.got, want, "node {i} is not below the victim");
            assert_eq!(got.out_of_sequence, 0);
        }
    }
}

#[test]
fn quiet_nodes_send_their_tick_counter_only() {
    let busy = fabric::run(small(2, None)).expect("busy run");
    let quiet = fabric::run(SimConfig {
        change_fraction: 0.0,
        ..small(2, None)
    })
    .expect("quiet run");
    // Every tick still arrives, and the series are the same ones.
    assert!(quiet.exactness.ok(), "{:?}", quiet.exactness);
    assert_eq!(quiet.gateway.series, busy.gateway.series);
    // After the first tick only the counter changes: one sample per node
    // per second of the steady window reaches the gateway.
    let per_node_s = quiet.gateway.samples_per_s / 64.0;
    assert!(
        (per_node_s - 1.0).abs() < 1e-9,
        "quiet: {per_node_s} samples per node per second"
    );
    assert!(
        busy.gateway.samples_per_s > 10.0 * quiet.gateway.samples_per_s,
        "busy {} quiet {}",
        busy.gateway.samples_per_s,
        quiet.gateway.samples_per_s
    );
    // Half the nodes sampling: changes in between.
    let half = fabric::run(SimConfig {
        change_fraction: 0.5,
        ..small(2, None)
    })
    .expect("half run");
    assert!(half.exactness.ok());
    let s = half.gateway.samples_per_s;
    assert!(
        s > 2.0 * quiet.gateway.samples_per_s && s < busy.gateway.samples_per_s,
        "half {s}"
    );
    assert!(
        fabric::run(SimConfig {
            change_fraction: 1.5,
            ..small(2, None)
        })
        .is_err()
    );
}
