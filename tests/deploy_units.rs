//! The systemd units shipped in `deploy/systemd` start the binary with
//! subcommands and flags it really has (a renamed flag fails here, not on a
//! cluster at boot).

mod support;

use support::canopy;

#[test]
fn systemd_units_use_real_subcommands_and_flags() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd");
    let mut units = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/systemd exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        units += 1;
        let text = std::fs::read_to_string(&path).expect("readable unit");
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap_or_else(|| panic!("{}: no ExecStart", path.display()));
        let mut words = exec.split_whitespace();
        let bin = words.next().expect("a program");
        // `canopy-node` (the node role alone) or `canopy SUBCOMMAND`.
        let (help, what) = if bin.ends_with("/canopy-node") {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_canopy-node"))
                .arg("--help")
                .output()
                .expect("canopy-node runs");
            assert!(out.status.success(), "canopy-node --help");
            (
                String::from_utf8(out.stdout).expect("UTF-8"),
                "canopy-node".to_string(),
            )
        } else {
            assert!(bin.ends_with("/canopy"), "{}: runs {bin}", path.display());
            let sub = words.next().expect("a subcommand");
            (canopy(&[sub, "--help"]), format!("canopy {sub}"))
        };
        for flag in words.filter(|w| w.starts_with("--")) {
            assert!(
                help.contains(flag),
                "{}: `{what}` has no {flag}",
                path.display()
            );
        }
        for key in ["[Unit]", "[Service]", "[Install]", "Restart=always"] {
            assert!(text.contains(key), "{}: lacks {key}", path.display());
        }
    }
    assert_eq!(units, 2, "canopy-node and canopy-gateway units");
}
