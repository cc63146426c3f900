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
    hydra         mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -hosts sim0000,... -ppn P -n N*P
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

import argparse
import datetime
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

ALL_LAUNCHERS = ["canopy", "canopy-agent", "hydra"]
# canopy rows: whether canopy starts its daemons through local_agent.sh
CANOPY_LAUNCHERS = {"canopy": False, "canopy-agent": True}
RATIOS = [("canopy", "hydra"), ("canopy-agent", "hydra")]
SOURCE = os.path.join(benchlib.HERE, "pmi_exchange.c")
TIMES_RE = re.compile(r"^pmi_exchange_times rank (\d+) main ([\d.]+) init ([\d.]+) barrier ([\d.]+) "
                      r"gets ([\d.]+) finalize ([\d.]+) cpu ([\d.]+)$", re.M)
STAMPS = ("main", "init", "barrier", "gets", "finalize")

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


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError("size %r is not NODESxPPN, e.g. 256x1" % text)
    return int(m.group(1)), int(m.group(2))


def build_program(workdir, args):
    """Compiles pmi_exchange.c into workdir; returns its path."""
    path = os.path.join(workdir, "pmi_exchange")
    cmd = [args.cc, "-O2", "-o", path, SOURCE]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("pmi_exchange_bench.py: %s failed: %s" % (" ".join(cmd), r.stderr.strip()[-500:]))
    return path


def command_for(launcher, nodes, ppn, program, timing_path, args):
    if launcher in CANOPY_LAUNCHERS:
        if CANOPY_LAUNCHERS[launcher]:
            where = ["--hosts", host_list(nodes), "--ppn", str(ppn), "--agent", "exec:%s %%h" % AGENT]
        else:
            where = ["--sim-nodes", str(nodes), "--ppn", str(ppn)]
        return [args.canopy] + where + ["--pmi", "simple", "--timeout", str(int(args.timeout)),
                                        "--timing=" + timing_path, program]
    if launcher == "hydra":
        return [args.hydra, "-launcher", "ssh", "-launcher-exec", AGENT, "-hosts", host_list(nodes),
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


def rank_summary(ranks):
    """Median and max over ranks of each stamp, of the first barrier's duration and of the ranks' CPU."""
    if not ranks:
        return None
    out = {}
    for key in STAMPS + ("barrier_seconds", "cpu"):
        values = [r[key] for r in ranks.values()]
        out[key] = {"median": statistics.median(values), "max": max(values)}
    out["cpu_sum"] = sum(r["cpu"] for r in ranks.values())
    return out


def canopy_zero(timing_path):
    """Epoch seconds of canopy's --timing zero (started_at, which has milliseconds: +0.5 ms), or None."""
    try:
        with open(timing_path) as f:
            started_at = json.load(f)["started_at"]
        when = datetime.datetime.strptime(started_at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return when.replace(tzinfo=datetime.timezone.utc).timestamp() + 0.0005


def check(result, n, ranks):
    if result["rc"] != 0:
        return "exit %s: %s" % (result["rc"], " | ".join(result["stderr_tail"]))
    expected = "pmi_exchange: %d ranks OK" % n
    if expected not in result["stdout"]:
        return "no '%s' line in the output" % expected
    if sorted(ranks) != list(range(n)):
        return "timing lines from %d of %d ranks" % (len(ranks), n)
    return None


def bench_size(nodes, ppn, launchers, program, args, env, tmp):
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
            argv = command_for(launcher, nodes, ppn, program, timing_path, args)
            cell["argv"] = " ".join(argv)
            r = run_once(argv, env, args.timeout + 10, cgroup_cpu=True)
            ranks = rank_stamps(r["stdout"], r["started_epoch"])
            problem = check(r, n, ranks)
            cell["stragglers"] += r["stragglers"]
            # all CPU of the launch (cgroup), else what the launcher waited for
            cpu = r["cgroup_cpu_seconds"] if r["cgroup_cpu_seconds"] is not None else r["cpu_seconds"]
            summary = rank_summary(ranks)
            run = {"seconds": r["seconds"], "cpu_seconds": cpu,
                   "cpu_source": "cgroup" if r["cgroup_cpu_seconds"] is not None else "wait4",
                   "waited_cpu_seconds": r["cpu_seconds"], "rc": r["rc"], "ranks": summary,
                   "rank_cpu_seconds": summary and summary["cpu_sum"],
                   "launcher_cpu_seconds": summary and cpu - summary["cpu_sum"], "loadavg": benchlib.loadavg()}
            if launcher in CANOPY_LAUNCHERS:
                run["timing"] = benchlib.read_timing(timing_path)
                zero = canopy_zero(timing_path)
                # where canopy's timing zero falls, in s since the benchmark started it: shifts its steps and
                # phases onto the ranks' stamps (which count from the benchmark's start of the launcher)
                run["timing_offset"] = None if zero is None else zero - r["started_epoch"]
            label = "%dx%d %-12s %s %d" % (nodes, ppn, launcher, "run" if timed else "warm-up",
                                          round_ - args.warmup + 1 if timed else round_ + 1)
            if problem:
                cell["errors"].append(problem)
                print("  %s: FAILED %s" % (label, problem), file=sys.stderr, flush=True)
                continue
            print("  %s: %.3f s (CPU %.3f s, ranks %.3f s), barrier max %.1f ms, load %s" % (
                label, r["seconds"], cpu, summary["cpu_sum"], summary["barrier_seconds"]["max"] * 1e3,
                " ".join(run["loadavg"])), file=sys.stderr, flush=True)
            if timed:
                cell["runs"].append(run)
    for cell in cells.values():
        cell["summary"] = summarize([r["seconds"] for r in cell["runs"]])
        cell["cpu_summary"] = summarize([r["cpu_seconds"] for r in cell["runs"]])
        cell["rank_cpu_summary"] = summarize([r["rank_cpu_seconds"] for r in cell["runs"]])
        cell["launcher_cpu_summary"] = summarize([r["launcher_cpu_seconds"] for r in cell["runs"]])
        # the run whose wall time is the median one (lower median): its stamps go in the tables
        ordered = sorted(cell["runs"], key=lambda r: r["seconds"])
        cell["median_run"] = ordered[(len(ordered) - 1) // 2] if ordered else None
    return {"nodes": nodes, "ppn": ppn, "ranks": n, "launchers": cells,
            "background_cpus_before_rounds": background}


def ratio_pairs(launchers):
    """The ratios whose two launchers both ran."""
    return [r for r in RATIOS if r[0] in launchers and r[1] in launchers]


def ratio_cell(entry, pair, summary_key):
    a, b = (entry["launchers"][l][summary_key] for l in pair)
    if not a or not b or not b["median"]:
        return "-"
    return "%.2f" % (a["median"] / b["median"])


def size_cell(e):
    return "%d x %d" % (e["nodes"], e["ppn"])


def print_wall_table(results, launchers, args, out=sys.stdout):
    pairs = ratio_pairs(launchers)
    header = ["nodes x ppn", "ranks"] + ["%s [s]" % l for l in launchers] + ["%s / %s" % p for p in pairs]
    rows = []
    for e in results:
        row = [size_cell(e), str(e["ranks"])]
        for l in launchers:
            s = e["launchers"][l]["summary"]
            row.append("failed" if not s else "%.3f" % s["median"] + ("" if s["runs"] == args.runs else
                                                                      " (%d)" % s["runs"]))
        rows.append(row + [ratio_cell(e, p, "summary") for p in pairs])
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
    pairs = ratio_pairs(launchers)
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
    for e in results:
        for l in launchers:
            run = e["launchers"][l]["median_run"]
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
    rows = []
    previous = [0.0] * len(entries)
    for key, kind, stat, what in BREAKDOWN:
        row = [key + (" (%s)" % stat if stat else "")]
        for i, run in enumerate(runs):
            v = breakdown_value(run, key, kind, stat)
            if v is None:
                row.append("-")
                continue
            row.append("%.1f (%+.1f)" % (v * 1e3, (v - previous[i]) * 1e3))
            previous[i] = v
        rows.append(row + [what])
    rows.append(["wall"] + ["%.1f" % (run["seconds"] * 1e3) for run in runs] + ["the run shown (median wall)"])
    markdown_table(header, rows, out)
    print("Milliseconds since the benchmark started canopy; (+x) = time since the row above that has a value.\n"
          "canopy's own steps and phases are shifted by where its --timing zero fell (its started_at, which has\n"
          "millisecond resolution: +-0.5 ms); - = not recorded in this run.", file=out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="16x1,64x1,256x1,4x16",
                   help="comma-separated NODESxPPN (default 16x1,64x1,256x1,4x16)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per launcher and size (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--only", default=",".join(ALL_LAUNCHERS),
                   help="launchers to run, comma-separated subset of %s (default all)" % ",".join(ALL_LAUNCHERS))
    p.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"),
                   help="canopy binary (default build/launcher/canopy; canopyd is found next to it)")
    p.add_argument("--hydra", default="mpiexec.hydra")
    p.add_argument("--cc", default="cc", help="C compiler for pmi_exchange.c (default cc)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as hung (default 120)")
    p.add_argument("--max-failures", type=int, default=2, help="stop running a cell after this many failures")
    p.add_argument("--wait-idle", type=float, default=60.0,
                   help="before each round wait up to this many seconds for the machine to go idle (default 60)")
    p.add_argument("--idle-cpus", type=float, default=0.3,
                   help="idle means other work uses under this many CPUs (default 0.3)")
    p.add_argument("--json", default="pmi_exchange_bench.json",
                   help="write results here (default ./pmi_exchange_bench.json)")
    p.add_argument("--no-namespace", action="store_true",
                   help="do not bind-mount /etc/hosts in a private mount namespace (the fake hosts must resolve)")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    launchers = [l for l in args.only.split(",") if l]
    bad = [l for l in launchers if l not in ALL_LAUNCHERS]
    if bad or not launchers:
        p.error("unknown launcher %s; choose from %s" % (",".join(bad), ",".join(ALL_LAUNCHERS)))
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.canopy = os.path.abspath(args.canopy)
    if any(l in CANOPY_LAUNCHERS for l in launchers) and not os.access(args.canopy, os.X_OK):
        p.error("canopy binary %s not found; build it (meson setup build && ninja -C build) or pass --canopy"
                % args.canopy)
    if "hydra" in launchers and not shutil.which(args.hydra):
        p.error("%s not found for launcher hydra; install mpich or drop it with --only" % args.hydra)
    if not shutil.which(args.cc):
        p.error("C compiler %s not found; pass --cc" % args.cc)

    if not args.no_namespace and not os.environ.get(NS_ENV):
        benchlib.enter_namespace(__file__, argv, max(n for n, _ in sizes))  # does not return
    hosts_namespace = benchlib.mount_hosts_if_in_namespace()

    tmp = tempfile.mkdtemp(prefix="canopy-pmi-exchange-")
    node_tmp = os.path.join(tmp, "nodes")
    os.mkdir(node_tmp)
    env = dict(os.environ)
    env.pop(NS_ENV, None)
    env["LOCAL_AGENT_TMPDIR_ROOT"] = node_tmp  # each fake host gets its own TMPDIR, as a real node would
    report = {**benchlib.report_header("canopy.pmi_exchange_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace, "agent": os.path.relpath(AGENT, REPO), "results": []}
    m = report["machine"]
    print("machine: %s CPUs, kernel %s, mpich %s, canopy %s, loadavg %s" % (
        m["nproc"], m["kernel"], m["mpich"], m["canopy_git"], " ".join(m["loadavg_start"])), file=sys.stderr)
    try:
        program = build_program(tmp, args)
        for nodes, ppn in sizes:
            report["results"].append(bench_size(nodes, ppn, launchers, program, args, env, tmp))
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
    print("\n## Rank-side stamps\n")
    print_rank_table(results, launchers)
    for launcher in launchers:
        if launcher in CANOPY_LAUNCHERS and any(e["launchers"][launcher]["median_run"] for e in results):
            print("\n## Where %s's time goes\n" % launcher)
            print_breakdown(results, launcher)
    print()
    failed = False
    for e in results:
        for l, cell in e["launchers"].items():
            if cell["errors"]:
                print("%s %s: %d failed run(s): %s" % (size_cell(e), l, len(cell["errors"]), cell["errors"][0]))
            if not cell["runs"]:
                failed = True
            if cell["stragglers"]:
                print("%s %s: %d process(es) outlived the launcher and were killed"
                      % (size_cell(e), l, cell["stragglers"]))
    busiest = max((max(e["background_cpus_before_rounds"] or [0]) for e in results), default=0)
    print("Load average at start %s, at end %s; busiest background load before a round: %.2f CPUs of %d."
          % (" ".join(m["loadavg_start"]), " ".join(m["loadavg_end"]), busiest, m["nproc"] or 1))
    print("results written to %s" % args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
