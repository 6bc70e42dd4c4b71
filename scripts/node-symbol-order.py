#!/usr/bin/env python3
"""Writes `canopy-node`'s linker symbol ordering file (`src/bin/canopy-node.order`,
read by `build.rs`): the functions a node runs, busiest first.

Why: the kernel maps a binary's code in 64 KiB blocks around each page that
runs (fault-around), so code run once at start-up, spread over the whole
text, made nearly all 3.4 MB of it resident. Laid out together, the code a
node runs fills fewer blocks (issue 3: the leaf's RSS, 3.2 -> 1.7 MB of text).

Two sources, both from a leaf next to a gateway (`canopy plan --emit-configs
--loopback`, as `leaf-overhead` runs it), each over 70 s or more so a
periodic keyframe is in:

1. callgrind (every function run under valgrind, with its cost):
       valgrind --tool=callgrind --demangle=no --callgrind-out-file=CG \\
           target/node/canopy-node --config bench-leaf.toml --sim-jobs 50
2. the code pages the binary faults in natively (paths valgrind's CPU does
   not take, e.g. ring's ADX and zstd's BMI2 variants), appended after; run
   it again on the relinked binary until it adds nothing:
       perf record -e page-faults -c 1 -d -o PF target/node/canopy-node ...

    scripts/node-symbol-order.py --callgrind CG target/node/canopy-node > src/bin/canopy-node.order
    scripts/node-symbol-order.py --faults PF target/node/canopy-node src/bin/canopy-node.order >> NEW
    cat NEW >> src/bin/canopy-node.order    # the names not listed yet

The same script makes `canopy`'s list for the gateway (`src/canopy-gateway.order`,
issue 5: resident text 8.0 -> 1.9 MB after the side-by-side ingest): callgrind
over `canopy gateway` (memory-only and `--data-dir`) fed by `sbs_send ADDR 100 65`
and the side-by-side queries, then the faults of a native run fed by
`sbs_send ADDR 1000 65` (`--faults PF target/release/canopy LIST`).

Names the build no longer has (code changed, another rustc) are skipped by
the linker: a stale list only costs memory.
"""
import bisect
import re
import subprocess
import sys
from collections import Counter


def functions(binary: str) -> list[tuple[int, int, str]]:
    """(address, size, name) of every function the binary defines."""
    nm = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True)
    out = []
    for line in nm.stdout.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tT":
            out.append((int(p[0], 16), int(p[1], 16), p[3]))
    return sorted(out)


def from_callgrind(profile: str, binary: str) -> list[str]:
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    cost: Counter = Counter()
    ob = fn = ""
    skip = False
    base = binary.rsplit("/", 1)[-1]
    with open(profile, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(c?)(ob|fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                called, kind, ident, name = m.groups()
                if name is not None:
                    names[kind][ident] = name
                if not called:
                    if kind == "ob":
                        ob = names["ob"].get(ident, "")
                    else:
                        fn = names["fn"].get(ident, "")
                continue
            if line.startswith("calls="):
                skip = True  # the next cost line is the call's inclusive cost
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if skip:
                    skip = False
                elif len(parts) >= 2 and ob.endswith(base):
                    cost[fn] += int(parts[1])
    defined = {name for _, _, name in functions(binary)}
    return [name for name, _ in cost.most_common() if name in defined]


def from_faults(data: str, binary: str) -> list[str]:
    script = subprocess.run(
        ["perf", "script", "-i", data, "-F", "addr,ip,sym,dso"], capture_output=True, text=True, check=True
    ).stdout
    fns = functions(binary)
    starts = [a for a, _, _ in fns]
    start = next(a for a, _, n in fns if n == "_start")
    load = None
    ips = []
    for line in script.splitlines():
        m = re.match(r"\s*([0-9a-f]+) .*?\((\S+)\)\s+([0-9a-f]+) (\S+) \((\S+)\)", line)
        if not m or not m.group(5).endswith(binary.rsplit("/", 1)[-1]):
            continue
        addr, _, ip, sym, _ = m.groups()
        if sym == "_start" and load is None:
            load = int(ip, 16) - start
        if addr == ip:  # an instruction fetch fault: code
            ips.append(int(ip, 16))
    out: list[str] = []
    if load is None:
        return out
    for ip in ips:
        k = bisect.bisect_right(starts, ip - load) - 1
        if k >= 0 and ip - load < fns[k][0] + max(fns[k][1], 1) and fns[k][2] not in out:
            out.append(fns[k][2])
    return out


def main() -> None:
    mode, path, binary = sys.argv[1], sys.argv[2], sys.argv[3]
    names = from_callgrind(path, binary) if mode == "--callgrind" else from_faults(path, binary)
    listed: set[str] = set()
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            listed = set(f.read().split())
    print("\n".join(n for n in names if n not in listed))


if __name__ == "__main__":
    main()
