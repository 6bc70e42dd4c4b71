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
        assert!(bin.ends_with("/canopy"), "{}: runs {bin}", path.display());
        let sub = words.next().expect("a subcommand");
        let help = canopy(&[sub, "--help"]);
        for flag in words.filter(|w| w.starts_with("--")) {
            assert!(
                help.contains(flag),
                "{}: `canopy {sub}` has no {flag}",
                path.display()
            );
        }
        for key in ["[Unit]", "[Service]", "[Install]", "Restart=always"] {
            assert!(text.contains(key), "{}: lacks {key}", path.display());
        }
    }
    assert_eq!(units, 2, "canopy-node and canopy-gateway units");
}
