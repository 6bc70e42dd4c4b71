//! Links `canopy-node` and `canopy` with their code laid out by use: the
//! functions a node runs (listed busiest first in
//! `src/bin/canopy-node.order`) and those `canopy gateway` runs
//! (`src/canopy-gateway.order`), both made by `scripts/node-symbol-order.py`,
//! go together at the start of the text.
//! The kernel maps a binary's code in 64 KiB blocks around each page that
//! runs, so code spread over the whole text made nearly all of it resident
//! (issue 3: the leaf's RSS; 3.2 -> 1.6 MB of resident text; issue 5: the
//! gateway's, see `src/canopy-gateway.order`). A name the
//! build no longer has is skipped: a stale list costs memory, never
//! correctness. Only where Rust links with its own LLD by default
//! (x86_64 Linux from Rust 1.90; the workspace builds from 1.88, whose
//! default GNU ld has no such option and would fail the link), and not
//! when `CANOPY_NO_SYMBOL_ORDER` is set (e.g. for another linker).

use std::path::Path;
use std::process::Command;

/// The minor version of the compiler building this crate (`rustc 1.95.0
/// (...)` gives 95), or `None` when it cannot be told.
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var_os("RUSTC")?;
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}

fn main() {
    println!("cargo:rerun-if-env-changed=CANOPY_NO_SYMBOL_ORDER");
    let lld_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu")
        && rustc_minor().is_some_and(|minor| minor >= 90);
    let opted_out = std::env::var_os("CANOPY_NO_SYMBOL_ORDER").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (bin, list) in [
        ("canopy-node", "src/bin/canopy-node.order"),
        ("canopy", "src/canopy-gateway.order"),
    ] {
        let order = dir.join(list);
        println!("cargo:rerun-if-changed={}", order.display());
        if lld_default && !opted_out && order.is_file() {
            println!(
                "cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={}",
                order.display()
            );
            println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-warn-symbol-ordering");
        }
    }
}
