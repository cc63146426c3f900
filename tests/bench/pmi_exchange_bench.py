#!/usr/bin/python3
# PMI exchange benchmark: the launcher and MPICH's PMI-1 exchange without MPI, under canopy and under hydra.
"""Times tests/bench/pmi_exchange.c on N simulated nodes x P ranks. The program speaks PMI-1 on PMI_FD as
MPICH 4's MPI_Init does (init, get_maxes, get_my_kvsname, a put of a 100-hex-digit "card", barrier, gets of the
two neighbours' cards and of PMI_process_mapping, a second barrier, finalize) and nothing else: no MPI, no UCX,
no library beyond libc. On 2 cores MPICH's own start-up (UCX's init) costs most of MPI_Init's CPU and hides
what the launcher and the PMI exchange cost; this benchmark leaves only those.

    canopy        canopy --sim-nodes N --ppn P --pmi simple --timeout T --timing=FILE pmi_exchange
    canopy-agent  canopy --hosts sim0000,... --ppn P --pmi simple --agent "exec:local_agent.sh %h" --timeout T
                  --timing=FILE pmi_exchange
    canopy-base   the canopy row with another build (--canopy-base PATH, say from before a change); not run
                  unless --only names it
    hydra         mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -f HOSTFILE -ppn P -n N*P
                  pmi_exchange

local_agent.sh stands in for ssh (see launch_bench.py), so hydra starts N proxies on this machine and the
canopy-agent row starts canopy's daemons through it too; the canopy row forks them directly (agent "local").

Ratios: canopy / hydra and canopy-agent / hydra, of median wall time, of the median CPU of the whole launch
(a cpuacct cgroup per run: launcher, agents, daemons, ranks) and of the median "launcher CPU", the whole
launch's CPU minus the sum of the ranks' own CPU (each rank's getrusage at exit).

Runs are interleaved (one run of each launcher per round, the order rotating); a run counts only if it exits 0,
prints "pmi_exchange: N ranks OK" and one "pmi_exchange_times" line per rank. Needs root (private mount
namespace with an /etc/hosts for sim0000...).
"""

import datetime
import json
import os
import re
import shutil
import sys

import benchlib
from benchlib import AGENT, host_file, REPO, host_list, markdown_table, size_cell

ALL_LAUNCHERS = ["canopy", "canopy-agent", "canopy-base", "hydra"]
DEFAULT_LAUNCHERS = ["canopy", "canopy-agent", "hydra"]
# canopy rows: whether canopy starts its daemons through local_agent.sh
CANOPY_LAUNCHERS = {"canopy": False, "canopy-agent": True, "canopy-base": False}
RATIOS = [("canopy", "hydra"), ("canopy-agent", "hydra"), ("canopy", "canopy-base")]
SOURCE = os.path.join(benchlib.HERE, "pmi_exchange.c")
TIMES_RE = re.compile(r"^pmi_exchange_times rank (\d+) main ([\d.]+) init ([\d.]+) barrier ([\d.]+) "
                      r"gets ([\d.]+) finalize ([\d.]+) cpu ([\d.]+)$", re.M)
STAMPS = ("main", "init", "barrier", "gets", "finalize")
# what the run records keep of each rank's stamps (median and max over ranks)
RANK_KEYS = STAMPS + ("barrier_seconds", "cpu")
# what each cell summarizes of its runs: benchlib's wall time and whole CPU, and the ranks' and the launcher's CPU
CELL_SUMMARIES = benchlib.CELL_SUMMARIES + (("rank_cpu_summary", "rank_cpu_seconds"),
                                            ("launcher_cpu_summary", "launcher_cpu_seconds"))

# canopy launcher steps, phases and rank stamps shown in the breakdown, in the order they happen.
BREAKDOWN = [
    ("start", "step", None, "canopy's clock started (its --timing zero): exec and start-up of the launcher"),
    ("tree_up", "step", None, "every daemon connected (launcher)"),
    ("rank.spawned", "phase", "max", "last rank forked"),
    ("main", "rank", "max", "last rank entered main()"),
    ("rank.pmi_init", "phase", "max", "last rank's PMI-1 init reached its daemon"),
    ("init", "rank", "max", "last rank got its init answer"),
    ("barrier", "rank", "max", "last rank out of the first barrier (the exchange of the cards)"),
    ("gets", "rank", "max", "last rank done with its 3 gets"),
    ("rank.pmi_finalize", "phase", "max", "last rank's finalize reached its daemon (after the second barrier)"),
    ("finalize", "rank", "max", "last rank got its finalize answer"),
    ("ranks_exited", "step", None, "every rank exited (launcher)"),
    ("teardown_done", "step", None, "daemons gone (launcher)"),
]


def build_program(workdir, args):
    """Compiles pmi_exchange.c into workdir; returns its path."""
    return benchlib.compile_c(args.cc, SOURCE, os.path.join(workdir, "pmi_exchange"), __file__)


def command_for(launcher, nodes, ppn, program, timing_path, args):
    if launcher in CANOPY_LAUNCHERS:
        if CANOPY_LAUNCHERS[launcher]:
            where = ["--hosts", host_list(nodes), "--ppn", str(ppn), "--agent", "exec:%s %%h" % AGENT]
        else:
            where = ["--sim-nodes", str(nodes), "--ppn", str(ppn)]
        binary = args.canopy_base if launcher == "canopy-base" else args.canopy
        return [binary] + where + ["--pmi", "simple", "--timeout", str(int(args.timeout)),
                                        "--timing=" + timing_path, program]
    if launcher == "hydra":
        return [args.hydra, "-launcher", "ssh", "-launcher-exec", AGENT, "-f", host_file(args.scratch, nodes),
                "-ppn", str(ppn), "-n", str(nodes * ppn), program]
    raise ValueError(launcher)


def rank_stamps(stdout, started_epoch):
    """The program's per-rank lines as {rank: {main, init, barrier, gets, finalize: s since launch, ...}}."""
    ranks = {}
    for m in TIMES_RE.finditer(stdout):
        values = [float(x) for x in m.groups()[1:]]
        stamps = dict(zip(STAMPS, values[:5]))
        rank = {k: v - started_epoch for k, v in stamps.items()}
        rank["barrier_seconds"] = stamps["barrier"] - stamps["init"]
        rank["cpu"] = values[5]
        ranks[int(m.group(1))] = rank
    return ranks


def canopy_zero(timing_path):
    """Epoch seconds of canopy's --timing zero (started_at, which has milliseconds: +0.5 ms), or None."""
    try:
        with open(timing_path) as f:
            started_at = json.load(f)["started_at"]
        when = datetime.datetime.strptime(started_at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return when.replace(tzinfo=datetime.timezone.utc).timestamp() + 0.0005


def bench_size(nodes, ppn, launchers, program, args, env, tmp):
    """Interleaved rounds of the launchers on nodes x ppn; returns the size's entry of the report."""
    n = nodes * ppn

    def one_run(launcher, cell, round_):
        timing_path = os.path.join(tmp, "timing-%dx%d-%d.json" % (nodes, ppn, round_))
        argv = command_for(launcher, nodes, ppn, program, timing_path, args)
        r, run = benchlib.run_for_cell(cell, argv, env, args.timeout + 10)
        ranks = rank_stamps(r["stdout"], r["started_epoch"])
        summary = benchlib.rank_summary(ranks, RANK_KEYS)
        run.update({"ranks": summary, "rank_cpu_seconds": summary and summary["cpu_sum"],
                    "launcher_cpu_seconds": summary and run["cpu_seconds"] - summary["cpu_sum"],
                    "loadavg": benchlib.loadavg()})
        if launcher in CANOPY_LAUNCHERS:
            run["timing"] = benchlib.read_timing(timing_path)
            zero = canopy_zero(timing_path)
            # where canopy's timing zero falls, in s since the benchmark started it: shifts its steps and
            # phases onto the ranks' stamps (which count from the benchmark's start of the launcher)
            run["timing_offset"] = None if zero is None else zero - r["started_epoch"]
        problem = benchlib.check_ranks(r, n, ranks, "pmi_exchange: %d ranks OK" % n)
        if problem:
            return run, problem, None
        return run, None, "%.3f s (CPU %.3f s, ranks %.3f s), barrier max %.1f ms, load %s" % (
            r["seconds"], run["cpu_seconds"], summary["cpu_sum"], summary["barrier_seconds"]["max"] * 1e3,
            " ".join(run["loadavg"]))

    return benchlib.interleaved_rounds(nodes, ppn, launchers, args, one_run, width=12, summaries=CELL_SUMMARIES)


def ratio_cell(entry, pair, summary_key):
    a, b = (entry["launchers"][l][summary_key] for l in pair)
    if not a or not b or not b["median"]:
        return "-"
    return "%.2f" % (a["median"] / b["median"])


def print_wall_table(results, launchers, args, out=sys.stdout):
    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    header = ["nodes x ppn", "ranks"] + ["%s [s]" % l for l in launchers] + ["%s / %s" % p for p in pairs]
    rows = [[size_cell(e), str(e["ranks"])] +
            [benchlib.median_cell(e["launchers"][l]["summary"], args.runs, "%.3f") for l in launchers] +
            [ratio_cell(e, p, "summary") for p in pairs] for e in results]
    markdown_table(header, rows, out)
    print("Median wall time of %d run(s), launch to exit; (k) = only k runs counted; - = a cell failed or did "
          "not run.\nRatios < 1 mean canopy is faster." % args.runs, file=out)


def ms(summary):
    return "-" if not summary else "%.1f" % (summary["median"] * 1e3)


def print_cpu_table(results, launchers, out=sys.stdout):
    header = ["nodes x ppn"]
    for l in launchers:
        header += ["%s whole [ms]" % l, "%s ranks [ms]" % l, "%s launcher [ms]" % l]
    rows = []
    for e in results:
        row = [size_cell(e)]
        for l in launchers:
            cell = e["launchers"][l]
            row += [ms(cell["cpu_summary"]), ms(cell["rank_cpu_summary"]), ms(cell["launcher_cpu_summary"])]
        rows.append(row)
    markdown_table(header, rows, out)
    print("CPU milliseconds (user+system), median over runs. whole = the whole launch (launcher, agents, daemons,\n"
          "ranks) from a cpuacct cgroup per run (where none can be made: what the launcher waited for); ranks = the\n"
          "sum of the ranks' own getrusage at exit; launcher = whole - ranks, what launching and serving PMI cost.",
          file=out)


def print_cpu_ratio_table(results, launchers, out=sys.stdout):
    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    if not pairs:
        return
    header = ["nodes x ppn"] + ["%s / %s whole CPU" % p for p in pairs] + \
             ["%s / %s launcher CPU" % p for p in pairs]
    rows = [[size_cell(e)] + [ratio_cell(e, p, "cpu_summary") for p in pairs] +
            [ratio_cell(e, p, "launcher_cpu_summary") for p in pairs] for e in results]
    markdown_table(header, rows, out)
    print("Median CPU of the canopy row / median CPU of hydra, for the whole launch and for the launcher alone.",
          file=out)


def print_rank_table(results, launchers, out=sys.stdout):
    """Every launcher, median-wall run: when its last rank got to main, out of init, the barrier and finalize."""
    header = ["nodes x ppn", "launcher", "last main [ms]", "last init done [ms]", "last barrier done [ms]",
              "last finalize done [ms]", "max barrier (barrier - init) [ms]", "wall [ms]"]
    rows = []
    for e, l, run in benchlib.median_runs(results, launchers):
        if not run:
            rows.append([size_cell(e), l, "failed"] + [""] * (len(header) - 3))
            continue
        k = run["ranks"]
        rows.append([size_cell(e), l] + ["%.1f" % (k[s]["max"] * 1e3) for s in ("main", "init", "barrier",
                                                                                  "finalize")] +
                    ["%.1f" % (k["barrier_seconds"]["max"] * 1e3), "%.1f" % (run["seconds"] * 1e3)])
    markdown_table(header, rows, out)
    print("From the program's own stamps, median-wall run of each launcher; milliseconds since the benchmark\n"
          "started the launcher. max barrier = the longest first barrier of a rank, from its init answer to its\n"
          "barrier_out (it includes waiting for the ranks that started last).", file=out)


def breakdown_value(run, key, kind, stat):
    """A breakdown row's value in s since the benchmark started the launcher (canopy's own times shifted)."""
    if kind == "rank":
        return run["ranks"][key][stat]
    timing, offset = run.get("timing"), run.get("timing_offset")
    if not timing or offset is None:
        return None
    if kind == "step":
        value = 0.0 if key == "start" else timing["steps"].get(key)
    else:
        phase = timing["phases"].get(key)
        value = phase[stat] if phase else None
    return None if value is None else value + offset


def print_breakdown(results, launcher, out=sys.stdout):
    """One canopy row's median-wall run per size: when each step finished (ms since launch), and its delta."""
    entries = [e for e in results if e["launchers"].get(launcher, {}).get("median_run")]
    if not entries:
        return
    runs = [e["launchers"][launcher]["median_run"] for e in entries]
    header = ["step (%s, ms since launch)" % launcher] + [size_cell(e) for e in entries] + ["what"]
    rows = benchlib.breakdown_rows(runs, BREAKDOWN, breakdown_value, scale=1e3, digits=1)
    rows.append(["wall"] + ["%.1f" % (run["seconds"] * 1e3) for run in runs] + ["the run shown (median wall)"])
    markdown_table(header, rows, out)
    print("Milliseconds since the benchmark started canopy; (+x) = time since the row above that has a value.\n"
          "canopy's own steps and phases are shifted by where its --timing zero fell (its started_at, which has\n"
          "millisecond resolution: +-0.5 ms); - = not recorded in this run.", file=out)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    benchlib.add_size_options(p, ALL_LAUNCHERS, runs=5, warmup=1, default_launchers=DEFAULT_LAUNCHERS)
    p.add_argument("--canopy-base", help="another canopy build for the canopy-base row (say, from before a change)")
    p.add_argument("--hydra", default="mpiexec.hydra")
    p.add_argument("--cc", default="cc", help="C compiler for pmi_exchange.c (default cc)")
    benchlib.add_run_options(p, 120.0, "pmi_exchange_bench.json", "the fake hosts must resolve")
    args = p.parse_args(argv)
    sizes, launchers = benchlib.parse_size_options(p, args, ALL_LAUNCHERS)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    benchlib.check_canopy(p, args, needed=any(l in CANOPY_LAUNCHERS for l in launchers))
    if "canopy-base" in launchers:
        if not args.canopy_base or not os.access(args.canopy_base, os.X_OK):
            p.error("launcher canopy-base needs --canopy-base PATH, an executable canopy")
        args.canopy_base = os.path.abspath(args.canopy_base)
    if "hydra" in launchers and not shutil.which(args.hydra):
        p.error("%s not found for launcher hydra; install mpich or drop it with --only" % args.hydra)
    if not shutil.which(args.cc):
        p.error("C compiler %s not found; pass --cc" % args.cc)

    hosts_namespace = benchlib.enter_hosts_namespace(__file__, argv, max(n for n, _ in sizes), args.no_namespace)
    report = {**benchlib.report_header("canopy.pmi_exchange_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace, "agent": os.path.relpath(AGENT, REPO), "results": []}
    benchlib.print_machine(report["machine"], [("mpich", "mpich")])
    with benchlib.scratch_dir("canopy-pmi-exchange-") as (tmp, env):
        args.scratch = tmp   # hydra's hostfiles (its -hosts list fails at 1,024 names)
        program = build_program(tmp, args)
        benchlib.bench_sizes(report, sizes, args.json,
                             lambda nodes, ppn: bench_size(nodes, ppn, launchers, program, args, env, tmp))
    results = benchlib.finish_report(report, args.json)

    pairs = benchlib.ratio_pairs(RATIOS, launchers)
    benchlib.print_sections([
        ("Wall time", print_wall_table, results, launchers, args),
        ("CPU", print_cpu_table, results, launchers),
        ("CPU ratios", print_cpu_ratio_table, results, launchers) if pairs else None,
        ("Rank-side stamps", print_rank_table, results, launchers)] +
        [("Where %s's time goes" % l, print_breakdown, results, l)
         for l in benchlib.breakdown_launchers(results, launchers, CANOPY_LAUNCHERS)])
    benchlib.print_closing(report, args.json)
    return 1 if any(not cell["runs"] for e in results for cell in e["launchers"].values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
