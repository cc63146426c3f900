#!/usr/bin/env python3
"""What a restart costs (--max-restarts, docs/restarts.md) against a fresh job of the same size: a requeue without
the scheduler's wait.

Trivial program, at each --nodes size, interleaved round by round so the machine's drift falls on both rows alike:

  fresh     canopy --sim-nodes N --max-restarts 1 sh -c SCRIPT with nothing failing: from the launcher's start to
            every rank running (the timeline's first ranks_spawned)
  restart   the same job in which rank 0 of the first attempt fails --fail-after seconds after it started (every
            other rank of that attempt waits to be stopped): from the failure to every rank of the next attempt
            running (the report's restart_seconds), and from the failure to the launcher's restart request
            (detection)

  floor     the machine's own floor for the restart's last step: os.posix_spawn of N `sh -c SCRIPT` (the later
            attempt's branch, which exits at once), all at once from one process, until the last has exited. Every
            rank of a restart is one such fork and exec, from its node's daemon; a fresh job's are the same, hidden
            behind the daemons' own start

Staged imports (--import MODULE, on a slowfs mount as tests/bench/import_bench.py sets up, with its manifest): the
same two jobs with --stage and --mark-on-output for each rank's first step, after its import:

  fresh     from the launcher's start to the last rank's app.first_step
  restart   from the failure to the last app.first_step of the next attempt
  floor     a fresh job whose ranks import from the environment's own copy (no slowfs, no staging): the CPU that
            starting the interpreters and importing costs on this machine, which a restart pays again

With --cost-nodes N, first what --max-restarts costs a job that never fails (its daemons stay until the launcher's
shutdown instead of leaving as their ranks end), `true` on N nodes with and without it, interleaved (benchlib's
option_cost_table).

Targets (issue 42): a restart at most 0.3x a fresh job's time to ranks running, and at most 0.5x its time to the
first step with staged imports.

    python3 tests/bench/restart_bench.py --nodes 64,256 --runs 5
    python3 tests/bench/restart_bench.py --nodes 64 --runs 3 --import numpy --fail-after 20
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Rank 0 of the first attempt fails FAIL_AFTER seconds after it started; the other ranks of that attempt wait to
# be stopped. With NO_FAILURE set, or in a later attempt, every rank ends at once.
SCRIPT = r'''
if [ -z "$NO_FAILURE" ] && [ "$CANOPY_RESTART_COUNT" = 0 ]; then
  if [ "$CANOPY_RANK" = 0 ]; then sleep "$FAIL_AFTER"; exit 1; fi
  exec sleep 600
fi
'''

# The import row's rank code: the import, its first step marked by its output line, then the same failure rule.
IMPORT_TAIL = r'''
import os, sys, time
if not os.environ.get("NO_FAILURE") and os.environ["CANOPY_RESTART_COUNT"] == "0":
    if os.environ["CANOPY_RANK"] == "0":
        time.sleep(float(os.environ["FAIL_AFTER"]))
        sys.exit(1)
    time.sleep(600)
'''


def spawn_floor(nodes, env):
    """Seconds to posix_spawn `nodes` copies of `sh -c SCRIPT` (the restarted attempt's branch) and reap them all."""
    argv = ["/bin/sh", "-c", SCRIPT]
    env_list = {**env, "CANOPY_RESTART_COUNT": "1", "CANOPY_RANK": "0"}
    started = time.monotonic()
    pids = [os.posix_spawn("/bin/sh", argv, env_list) for _ in range(nodes)]
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit("restart_bench: the floor's sh failed")
    return time.monotonic() - started


def job(command, env, timeout):
    """(wall, CPU seconds, timing report) of one job; exits the bench if it fails."""
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as scratch:
        timing = os.path.join(scratch, "timing.json")
        argv = [command[0], f"--timing={timing}", *command[1:]]
        started = time.monotonic()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            _, status, usage = wait_with_timeout(process, timeout)
        finally:
            stderr = process.stderr.read().decode(errors="replace")
            process.stderr.close()
        wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            said = "\n".join(line for line in stderr.splitlines() if line.startswith("canopy: "))
            sys.exit(f"restart_bench: {' '.join(map(str, argv))} failed:\n{said}")
        with open(timing) as f:
            return wall, usage.ru_utime + usage.ru_stime, json.load(f)


def wait_with_timeout(process, timeout):
    """os.wait4's answer for `process`, polled: the measures come from the job's own report, not from this."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            return pid, status, usage
        if time.monotonic() > deadline:
            process.kill()
            os.wait4(process.pid, 0)
            sys.exit(f"restart_bench: a job ran past {timeout} s")
        time.sleep(0.05)


def stamp(report, name):
    return next(s["seconds"] for s in report["timeline"] if s["name"] == name)


def last_first_step(report):
    phase = next((p for p in report["phases"] if p["name"] == "app.first_step"), None)
    if phase is None:
        sys.exit("restart_bench: no app.first_step in the report: did the ranks print their IMPORT_BENCH line?")
    return phase["max"]


def measure(fresh_command, restart_command, env, runs, fail_after, timeout, first_step, floor_nodes=0):
    rows = {"fresh": [], "restart": [], "floor": []}
    for command, name, extra in ((fresh_command, "fresh", {"NO_FAILURE": "1"}), (restart_command, "restart", {})):
        job(command, {**env, **extra, "FAIL_AFTER": str(fail_after)}, timeout)   # page cache, first dlopen
    for _ in range(runs):
        wall, cpu, report = job(fresh_command, {**env, "NO_FAILURE": "1", "FAIL_AFTER": str(fail_after)}, timeout)
        running = last_first_step(report) if first_step else stamp(report, "ranks_spawned")
        rows["fresh"].append({"to_running": running, "wall": wall, "cpu": cpu})
        wall, cpu, report = job(restart_command, {**env, "FAIL_AFTER": str(fail_after)}, timeout)
        (restart,) = report["restarts"]
        if restart["failed_at"] < restart["attempt_running_at"] or restart["running_again_at"] < 0:
            sys.exit(f"restart_bench: the failure came before every rank had started ({restart}); raise --fail-after")
        again = (last_first_step(report) if first_step else restart["running_again_at"]) - restart["failed_at"]
        detected = stamp(report, "ranks_restarting") - restart["failed_at"]
        rows["restart"].append({"to_running": again, "detected": detected, "wall": wall, "cpu": cpu,
                                "restart_seconds": restart["restart_seconds"]})
        if floor_nodes:
            rows["floor"].append({"to_running": spawn_floor(floor_nodes, env)})
    return rows


def median(rows, key):
    return statistics.median(row[key] for row in rows)


def print_rows(label, nodes, rows, target, what):
    fresh, restart = median(rows["fresh"], "to_running"), median(rows["restart"], "to_running")
    floor = median(rows["floor"], "to_running") if rows["floor"] else None
    print(f"| {label} | {nodes} | {fresh:.3f} | {restart:.3f} | {restart / fresh:.3f} | {target} | "
          f"{median(rows['restart'], 'detected') * 1000:.1f} ms | "
          f"{'-' if floor is None else f'{floor:.3f} ({restart / floor:.2f}x)'} | "
          f"{median(rows['fresh'], 'cpu'):.2f} | {median(rows['restart'], 'cpu'):.2f} |")
    return {"nodes": nodes, "what": what, "fresh_s": fresh, "restart_s": restart, "ratio": restart / fresh,
            "floor_s": floor, "runs": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--canopy", default=str(REPO / "build" / "launcher" / "canopy"))
    p.add_argument("--nodes", default="64,256", help="comma-separated simulated node counts of the trivial rows "
                                                      "(none: no trivial row)")
    p.add_argument("--ppn", type=int, default=1)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--fail-after", type=float, default=3.0,
                   help="seconds after its start that rank 0 of the first attempt fails: longer than the start-up")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--import", dest="module", default=None,
                   help="also the staged-import rows with this module (torch, numpy), from import_bench's slowfs "
                        "mount and environment")
    p.add_argument("--import-nodes", default=None, help="node counts of the import rows (default: --nodes)")
    p.add_argument("--cost-nodes", type=int, default=0, help="first, the cost table at this many nodes")
    p.add_argument("--json", default=None, help="also write every run to this file")
    args = p.parse_args()

    if args.cost_nodes:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import benchlib
        job = ["--sim-nodes", str(args.cost_nodes), "true"]
        benchlib.option_cost_table({"no restarts": [args.canopy] + job,
                                    "--max-restarts 1, no failure": [args.canopy, "--max-restarts", "1"] + job},
                                   args.runs, args.cost_nodes, "no restarts", "restart_bench")
    env = dict(os.environ)
    results = []
    print(f"medians of {args.runs} interleaved runs; ratio = restart / fresh")
    print("| program | nodes | fresh: start to running [s] | restart: failure to running [s] | ratio | target | "
          "failure to restart request | floor [s] (restart / floor) | fresh CPU [s] | restart job CPU [s] |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for nodes in [int(n) for n in args.nodes.split(",") if n and n != "none"]:
        base = [args.canopy, "--sim-nodes", str(nodes), "--ppn", str(args.ppn), "--max-restarts", "1",
                "sh", "-c", SCRIPT]
        rows = measure(base, base, env, args.runs, args.fail_after, args.timeout, first_step=False,
                       floor_nodes=nodes * args.ppn)
        results.append(print_rows("trivial (sh)", nodes, rows, "0.3", "ranks running"))
    if args.module:
        results += staged_import_rows(args, env)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def staged_import_rows(args, env):
    """The import rows, with import_bench's environment, slowfs mount and manifest (recorded once, untimed)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import import_bench as imports
    bench_args = argparse.Namespace(canopy=args.canopy, pyenv="/tmp/canopy-bench/pyenv",
                                    mount="/tmp/canopy-bench/mnt", workdir="/tmp/canopy-bench", module=args.module,
                                    interpreter=False, timeout=args.timeout, delay_ms=1.0,
                                    manifest=f"/tmp/canopy-bench/{args.module}.manifest")
    os.makedirs(bench_args.workdir, exist_ok=True)
    imports.RANK_CODE = imports.RANK_CODE_TEMPLATE.replace("MODULE", args.module)
    subprocess.run([imports.MAKE_PYENV, bench_args.pyenv], check=True, stdout=sys.stderr)
    if args.module != "torch":
        bench_args.pyenv = imports.make_module_env(bench_args.pyenv, args.module)
    build_dir = Path(args.canopy).resolve().parents[1]
    fs = imports.Slowfs(str(build_dir / "tests" / "tools" / "slowfs" / "slowfs"), bench_args.pyenv,
                        bench_args.mount, bench_args.delay_ms)
    results = []
    try:
        if not os.path.exists(bench_args.manifest):
            imports.record_manifest(bench_args, fs)
        python = os.path.join(bench_args.mount, "bin", "python3")
        code = imports.RANK_CODE + IMPORT_TAIL
        rank_env = {**env, **imports.rank_env()}
        for nodes in [int(n) for n in (args.import_nodes or args.nodes).split(",")]:
            command = [args.canopy, "--sim-nodes", str(nodes), "--ppn", str(args.ppn), "--max-restarts", "1",
                       "--stage", bench_args.mount, "--stage-manifest", bench_args.manifest,
                       "--mark-on-output", "IMPORT_BENCH=first_step", python, "-c", code]
            rows = measure(command, command, rank_env, args.runs, args.fail_after, args.timeout, first_step=True)
            local = [args.canopy, "--sim-nodes", str(nodes), "--ppn", str(args.ppn), "--mark-on-output",
                     "IMPORT_BENCH=first_step", os.path.join(bench_args.pyenv, "bin", "python3"), "-c", code]
            job(local, {**rank_env, "NO_FAILURE": "1"}, args.timeout)   # page cache
            for _ in range(args.runs):
                rows["floor"].append({"to_running": last_first_step(job(local, {**rank_env, "NO_FAILURE": "1"},
                                                                        args.timeout)[2])})
            results.append(print_rows(f"staged import {args.module}", nodes, rows, "0.5", "first step"))
    finally:
        fs.close()
    return results


if __name__ == "__main__":
    main()
