#!/usr/bin/env python3
"""What binding costs a launch: the same job under an earlier build and this one, without binding and with each kind
of binding, interleaved round by round so the machine's drift falls on every row alike (docs/performance.md).

    python3 tests/bench/binding_bench.py --base /path/to/older/build --nodes 256 --runs 5
"""
import argparse
import statistics
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parents[2]


def timed(command):
    return benchlib.timed_job(command, "binding_bench")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="build dir of the canopy to compare with (its launcher/canopy)")
    p.add_argument("--build", default=str(REPO / "build"), help="this build's dir (default build/)")
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    aurora = REPO / "tests" / "topologies" / "aurora.xml"
    job = ["--sim-nodes", str(args.nodes), "true"]
    rows = {
        "base, no binding": [f"{args.base}/launcher/canopy"] + job,
        "this, no binding": [f"{args.build}/launcher/canopy"] + job,
        "this, --cpu-bind core (this machine's hwloc)": [f"{args.build}/launcher/canopy", "--cpu-bind", "core"] + job,
        "this, --gpu-bind closest --cpu-bind gpu --topology aurora": [
            f"{args.build}/launcher/canopy", "--gpu-bind", "closest", "--cpu-bind", "gpu", "--topology", str(aurora)] + job,
    }
    results = {name: [] for name in rows}
    for name, command in rows.items():   # one untimed run each: page cache, first dlopen
        timed(command)
    for _ in range(args.runs):
        for name, command in rows.items():
            results[name].append(timed(command))
    base_wall = statistics.median(w for w, _ in results["base, no binding"])
    base_cpu = statistics.median(c for _, c in results["base, no binding"])
    print(f"{args.nodes} simulated nodes, `true`, {args.runs} interleaved runs, medians")
    print("| row | wall [s] | CPU [s] | wall / base | CPU / base | CPU above base per node |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / base_wall:.3f} | {cpu / base_cpu:.3f} | "
              f"{(cpu - base_cpu) / args.nodes * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
