//! The node and gateway files: defaults, overrides, remote_write entries
//! and their secrets, files generated from a plan.

use super::gateway::*;
use super::*;
use canopy_gateway::remote_write::{EndpointConfig, WriteAuth};
use canopy_topology::{PlanParams, plan};

const MIN: &str = "listen = \"0.0.0.0:7700\"\n";
const TLS: &str = "[tls]\nca = \"ca.pem\"\ncert = \"g.pem\"\nkey = \"g.key\"\n";

#[test]
fn gateway_thresholds_default_and_override_one_by_one() {
    let f: GatewayFile = toml::from_str(&format!("{MIN}{TLS}")).expect("minimal");
    assert_eq!(f.thresholds, Thresholds::default());
    assert_eq!(f.tokens, None);
    let f: GatewayFile = toml::from_str(&format!(
        "{MIN}tokens = \"tokens\"\n[thresholds]\ncpu_under = 0.3\nio_share_over = 0.8\n{TLS}"
    ))
    .expect("thresholds");
    assert_eq!(f.thresholds.cpu_under, 0.3);
    assert_eq!(f.thresholds.io_share_over, 0.8);
    assert_eq!(f.thresholds.mem_over, Thresholds::default().mem_over);
    assert_eq!(f.tokens.as_deref(), Some(Path::new("tokens")));
    let e = toml::from_str::<GatewayFile>(&format!("{MIN}[thresholds]\ncpu_undr = 0.3\n{TLS}"))
        .expect_err("a typo is an error");
    assert!(e.to_string().contains("cpu_undr"), "{e}");
    // remote_write: URLs and tables with credentials side by side.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("vm.token"), "tok\n").expect("write");
    std::fs::write(dir.path().join("pw"), "pw").expect("write");
    let g: GatewayFile = toml::from_str(&format!(
        "{MIN}remote_write = [\"http://a/w\", {{ url = \"https://b/w\", bearer_token_file = \"vm.token\" }}, {{ url = \"https://c/w\", basic_auth = {{ username = \"u\", password_file = \"pw\" }} }}]\n{TLS}"
    ))
    .expect("remote_write entries");
    let cfg = dir.path().join("gateway.toml");
    let eps: Vec<EndpointConfig> = g
        .remote_write
        .iter()
        .map(|r| r.load(&cfg))
        .collect::<Result<_>>()
        .expect("load");
    assert_eq!(eps[0], EndpointConfig::plain("http://a/w"));
    assert_eq!(eps[1].auth, Some(WriteAuth::Bearer("tok".into())));
    assert_eq!(
        eps[2].auth,
        Some(WriteAuth::Basic {
            username: "u".into(),
            password: "pw".into()
        })
    );
    // What `plan --emit-configs` writes reads back the same.
    let text = toml::to_string_pretty(&f).expect("serialise");
    let back: GatewayFile = toml::from_str(&text).expect("round trip");
    assert_eq!(back, f);
}

#[test]
fn a_tops_ack_timeout_outwaits_the_gateways_hole_wait() {
    for tick_ms in [100, 1_000, 5_000, 60_000] {
        let hold = u64::from(canopy_aggregator::merge::HOLE_WAIT_TICKS) * tick_ms;
        let top = ack_timeout_ms(1, tick_ms);
        assert!(top > hold + tick_ms, "tick {tick_ms}: {top} ms");
        assert!(top >= ACK_TIMEOUT_BASE_MS, "tick {tick_ms}: {top} ms");
        assert_eq!(ack_timeout_ms(3, tick_ms), top + 2 * ACK_TIMEOUT_STEP_MS);
    }
}

/// 16 hosts `h01`..`h16` in 4 subtrees, 2 replicas, arity 2, on loopback
/// from port 20000 with `gateways` gateways: (hosts, plan, addressing).
fn plan16(gateways: usize) -> (Vec<String>, Plan, Addressing) {
    let hosts: Vec<String> = (1..=16).map(|i| format!("h{i:02}")).collect();
    let p = plan(
        &hosts,
        PlanParams {
            subtrees: 4,
            replicas: 2,
            arity: 2,
        },
    )
    .expect("plan");
    let a = Addressing {
        loopback: true,
        base_port: 20000,
        gateways: Vec::new(),
        loopback_gateways: gateways,
    };
    (hosts, p, a)
}

#[test]
fn planned_configs_stagger_relays_by_depth() {
    let (_, p, a) = plan16(1);
    let offset = |h: &str| {
        let f = node_file(&p, &p.allowed_children(), h, &a, 1000).expect("node file");
        let s = f.sample_offset_ms.expect("sample offset");
        let r = f.relay_offset_ms.expect("relay offset");
        assert!(
            s < r,
            "{h} samples ({s} ms) before its relay forwards ({r} ms)"
        );
        r
    };
    let ack = |h: &str| {
        let f = node_file(&p, &p.allowed_children(), h, &a, 1000).expect("node file");
        f.uplinks[0].ack_timeout_ms.expect("a planned ack timeout")
    };
    let mut pairs = 0;
    for hp in p.hosts() {
        let home = &hp.links[0];
        if let Peer::Host(parent) = &home.parent {
            // A child outwaits its parent's own failover.
            assert!(
                ack(&hp.name) >= ack(parent) + ACK_TIMEOUT_STEP_MS,
                "{} waits longer for acks than {parent}",
                hp.name
            );
            // A parent forwards after its child has forwarded.
            assert!(
                offset(parent) > offset(&hp.name),
                "{parent} after {}",
                hp.name
            );
            pairs += 1;
        } else {
            assert_eq!(home.depth, 1);
        }
    }
    assert!(pairs > 0, "the plan has relays below the tops");
    // Old configs (no offsets) still load: timers then run from the start.
    let f = node_file(&p, &p.allowed_children(), "h01", &a, 1000).expect("node file");
    let mut text = toml::to_string_pretty(&f).expect("toml");
    assert!(text.contains("relay_offset_ms"));
    text = text
        .lines()
        .filter(|l| !l.contains("offset_ms"))
        .collect::<Vec<_>>()
        .join("\n");
    let old: NodeFile = toml::from_str(&text).expect("a config without offsets");
    assert_eq!(old.relay_offset_ms, None);
    // ... and without ack timeouts (the uplink's default then).
    let text: String = text
        .lines()
        .filter(|l| !l.contains("ack_timeout_ms"))
        .collect::<Vec<_>>()
        .join("\n");
    let old: NodeFile = toml::from_str(&text).expect("a config without ack timeouts");
    assert!(old.uplinks.iter().all(|u| u.ack_timeout_ms.is_none()));
    // The answer timeout is not planned (the uplink's 1 s default) and
    // may be set at the top of the file.
    assert_eq!(old.answer_timeout_ms, None);
    assert!(!text.contains("answer_timeout_ms"));
    let set: NodeFile = toml::from_str(&format!("answer_timeout_ms = 2500\n{text}"))
        .expect("a config with an answer timeout");
    assert_eq!(set.answer_timeout_ms, Some(2500));
    let back: NodeFile =
        toml::from_str(&toml::to_string_pretty(&set).expect("toml")).expect("round trip");
    assert_eq!(back, set);
    // So is the filesystem interval (absent: the collector's 10 ticks).
    assert_eq!(old.filesystem_every_ticks, None);
    let set: NodeFile = toml::from_str(&format!("filesystem_every_ticks = 1\n{text}"))
        .expect("a config with a filesystem interval");
    assert_eq!(set.filesystem_every_ticks, Some(1));
}

#[test]
fn planned_configs_list_every_allowed_peer_and_old_ones_still_load() {
    let (hosts, p, a) = plan16(2);
    let allowed = p.allowed_children();
    let files: Vec<NodeFile> = hosts
        .iter()
        .map(|h| node_file(&p, &allowed, h, &a, 1000).expect("node file"))
        .collect();
    let peers = |f: &NodeFile| f.allowed_peers.clone().expect("a planned list");
    // Every uplink's parent and backup lets this host in.
    for f in &files {
        for u in &f.uplinks {
            for parent in [&u.parent, &u.backup] {
                let ok = if parent == canopy_topology::GATEWAY_NAME {
                    let g = gateway_file(&a, &p, &allowed, 1).expect("gateway file");
                    g.allowed_peers.expect("a planned list").contains(&f.host)
                } else {
                    let pf = files.iter().find(|x| &x.host == parent).expect("parent");
                    peers(pf).contains(&f.host)
                };
                assert!(ok, "{} may connect to {parent}", f.host);
            }
        }
        for c in &f.children {
            assert!(peers(f).contains(c), "{c} under {}", f.host);
        }
    }
    // A relay's list goes beyond its home children (backup children).
    assert!(files.iter().any(|f| peers(f).len() > f.children.len()));
    // Round trip, and a config without the list loads (accept any).
    let text = toml::to_string_pretty(&files[0]).expect("toml");
    let back: NodeFile = toml::from_str(&text).expect("round trip");
    assert_eq!(back, files[0]);
    let mut v: toml::Table = toml::from_str(&text).expect("table");
    assert!(v.remove("allowed_peers").is_some());
    let old: NodeFile = toml::from_str(&toml::to_string(&v).expect("toml")).expect("old");
    assert_eq!(old.allowed_peers, None);
    let g = gateway_file(&a, &p, &allowed, 0).expect("gateway file");
    let mut v: toml::Table = toml::from_str(&toml::to_string(&g).expect("toml")).expect("table");
    assert!(v.remove("allowed_peers").is_some());
    let old: GatewayFile = toml::from_str(&toml::to_string(&v).expect("toml")).expect("old");
    assert_eq!(old.allowed_peers, None);
}
