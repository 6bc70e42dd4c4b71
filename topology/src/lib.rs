//! Canopy's topology planner: host lists in, an interior-disjoint forest of
//! subtrees out. Pure and deterministic (no I/O, no clock): every host runs
//! the same function on the same host list and gets the same plan, so the
//! plan is the agreement and no coordination service is needed.
//!
//! * [`parse_hostlist`] / [`parse_hostfile`] expand Slurm hostlists
//!   (`node[001-512,600]`, `rack[1-2]-n[01-04]`, `a[1-3],b`);
//!   [`compress_hostlist`] is the inverse for display.
//! * [`plan`] builds the forest from the hosts and [`PlanParams`]
//!   (K subtrees, R replicas, arity A).
//! * [`choose_parent`] / [`choose_uplink`] are the failover decision.
//! * [`to_text`], [`to_json`], [`to_dot`] render a plan.
//!
//! # The forest (SplitStream's idea)
//!
//! Host `i` has a *home* subtree, `i mod K` (the last partial round of
//! `N mod K` hosts is spread evenly instead). There it sits in a complete
//! A-ary heap of that subtree's home hosts, in input order, the first one
//! being the *top* that sends to the gateway. It is also a plain leaf in
//! the R-1 next subtrees (`home+1 .. home+R-1 mod K`), filling the
//! shallowest free child slots of their home hosts, in BFS order.
//! N = 6, K = 2, R = 2, A = 2:
//!
//! ```text
//!                         gateway
//!                ________/       \________
//!   subtree 0  n0                         n1  subtree 1
//!             /  \                       /  \
//!           n2    n4                   n3    n5      <- home hosts (relays)
//!          /  \     \                 /  \     \
//!        n1    n3    n5             n0    n2    n4   <- the others, as leaves
//! ```
//!
//! # Invariants (property-tested in `tests/invariants.rs`)
//!
//! 1. Every host is in exactly R distinct subtrees; `links[0]` is its home.
//! 2. A host has children only in its home subtree, and at most A of them.
//! 3. Hence the R paths from a host to the gateway share no relaying host:
//!    one dead host cuts at most one of them. This still holds after
//!    failover, because backups (and every further fallback) are ancestors
//!    in the same subtree.
//! 4. Parent links form trees rooted at the gateway (no cycles); `depth` is
//!    the number of hops to the gateway along primary parents.
//! 5. Balance: home-host counts of the subtrees differ by at most 1, and so
//!    do their sizes (home + leaf-only members).
//! 6. Depth: a subtree of T members is a complete A-ary heap, so its depth
//!    is `level(T-1) + 1`, `level(x)` being the heap level of slot `x`
//!    (for A = 2: `floor(log2(T)) + 1`), with `T <= ceil(N*R/K)`.
//! 7. Backup parent: the grandparent, or the gateway when the parent is the
//!    top or the gateway; never the host itself nor a descendant.
//!
//! Leaf capacity: a subtree with `m` home hosts has `m*(A-1) + 1` leaf slots.
//! With R <= 2 (any A >= 2) every leaf-only member gets one, by balance. With
//! 3 <= R <= A, a few leaves may be left over in small or unevenly filled
//! subtrees; they hang directly under the gateway (`gateway_children` counts
//! them), which keeps every invariant above. R > A is rejected.

mod error;
mod failover;
mod hostlist;
mod plan;
mod render;

pub use error::TopologyError;
pub use failover::{Ancestors, choose_parent, choose_uplink};
pub use hostlist::{compress_hostlist, parse_hostfile, parse_hostlist};
pub use plan::{GATEWAY_NAME, HostPlan, Link, Peer, Plan, PlanParams, Role, SubtreeSummary, plan};
pub use render::{to_dot, to_json, to_text};

/// Largest host list accepted, by the parsers and by [`plan`].
pub const MAX_HOSTS: usize = 10_000_000;
/// Largest K accepted by [`PlanParams::validate`].
pub const MAX_SUBTREES: usize = 65_536;
/// Largest A accepted by [`PlanParams::validate`].
pub const MAX_ARITY: usize = 1024;
