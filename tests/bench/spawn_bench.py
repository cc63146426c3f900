#!/usr/bin/python3
# Spawn-latency benchmark: MPI_Comm_spawn of K new ranks from N simulated nodes, under canopy and under mpirun.
"""Times MPI_Comm_spawn (tests/bench/spawn_latency.c, Open MPI 4.1) of K new ranks from a job of N simulated
nodes x 1 rank, under canopy and under Open MPI's own mpirun: the same binary, interleaved rounds.

The program: every parent meets in MPI_Barrier, rank 0 takes t0, all parents call MPI_Comm_spawn(itself, K,
root 0, MPI_COMM_WORLD) and then MPI_Barrier on the intercommunicator (so every child is up and connected),
rank 0 takes t1 and prints "spawn_latency K=<K> seconds=<t1-t0> children=<K> start=<t0 as wall clock>". Children barrier on their parent
intercommunicator, disconnect and finalize. A run counts only if it exits 0 and prints that line.

Rows (S = ceil(K/N), the room each node needs for the children):
  canopy         canopy --sim-nodes N --ppn 1 --spawn-slots S --timeout T --timing=FILE
                 --env OMPI_MCA_btl=self,tcp spawn_latency K
  mpirun         mpirun.openmpi --allow-run-as-root --oversubscribe --mca plm_rsh_agent local_agent.sh
                 --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo --host sim0000:S+1,...
                 --mca btl self,tcp -np N spawn_latency K
  canopy-vader   as canopy without --env OMPI_MCA_btl=self,tcp: Open MPI's defaults, shared memory within a node
                 (no mpirun counterpart: see below)

Why both compared rows keep Open MPI to self,tcp: under mpirun, a spawned child on one fake host crashes in
MPI_Init (SIGSEGV in mca_btl_vader_poll_handle_frag, from ompi_dpm_dyn_init's connect/accept) as soon as K > 1:
its vader (shared memory) peers span the fake hosts, which all are this one machine, each with its own TMPDIR.
Without vader every rank and child talks TCP over loopback, under both launchers alike. canopy-vader shows
what canopy's default costs next to that.

The slots: each fake host gets 1 slot for its parent and S for children, so mpirun maps the K children over the
N hosts as canopy's --spawn-slots S does, without oversubscribing any host. local_agent.sh stands in for ssh, so
mpirun starts N orteds, all on this machine (see launch_bench.py and mpi_startup_bench.py).

Each run records: the program's spawn latency (t1 - t0), the whole job's wall time (launch to exit) and its
CPU-seconds (user+system of the launcher, its daemons, the parents and children: a cpuacct cgroup per run,
else what the launcher waited for). The report gives the medians, the ratios canopy / mpirun, and for canopy
rows when the last child was forked (spawned_rank.spawned from --timing), which splits the latency into the
launcher's part and the children's own MPI_Init. Needs root (private mount namespace with an /etc/hosts for
sim0000...).
"""

import math
import os
import re
import shutil
import sys

import benchlib
from benchlib import markdown_table

ALL_LAUNCHERS = ["canopy", "mpirun", "canopy-vader"]
CANOPY_LAUNCHERS = ("canopy", "canopy-vader")
RATIOS = [("canopy", "mpirun")]
SOURCE = os.path.join(benchlib.HERE, "spawn_latency.c")
LATENCY_RE = re.compile(r"^spawn_latency K=(\d+) seconds=([\d.]+) children=(\d+) start=([\d.]+)$", re.M)
SUMMARIES = benchlib.CELL_SUMMARIES + (("spawn_summary", "spawn_seconds"),)


def slots_per_node(nodes, k):
    """Spawn slots each node needs so that K children fit on N nodes: ceil(K/N)."""
    return math.ceil(k / nodes)


def command_for(launcher, nodes, k, program, timing_path, args):
    slots = slots_per_node(nodes, k)
    if launcher in CANOPY_LAUNCHERS:
        argv = [args.canopy, "--sim-nodes", str(nodes), "--ppn", "1", "--spawn-slots", str(slots),
                "--timeout", str(int(args.timeout)), "--timing=" + timing_path]
        if launcher == "canopy":
            argv += ["--env", "OMPI_MCA_btl=self,tcp"]   # as under mpirun: no shared memory
        return argv + [program, str(k)]
    if launcher == "mpirun":
        return benchlib.mpirun_argv(args.mpirun, benchlib.host_slots(nodes, 1 + slots)) + \
            ["--mca", "btl", "self,tcp", "-np", str(nodes), program, str(k)]
    raise ValueError(launcher)


def spawn_line(stdout, k, started_epoch):
    """The program's (spawn latency, its start in s since launch) for K children, or (None, None) without its line."""
    m = LATENCY_RE.search(stdout)
    if not m or int(m.group(1)) != k or int(m.group(3)) != k:
        return None, None
    return float(m.group(2)), float(m.group(4)) - started_epoch


def bench_cell(nodes, k, launchers, program, args, env, tmp):
    """Interleaved rounds of the launchers spawning K from N nodes; returns the cell's entry of the report."""

    def one_run(launcher, cell, round_):
        timing_path = os.path.join(tmp, "timing-%d-%d-%s-%d.json" % (nodes, k, launcher, round_))
        argv = command_for(launcher, nodes, k, program, timing_path, args)
        r, run = benchlib.run_for_cell(cell, argv, env, args.timeout)
        run["spawn_seconds"], run["spawn_started"] = spawn_line(r["stdout"], k, r["started_epoch"])
        run["loadavg"] = benchlib.loadavg()
        if launcher in CANOPY_LAUNCHERS:
            run["timing"] = benchlib.read_timing(timing_path)
        if r["rc"] != 0:
            return run, "exit %s: %s" % (r["rc"], " | ".join(r["stderr_tail"])), None
        if run["spawn_seconds"] is None:
            return run, "no 'spawn_latency K=%d ... children=%d' line in the output" % (k, k), None
        return run, None, "K=%d spawn %.3f s, wall %.3f s (CPU %.2f s), load %s" % (
            k, run["spawn_seconds"], r["seconds"], run["cpu_seconds"], " ".join(run["loadavg"]))

    entry = benchlib.interleaved_rounds(nodes, 1, launchers, args, one_run, width=12, summaries=SUMMARIES)
    entry["k"] = k
    entry["spawn_slots"] = slots_per_node(nodes, k)
    return entry


def median(cell, key):
    summary = cell[key]
    return summary["median"] if summary else None


def fmt(value, digits=2):
    return "-" if value is None else "%.*f" % (digits, value)


def ratio(entry, a, b, key):
    x, y = median(entry["launchers"][a], key), median(entry["launchers"][b], key)
    return None if x is None or not y else x / y


def print_main_table(results, launchers, args, out=sys.stdout):
    """Per N and K: median spawn latency, wall and CPU of each launcher, and the ratios canopy / mpirun."""
    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    header = (["nodes", "K"] + ["%s spawn [s]" % l for l in launchers] +
              ["%s / %s spawn" % p for p in pairs] + ["%s wall [s]" % l for l in launchers] +
              ["%s / %s wall" % p for p in pairs] + ["%s CPU [s]" % l for l in launchers] +
              ["%s / %s CPU" % p for p in pairs])
    rows = []
    for e in results:
        row = [str(e["nodes"]), str(e["k"])]
        for key, digits in (("spawn_summary", 3), ("summary", 2), ("cpu_summary", 2)):
            row += [fmt(median(e["launchers"][l], key), digits) +
                    ("" if not e["launchers"][l][key] or e["launchers"][l][key]["runs"] == args.runs
                     else " (%d)" % e["launchers"][l][key]["runs"]) for l in launchers]
            row += [fmt(ratio(e, a, b, key)) for a, b in pairs]
        rows.append(row)
    markdown_table(header, rows, out)
    print("Medians of %d interleaved run(s): spawn = MPI_Comm_spawn until every child passed a barrier on the\n"
          "intercommunicator (the program's own clock); wall = launch to exit of the whole job; CPU = user+system of\n"
          "the whole launch (launcher, daemons, parents, children). (k) = only k runs counted; - = the cell failed\n"
          "or did not run." % args.runs, file=out)


def print_breakdown(results, launchers, out=sys.stdout):
    """Canopy rows, median-wall run: when the last child was forked, and the spawn latency around it."""
    rows = []
    for e, l, run in benchlib.median_runs(results, [l for l in launchers if l in CANOPY_LAUNCHERS]):
        if not run:
            continue
        phases = (run.get("timing") or {}).get("phases") or {}
        forked, life = phases.get("spawned_rank.spawned"), phases.get("spawned_rank.runtime")
        first_fork = phases.get("rank.spawned")
        start, end = run["spawn_started"], run["spawn_started"] + run["spawn_seconds"]
        last = forked and forked["max"]
        rows.append([str(e["nodes"]), str(e["k"]), l, fmt(first_fork and first_fork["max"]), fmt(start),
                     fmt(forked and forked["min"]), fmt(last), fmt(end),
                     fmt(None if last is None else last - start), fmt(None if last is None else end - last),
                     fmt(life and life["median"]), fmt(run["seconds"])])
    if not rows:
        return
    markdown_table(["nodes", "K", "launcher", "last parent forked", "spawn called", "first child forked",
                    "last child forked", "spawn done", "call to last fork [s]", "last fork to done [s]",
                    "child run time, median [s]", "wall [s]"], rows, out)
    print("canopy's --timing of the median-wall run and the program's wall-clock start of the spawn, in s since\n"
          "launch: the parents' forks (rank.spawned), the children's (spawned_rank.spawned), their run time from\n"
          "fork to exit (spawned_rank.runtime). Call to last fork = the PMIx spawn request's way to the root and\n"
          "the daemons, and their forks; last fork to done = the children's exec, MPI_Init and connect/accept with\n"
          "the parents, up to the barrier.", file=out)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--nodes", default="8,32", help="comma-separated node counts of the parent job (default 8,32)")
    p.add_argument("--ks", default="1,8,64", help="comma-separated numbers of ranks to spawn (default 1,8,64)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per launcher and cell (default 5)")
    p.add_argument("--warmup", type=int, default=0, help="untimed rounds first (default 0)")
    p.add_argument("--only", default=",".join(ALL_LAUNCHERS),
                   help="launchers to run, comma-separated subset of %s (default all)" % ",".join(ALL_LAUNCHERS))
    benchlib.add_canopy_option(p)
    p.add_argument("--mpirun", default="mpirun.openmpi")
    p.add_argument("--mpicc", default="mpicc.openmpi", help="Open MPI compiler wrapper (default mpicc.openmpi)")
    benchlib.add_run_options(p, 300.0, "spawn_bench.json", "Open MPI gets slow")
    args = p.parse_args(argv)
    try:
        node_counts = [int(x) for x in args.nodes.split(",") if x]
        ks = [int(x) for x in args.ks.split(",") if x]
    except ValueError:
        p.error("--nodes and --ks take comma-separated numbers")
    if not node_counts or not ks or min(node_counts + ks) < 1:
        p.error("--nodes and --ks need numbers of at least 1")
    launchers = [l for l in args.only.split(",") if l]
    bad = [l for l in launchers if l not in ALL_LAUNCHERS]
    if bad or not launchers:
        p.error("unknown launcher %s; choose from %s" % (",".join(bad), ",".join(ALL_LAUNCHERS)))
    benchlib.check_canopy(p, args, needed=any(l in CANOPY_LAUNCHERS for l in launchers))
    for tool in [args.mpicc] + ([args.mpirun] if "mpirun" in launchers else []):
        if not shutil.which(tool):
            p.error("%s not found; install openmpi-bin and libopenmpi-dev" % tool)

    hosts_namespace = benchlib.enter_hosts_namespace(__file__, argv, max(node_counts), args.no_namespace)
    report = {**benchlib.report_header("canopy.spawn_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace,
              "mpi_env": {k: v for k, v in os.environ.items() if k.startswith(("OMPI_MCA_", "PMIX_MCA_"))},
              "results": []}
    benchlib.print_machine(report["machine"], [("openmpi", "openmpi-bin"), ("pmix", "libpmix")])
    with benchlib.scratch_dir("canopy-spawn-") as (tmp, env):
        program = benchlib.compile_c(args.mpicc, SOURCE, os.path.join(tmp, "spawn_latency"), __file__)
        for nodes in node_counts:
            for k in ks:
                report["results"].append(bench_cell(nodes, k, launchers, program, args, env, tmp))
                benchlib.write_report(report, args.json)   # partial results survive an interrupted run
    results = benchlib.finish_report(report, args.json)

    benchlib.print_sections([
        ("Spawn latency, wall time and CPU", print_main_table, results, launchers, args),
        ("Where canopy's spawn time goes", print_breakdown, results, launchers)])
    print()
    failed = [e for e in results if any(not c["runs"] or c["errors"] for c in e["launchers"].values())]
    benchlib.print_failures(results, lambda e: "%d nodes, K=%d" % (e["nodes"], e["k"]))
    if failed:
        print("NOT every run exited 0 with its line: %d cell(s) had failures (above); '-' marks a cell with none."
              % len(failed))
    else:
        print("Every run exited 0 and printed its spawn_latency line.")
    benchlib.print_load_average(report["machine"], results)
    print("results written to %s" % args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
