//! Pure failover choice: which peer a host sends to in one subtree, given
//! which peers answer. The caller (the leaf agent) owns liveness detection and
//! its clock; this module only decides.
//!
//! Rule, per subtree link:
//! 1. the primary parent while it is alive (so a host moves back as soon as
//!    its parent returns: the choice is stateless);
//! 2. else the backup parent (grandparent, or the gateway);
//! 3. else the next live ancestor further up ([`choose_uplink`]), ending at
//!    the gateway, which is always the last resort.
//!
//! Every candidate is an ancestor in the same subtree, and every relaying
//! ancestor of a subtree is one of that subtree's home hosts, so a failover
//! never creates a cycle and never makes two of a host's R paths share a
//! relay.

use std::collections::{BTreeMap, BTreeSet};

use crate::plan::{Link, Peer, Plan};

static GATEWAY: Peer = Peer::Gateway;

/// The first two steps of the rule: primary if alive, else backup if alive,
/// else `None` (walk further up with [`Plan::ancestors`] or
/// [`choose_uplink`]).
pub fn choose_parent(link: &Link, primary_alive: bool, backup_alive: bool) -> Option<&Peer> {
    if primary_alive {
        Some(&link.parent)
    } else if backup_alive {
        Some(&link.backup)
    } else {
        None
    }
}

/// The whole rule: the first ancestor of `link` (parent, grandparent, ...)
/// for which `alive` returns true, or the gateway if none does. `alive` is
/// not asked about the gateway.
pub fn choose_uplink<'a>(
    plan: &'a Plan,
    link: &'a Link,
    mut alive: impl FnMut(&Peer) -> bool,
) -> &'a Peer {
    plan.ancestors(link)
        .find(|peer| matches!(peer, Peer::Gateway) || alive(peer))
        .unwrap_or(&GATEWAY)
}

impl Plan {
    /// Who may connect to whom: for every parent (a host's name, or
    /// [`crate::GATEWAY_NAME`]), the hosts the plan sends to it in some
    /// subtree, as their primary parent or as their backup. A relay (or
    /// gateway) accepts these peers and no others; a host absent from the
    /// map is nobody's parent. One pass over the plan.
    pub fn allowed_children(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for h in &self.hosts {
            for l in &h.links {
                for p in [&l.parent, &l.backup] {
                    out.entry(p.name().to_string())
                        .or_default()
                        .insert(h.name.clone());
                }
            }
        }
        out
    }

    /// The ancestors of a link in its subtree, nearest first: parent,
    /// grandparent (the backup), ..., and finally [`Peer::Gateway`].
    /// `link` must come from this plan.
    pub fn ancestors<'a>(&'a self, link: &'a Link) -> Ancestors<'a> {
        Ancestors {
            plan: self,
            next: Some(link),
        }
    }
}

/// Iterator returned by [`Plan::ancestors`].
#[derive(Debug, Clone)]
pub struct Ancestors<'a> {
    plan: &'a Plan,
    /// The link whose parent is yielded next.
    next: Option<&'a Link>,
}

impl<'a> Iterator for Ancestors<'a> {
    type Item = &'a Peer;

    fn next(&mut self) -> Option<&'a Peer> {
        let link = self.next.take()?;
        // A parent is a home host of the same subtree, so its home link
        // (`links[0]`) is the next step up. A foreign link simply ends the walk.
        self.next = link
            .parent_index
            .and_then(|p| self.plan.hosts.get(p))
            .and_then(|h| h.links.first())
            .filter(|l| l.subtree == link.subtree);
        Some(&link.parent)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may panic.
mod tests {
    use super::*;
    use crate::plan::{PlanParams, plan};

    fn plan_of(n: usize) -> Plan {
        let hosts: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
        plan(
            &hosts,
            PlanParams {
                subtrees: 2,
                replicas: 2,
                arity: 2,
            },
        )
        .unwrap()
    }

    #[test]
    fn primary_then_backup_then_none() {
        let p = plan_of(20);
        let link = &p.host("h19").unwrap().links[0];
        assert_eq!(choose_parent(link, true, true), Some(&link.parent));
        assert_eq!(choose_parent(link, true, false), Some(&link.parent));
        assert_eq!(choose_parent(link, false, true), Some(&link.backup));
        assert_eq!(choose_parent(link, false, false), None);
    }

    #[test]
    fn ancestors_walk_to_the_gateway() {
        let p = plan_of(20);
        let link = &p.host("h19").unwrap().links[0];
        let chain: Vec<&str> = p.ancestors(link).map(Peer::name).collect();
        // Subtree 1 homes: h1 h3 .. h19 at slots 0..10; h19 is slot 9.
        // Slot 9 -> 4 (h9) -> 1 (h3) -> 0 (h1) -> gateway.
        assert_eq!(chain, ["h9", "h3", "h1", "gateway"]);
        assert_eq!(chain.len(), link.depth as usize);
        assert_eq!(link.backup.name(), "h3");
    }

    #[test]
    fn uplink_skips_dead_ancestors_and_falls_back_to_gateway() {
        let p = plan_of(20);
        let link = &p.host("h19").unwrap().links[0];
        let dead =
            |names: &'static [&'static str]| move |peer: &Peer| !names.contains(&peer.name());
        assert_eq!(choose_uplink(&p, link, dead(&[])).name(), "h9");
        assert_eq!(choose_uplink(&p, link, dead(&["h9"])).name(), "h3");
        assert_eq!(choose_uplink(&p, link, dead(&["h9", "h3"])).name(), "h1");
        assert_eq!(
            choose_uplink(&p, link, dead(&["h9", "h3", "h1"])).name(),
            "gateway"
        );
    }
}
