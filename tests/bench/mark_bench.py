#!/usr/bin/python3
# Phase-mark overhead: what one canopy_mark costs a rank, and what marks add to a job's startup.
"""Builds a small C program against libcanopy (the public header and the .so, as an application would) that
calls canopy_mark M times and reports the cost of each call on the rank side, then runs it under
`canopy --sim-nodes N --ppn P --timing=...`. Prints the median, p99 and max per mark over all ranks, and the
job's wall time with and without the marks, interleaved over --runs. Target (issue 4): under 50 µs per mark on
the rank side, under 1 % of startup time overall.

usage: /usr/bin/python3 tests/bench/mark_bench.py [--nodes 2] [--ppn 2] [--marks 1000] [--runs 5]
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

PROGRAM = r"""
#include <canopy/canopy.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }

int main(int argc, char** argv)
{
    int marks = argc > 1 ? atoi(argv[1]) : 1000;
    if (canopy_init() != CANOPY_OK) { fprintf(stderr, "canopy_init failed: %s\n", canopy_last_error()); return 1; }
    double* cost = calloc((size_t)marks, sizeof *cost);
    for (int i = 0; i < marks; ++i) {
        double start = now_us();
        if (canopy_mark(i == 0 ? "bench.first" : "bench.mark") != CANOPY_OK) { fprintf(stderr, "mark failed\n"); return 1; }
        cost[i] = now_us() - start;
    }
    qsort(cost, (size_t)marks, sizeof *cost, cmp);
    for (int i = 0; i < marks; ++i)
        printf("MARK_US %.3f\n", cost[i]);
    canopy_finalize();
    return 0;
}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"))
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ppn", type=int, default=2)
    parser.add_argument("--marks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.canopy)))
    libdir = os.path.join(build, "lib", "api")
    with tempfile.TemporaryDirectory(prefix="canopy-mark-bench-") as work:
        run_bench(args, libdir, work)


def run_bench(args, libdir, work):
    source, binary = os.path.join(work, "marks.c"), os.path.join(work, "marks")
    with open(source, "w") as f:
        f.write(PROGRAM)
    subprocess.run(["gcc", "-O2", "-I", os.path.join(REPO, "lib", "include"), source, "-o", binary, "-L", libdir,
                    "-lcanopy", f"-Wl,-rpath,{libdir}"], check=True)

    costs, walls = [], {"marks": [], "none": []}
    for run in range(args.runs):
        for variant, count in (("marks", args.marks), ("none", 0)):
            started = time.monotonic()
            done = subprocess.run([args.canopy, "--sim-nodes", str(args.nodes), "--ppn", str(args.ppn), binary,
                                   str(count)], capture_output=True, text=True, timeout=120)
            walls[variant].append(time.monotonic() - started)
            if done.returncode != 0:
                raise SystemExit(f"mark_bench: run failed: {done.stderr[-1000:]}")
            if variant == "marks":
                costs += [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("MARK_US")]
    costs.sort()
    p99 = costs[int(len(costs) * 0.99) - 1]
    ranks = args.nodes * args.ppn
    wall_marks, wall_none = statistics.median(walls["marks"]), statistics.median(walls["none"])
    print(f"\n{len(costs)} marks ({args.marks} per rank, {ranks} ranks on {args.nodes} simulated nodes, "
          f"{args.runs} runs), {os.cpu_count()} CPUs\n")
    print("| per mark, rank side | median µs | p99 µs | max µs (includes each rank's first, which connects) |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| canopy_mark | {statistics.median(costs):.2f} | {p99:.2f} | {max(costs):.1f} |")
    extra = (wall_marks - wall_none) / wall_none * 100
    print(f"\njob wall median: {wall_none:.3f} s without marks, {wall_marks:.3f} s with {args.marks} marks per rank "
          f"({extra:+.1f} %); one mark per phase is {1 / args.marks * extra:+.3f} % of startup")


if __name__ == "__main__":
    main()
