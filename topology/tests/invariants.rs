//! Property tests of the forest invariants listed in the crate docs, through
//! the public API only.
#![allow(clippy::unwrap_used)] // Tests may panic.

use std::collections::HashSet;

use canopy_topology::{
    Link, Peer, Plan, PlanParams, Role, choose_parent, choose_uplink, parse_hostlist, plan,
};
use proptest::prelude::*;

fn params(subtrees: usize, replicas: usize, arity: usize) -> PlanParams {
    PlanParams {
        subtrees,
        replicas,
        arity,
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node{i:05}")).collect()
}

/// Heap level of slot `x` in a complete `a`-ary heap (slot 0 is level 0).
fn level(mut x: usize, a: usize) -> u32 {
    let (mut level, mut width) = (0, 1usize);
    while x >= width {
        x -= width;
        width *= a;
        level += 1;
    }
    level
}

/// The exact depth bound: a subtree has at most ceil(N*R/K) members.
fn depth_bound(n: usize, p: PlanParams) -> u32 {
    let t_max = (n * p.replicas).div_ceil(p.subtrees);
    let bound = level(t_max - 1, p.arity) + 1;
    if p.arity == 2 {
        assert_eq!(bound, t_max.ilog2() + 1);
    }
    bound
}

fn index(plan: &Plan, peer: &Peer) -> Option<usize> {
    match peer {
        Peer::Host(name) => Some(plan.index_of(name).expect("peer is a host of the plan")),
        Peer::Gateway => None,
    }
}

/// Relaying hosts on the path actually used from `link` when `alive` says
/// who answers, following every hop's own failover choice.
fn relays_used(plan: &Plan, link: &Link, alive: impl Fn(&Peer) -> bool) -> Vec<usize> {
    let mut relays = Vec::new();
    let mut current = link;
    loop {
        let next = choose_uplink(plan, current, &alive);
        let Some(i) = index(plan, next) else {
            return relays;
        };
        relays.push(i);
        assert!(
            relays.len() <= link.depth as usize,
            "failover path too long"
        );
        current = plan.hosts()[i]
            .link(link.subtree)
            .expect("relay is in the subtree");
    }
}

fn assert_pairwise_disjoint(sets: &[Vec<usize>], what: &str) {
    let mut seen = HashSet::new();
    for set in sets {
        for &i in set {
            assert!(seen.insert(i), "{what}: relay {i} on two paths");
        }
    }
}

/// Checks every invariant; with `fail_each_host`, also simulates the death
/// of each host in turn (quadratic: small N only).
fn check(plan: &Plan, hosts: &[String], p: PlanParams, fail_each_host: bool) {
    let (n, k, r, a) = (hosts.len(), p.subtrees, p.replicas, p.arity);
    assert_eq!(plan.params(), p);
    assert_eq!(plan.hosts().len(), n);
    assert_eq!(plan.subtrees().len(), k);

    let mut home_count = vec![0usize; k];
    let mut size = vec![0usize; k];
    let mut max_depth = vec![0u32; k];
    let mut on_gateway = vec![0usize; k];
    let mut child_entries = 0usize;
    let mut host_parents = 0usize;
    for (i, h) in plan.hosts().iter().enumerate() {
        // 1. R distinct subtrees, home first.
        assert_eq!(h.name, hosts[i]);
        assert_eq!(plan.index_of(&h.name), Some(i));
        assert_eq!(h.links.len(), r);
        let subtrees: HashSet<usize> = h.links.iter().map(|l| l.subtree).collect();
        assert_eq!(subtrees.len(), r, "{}: subtrees not distinct", h.name);
        assert_eq!(h.links[0].subtree, h.home);
        home_count[h.home] += 1;
        for (d, l) in h.links.iter().enumerate() {
            assert!(l.subtree < k);
            assert_eq!(l.role, if d == 0 { Role::Interior } else { Role::Leaf });
            // 2. Children only at home, at most A, and they point back.
            assert!(l.children.len() <= a);
            if d > 0 {
                assert!(l.children.is_empty(), "{} relays outside home", h.name);
            }
            child_entries += l.children.len();
            for c in &l.children {
                let child = plan.host(c).and_then(|c| c.link(l.subtree));
                assert_eq!(child.map(|c| &c.parent), Some(&Peer::Host(h.name.clone())));
            }
            // 4. Trees: depth is parent depth + 1, so no cycle; the gateway ends it.
            size[l.subtree] += 1;
            max_depth[l.subtree] = max_depth[l.subtree].max(l.depth);
            assert_eq!(l.parent_index, index(plan, &l.parent));
            let grandparent = match index(plan, &l.parent) {
                Some(pi) => {
                    host_parents += 1;
                    assert_ne!(pi, i, "self parent");
                    let pl = plan.hosts()[pi].link(l.subtree).expect("parent in subtree");
                    assert_eq!(pl.role, Role::Interior);
                    assert!(pl.children.contains(&h.name));
                    assert_eq!(l.depth, pl.depth + 1);
                    pl.parent.clone()
                }
                None => {
                    on_gateway[l.subtree] += 1;
                    assert_eq!(l.depth, 1);
                    Peer::Gateway
                }
            };
            // 7. Backup is the grandparent (an ancestor: not self, not a
            // descendant), or the gateway.
            assert_eq!(l.backup, grandparent);
            assert_ne!(l.backup, Peer::Host(h.name.clone()));
            let chain: Vec<&Peer> = plan.ancestors(l).collect();
            assert_eq!(chain.len(), l.depth as usize);
            assert_eq!(chain.last(), Some(&&Peer::Gateway));
            assert!(chain.contains(&&l.backup));
            if l.slot == 0 {
                assert_eq!(plan.subtrees()[l.subtree].top.as_ref(), Some(&h.name));
            }
        }
        // 3. Interior-disjoint paths, nobody dead.
        let paths: Vec<Vec<usize>> = h
            .links
            .iter()
            .map(|l| relays_used(plan, l, |_| true))
            .collect();
        assert!(paths.iter().all(|p| !p.contains(&i)));
        assert_pairwise_disjoint(&paths, &h.name);
    }
    assert_eq!(child_entries, host_parents);

    // 5. Balance, and summaries agree with the links.
    let spread = |v: &[usize]| v.iter().max().unwrap() - v.iter().min().unwrap();
    assert!(spread(&home_count) <= 1, "home counts {home_count:?}");
    assert!(spread(&size) <= 1, "sizes {size:?}");
    // 6. Depth bound.
    let bound = depth_bound(n, p);
    for (s, sum) in plan.subtrees().iter().enumerate() {
        assert_eq!(sum.id, s);
        assert_eq!(sum.size, size[s]);
        assert_eq!(sum.home_hosts, home_count[s]);
        assert_eq!(sum.leaf_members, size[s] - home_count[s]);
        assert_eq!(sum.depth, max_depth[s]);
        assert_eq!(sum.top.is_some(), size[s] > 0);
        assert_eq!(sum.gateway_children, on_gateway[s]);
        assert!(
            sum.depth <= bound,
            "subtree {s} depth {} > {bound}",
            sum.depth
        );
        if r <= 2 && size[s] > 0 {
            assert_eq!(on_gateway[s], 1, "no overflow leaves when R <= 2");
        }
    }

    // 3 again, with each host dead in turn: paths avoid it and stay disjoint.
    if fail_each_host {
        for (f, failed) in hosts.iter().enumerate() {
            let dead = Peer::Host(failed.clone());
            let alive = |peer: &Peer| *peer != dead;
            for (i, h) in plan.hosts().iter().enumerate() {
                if i == f {
                    continue;
                }
                for l in &h.links {
                    if l.parent == dead {
                        let backup_alive = l.backup != dead;
                        assert!(backup_alive, "backup is not the parent");
                        assert_eq!(choose_parent(l, false, true), Some(&l.backup));
                        assert_eq!(choose_uplink(plan, l, alive), &l.backup);
                    }
                }
                let paths: Vec<Vec<usize>> = h
                    .links
                    .iter()
                    .map(|l| relays_used(plan, l, alive))
                    .collect();
                assert!(paths.iter().all(|p| !p.contains(&f) && !p.contains(&i)));
                assert_pairwise_disjoint(&paths, &h.name);
            }
        }
    }
}

fn plan_and_check(n: usize, p: PlanParams) {
    let hosts = names(n);
    let planned = plan(&hosts, p).expect("valid input");
    check(&planned, &hosts, p, n <= 48);
    assert_eq!(plan(&hosts, p).as_ref(), Ok(&planned), "deterministic");
}

#[test]
fn grid_binary_k_1_to_16() {
    for k in 1usize..=16 {
        for r in 1..=2.min(k) {
            for n in [
                1,
                2,
                3,
                k.saturating_sub(1).max(1),
                k,
                k + 1,
                2 * k + 3,
                100,
                1000,
            ] {
                plan_and_check(n, params(k, r, 2));
            }
        }
    }
}

#[test]
fn grid_higher_arity_allows_higher_replication() {
    for (k, a) in [(3, 3), (4, 4), (5, 3), (8, 4), (16, 5)] {
        for r in 1..=a.min(k) {
            for n in [1, 2, 3, k - 1, k, k + 1, 37, 500] {
                plan_and_check(n, params(k, r, a));
            }
        }
    }
}

#[test]
fn hundred_thousand_hosts() {
    let hosts = parse_hostlist("node[000001-100000]").expect("valid hostlist");
    let p = PlanParams::default();
    let planned = plan(&hosts, p).expect("valid input");
    check(&planned, &hosts, p, false);
    // 25,000 members per subtree: floor(log2(25000)) + 1 hops.
    assert!(planned.subtrees().iter().all(|s| s.size == 25_000));
    assert_eq!(planned.subtrees().iter().map(|s| s.depth).max(), Some(15));
}

fn any_params() -> impl Strategy<Value = PlanParams> {
    (1usize..=16, 2usize..=6)
        .prop_flat_map(|(k, a)| (Just(k), 1..=k.min(a), Just(a)))
        .prop_map(|(k, r, a)| params(k, r, a))
}

fn any_n(p: PlanParams) -> impl Strategy<Value = usize> {
    let k = p.subtrees;
    prop_oneof![
        Just(1),
        Just(2),
        Just(3),
        Just(k.saturating_sub(1).max(1)),
        Just(k),
        Just(k + 1),
        1usize..=60,
        61usize..=1500,
    ]
}

/// Every planned parent and backup relationship is allowed, and nothing
/// else: a relay accepts exactly the hosts that may send to it.
fn check_allowed_children(plan: &Plan) {
    let allowed = plan.allowed_children();
    let mut planned = 0usize;
    for h in plan.hosts() {
        for l in &h.links {
            for p in [&l.parent, &l.backup] {
                assert!(
                    allowed.get(p.name()).is_some_and(|s| s.contains(&h.name)),
                    "{} may not connect to {} in subtree {}",
                    h.name,
                    p.name(),
                    l.subtree
                );
            }
            // The relay's planned children are in its set.
            for c in &l.children {
                assert!(allowed[&h.name].contains(c), "{c} under {}", h.name);
            }
        }
    }
    for (parent, peers) in &allowed {
        assert!(!peers.contains(parent), "{parent} may connect to itself");
        for c in peers {
            let host = plan.host(c).expect("an allowed peer is a planned host");
            assert!(
                host.links
                    .iter()
                    .any(|l| l.parent.name() == parent || l.backup.name() == parent),
                "{c} is allowed on {parent} without a planned link to it"
            );
            planned += 1;
        }
    }
    assert!(planned >= plan.hosts().len(), "every host has a parent");
}

#[test]
fn allowed_children_of_a_small_plan() {
    let hosts = names(6);
    let p = plan(&hosts, params(2, 2, 2)).expect("plan");
    check_allowed_children(&p);
    let allowed = p.allowed_children();
    // A relay's set holds its children and its grandchildren (for whom it
    // is the backup); a leaf-only host is nobody's parent.
    for h in p.hosts() {
        let home = &h.links[0];
        let expected: std::collections::BTreeSet<String> = home
            .children
            .iter()
            .cloned()
            .chain(home.children.iter().flat_map(|c| {
                let c = p.host(c).and_then(|c| c.link(home.subtree));
                c.map(|c| c.children.clone()).unwrap_or_default()
            }))
            .collect();
        assert_eq!(
            allowed.get(&h.name).cloned().unwrap_or_default(),
            expected,
            "{}",
            h.name
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_planned_parent_and_backup_is_allowed_and_nothing_else(
        (p, n) in any_params().prop_flat_map(|p| (Just(p), any_n(p)))
    ) {
        let hosts = names(n);
        let planned = plan(&hosts, p).expect("plan");
        check_allowed_children(&planned);
    }

    #[test]
    fn invariants_hold(
        (p, n) in any_params().prop_flat_map(|p| (Just(p), any_n(p)))
    ) {
        plan_and_check(n, p);
    }

    #[test]
    fn binary_r2_invariants_hold(k in 1usize..=16, n in 1usize..=2000) {
        if k >= 2 {
            plan_and_check(n, params(k, 2, 2));
        } else {
            plan_and_check(n, params(k, 1, 2));
        }
    }
}
