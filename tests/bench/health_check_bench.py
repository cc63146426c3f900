#!/usr/bin/env python3
"""What --health-check costs a launch: the same job without it under an earlier build and this one (the cost when
it is off), and with the built-in checks and with a trivial command, interleaved round by round so the machine's
drift falls on every row alike (docs/performance.md).

    python3 tests/bench/health_check_bench.py --base /path/to/older/build --nodes 256 --runs 7
"""
import argparse
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parents[2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", help="build dir of the canopy to compare with (its launcher/canopy); without it, no "
                                  "base row")
    p.add_argument("--build", default=str(REPO / "build"), help="this build's dir (default build/)")
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    job = ["--sim-nodes", str(args.nodes), "true"]
    this = f"{args.build}/launcher/canopy"
    rows = {}
    if args.base:
        rows["base, no check"] = [f"{args.base}/launcher/canopy"] + job
    rows["this, no check"] = [this] + job
    rows["this, --health-check (built-in checks)"] = [this, "--health-check"] + job
    rows["this, --health-check=true (and a command)"] = [this, "--health-check=true"] + job
    reference = "base, no check" if args.base else "this, no check"
    benchlib.option_cost_table(rows, args.runs, args.nodes, reference, "health_check_bench")

if __name__ == "__main__":
    main()
