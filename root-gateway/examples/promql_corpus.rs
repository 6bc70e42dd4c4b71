//! Runs Prometheus `.test` scripts with Canopy's runner and prints counts.
//!
//! `cargo run -p canopy-gateway --example promql_corpus -- <files...> [-v|-vv]`
//! (`-v` lists failures, `-vv` also skipped evals; by default each instant
//! eval also runs as a range query, as upstream does; `--no-range-check` not).
#![allow(clippy::print_stdout)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v" || a == "-vv");
    let very = args.iter().any(|a| a == "-vv");
    let opts = canopy_gateway::promql::testscript::Options {
        range_check: !args.iter().any(|a| a == "--no-range-check"),
    };
    let (mut p, mut f, mut s) = (0, 0, 0);
    for path in args.iter().filter(|a| !a.starts_with('-')) {
        let Ok(text) = std::fs::read_to_string(path) else {
            println!("{path}: cannot read");
            continue;
        };
        let r = canopy_gateway::promql::testscript::run_script_with(&text, opts);
        let name = path.rsplit('/').next().unwrap_or(path);
        println!(
            "{name:28} passed {:4} failed {:4} skipped {:4} {:?}",
            r.passed, r.failed, r.skipped, r.skip_reasons
        );
        if verbose {
            for fl in &r.failures {
                println!("    {name}:{} {} -- {}", fl.line, fl.expr, fl.message);
            }
        }
        if very {
            for sk in &r.skips {
                println!("    skip {name}:{} {} -- {}", sk.line, sk.expr, sk.message);
            }
        }
        p += r.passed;
        f += r.failed;
        s += r.skipped;
    }
    println!("TOTAL passed {p} failed {f} skipped {s}");
}
