//! Output formats for a [`Plan`]: human text, JSON, Graphviz dot. All pure:
//! they return a `String`, the caller decides where it goes.
//!
//! JSON shape (more fields may be added; these are stable):
//!
//! ```text
//! { "params":   {"subtrees": K, "replicas": R, "arity": A},
//!   "subtrees": [{"id", "top", "size", "home_hosts", "leaf_members", "depth", "gateway_children"}],
//!   "hosts":    {"<host>": {"index": i, "home": s,
//!                            "links": [{"subtree", "role", "parent", "backup",
//!                                       "children", "depth", "slot"}]}} }
//! ```
//!
//! `parent` and `backup` are a host name or `"gateway"`; `hosts` keeps input
//! order.

use std::fmt::Write as _;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::plan::{HostPlan, Peer, Plan, Role};

impl Serialize for Peer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl Serialize for Plan {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Plan", 3)?;
        s.serialize_field("params", &self.params)?;
        s.serialize_field("subtrees", &self.subtrees)?;
        s.serialize_field("hosts", &HostsJson(&self.hosts))?;
        s.end()
    }
}

/// `hosts` as a JSON object keyed by name, in input order.
struct HostsJson<'a>(&'a [HostPlan]);

impl Serialize for HostsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (index, host) in self.0.iter().enumerate() {
            map.serialize_entry(&host.name, &HostJson { index, host })?;
        }
        map.end()
    }
}

struct HostJson<'a> {
    index: usize,
    host: &'a HostPlan,
}

impl Serialize for HostJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Host", 3)?;
        s.serialize_field("index", &self.index)?;
        s.serialize_field("home", &self.host.home)?;
        s.serialize_field("links", &self.host.links)?;
        s.end()
    }
}

/// The plan as pretty-printed JSON (see the module docs for the shape).
pub fn to_json(plan: &Plan) -> String {
    // Cannot fail: every map key is a string and no Serialize impl here
    // returns an error of its own.
    #[allow(clippy::expect_used)]
    serde_json::to_string_pretty(plan).expect("plan serializes to JSON")
}

/// Human-readable plan: a header, one line per subtree, then per host one
/// line per link.
pub fn to_text(plan: &Plan) -> String {
    let p = plan.params();
    let mut out = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        out,
        "plan: {} hosts, {} subtrees (K), {} replicas (R), arity {} (A)",
        plan.hosts().len(),
        p.subtrees,
        p.replicas,
        p.arity
    );
    for s in plan.subtrees() {
        let _ = writeln!(
            out,
            "subtree {}: top {}, {} members ({} home, {} leaf-only), depth {}, {} on gateway",
            s.id,
            s.top.as_deref().unwrap_or("-"),
            s.size,
            s.home_hosts,
            s.leaf_members,
            s.depth,
            s.gateway_children
        );
    }
    for host in plan.hosts() {
        let _ = writeln!(out, "{} (home {})", host.name, host.home);
        for l in &host.links {
            let role = match l.role {
                Role::Interior => "interior",
                Role::Leaf => "leaf",
            };
            let _ = write!(
                out,
                "  subtree {} {role} depth {} parent {} backup {}",
                l.subtree,
                l.depth,
                l.parent.name(),
                l.backup.name()
            );
            if !l.children.is_empty() {
                let _ = write!(out, " children {}", l.children.join(","));
            }
            out.push('\n');
        }
    }
    out
}

/// Graphviz dot: one cluster per subtree, the gateway outside them, edges
/// from child to parent. A host appears once per subtree it belongs to
/// (node id `s<subtree>:<name>`); home hosts are boxes, leaf-only members
/// ellipses.
pub fn to_dot(plan: &Plan) -> String {
    let k = plan.params().subtrees;
    let mut nodes: Vec<String> = vec![String::new(); k];
    let mut edges = String::new();
    for host in plan.hosts() {
        for l in &host.links {
            let id = quote(&format!("s{}:{}", l.subtree, host.name));
            let shape = match l.role {
                Role::Interior => "box",
                Role::Leaf => "ellipse",
            };
            if let Some(cluster) = nodes.get_mut(l.subtree) {
                let _ = writeln!(
                    cluster,
                    "    {id} [label={}, shape={shape}];",
                    quote(&host.name)
                );
            }
            let parent = match &l.parent {
                Peer::Host(name) => quote(&format!("s{}:{name}", l.subtree)),
                Peer::Gateway => "gateway".to_owned(),
            };
            let _ = writeln!(edges, "  {id} -> {parent};");
        }
    }
    let mut out = String::from(
        "digraph canopy {\n  rankdir=BT;\n  gateway [shape=doubleoctagon, label=\"gateway\"];\n",
    );
    for (s, cluster) in nodes.iter().enumerate() {
        let _ = write!(
            out,
            "  subgraph cluster_{s} {{\n    label=\"subtree {s}\";\n{cluster}  }}\n"
        );
    }
    out.push_str(&edges);
    out.push_str("}\n");
    out
}

/// A dot double-quoted ID.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may panic.
mod tests {
    use super::*;
    use crate::plan::{PlanParams, plan};

    fn small() -> Plan {
        let hosts: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
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
    fn json_has_the_documented_shape() {
        let v: serde_json::Value = serde_json::from_str(&to_json(&small())).unwrap();
        let links = &v["hosts"]["n0"]["links"];
        assert_eq!(links[0]["subtree"], 0);
        assert_eq!(links[0]["parent"], "gateway");
        assert_eq!(links[0]["backup"], "gateway");
        assert_eq!(links[0]["role"], "interior");
        assert_eq!(links[0]["children"], serde_json::json!(["n2", "n4"]));
        assert_eq!(links[1]["subtree"], 1);
        assert_eq!(links[1]["parent"], "n3");
        assert_eq!(links[1]["backup"], "n1");
        assert_eq!(links[1]["role"], "leaf");
        assert_eq!(v["params"]["replicas"], 2);
        assert_eq!(v["subtrees"][1]["top"], "n1");
        assert!(links[0].get("parent_index").is_none());
    }

    #[test]
    fn json_hosts_keep_input_order() {
        let json = to_json(&small());
        let pos = |h: &str| json.find(&format!("\"{h}\": {{")).unwrap();
        assert!(pos("n0") < pos("n1") && pos("n1") < pos("n5"));
    }

    #[test]
    fn text_mentions_every_host_and_subtree() {
        let text = to_text(&small());
        assert!(text.starts_with("plan: 6 hosts, 2 subtrees"));
        assert!(text.contains("subtree 1: top n1, 6 members (3 home, 3 leaf-only), depth 3"));
        assert!(text.contains("n0 (home 0)\n  subtree 0 interior depth 1 parent gateway backup gateway children n2,n4\n  subtree 1 leaf depth 3 parent n3 backup n1\n"));
    }

    #[test]
    fn dot_has_clusters_gateway_and_edges() {
        let dot = to_dot(&small());
        assert!(dot.starts_with("digraph canopy {"));
        assert!(dot.contains("subgraph cluster_0"));
        assert!(dot.contains("subgraph cluster_1"));
        assert!(dot.contains("\"s0:n0\" -> gateway;"));
        assert!(dot.contains("\"s1:n0\" -> \"s1:n3\";"));
        assert_eq!(dot.matches(" -> ").count(), 12);
        assert_eq!(quote("a\"b\\"), "\"a\\\"b\\\\\"");
    }
}
