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
    hydra               mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -hosts sim0000,... -ppn P
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

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import benchlib
from benchlib import AGENT, NS_ENV, REPO, host_list, markdown_table, run_once, summarize

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


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError("size %r is not NODESxPPN, e.g. 256x1" % text)
    return int(m.group(1)), int(m.group(2))


def build_programs(workdir, args):
    """Compiles mpi_startup.c for Open MPI and MPICH into workdir; returns {launcher: path}."""
    out = {}
    for flavour, cc in (("ompi", args.mpicc_ompi), ("mpich", args.mpicc_mpich)):
        path = os.path.join(workdir, "mpi_startup." + flavour)
        cmd = [cc, "-O2", "-o", path, SOURCE]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit("mpi_startup_bench.py: %s failed: %s" % (" ".join(cmd), r.stderr.strip()[-500:]))
        out[flavour] = path
    return out


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
        hosts = ",".join("%s:%d" % (h, ppn) for h in host_list(nodes).split(","))
        return [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "plm_rsh_agent", AGENT,
                "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
                "--host", hosts, "-np", str(n),
                # each fake host's shared memory in its own TMPDIR (local_agent.sh sets it per host)
                "sh", "-c", 'OMPI_MCA_btl_vader_backing_directory="$TMPDIR" exec "$0" "$@"',
                programs["ompi"], str(n)]
    if launcher == "hydra":
        return [args.hydra, "-launcher", "ssh", "-launcher-exec", AGENT, "-hosts", host_list(nodes),
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


def rank_summary(ranks):
    """Median and max over ranks of each stamp, plus the ranks' CPU."""
    if not ranks:
        return None
    out = {}
    for key in ("main", "init", "allreduce", "finalize", "init_seconds", "cpu"):
        values = [r[key] for r in ranks.values()]
        out[key] = {"median": statistics.median(values), "max": max(values)}
    out["cpu_sum"] = sum(r["cpu"] for r in ranks.values())
    return out


def check(result, n, ranks):
    if result["rc"] != 0:
        return "exit %s: %s" % (result["rc"], " | ".join(result["stderr_tail"]))
    expected = "mpi_startup: %d ranks, sum %d OK" % (n, n * (n + 1) // 2)
    if expected not in result["stdout"]:
        return "no '%s' line in the output" % expected
    if sorted(ranks) != list(range(n)):
        return "timing lines from %d of %d ranks" % (len(ranks), n)
    return None


def bench_size(nodes, ppn, launchers, programs, args, env, tmp):
    n = nodes * ppn
    cells = {l: {"runs": [], "errors": [], "stragglers": 0} for l in launchers}
    background = []
    for round_ in range(args.warmup + args.runs):
        timed = round_ >= args.warmup
        if timed:
            background.append(round(benchlib.wait_for_idle(args.wait_idle, args.idle_cpus), 2))
        shift = round_ % len(launchers)
        for launcher in launchers[shift:] + launchers[:shift]:
            cell = cells[launcher]
            if len(cell["errors"]) >= args.max_failures:
                continue
            timing_path = os.path.join(tmp, "timing-%dx%d-%d.json" % (nodes, ppn, round_))
            argv = command_for(launcher, nodes, ppn, programs, timing_path, args)
            cell["argv"] = " ".join(argv)
            r = run_once(argv, env, args.timeout, cgroup_cpu=True)
            ranks = rank_stamps(r["stdout"], r["started_epoch"])
            problem = check(r, n, ranks)
            cell["stragglers"] += r["stragglers"]
            # all CPU of the launch (cgroup), else what the launcher waited for (orteds detach from mpirun)
            cpu = r["cgroup_cpu_seconds"] if r["cgroup_cpu_seconds"] is not None else r["cpu_seconds"]
            run = {"seconds": r["seconds"], "cpu_seconds": cpu, "cpu_source": "cgroup" if
                   r["cgroup_cpu_seconds"] is not None else "wait4", "waited_cpu_seconds": r["cpu_seconds"],
                   "rc": r["rc"],
                   "ranks": rank_summary(ranks), "loadavg": benchlib.loadavg()}
            if launcher in CANOPY_LAUNCHERS:
                run["timing"] = benchlib.read_timing(timing_path)
            label = "%dx%d %-18s %s %d" % (nodes, ppn, launcher, "run" if timed else "warm-up",
                                          round_ - args.warmup + 1 if timed else round_ + 1)
            if problem:
                cell["errors"].append(problem)
                print("  %s: FAILED %s" % (label, problem), file=sys.stderr, flush=True)
                continue
            print("  %s: %.3f s (CPU %.2f s), MPI_Init max %.3f s, load %s" % (
                label, r["seconds"], cpu, run["ranks"]["init_seconds"]["max"],
                " ".join(run["loadavg"])), file=sys.stderr, flush=True)
            if timed:
                cell["runs"].append(run)
    for cell in cells.values():
        cell["summary"] = summarize([r["seconds"] for r in cell["runs"]])
        cell["cpu_summary"] = summarize([r["cpu_seconds"] for r in cell["runs"]])
        # the run whose wall time is the median one (lower median): its breakdown goes in the tables
        ordered = sorted(cell["runs"], key=lambda r: r["seconds"])
        cell["median_run"] = ordered[(len(ordered) - 1) // 2] if ordered else None
    return {"nodes": nodes, "ppn": ppn, "ranks": n, "launchers": cells,
            "background_cpus_before_rounds": background}


def fmt_s(value):
    return "-" if value is None else "%.2f" % value


def ratio_pairs(launchers):
    """The like-for-like ratios whose two launchers both ran."""
    return [r for r in RATIOS if r[0] in launchers and r[1] in launchers]


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
    pairs = ratio_pairs(launchers)
    header = ["nodes x ppn", "ranks"] + ["%s [s]" % l for l in launchers] + ["%s / %s" % p[:2] for p in pairs]
    rows = []
    for e in results:
        row = ["%d x %d" % (e["nodes"], e["ppn"]), str(e["ranks"])]
        for l in launchers:
            s = e["launchers"][l]["summary"]
            row.append("failed" if not s else "%.2f" % s["median"] + ("" if s["runs"] == args.runs else
                                                                      " (%d)" % s["runs"]))
        rows.append(row + ratio_cells(e, pairs, "summary"))
    markdown_table(header, rows, out)
    print("Median wall time of %d run(s), launch to exit; (k) = only k runs counted. Ratios compare the same binary:\n"
          "Open MPI build under canopy vs mpirun, MPICH build under canopy vs hydra (- = a cell failed or did not run).\n"
          "Targets, at %d x %d only: canopy / mpirun <= 0.5 and canopy-mpich / hydra <= 0.5."
          % ((args.runs,) + TARGET_SIZE), file=out)


def print_cpu_ratio_table(results, launchers, out=sys.stdout):
    pairs = ratio_pairs(launchers)
    if not pairs:
        return
    header = ["nodes x ppn"] + ["%s / %s CPU" % p[:2] for p in pairs]
    rows = [["%d x %d" % (e["nodes"], e["ppn"])] + ratio_cells(e, pairs, "cpu_summary") for e in results]
    markdown_table(header, rows, out)
    print("Median CPU-seconds of the whole launch (as above), canopy row / the same binary's own launcher.", file=out)


def print_cpu_table(results, launchers, out=sys.stdout):
    header = ["nodes x ppn"] + ["%s CPU [s]" % l for l in launchers] + \
             ["%s rank CPU [s]" % l for l in launchers]
    rows = []
    for e in results:
        row = ["%d x %d" % (e["nodes"], e["ppn"])]
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
    runs = {id(e): e["launchers"][launcher]["median_run"] for e in entries}
    header = ["step (%s, s since launch)" % launcher] + ["%d x %d" % (e["nodes"], e["ppn"]) for e in entries] + \
             ["what"]
    rows = []
    previous = {id(e): 0.0 for e in entries}
    for key, kind, stat, what in BREAKDOWN:
        row = [key + (" (%s)" % stat if stat else "")]
        for e in entries:
            v = breakdown_value(runs[id(e)], key, kind, stat)
            if v is None:
                row.append("-")
                continue
            row.append("%.2f (%+.2f)" % (v, v - previous[id(e)]))
            previous[id(e)] = v
        rows.append(row + [what])
    rows.append(["MPI_Init per rank (median / max)"] + [
        "%.2f / %.2f" % (runs[id(e)]["ranks"]["init_seconds"]["median"],
                         runs[id(e)]["ranks"]["init_seconds"]["max"]) for e in entries] +
        ["main() to end of MPI_Init, each rank"])
    rows.append(["tree messages per daemon (median / max)"] + [tree_messages(runs[id(e)]) for e in entries] +
                ["daemon.tree_messages: fence and routed frames"])
    rows.append(["wall"] + ["%.2f" % runs[id(e)]["seconds"] for e in entries] + ["the run shown (median wall)"])
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
    for e in results:
        for l in launchers:
            run = e["launchers"][l]["median_run"]
            if not run:
                rows.append(["%d x %d" % (e["nodes"], e["ppn"]), l, "failed", "", "", "", ""])
                continue
            k = run["ranks"]
            rows.append(["%d x %d" % (e["nodes"], e["ppn"]), l, "%.2f" % k["main"]["max"],
                         "%.2f / %.2f" % (k["init_seconds"]["median"], k["init_seconds"]["max"]),
                         "%.2f" % k["init"]["max"], "%.2f" % k["finalize"]["max"], "%.2f" % run["seconds"]])
    markdown_table(header, rows, out)
    print("From the program's own stamps, median-wall run of each launcher; times since the launcher started.",
          file=out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="16x1,64x1,256x1,4x16",
                   help="comma-separated NODESxPPN (default 16x1,64x1,256x1,4x16)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per launcher and size (default 3)")
    p.add_argument("--warmup", type=int, default=0, help="untimed rounds first (default 0)")
    p.add_argument("--only", default=",".join(ALL_LAUNCHERS),
                   help="launchers to run, comma-separated subset of %s (default all)" % ",".join(ALL_LAUNCHERS))
    p.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"),
                   help="canopy binary (default build/launcher/canopy; canopyd is found next to it)")
    p.add_argument("--hydra", default="mpiexec.hydra")
    p.add_argument("--mpirun", default="mpirun.openmpi")
    p.add_argument("--mpicc-ompi", default="mpicc.openmpi", help="Open MPI compiler wrapper (default mpicc.openmpi)")
    p.add_argument("--mpicc-mpich", default="mpicc.mpich", help="MPICH compiler wrapper (default mpicc.mpich)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a run counts as hung (default 300)")
    p.add_argument("--max-failures", type=int, default=2, help="stop running a cell after this many failures")
    p.add_argument("--wait-idle", type=float, default=60.0,
                   help="before each round wait up to this many seconds for the machine to go idle (default 60)")
    p.add_argument("--idle-cpus", type=float, default=0.3,
                   help="idle means other work uses under this many CPUs (default 0.3)")
    p.add_argument("--json", default="mpi_startup_bench.json", help="write results here (default ./mpi_startup_bench.json)")
    p.add_argument("--no-namespace", action="store_true",
                   help="do not bind-mount /etc/hosts in a private mount namespace (Open MPI gets slow)")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    launchers = [l for l in args.only.split(",") if l]
    bad = [l for l in launchers if l not in ALL_LAUNCHERS]
    if bad or not launchers:
        p.error("unknown launcher %s; choose from %s" % (",".join(bad), ",".join(ALL_LAUNCHERS)))
    args.canopy = os.path.abspath(args.canopy)
    if any(l in CANOPY_LAUNCHERS for l in launchers) and not os.access(args.canopy, os.X_OK):
        p.error("canopy binary %s not found; build it (meson setup build && ninja -C build) or pass --canopy"
                % args.canopy)
    tools = {"hydra": [args.hydra, args.mpicc_mpich], "mpirun": [args.mpirun, args.mpicc_ompi],
             "canopy": [args.mpicc_ompi], "canopy-agent": [args.mpicc_ompi],
             "canopy-mpich": [args.mpicc_mpich], "canopy-mpich-agent": [args.mpicc_mpich]}
    for launcher in launchers:
        for tool in tools[launcher]:
            if not shutil.which(tool):
                p.error("%s not found for launcher %s; install mpich / openmpi-bin / libopenmpi-dev or drop it "
                        "with --only" % (tool, launcher))

    if not args.no_namespace and not os.environ.get(NS_ENV):
        benchlib.enter_namespace(__file__, argv, max(n for n, _ in sizes))  # does not return
    hosts_namespace = benchlib.mount_hosts_if_in_namespace()

    tmp = tempfile.mkdtemp(prefix="canopy-mpi-startup-")
    node_tmp = os.path.join(tmp, "nodes")
    os.mkdir(node_tmp)
    env = dict(os.environ)
    env.pop(NS_ENV, None)
    env["LOCAL_AGENT_TMPDIR_ROOT"] = node_tmp  # each fake host gets its own TMPDIR, as a real node would
    report = {**benchlib.report_header("canopy.mpi_startup_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace,
              # MPI and PMIx settings inherited by every launcher's ranks change what is measured: keep them
              "mpi_env": {k: v for k, v in os.environ.items() if k.startswith(("OMPI_MCA_", "PMIX_MCA_", "MPIR_CVAR_"))},
              "results": []}
    m = report["machine"]
    print("machine: %s CPUs, kernel %s, mpich %s, openmpi %s, pmix %s, canopy %s, loadavg %s" % (
        m["nproc"], m["kernel"], m["mpich"], m["openmpi-bin"], m["libpmix"], m["canopy_git"],
        " ".join(m["loadavg_start"])), file=sys.stderr)
    try:
        programs = build_programs(tmp, args)
        for nodes, ppn in sizes:
            report["results"].append(bench_size(nodes, ppn, launchers, programs, args, env, tmp))
            with open(args.json, "w") as f:  # partial results survive an interrupted run
                json.dump(report, f, indent=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m["loadavg_end"] = benchlib.loadavg()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)

    results = report["results"]
    print("\n## Wall time\n")
    print_wall_table(results, launchers, args)
    print("\n## CPU\n")
    print_cpu_table(results, launchers)
    if ratio_pairs(launchers):
        print("\n## CPU ratios\n")
        print_cpu_ratio_table(results, launchers)
    for launcher in launchers:
        if launcher in CANOPY_LAUNCHERS and any(e["launchers"][launcher]["median_run"] for e in results):
            print("\n## Where %s's time goes\n" % launcher)
            print_breakdown(results, launcher)
    print("\n## Rank-side stamps, every launcher\n")
    print_rank_table(results, launchers)
    print()
    for e in results:
        for l, cell in e["launchers"].items():
            if cell["errors"]:
                print("%d x %d %s: %d failed run(s): %s" % (e["nodes"], e["ppn"], l, len(cell["errors"]),
                                                            cell["errors"][0]))
            if cell["stragglers"]:
                print("%d x %d %s: %d process(es) outlived the launcher and were killed"
                      % (e["nodes"], e["ppn"], l, cell["stragglers"]))
    busiest = max((max(e["background_cpus_before_rounds"] or [0]) for e in results), default=0)
    print("Load average at start %s, at end %s; busiest background load before a round: %.2f CPUs of %d."
          % (" ".join(m["loadavg_start"]), " ".join(m["loadavg_end"]), busiest, m["nproc"] or 1))
    print("results written to %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
