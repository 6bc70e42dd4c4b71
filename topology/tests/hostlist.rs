//! Hostlist parsing against a fixture and an independent model, and the
//! compress/parse round trip.
#![allow(clippy::unwrap_used)] // Tests may panic.

use std::collections::HashSet;

use canopy_topology::{TopologyError, compress_hostlist, parse_hostfile, parse_hostlist};
use proptest::prelude::*;

#[test]
fn slurm_style_host_file_fixture() {
    let content = include_str!("data/slurm_hosts.txt");
    let hosts = parse_hostfile(content).expect("fixture parses");
    assert_eq!(hosts.len(), 2 + 1 + 8 + 4 + 2 + 2);
    assert_eq!(&hosts[..4], ["login1", "login2", "mgmt01", "rack01-cn001"]);
    assert_eq!(hosts[10], "rack02-cn004");
    assert_eq!(&hosts[16..], ["bigmem9", "fat10", "fat11"]);
    assert_eq!(
        compress_hostlist(&hosts),
        "login[1-2],mgmt01,rack01-cn[001-004],rack02-cn[001-004],gpu[01-04],bigmem[7,9],fat[10-11]"
    );
}

/// One bracket element: `first..=first+len`, zero padded to `width`.
fn element() -> impl Strategy<Value = (u64, u64, usize)> {
    (0u64..2000, 0u64..30, 1usize..=5)
}

fn render((first, len, width): (u64, u64, usize)) -> (String, Vec<String>) {
    let pad = |v: u64| format!("{v:0width$}");
    let last = first + len;
    let text = if len == 0 {
        pad(first)
    } else {
        format!("{}-{}", pad(first), pad(last))
    };
    (text, (first..=last).map(pad).collect())
}

proptest! {
    /// `prefix[elements]suffix,other` expands like a naive model, or
    /// reports the first duplicate.
    #[test]
    fn expansion_matches_model(
        prefix in "[a-z]{1,4}",
        suffix in "(-ib|x)?",
        elements in prop::collection::vec(element(), 1..5),
        other in prop::collection::vec(element(), 0..3),
    ) {
        let (texts, numbers): (Vec<String>, Vec<Vec<String>>) =
            elements.into_iter().map(render).unzip();
        let mut expr = format!("{prefix}[{}]{suffix}", texts.join(" , "));
        let mut want: Vec<String> =
            numbers.concat().iter().map(|n| format!("{prefix}{n}{suffix}")).collect();
        if !other.is_empty() {
            let (texts, numbers): (Vec<String>, Vec<Vec<String>>) =
                other.into_iter().map(render).unzip();
            expr.push_str(&format!(", q[{}]", texts.join(",")));
            want.extend(numbers.concat().iter().map(|n| format!("q{n}")));
        }
        let mut seen = HashSet::new();
        match want.iter().find(|h| !seen.insert(h.as_str())) {
            Some(dup) => prop_assert_eq!(
                parse_hostlist(&expr),
                Err(TopologyError::DuplicateHost { host: dup.clone() })
            ),
            None => prop_assert_eq!(parse_hostlist(&expr), Ok(want)),
        }
    }

    /// Any list of distinct, syntax-free names survives compress + parse.
    #[test]
    fn compress_round_trips(
        raw in prop::collection::vec(
            (
                prop::sample::select(&["n", "node", "rack1-n", "gpu", "login"][..]),
                0u64..300,
                1usize..=4,
                prop::sample::select(&["", "x", "-ib"][..]),
            ),
            1..200,
        )
    ) {
        let mut seen = HashSet::new();
        let hosts: Vec<String> = raw
            .into_iter()
            .map(|(p, v, w, s)| format!("{p}{v:0w$}{s}"))
            .filter(|h| seen.insert(h.clone()))
            .collect();
        let compressed = compress_hostlist(&hosts);
        prop_assert!(compressed.len() <= hosts.iter().map(|h| h.len() + 1).sum::<usize>());
        prop_assert_eq!(parse_hostlist(&compressed), Ok(hosts));
    }

    /// Garbage never panics; success means a non-empty list of distinct names.
    #[test]
    fn never_panics(
        tokens in prop::collection::vec(
            prop::sample::select(&["a", "b", "1", "02", "13", "[", "]", ",", "-", " ", "\t", "\n", "#"][..]),
            0..16,
        )
    ) {
        // Tokens keep numbers small, so no case expands to millions of hosts.
        let expr = tokens.concat();
        if let Ok(hosts) = parse_hostlist(&expr) {
            prop_assert!(!hosts.is_empty());
            let distinct: HashSet<&String> = hosts.iter().collect();
            prop_assert_eq!(distinct.len(), hosts.len());
        }
        let _ = parse_hostfile(&expr);
    }
}
