#!/usr/bin/env python3
"""What binding costs a launch: the same job under an earlier build and this one, without binding and with each kind
of binding, interleaved round by round so the machine's drift falls on every row alike (docs/performance.md).

    python3 tests/bench/binding_bench.py --base /path/to/older/build --nodes 256 --runs 5
"""
import argparse
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parents[2]


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
    benchlib.option_cost_table(rows, args.runs, args.nodes, "base, no binding", "binding_bench")


if __name__ == "__main__":
    main()
