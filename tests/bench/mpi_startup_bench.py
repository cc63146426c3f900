#!/usr/bin/python3
# MPI start-up benchmark: MPI_Init + one checked Allreduce + MPI_Finalize, each MPI build under canopy and its own launcher.
"""Times tests/bench/mpi_startup.c (MPI_Init, one MPI_Allreduce whose sum every rank checks, MPI_Finalize)
on N simulated nodes x P ranks. The same binary runs under canopy and under its own MPI's launcher:

  Open MPI 4.1 build (mpi_startup.ompi; canopy serves it PMIx):
    canopy              canopy (Open MPI build): canopy --sim-nodes N --ppn P --timeout T --timing=FILE
                        mpi_startup.ompi N*P
    canopy-agent        canopy --hosts sim0000,... --ppn P --agent "exec:local_agent.sh %h" --timeout T
                        --timing=FILE --env OMPI_MCA_btl_tcp_if_include=lo --env OMPI_MCA_oob_tcp_if_include=lo
                        sh -c 'OMPI_MCA_btl_vader_backing_directory="$CANOPY_NODE_TMPDIR" exec "$0" "$@"'
                        mpi_startup.ompi N*P
    mpirun              mpirun.openmpi --mca plm_rsh_agent local_agent.sh --host sim0000:P,... -np N*P
                        sh -c ... mpi_startup.ompi N*P
  MPICH 4.0 build (mpi_startup.mpich; canopy serves it simple PMI over PMI_FD):
    canopy-mpich        canopy --sim-nodes N --ppn P --timeout T --timing=FILE mpi_startup.mpich N*P
    canopy-mpich-agent  canopy --hosts sim0000,... --ppn P --agent "exec:local_agent.sh %h" --timeout T
                        --timing=FILE mpi_startup.mpich N*P
    hydra               mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -f HOSTFILE -ppn P
                        -n N*P mpi_startup.mpich N*P

local_agent.sh stands in for ssh (see launch_bench.py), so every launcher starts N daemons on this machine;
the *-agent rows start canopy's daemons through it too, as hydra and mpirun start theirs. Open MPI names
shared-memory segments after the real host name and the local rank, so ranks of two fake hosts collide and
crash (4 x 16 segfaulted) unless each fake host's ranks get their own OMPI_MCA_btl_vader_backing_directory:
under mpirun each rank goes through `sh -c` to set it to its host's TMPDIR (local_agent.sh), under
canopy-agent to CANOPY_NODE_TMPDIR (canopy's per-node directory), and both keep TCP on loopback. With
--sim-nodes canopy knows the nodes share a host and sets all of that itself. MPICH needs nothing.

Ratios compare like with like, the same binary: canopy / mpirun and canopy-agent / mpirun (Open MPI),
canopy-mpich / hydra and canopy-mpich-agent / hydra (MPICH), for median wall time and median CPU of the
whole launch. Targets at 256 x 1: canopy-mpich at most 0.5 x hydra's time, canopy at most 0.5 x mpirun's.

Runs are interleaved (one run of each launcher per round, the order rotating); a run counts only if it exits 0
and prints "mpi_startup: N ranks, sum S OK" and one "mpi_startup_times" line per rank. From those lines (wall
clock stamps on entering main and after each MPI call, and each rank's CPU) and canopy's --timing JSON the
script shows where the time goes, per canopy row. Needs root (private mount namespace with an /etc/hosts for
sim0000...).
"""

import os
import re
import shutil
import sys

import benchlib
from benchlib import AGENT, host_file, host_list, markdown_table, size_cell

ALL_LAUNCHERS = ["canopy", "canopy-agent", "mpirun", "canopy-mpich", "canopy-mpich-agent", "hydra"]
# canopy rows: which binary they run, and whether canopy starts its daemons through local_agent.sh
CANOPY_LAUNCHERS = {"canopy": ("ompi", False), "canopy-agent": ("ompi", True),
                    "canopy-mpich": ("mpich", False), "canopy-mpich-agent": ("mpich", True)}
# like-for-like ratios (same binary): (canopy row, the MPI's own launcher, target at 256 x 1 or None)
RATIOS = [("canopy", "mpirun", 0.5), ("canopy-agent", "mpirun", None),
          ("canopy-mpich", "hydra", 0.5), ("canopy-mpich-agent", "hydra", None)]
TARGET_SIZE = (256, 1)
SOURCE = os.path.join(benchlib.HERE, "mpi_startup.c")
TIMES_RE = re.compile(r"^mpi_startup_times rank (\d+) main ([\d.]+) init ([\d.]+) allreduce ([\d.]+) "
                      r"finalize ([\d.]+) cpu ([\d.]+)$", re.M)
# what the run records keep of each rank's stamps (median and max over ranks)
RANK_KEYS = ("main", "init", "allreduce", "finalize", "init_seconds", "cpu")

# canopy launcher steps and phases shown in the breakdown, in the order they happen.
BREAKDOWN = [
    ("tree_up", "step", None, "every daemon connected (launcher)"),
    ("daemon.pmix_ready", "phase", "max", "last daemon's PMIx server ready (Open MPI)"),
    ("rank.spawned", "phase", "max", "last rank forked"),
    ("main", "rank", "max", "last rank entered main() (exec + loading libmpi)"),
    ("rank.pmi_init", "phase", "max", "last rank's simple-PMI init reached its daemon (MPICH)"),
    ("init", "rank", "max", "last rank left MPI_Init"),
    ("allreduce", "rank", "max", "last rank left MPI_Allreduce"),
    ("rank.pmi_finalize", "phase", "max", "last rank's simple-PMI finalize reached its daemon (MPICH)"),
    ("finalize", "rank", "max", "last rank left MPI_Finalize"),
    ("ranks_exited", "step", None, "every rank exited (launcher)"),
    ("teardown_done", "step", None, "daemons gone (launcher)"),
]


def build_programs(workdir, args):
    """Compiles mpi_startup.c for Open MPI and MPICH into workdir; returns {flavour: path}."""
    return {flavour: benchlib.compile_c(cc, SOURCE, os.path.join(workdir, "mpi_startup." + flavour), __file__)
            for flavour, cc in (("ompi", args.mpicc_ompi), ("mpich", args.mpicc_mpich))}


def command_for(launcher, nodes, ppn, programs, timing_path, args):
    n = nodes * ppn
    if launcher in CANOPY_LAUNCHERS:
        flavour, agent = CANOPY_LAUNCHERS[launcher]
        if agent:
            where = ["--hosts", host_list(nodes), "--ppn", str(ppn), "--agent", "exec:%s %%h" % AGENT]
        else:
            where = ["--sim-nodes", str(nodes), "--ppn", str(ppn)]
        argv = [args.canopy] + where + ["--timeout", str(int(args.timeout)), "--timing=" + timing_path]
        if flavour == "ompi" and agent:
            # canopy cannot tell that the agent's hosts are one machine: do what mpirun's row does, keep TCP on
            # loopback and give each node's ranks their own shared-memory directory (canopy's per-node one)
            argv += ["--env", "OMPI_MCA_btl_tcp_if_include=lo", "--env", "OMPI_MCA_oob_tcp_if_include=lo",
                     "sh", "-c", 'OMPI_MCA_btl_vader_backing_directory="$CANOPY_NODE_TMPDIR" exec "$0" "$@"']
        return argv + [programs[flavour], str(n)]
    if launcher == "mpirun":
        return benchlib.mpirun_argv(args.mpirun, benchlib.host_slots(nodes, ppn)) + ["-np", str(n),
                # each fake host's shared memory in its own TMPDIR (local_agent.sh sets it per host)
                "sh", "-c", 'OMPI_MCA_btl_vader_backing_directory="$TMPDIR" exec "$0" "$@"',
                programs["ompi"], str(n)]
    if launcher == "hydra":
        return [args.hydra, "-launcher", "ssh", "-launcher-exec", AGENT, "-f", host_file(args.scratch, nodes),
                "-ppn", str(ppn), "-n", str(n), programs["mpich"], str(n)]
    raise ValueError(launcher)


def rank_stamps(stdout, started_epoch):
    """The program's per-rank lines as {rank: {main, init, allreduce, finalize: s since launch, cpu: s}}."""
    ranks = {}
    for m in TIMES_RE.finditer(stdout):
        main, init, allreduce, finalize, cpu = (float(x) for x in m.groups()[1:])
        ranks[int(m.group(1))] = {"main": main - started_epoch, "init": init - started_epoch,
                                  "allreduce": allreduce - started_epoch, "finalize": finalize - started_epoch,
                                  "init_seconds": init - main, "cpu": cpu}
    return ranks


def bench_size(nodes, ppn, launchers, programs, args, env, tmp):
    """Interleaved rounds of the launchers on nodes x ppn; returns the size's entry of the report."""
    n = nodes * ppn
    expected = "mpi_startup: %d ranks, sum %d OK" % (n, n * (n + 1) // 2)

    def one_run(launcher, cell, round_):
        timing_path = os.path.join(tmp, "timing-%dx%d-%d.json" % (nodes, ppn, round_))
        argv = command_for(launcher, nodes, ppn, programs, timing_path, args)
        r, run = benchlib.run_for_cell(cell, argv, env, args.timeout)
        ranks = rank_stamps(r["stdout"], r["started_epoch"])
        run.update({"ranks": benchlib.rank_summary(ranks, RANK_KEYS), "loadavg": benchlib.loadavg()})
        if launcher in CANOPY_LAUNCHERS:
            run["timing"] = benchlib.read_timing(timing_path)
        problem = benchlib.check_ranks(r, n, ranks, expected)
        if problem:
            return run, problem, None
        return run, None, "%.3f s (CPU %.2f s), MPI_Init max %.3f s, load %s" % (
            r["seconds"], run["cpu_seconds"], run["ranks"]["init_seconds"]["max"], " ".join(run["loadavg"]))

    return benchlib.interleaved_rounds(nodes, ppn, launchers, args, one_run, width=18)


def fmt_s(value):
    return "-" if value is None else "%.2f" % value


def ratio_cells(entry, pairs, summary_key):
    """One cell per pair: median(canopy row) / median(its MPI's launcher), with the target verdict at 256 x 1."""
    cells = []
    for canopy, peer, target in pairs:
        a, b = entry["launchers"][canopy][summary_key], entry["launchers"][peer][summary_key]
        if not a or not b or not b["median"]:
            cells.append("-")
            continue
        ratio = a["median"] / b["median"]
        cell = "%.2f" % ratio
        if target is not None and summary_key == "summary" and (entry["nodes"], entry["ppn"]) == TARGET_SIZE:
            cell += ", target <= %g: %s" % (target, "met" if ratio <= target else "not met")
        cells.append(cell)
    return cells


def print_wall_table(results, launchers, args, out=sys.stdout):
    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    header = ["nodes x ppn", "ranks"] + ["%s [s]" % l for l in launchers] + ["%s / %s" % p[:2] for p in pairs]
    rows = [[size_cell(e), str(e["ranks"])] +
            [benchlib.median_cell(e["launchers"][l]["summary"], args.runs, "%.2f") for l in launchers] +
            ratio_cells(e, pairs, "summary") for e in results]
    markdown_table(header, rows, out)
    print("Median wall time of %d run(s), launch to exit; (k) = only k runs counted. Ratios compare the same binary:\n"
          "Open MPI build under canopy vs mpirun, MPICH build under canopy vs hydra (- = a cell failed or did not run).\n"
          "Targets, at %d x %d only: canopy / mpirun <= 0.5 and canopy-mpich / hydra <= 0.5."
          % ((args.runs,) + TARGET_SIZE), file=out)


def print_cpu_ratio_table(results, launchers, out=sys.stdout):
    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    if not pairs:
        return
    header = ["nodes x ppn"] + ["%s / %s CPU" % p[:2] for p in pairs]
    rows = [[size_cell(e)] + ratio_cells(e, pairs, "cpu_summary") for e in results]
    markdown_table(header, rows, out)
    print("Median CPU-seconds of the whole launch (as above), canopy row / the same binary's own launcher.", file=out)


def print_cpu_table(results, launchers, out=sys.stdout):
    header = ["nodes x ppn"] + ["%s CPU [s]" % l for l in launchers] + \
             ["%s rank CPU [s]" % l for l in launchers]
    rows = []
    for e in results:
        row = [size_cell(e)]
        row += [fmt_s(e["launchers"][l]["cpu_summary"] and e["launchers"][l]["cpu_summary"]["median"])
                for l in launchers]
        for l in launchers:
            run = e["launchers"][l]["median_run"]
            row.append("-" if not run else "%.3f median, %.1f all" % (run["ranks"]["cpu"]["median"],
                                                                     run["ranks"]["cpu_sum"]))
        rows.append(row)
    markdown_table(header, rows, out)
    print("CPU = user+system of the whole launch (launcher, agents, daemons, ranks) from a cpuacct cgroup per run\n"
          "(where none can be made: what the launcher waited for, which misses Open MPI's detached orteds), median;\n"
          "rank CPU = each rank's own getrusage at exit (median over ranks, and the sum over all ranks), "
          "from the median-wall run.", file=out)


def breakdown_value(run, key, kind, stat):
    if kind == "rank":
        return run["ranks"][key][stat]
    timing = run.get("timing")
    if not timing:
        return None
    if kind == "step":
        return timing["steps"].get(key)
    phase = timing["phases"].get(key)
    return phase[stat] if phase else None


def print_breakdown(results, launcher, out=sys.stdout):
    """One canopy row's median-wall run per size: when each step finished (s since launch), and its delta."""
    entries = [e for e in results if e["launchers"].get(launcher, {}).get("median_run")]
    if not entries:
        return False
    runs = [e["launchers"][launcher]["median_run"] for e in entries]
    header = ["step (%s, s since launch)" % launcher] + [size_cell(e) for e in entries] + ["what"]
    rows = benchlib.breakdown_rows(runs, BREAKDOWN, breakdown_value, scale=1, digits=2)
    rows.append(["MPI_Init per rank (median / max)"] + [
        "%.2f / %.2f" % (run["ranks"]["init_seconds"]["median"], run["ranks"]["init_seconds"]["max"])
        for run in runs] + ["main() to end of MPI_Init, each rank"])
    rows.append(["tree messages per daemon (median / max)"] + [tree_messages(run) for run in runs] +
                ["daemon.tree_messages: fence and routed frames"])
    rows.append(["wall"] + ["%.2f" % run["seconds"] for run in runs] + ["the run shown (median wall)"])
    markdown_table(header, rows, out)
    print("(+x) = time since the row above that has a value; - = not recorded in this run (daemon.pmix_ready only\n"
          "with PMIx, rank.pmi_* only with simple PMI). Rank stamps are the wall clock of each rank relative to the\n"
          "moment the benchmark started canopy (about 1 ms before canopy's own start).", file=out)
    return True


def tree_messages(run):
    phase = ((run.get("timing") or {}).get("phases") or {}).get("daemon.tree_messages")
    return "%d / %d" % (phase["median"], phase["max"]) if phase else "-"


def print_rank_table(results, launchers, out=sys.stdout):
    """Every launcher, median-wall run: when its ranks got to main, out of MPI_Init, and out of MPI_Finalize."""
    header = ["nodes x ppn", "launcher", "last main() [s]", "MPI_Init per rank, median / max [s]",
              "last MPI_Init done [s]", "last MPI_Finalize done [s]", "wall [s]"]
    rows = []
    for e, l, run in benchlib.median_runs(results, launchers):
        if not run:
            rows.append([size_cell(e), l, "failed", "", "", "", ""])
            continue
        k = run["ranks"]
        rows.append([size_cell(e), l, "%.2f" % k["main"]["max"],
                     "%.2f / %.2f" % (k["init_seconds"]["median"], k["init_seconds"]["max"]),
                     "%.2f" % k["init"]["max"], "%.2f" % k["finalize"]["max"], "%.2f" % run["seconds"]])
    markdown_table(header, rows, out)
    print("From the program's own stamps, median-wall run of each launcher; times since the launcher started.",
          file=out)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    benchlib.add_size_options(p, ALL_LAUNCHERS, runs=3, warmup=0)
    p.add_argument("--hydra", default="mpiexec.hydra")
    p.add_argument("--mpirun", default="mpirun.openmpi")
    p.add_argument("--mpicc-ompi", default="mpicc.openmpi", help="Open MPI compiler wrapper (default mpicc.openmpi)")
    p.add_argument("--mpicc-mpich", default="mpicc.mpich", help="MPICH compiler wrapper (default mpicc.mpich)")
    benchlib.add_run_options(p, 300.0, "mpi_startup_bench.json", "Open MPI gets slow")
    args = p.parse_args(argv)
    sizes, launchers = benchlib.parse_size_options(p, args, ALL_LAUNCHERS)
    benchlib.check_canopy(p, args, needed=any(l in CANOPY_LAUNCHERS for l in launchers))
    tools = {"hydra": [args.hydra, args.mpicc_mpich], "mpirun": [args.mpirun, args.mpicc_ompi],
             "canopy": [args.mpicc_ompi], "canopy-agent": [args.mpicc_ompi],
             "canopy-mpich": [args.mpicc_mpich], "canopy-mpich-agent": [args.mpicc_mpich]}
    for launcher in launchers:
        for tool in tools[launcher]:
            if not shutil.which(tool):
                p.error("%s not found for launcher %s; install mpich / openmpi-bin / libopenmpi-dev or drop it "
                        "with --only" % (tool, launcher))

    hosts_namespace = benchlib.enter_hosts_namespace(__file__, argv, max(n for n, _ in sizes), args.no_namespace)
    report = {**benchlib.report_header("canopy.mpi_startup_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace,
              # MPI and PMIx settings inherited by every launcher's ranks change what is measured: keep them
              "mpi_env": {k: v for k, v in os.environ.items() if k.startswith(("OMPI_MCA_", "PMIX_MCA_", "MPIR_CVAR_"))},
              "results": []}
    benchlib.print_machine(report["machine"], [("mpich", "mpich"), ("openmpi", "openmpi-bin"), ("pmix", "libpmix")])
    with benchlib.scratch_dir("canopy-mpi-startup-") as (tmp, env):
        args.scratch = tmp   # hydra's hostfiles (its -hosts list fails at 1,024 names)
        programs = build_programs(tmp, args)
        benchlib.bench_sizes(report, sizes, args.json,
                             lambda nodes, ppn: bench_size(nodes, ppn, launchers, programs, args, env, tmp))
    results = benchlib.finish_report(report, args.json)

    breakdowns = [("Where %s's time goes" % l, print_breakdown, results, l)
                  for l in benchlib.breakdown_launchers(results, launchers, CANOPY_LAUNCHERS)]
    benchlib.print_sections([
        ("Wall time", print_wall_table, results, launchers, args),
        ("CPU", print_cpu_table, results, launchers),
        ("CPU ratios", print_cpu_ratio_table, results, launchers) if benchlib.ratio_pairs(RATIOS, launchers) else None,
        *breakdowns,
        ("Rank-side stamps, every launcher", print_rank_table, results, launchers)])
    benchlib.print_closing(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
