//! What the real-process benchmarks ask of the host: where a program is,
//! where the `canopy` binary under test is, and the load they ran under.

use std::path::{Path, PathBuf};

/// `name` as given when it is a path, else the first match on `PATH`.
pub fn find_exe(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The `canopy` binary: `given`, else the one beside this program (cargo
/// builds both into the same `target/<profile>`); `None` if it is not a file.
pub fn canopy_binary(given: Option<&Path>) -> Option<PathBuf> {
    let p = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe().ok()?.parent()?.join("canopy"),
    };
    p.is_file().then_some(p)
}

/// The 1, 5 and 15 minute load averages as `/proc/loadavg` gives them.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
