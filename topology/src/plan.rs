//! The planner: host list + [`PlanParams`] -> [`Plan`].
//!
//! Layout of one subtree `s` with `m` home hosts and `l` leaf-only members:
//! its `m + l` members are numbered in heap order ("slots"), home hosts first
//! (in input order), then leaf-only members (in input order). Slot `x > 0`
//! hangs under slot `(x - 1) / A`; slot 0 (the top) hangs under the gateway.
//! Because home hosts take slots `0..m`, the slots that hang under a home host
//! are exactly `1..=A*m`: so leaf-only members fill the shallowest free child
//! slots in BFS order, and only home hosts ever have children. There are
//! `m*(A-1) + 1` such leaf slots (counting the top slot when `m == 0`); a
//! leaf-only member beyond them ("overflow", impossible when R <= 2, see
//! the crate docs) hangs directly under the gateway.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{MAX_ARITY, MAX_HOSTS, MAX_SUBTREES, TopologyError};

/// Shape of the forest. Defaults: K = 8, R = 2, A = 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanParams {
    /// K, the number of subtrees (each has one top connected to the gateway).
    pub subtrees: usize,
    /// R, how many distinct subtrees every host belongs to (1 <= R <= K, R <= A).
    pub replicas: usize,
    /// A, the maximum number of children of a relaying host (A >= 2).
    pub arity: usize,
}

impl Default for PlanParams {
    fn default() -> Self {
        Self {
            subtrees: 8,
            replicas: 2,
            arity: 2,
        }
    }
}

impl PlanParams {
    /// Checks `1 <= K <= MAX_SUBTREES`, `1 <= R <= K`, `2 <= A <= MAX_ARITY`
    /// and `R <= A`.
    ///
    /// `R <= A` is the leaf-slot capacity rule: a subtree with `m` home hosts
    /// has `m*(A-1) + 1` leaf slots and receives about `m*(R-1)` leaf-only
    /// members, so `R - 1 <= A - 1` is needed as the cluster grows.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let reason = if self.subtrees == 0 {
            "subtrees must be at least 1"
        } else if self.subtrees > MAX_SUBTREES {
            "too many subtrees"
        } else if self.replicas == 0 {
            "replicas must be at least 1"
        } else if self.replicas > self.subtrees {
            "replicas must not exceed subtrees (a host is in R distinct subtrees)"
        } else if self.arity < 2 {
            "arity must be at least 2"
        } else if self.arity > MAX_ARITY {
            "arity too large"
        } else if self.replicas > self.arity {
            "replicas must not exceed arity (leaf-slot capacity)"
        } else {
            return Ok(());
        };
        Err(TopologyError::InvalidParams {
            subtrees: self.subtrees,
            replicas: self.replicas,
            arity: self.arity,
            reason,
        })
    }
}

/// The other end of an uplink: a host, or the gateway (the root service).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A host of the plan, by name.
    Host(String),
    /// The gateway. In JSON and text it is written `gateway`, which is why no
    /// host may have that name.
    Gateway,
}

impl Peer {
    /// The host name, or `"gateway"`.
    pub fn name(&self) -> &str {
        match self {
            Peer::Host(name) => name,
            Peer::Gateway => GATEWAY_NAME,
        }
    }
}

/// How peers named "gateway" are written; reserved as a host name.
pub const GATEWAY_NAME: &str = "gateway";

/// A host's role in one of its subtrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Home subtree: the host sits in the heap of home hosts and relays for
    /// its children (it may have none, at the bottom of a small subtree).
    Interior,
    /// Leaf-only membership: never any children.
    Leaf,
}

/// One membership of a host: its place in one subtree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Link {
    /// Subtree id, `0..K`.
    pub subtree: usize,
    /// Interior (home subtree) or leaf-only.
    pub role: Role,
    /// Where to send: the parent host, or the gateway for a top.
    pub parent: Peer,
    /// Where to send while the parent is dead: the grandparent, or the
    /// gateway when the parent is the top (or is the gateway). Always an
    /// ancestor, so never the host itself nor a descendant.
    pub backup: Peer,
    /// Hosts that send to this host in this subtree (at most A; empty for leaves).
    pub children: Vec<String>,
    /// Hops to the gateway along primary parents (a top has depth 1).
    pub depth: u32,
    /// Heap slot in the subtree (0 is the top).
    pub slot: usize,
    /// Index in [`Plan::hosts`] of the parent; `None` for the gateway.
    #[serde(skip)]
    pub parent_index: Option<usize>,
}

/// Everything one host needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostPlan {
    /// The host name.
    pub name: String,
    /// The host's home subtree (where it may relay).
    pub home: usize,
    /// Exactly R links in distinct subtrees; `links[0]` is the home link
    /// (role [`Role::Interior`]), the others are leaf-only.
    pub links: Vec<Link>,
}

impl HostPlan {
    /// This host's link in `subtree`, if it belongs to it.
    pub fn link(&self, subtree: usize) -> Option<&Link> {
        self.links.iter().find(|l| l.subtree == subtree)
    }
}

/// Summary of one subtree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SubtreeSummary {
    /// Subtree id, `0..K`.
    pub id: usize,
    /// The member at slot 0, which connects to the gateway; `None` for an
    /// empty subtree. It is a home host unless the subtree has none (K > N).
    pub top: Option<String>,
    /// Number of members (home hosts + leaf-only members).
    pub size: usize,
    /// Number of home hosts (the only possible relays).
    pub home_hosts: usize,
    /// Number of leaf-only members.
    pub leaf_members: usize,
    /// Largest member depth (hops to the gateway); 0 if empty.
    pub depth: u32,
    /// Members whose parent is the gateway: the top, plus overflow leaves.
    pub gateway_children: usize,
}

/// The whole forest: per host (in input order) its R links, plus per-subtree
/// summaries. Same input, same plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub(crate) params: PlanParams,
    pub(crate) hosts: Vec<HostPlan>,
    pub(crate) index: HashMap<String, usize>,
    pub(crate) subtrees: Vec<SubtreeSummary>,
}

impl Plan {
    /// The parameters the plan was built with.
    pub fn params(&self) -> PlanParams {
        self.params
    }

    /// All hosts, in input order.
    pub fn hosts(&self) -> &[HostPlan] {
        &self.hosts
    }

    /// Index in [`Plan::hosts`] of the host called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The plan of the host called `name`.
    pub fn host(&self, name: &str) -> Option<&HostPlan> {
        self.index_of(name).and_then(|i| self.hosts.get(i))
    }

    /// Per-subtree summaries, indexed by subtree id.
    pub fn subtrees(&self) -> &[SubtreeSummary] {
        &self.subtrees
    }
}

/// Home subtree of host `i` of `n`: `i mod K` for complete rounds of K
/// hosts; the `r = n mod K` hosts of the last, partial round are spread
/// evenly (`j*K/r`) rather than packed into subtrees `0..r`, which keeps
/// subtree *totals* (home + leaf-only) within 1 of each other: the home
/// counts then form a balanced (Sturmian) sequence, and a subtree's total is
/// the sum of R consecutive home counts.
fn home_of(i: usize, n: usize, k: usize) -> usize {
    let full = n - n % k;
    if i < full {
        i % k
    } else {
        // j < r <= K - 1 and K <= MAX_SUBTREES, so j*K does not overflow.
        (i - full) * k / (n - full)
    }
}

/// Parent slot of slot `x` in a subtree with `m` home hosts, or `None` if
/// it hangs under the gateway (the top, or an overflow leaf).
fn parent_slot(x: usize, m: usize, arity: usize) -> Option<usize> {
    let p = x.checked_sub(1)? / arity;
    (p < m).then_some(p)
}

/// Builds the interior-disjoint forest for `hosts` (order matters: it
/// decides home subtrees and heap positions).
///
/// Errors: invalid `params`, empty list, more than [`MAX_HOSTS`] hosts,
/// duplicate names, or a name that is empty, contains whitespace, or is
/// the reserved `gateway`.
pub fn plan(hosts: &[String], params: PlanParams) -> Result<Plan, TopologyError> {
    params.validate()?;
    let n = hosts.len();
    if n == 0 {
        return Err(TopologyError::EmptyList);
    }
    if n > MAX_HOSTS {
        return Err(TopologyError::TooManyHosts { limit: MAX_HOSTS });
    }
    for host in hosts {
        let reason = if host.is_empty() {
            "empty"
        } else if host == GATEWAY_NAME {
            "reserved for the gateway"
        } else if host.chars().any(char::is_whitespace) {
            "contains whitespace"
        } else {
            continue;
        };
        return Err(TopologyError::InvalidHostName {
            host: host.clone(),
            reason,
        });
    }
    let mut index = HashMap::with_capacity(n);
    for (i, host) in hosts.iter().enumerate() {
        if index.insert(host.clone(), i).is_some() {
            return Err(TopologyError::DuplicateHost { host: host.clone() });
        }
    }
    let (k, r, a) = (params.subtrees, params.replicas, params.arity);

    // Memberships: host i is home in `home[i]` and leaf-only in the R-1
    // following subtrees (distinct because R <= K).
    let home: Vec<usize> = (0..n).map(|i| home_of(i, n, k)).collect();
    let subtree_of = |i: usize, d: usize| (home[i] + d) % k;
    let mut home_count = vec![0usize; k];
    let mut leaf_count = vec![0usize; k];
    for i in 0..n {
        home_count[home[i]] += 1;
        for d in 1..r {
            leaf_count[subtree_of(i, d)] += 1;
        }
    }

    // Members of all subtrees in one flat array, subtree s at
    // `start[s]..start[s+1]`, in slot order. `slot[i*r + d]` is host i's
    // slot in its d-th subtree.
    let mut start = Vec::with_capacity(k + 1);
    start.push(0usize);
    for s in 0..k {
        start.push(start[s] + home_count[s] + leaf_count[s]);
    }
    let mut next_home: Vec<usize> = vec![0; k];
    let mut next_leaf: Vec<usize> = home_count.clone();
    let mut members = vec![0u32; n * r];
    let mut slot = vec![0usize; n * r];
    for i in 0..n {
        for d in 0..r {
            let s = subtree_of(i, d);
            let cursor = if d == 0 {
                &mut next_home[s]
            } else {
                &mut next_leaf[s]
            };
            // i < MAX_HOSTS < u32::MAX.
            members[start[s] + *cursor] = i as u32;
            slot[i * r + d] = *cursor;
            *cursor += 1;
        }
    }

    // Depth per member slot; parents come before children in slot order.
    let mut depth = vec![0u32; n * r];
    let mut subtrees = Vec::with_capacity(k);
    for s in 0..k {
        let (base, size, m) = (start[s], start[s + 1] - start[s], home_count[s]);
        let mut max_depth = 0;
        for x in 0..size {
            let dx = parent_slot(x, m, a).map_or(1, |p| depth[base + p] + 1);
            depth[base + x] = dx;
            max_depth = max_depth.max(dx);
        }
        subtrees.push(SubtreeSummary {
            id: s,
            top: (size > 0).then(|| hosts[members[base] as usize].clone()),
            size,
            home_hosts: m,
            leaf_members: size - m,
            depth: max_depth,
            gateway_children: if size == 0 {
                0
            } else {
                1 + size.saturating_sub(a * m + 1)
            },
        });
    }

    let host_at = |s: usize, x: usize| members[start[s] + x] as usize;
    let peer = |s: usize, x: Option<usize>| match x {
        Some(x) => Peer::Host(hosts[host_at(s, x)].clone()),
        None => Peer::Gateway,
    };
    let plans = (0..n)
        .map(|i| {
            let links = (0..r)
                .map(|d| {
                    let s = subtree_of(i, d);
                    let (m, size, x) = (home_count[s], start[s + 1] - start[s], slot[i * r + d]);
                    let parent = parent_slot(x, m, a);
                    let children = if x < m {
                        // Slots a*x+1 ..= a*x+a that exist; all hang under x.
                        (a * x + 1..size.min(a * x + a + 1))
                            .map(|c| hosts[host_at(s, c)].clone())
                            .collect()
                    } else {
                        Vec::new()
                    };
                    Link {
                        subtree: s,
                        role: if d == 0 { Role::Interior } else { Role::Leaf },
                        parent: peer(s, parent),
                        backup: peer(s, parent.and_then(|p| parent_slot(p, m, a))),
                        children,
                        depth: depth[start[s] + x],
                        slot: x,
                        parent_index: parent.map(|p| host_at(s, p)),
                    }
                })
                .collect();
            HostPlan {
                name: hosts[i].clone(),
                home: home[i],
                links,
            }
        })
        .collect();
    Ok(Plan {
        params,
        hosts: plans,
        index,
        subtrees,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may panic.
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn params_validation() {
        let p = |subtrees, replicas, arity| PlanParams {
            subtrees,
            replicas,
            arity,
        };
        assert!(PlanParams::default().validate().is_ok());
        assert!(p(1, 1, 2).validate().is_ok());
        assert!(p(16, 4, 4).validate().is_ok());
        for bad in [p(0, 1, 2), p(2, 0, 2), p(2, 3, 4), p(4, 2, 1), p(8, 3, 2)] {
            assert!(
                matches!(bad.validate(), Err(TopologyError::InvalidParams { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn homes_are_balanced_and_spread() {
        // 10 hosts, K = 4: two full rounds, then 2 hosts spread to 0 and 2.
        let homes: Vec<usize> = (0..10).map(|i| home_of(i, 10, 4)).collect();
        assert_eq!(homes, [0, 1, 2, 3, 0, 1, 2, 3, 0, 2]);
    }

    #[test]
    fn small_example_matches_the_crate_doc_picture() {
        let p = plan(
            &names(6),
            PlanParams {
                subtrees: 2,
                replicas: 2,
                arity: 2,
            },
        )
        .unwrap();
        let n0 = &p.hosts()[0];
        assert_eq!(n0.home, 0);
        assert_eq!(n0.links[0].parent, Peer::Gateway);
        assert_eq!(n0.links[0].children, ["n2", "n4"]);
        assert_eq!(n0.links[1].subtree, 1);
        assert_eq!(n0.links[1].parent, Peer::Host("n3".into()));
        assert_eq!(n0.links[1].backup, Peer::Host("n1".into()));
        assert_eq!(n0.links[1].depth, 3);
        let n5 = p.host("n5").unwrap();
        assert_eq!(n5.links[1].parent, Peer::Host("n4".into()));
        assert_eq!(n5.links[1].backup, Peer::Host("n0".into()));
        assert_eq!(p.subtrees()[1].top.as_deref(), Some("n1"));
        assert_eq!(p.subtrees()[1].depth, 3);
    }

    #[test]
    fn more_subtrees_than_hosts() {
        let p = plan(&names(1), PlanParams::default()).unwrap();
        let h = &p.hosts()[0];
        assert_eq!(h.links.len(), 2);
        assert!(h.links.iter().all(|l| l.parent == Peer::Gateway));
        assert_eq!(p.subtrees().iter().filter(|s| s.size > 0).count(), 2);
    }

    #[test]
    fn overflow_leaves_hang_under_the_gateway() {
        // K = 4, R = A = 3, N = 3: homes spread to 0, 1, 2; subtree 3 has no
        // home host but two leaf-only members (n1 and n2).
        let p = plan(
            &names(3),
            PlanParams {
                subtrees: 4,
                replicas: 3,
                arity: 3,
            },
        )
        .unwrap();
        let s3 = &p.subtrees()[3];
        assert_eq!((s3.home_hosts, s3.leaf_members), (0, 2));
        assert_eq!(s3.gateway_children, 2);
        for name in ["n1", "n2"] {
            let link = p.host(name).unwrap().link(3).unwrap();
            assert_eq!(
                (&link.parent, &link.backup),
                (&Peer::Gateway, &Peer::Gateway)
            );
        }
    }

    #[test]
    fn rejects_bad_hosts() {
        let params = PlanParams::default();
        assert_eq!(plan(&[], params), Err(TopologyError::EmptyList));
        let dup = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
        assert_eq!(
            plan(&dup, params),
            Err(TopologyError::DuplicateHost { host: "a".into() })
        );
        for bad in ["", "gateway", "a b"] {
            assert!(matches!(
                plan(&[bad.to_owned()], params),
                Err(TopologyError::InvalidHostName { .. })
            ));
        }
    }

    #[test]
    fn deterministic() {
        let hosts = names(1000);
        let params = PlanParams {
            subtrees: 7,
            replicas: 2,
            arity: 3,
        };
        assert_eq!(plan(&hosts, params), plan(&hosts, params));
    }
}
