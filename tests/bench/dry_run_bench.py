#!/usr/bin/env python3
"""How long `canopy --dry-run` takes on large host lists (issue 14: well under a second on 10,000 hosts).

    /usr/bin/python3 tests/bench/dry_run_bench.py [--hosts 1000,10000,100000] [--runs 5]

Each size runs --runs times with the ssh agent and --ppn 4; `canopy --version` runs as often, as the floor of
starting the program at all on this machine. Prints the median wall time and CPU-seconds per run, and each size's
ratio to the floor."""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUILD_DIR = Path(os.environ.get("CANOPY_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
CANOPY = BUILD_DIR / "launcher" / "canopy"


def timed(argv, runs):
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if result.returncode != 0:
            sys.exit(f"{' '.join(map(str, argv[:4]))} ... failed: {result.stderr.strip()}")
    return statistics.median(walls), statistics.median(cpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not CANOPY.exists():
        sys.exit(f"{CANOPY} is missing; build first")
    floor_wall, floor_cpu = timed([CANOPY, "--version"], args.runs)
    print(f"floor (canopy --version): {floor_wall * 1000:.1f} ms wall, {floor_cpu * 1000:.1f} ms CPU\n")
    print("| hosts | wall (ms) | CPU (ms) | wall / floor |")
    print("| ---: | ---: | ---: | ---: |")
    for count in map(int, args.hosts.split(",")):
        width = len(str(count))
        argv = [CANOPY, "--dry-run", "--hosts", f"n[{1:0{width}d}-{count:0{width}d}]", "--ppn", "4", "--agent", "ssh",
                "python3", "train.py"]
        wall, cpu = timed(argv, args.runs)
        print(f"| {count} | {wall * 1000:.1f} | {cpu * 1000:.1f} | {wall / floor_wall:.1f} |")


if __name__ == "__main__":
    main()
