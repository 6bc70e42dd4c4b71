//! Links `canopy-node` with its code laid out by use: the functions a node
//! runs (listed busiest first in `src/bin/canopy-node.order`, made by
//! `scripts/node-symbol-order.py`) go together at the start of the text.
//! The kernel maps a binary's code in 64 KiB blocks around each page that
//! runs, so code spread over the whole text made nearly all of it resident
//! (issue 3: the leaf's RSS; 3.2 -> 1.6 MB of resident text). A name the
//! build no longer has is skipped: a stale list costs memory, never
//! correctness. Only where Rust links with its own LLD by default
//! (x86_64 Linux); GNU ld has no such option.

use std::path::Path;

fn main() {
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/canopy-node.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let lld_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    if lld_default && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=canopy-node=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=canopy-node=-Wl,--no-warn-symbol-ordering");
    }
}
