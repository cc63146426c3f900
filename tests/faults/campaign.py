#!/usr/bin/env python3
"""The fault campaign: many jobs on simulated nodes, each hit by one fault in one phase, and a table of what they
left behind. Usage (as root, for the CPU cap of a slow node):

    /usr/bin/python3 tests/faults/campaign.py --runs 300 [--faults kill_leaf,...] [--phases steady,...]
        [--json FILE] [--seed N]

Runs go round the fault x phase matrix in order until --runs are done. CANOPY_BUILD_DIR picks the build."""
import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import faultlib


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--faults", default=",".join(faultlib.FAULTS))
    parser.add_argument("--phases", default=",".join(faultlib.PHASES))
    parser.add_argument("--json", type=Path, help="write every run's outcome here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep runs here (default: a temp dir; failed runs stay)")
    args = parser.parse_args()
    for name, chosen, known in (("fault", args.faults, faultlib.FAULTS), ("phase", args.phases, faultlib.PHASES)):
        unknown = set(chosen.split(",")) - set(known)
        if unknown:
            parser.error(f"unknown {name} {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    return args


def table(outcomes):
    rows = collections.OrderedDict()
    for outcome in outcomes:
        rows.setdefault((outcome.fault, outcome.phase), []).append(outcome)
    lines = ["| fault | phase | runs | fault landed in | hangs | orphans | leftovers | wrong exit | unnamed | "
             "exit codes | s to exit (max) |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for (fault, phase), runs in rows.items():
        landed = collections.Counter(run.hit or "never" for run in runs)
        codes = collections.Counter(run.exit_code for run in runs)
        lines.append(
            f"| {fault} | {phase} | {len(runs)} | {', '.join(f'{k} {v}' for k, v in sorted(landed.items()))} | "
            f"{sum(r.hang for r in runs)} | {sum(bool(r.orphans) for r in runs)} | "
            f"{sum(bool(r.leftovers) for r in runs)} | {sum(not r.expected_exit for r in runs)} | "
            f"{sum(r.named is False for r in runs)} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(codes.items(), key=lambda kv: str(kv[0])))} | "
            f"{max(r.seconds for r in runs):.1f} |")
    return "\n".join(lines)


def run_plan(plan, runs, run_one):
    """`runs` runs round the (fault, phase) plan, each said as it ends; run_one(fault, phase, index) -> Outcome."""
    outcomes = []
    for index in range(runs):
        fault, phase = plan[index % len(plan)]
        outcome = run_one(fault, phase, index)
        outcomes.append(outcome)
        print(f"[{index + 1}/{runs}] {fault} in {phase}: {'ok' if outcome.clean else 'FAILED'} "
              f"(exit {outcome.exit_code}, {outcome.seconds:.1f} s)", flush=True)
        if not outcome.clean:
            print(outcome.describe(), flush=True)
    return outcomes


def report(outcomes, seconds, json_path, where=""):
    """Writes the outcomes (to json_path if given), their summary and table; the exit status: 0 if all clean."""
    if json_path:
        json_path.write_text(json.dumps([vars(o) for o in outcomes], indent=1))
    print(f"\n{summary(outcomes, seconds)}{where}\n")
    print(table(outcomes))
    return 0 if all(o.clean for o in outcomes) else 1


def summary(outcomes, seconds):
    return (f"{len(outcomes)} runs in {seconds:.0f} s: {sum(o.hang for o in outcomes)} hangs, "
            f"{sum(bool(o.orphans) for o in outcomes)} with orphans, {sum(bool(o.leftovers) for o in outcomes)} "
            f"with leftovers, {sum(not o.expected_exit for o in outcomes)} wrong exits, "
            f"{sum(o.named is False for o in outcomes)} error lines not naming what failed")


def main():
    args = parse_arguments()
    faults, phases = args.faults.split(","), args.phases.split(",")
    plan = [(f, p) for f, p in faultlib.matrix() if f in faults and p in phases]
    if not plan:
        sys.exit("campaign: no fault applies to the phases chosen")
    if "slow_leaf" in faults and faultlib.SlowCgroup.missing():
        sys.exit(f"campaign: slow_leaf needs a CPU cap: {faultlib.SlowCgroup.missing()}")
    rng = random.Random(args.seed)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="canopy-faults-"))
    staged = faultlib.StagedTree(workdir) if "staging" in phases else None
    started = time.monotonic()
    outcomes = run_plan(plan, args.runs, lambda fault, phase, index: faultlib.run_one(
        fault, phase, workdir / f"run{index:04d}", staged, rng))
    sys.exit(report(outcomes, time.monotonic() - started, args.json, f"; workdir {workdir}"))


if __name__ == "__main__":
    main()
