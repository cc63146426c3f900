#!/usr/bin/python3
# Launch benchmark: wall time of canopy vs MPICH hydra vs Open MPI mpirun on N simulated nodes x 1 rank.
"""Times `true` and `hostname` launched on N simulated nodes (one rank each) by:

  canopy        canopy --sim-nodes N PROG                      (daemons started directly, agent "local")
  canopy-nopmix canopy --sim-nodes N --pmix off PROG                 (no PMIx server on the nodes)
  canopy-nopmi  canopy --sim-nodes N --pmi none PROG      (neither PMIx nor simple PMI: no PMI_FD either)
  canopy-agent  canopy --hosts sim0000,... --agent "exec:local_agent.sh %h" PROG
  canopy-base   CANOPY_BASE --sim-nodes N PROG      (another build, e.g. before a change: --canopy-base PATH)
  hydra         mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -hosts sim0000,... -ppn 1 -n N PROG
  mpirun        Open MPI mpirun --mca plm_rsh_agent local_agent.sh --host sim0000,... -np N PROG
  floor         spawn_floor N CANOPYD: posix_spawn of N `canopyd --version` and N `/bin/true`, all at once, then
                wait (tests/bench/spawn_floor.c): the least this machine can do to start a daemon and a rank per
                node; PROG is not run. canopy/floor is the launch's ratio to it (issue 39 asks for at most 1.3x)

local_agent.sh stands in for ssh: it drops the host and runs the daemon command on this machine,
so every launcher really starts N daemons (proxies/orteds/canopyds), one per fake host.

canopy serves PMIx and simple PMI (a socketpair per rank, its end given to the rank as PMI_FD) by default;
canopy-nopmix still serves simple PMI, canopy-nopmi serves neither. Neither program speaks PMI, so canopy vs
canopy-nopmi is what serving both costs ranks that never use them, and canopy-nopmix vs canopy-nopmi what
serving simple PMI alone costs. canopy-nopmi is not in the default list (--launchers adds it), so a default run
is the one docs/performance.md reports.

The fake host names must resolve without DNS (Open MPI looks up every --host name; an unknown name
costs a resolver round trip to a non-loopback server). So, as root, the script re-runs itself in a
private mount namespace (unshare -m) where /etc/hosts is bind-mounted over by a copy that maps
simNNNN to 127.1.X.Y, the same addresses canopy --sim-nodes uses. Nothing outside the namespace sees it.

Runs are interleaved (each launcher once per round) so background load hits all launchers alike, and
each round waits (up to --wait-idle s) for the machine to be idle; the load seen is kept in the JSON.
Each run must exit 0 and, for `hostname`, print exactly N lines; otherwise the cell is marked failed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import AGENT, REPO, host_list, markdown_table, reap_session, run_once, session_pids, summarize

ALL_LAUNCHERS = ["canopy", "canopy-nopmix", "canopy-nopmi", "canopy-agent", "canopy-base", "hydra", "mpirun", "floor"]
# what runs without --launchers: the rows of the default run docs/performance.md reports
DEFAULT_LAUNCHERS = ["canopy", "canopy-nopmix", "canopy-agent", "hydra", "mpirun", "floor"]
# (numerator, denominator) ratio columns of the wall-time table, each shown when both launchers ran
RATIO_COLUMNS = [("canopy", "floor"), ("canopy", "hydra"), ("canopy", "mpirun"), ("canopy", "canopy-nopmi"),
                 ("canopy-nopmix", "canopy-nopmi"), ("canopy-base", "hydra"), ("canopy", "canopy-base")]


def command_for(launcher, n, program, args):
    """argv that launches `program` on n fake nodes x 1 rank with `launcher`."""
    if launcher == "canopy":
        return [args.canopy, "--sim-nodes", str(n), program]
    if launcher == "canopy-nopmix":
        # Without the per-node PMIx server: what the tree itself costs (programs that need no PMI).
        return [args.canopy, "--sim-nodes", str(n), "--pmix", "off", program]
    if launcher == "canopy-nopmi":
        # Neither PMIx nor simple PMI served (no socketpair and no PMI_FD per rank): against canopy and
        # canopy-nopmix, what serving PMI costs ranks that never speak it.
        return [args.canopy, "--sim-nodes", str(n), "--pmi", "none", program]
    if launcher == "canopy-agent":
        return [args.canopy, "--hosts", host_list(n), "--agent", "exec:%s %%h" % AGENT, program]
    if launcher == "canopy-base":
        # The same job under another build, interleaved with this one: before and after a change in one run.
        return [args.canopy_base, "--sim-nodes", str(n), program]
    if launcher == "hydra":
        return [args.hydra, "-launcher", "ssh", "-launcher-exec", AGENT,
                "-hosts", host_list(n), "-ppn", "1", "-n", str(n), program]
    if launcher == "mpirun":
        return [args.mpirun, "--allow-run-as-root", "--oversubscribe",
                "--mca", "plm_rsh_agent", AGENT,
                # keep Open MPI's out-of-band and TCP traffic on loopback
                "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
                "--host", host_list(n), "-np", str(n), program]
    if launcher == "floor":
        return [args.spawn_floor, str(n), os.path.join(os.path.dirname(args.canopy), "..", "daemon", "canopyd")]
    raise ValueError(launcher)


def check(result, n, program, launcher):
    if result["rc"] != 0:
        return "exit %s: %s" % (result["rc"], " | ".join(result["stderr_tail"]))
    if program == "hostname" and result["lines"] != n and launcher != "floor":
        return "printed %d lines, expected %d" % (result["lines"], n)
    return None


def bench_cell(n, program, launchers, args, env):
    """Warm up, then interleave timed runs of every launcher for one (nodes, program) pair."""
    cells = {}
    for launcher in launchers:
        argv = command_for(launcher, n, program, args)
        cells[launcher] = {"argv_head": argv[:3] + ["..."], "times": [], "cpu_times": [], "errors": [],
                           "stragglers": 0, "runs_planned": args.runs}
        for _ in range(args.warmup):
            r = run_once(argv, env, args.timeout)
            problem = check(r, n, program, launcher)
            cells[launcher]["stragglers"] += r["stragglers"]
            if problem:
                cells[launcher]["errors"].append("warmup: " + problem)
            elif r["seconds"] > args.slow_threshold:
                cells[launcher]["runs_planned"] = min(args.runs, args.slow_runs)
    background = []
    for round_ in range(args.runs):
        background.append(benchlib.background_load(args))
        for launcher in launchers:
            cell = cells[launcher]
            if round_ >= cell["runs_planned"] or len(cell["errors"]) >= 2:
                continue
            r = run_once(command_for(launcher, n, program, args), env, args.timeout)
            cell["stragglers"] += r["stragglers"]
            problem = check(r, n, program, launcher)
            if problem:
                cell["errors"].append(problem)
            else:
                cell["times"].append(r["seconds"])
                cell["cpu_times"].append(r["cpu_seconds"])
            print("  %-8s %4d nodes  %-12s run %d: %s" % (
                program, n, launcher, round_ + 1,
                ("%.3f s (CPU %.3f s)" % (r["seconds"], r["cpu_seconds"])) if not problem
                else "FAILED " + problem),
                file=sys.stderr, flush=True)
    for cell in cells.values():
        cell["summary"] = summarize(cell["times"])
        cell["cpu_summary"] = summarize(cell["cpu_times"])
    return cells, background


def read_status(pid):
    values = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Name", "VmRSS", "VmHWM"):
                    values[key] = rest.strip()
    except OSError:
        return None
    return values


def kib(text):
    return int(text.split()[0]) if text else 0


def measure_rss(args, env):
    """Peak VmRSS/VmHWM of canopyd (and canopy) while `canopy --sim-nodes 4 sleep 2` runs."""
    argv = [args.canopy, "--sim-nodes", str(args.rss_nodes), "sleep", "2"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    peak = {"canopyd_rss_kib": 0, "canopyd_hwm_kib": 0, "canopy_rss_kib": 0, "canopy_hwm_kib": 0}
    daemons = set()
    while proc.poll() is None:
        for pid in session_pids(proc.pid):
            s = read_status(pid)
            if not s or "VmRSS" not in s:
                continue
            name = s.get("Name")
            if name == "canopyd":
                daemons.add(pid)
                peak["canopyd_rss_kib"] = max(peak["canopyd_rss_kib"], kib(s["VmRSS"]))
                peak["canopyd_hwm_kib"] = max(peak["canopyd_hwm_kib"], kib(s.get("VmHWM")))
            elif name == "canopy":
                peak["canopy_rss_kib"] = max(peak["canopy_rss_kib"], kib(s["VmRSS"]))
                peak["canopy_hwm_kib"] = max(peak["canopy_hwm_kib"], kib(s.get("VmHWM")))
        time.sleep(0.02)
    stderr = proc.stderr.read().decode(errors="replace").strip()
    peak.update({"command": " ".join(argv), "rc": proc.returncode, "daemons_seen": len(daemons),
                 "stderr": stderr[-500:]})
    reap_session(proc.pid, grace=3.0)
    return peak


def timing_table(args, env, n, program, runs=3):
    """canopy's own --timing table (stderr) and JSON: of `runs` launches on an idle machine, the median one."""
    tables = []
    for _ in range(runs):
        benchlib.wait_for_idle(args.wait_idle, args.idle_cpus)
        tables.append(timing_once(args, env, n, program))
    tables.sort(key=lambda t: (t["json"] or {}).get("wall_seconds", float("inf")))
    chosen = tables[len(tables) // 2]
    chosen["walls_of_all_runs"] = [(t["json"] or {}).get("wall_seconds") for t in tables]
    return chosen


def timing_once(args, env, n, program):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timing.json")
        proc = subprocess.run([args.canopy, "--sim-nodes", str(n), "--timing=" + path, program],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env, timeout=args.timeout)
        data = None
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
    return {"command": "canopy --sim-nodes %d --timing %s" % (n, program), "rc": proc.returncode,
            "table": proc.stderr.decode(errors="replace"), "json": data}


def fmt_seconds(summary):
    return "%.3f" % summary["median"] if summary else "failed"


def ratio(a, b):
    if not a or not b:
        return "-"
    return "%.2f" % (a["median"] / b["median"])


def print_cpu_table(results, launchers, out=sys.stdout):
    header = ["program", "nodes"] + ["%s CPU [s]" % c for c in launchers]
    rows = [[e["program"], str(e["nodes"])] + [fmt_seconds(e["launchers"][c]["cpu_summary"]) for c in launchers]
            for e in results]
    markdown_table(header, rows, out)
    print("Median user+system CPU of the launcher and the processes it waited for (daemons, ranks).", file=out)


def print_table(results, launchers, runs, out=sys.stdout):
    cols = [l for l in launchers]
    pairs = benchlib.ratio_pairs(RATIO_COLUMNS, cols)
    header = ["program", "nodes"] + ["%s [s]" % c for c in cols] + ["%s/%s" % pair for pair in pairs]
    rows = []
    for entry in results:
        cells = entry["launchers"]
        row = [entry["program"], str(entry["nodes"])]
        row += [benchlib.median_cell(cells[c]["summary"], runs, "%.3f") for c in cols]
        row += [ratio(cells[a]["summary"], cells[b]["summary"]) for a, b in pairs]
        rows.append(row)
    markdown_table(header, rows, out)
    print("Median wall time of the runs; (k) = only k runs. Ratios < 1 mean canopy is faster.", file=out)
    print("Busiest background load seen before a round: %.2f CPUs of %d."
          % (benchlib.busiest_background(results), os.cpu_count() or 1), file=out)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--nodes", default="16,64,256", help="comma-separated node counts (default 16,64,256)")
    p.add_argument("--programs", default="true,hostname", help="programs to launch (default true,hostname)")
    p.add_argument("--launchers", default=",".join(DEFAULT_LAUNCHERS),
                   help="subset of %s (default %s)" % (",".join(ALL_LAUNCHERS), ",".join(DEFAULT_LAUNCHERS)))
    p.add_argument("--runs", type=int, default=5, help="timed runs per cell (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per cell first (default 1)")
    p.add_argument("--slow-threshold", type=float, default=5.0,
                   help="a launcher whose warmup took longer than this many seconds ... (default 5)")
    p.add_argument("--slow-runs", type=int, default=3, help="... gets only this many timed runs (default 3)")
    benchlib.add_idle_options(p, 120.0)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds before a run counts as hung")
    benchlib.add_canopy_option(p)
    p.add_argument("--canopy-base", help="another canopy build for the canopy-base row (say, from before a change)")
    p.add_argument("--hydra", default="mpiexec.hydra")
    p.add_argument("--mpirun", default="mpirun.openmpi")
    p.add_argument("--cc", default="cc", help="C compiler for spawn_floor.c, the floor row (default cc)")
    benchlib.add_json_option(p, "launch_bench.json")
    p.add_argument("--rss-nodes", type=int, default=4, help="--sim-nodes for the canopyd RSS probe (default 4)")
    p.add_argument("--no-rss", action="store_true", help="skip the canopyd RSS probe")
    p.add_argument("--no-timing", action="store_true", help="skip canopy's --timing table")
    benchlib.add_namespace_option(p)
    args = p.parse_args(argv)
    args.nodes = [int(x) for x in args.nodes.split(",") if x]
    programs = [x for x in args.programs.split(",") if x]
    launchers = [x for x in args.launchers.split(",") if x]
    bad = [l for l in launchers if l not in ALL_LAUNCHERS]
    if bad:
        p.error("unknown launcher %s; choose from %s" % (",".join(bad), ",".join(ALL_LAUNCHERS)))
    benchlib.check_canopy(p, args, needed=any(l.startswith("canopy") for l in launchers))
    if "canopy-base" in launchers:
        if not args.canopy_base or not os.access(args.canopy_base, os.X_OK):
            p.error("launcher canopy-base needs --canopy-base PATH, an executable canopy")
        args.canopy_base = os.path.abspath(args.canopy_base)
    for tool, needed in ((args.hydra, "hydra"), (args.mpirun, "mpirun")):
        if needed in launchers and not shutil.which(tool):
            p.error("%s not found for launcher %s; install mpich / openmpi-bin or drop it with --launchers"
                    % (tool, needed))

    hosts_namespace = benchlib.enter_hosts_namespace(__file__, argv, max(args.nodes), args.no_namespace)
    node_tmp = tempfile.mkdtemp(prefix="canopy-bench-nodes-")
    env = benchlib.agent_env(node_tmp)
    if "floor" in launchers:
        args.spawn_floor = benchlib.compile_c(args.cc, os.path.join(benchlib.HERE, "spawn_floor.c"),
                                              os.path.join(node_tmp, "spawn_floor"), __file__)
    report = {**benchlib.report_header("canopy.launch_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace, "agent": os.path.relpath(AGENT, REPO), "results": []}
    benchlib.print_machine(report["machine"], [("mpich", "mpich"), ("openmpi", "openmpi-bin")], with_loadavg=False)
    try:
        for n in args.nodes:
            for program in programs:
                cells, background = bench_cell(n, program, launchers, args, env)
                report["results"].append({"program": program, "nodes": n, "launchers": cells,
                                          "background_cpus_before_rounds": background})
        report["machine"]["loadavg_end"] = benchlib.loadavg()
        if "canopy" in launchers and not args.no_rss:
            report["canopyd_rss"] = measure_rss(args, env)
        if "canopy" in launchers and not args.no_timing:
            report["canopy_timing"] = timing_table(args, env, max(args.nodes), "true")
    finally:
        shutil.rmtree(node_tmp, ignore_errors=True)

    benchlib.write_report(report, args.json)
    print()
    print_table(report["results"], launchers, args.runs)
    print()
    print_cpu_table(report["results"], launchers)
    benchlib.print_failures(report["results"], lambda e: "%s %d nodes" % (e["program"], e["nodes"]))
    rss = report.get("canopyd_rss")
    if rss:
        print("\ncanopyd peak VmRSS %.1f MiB (VmHWM %.1f MiB) over %d daemons; canopy launcher VmRSS %.1f MiB  [%s, exit %s]"
              % (rss["canopyd_rss_kib"] / 1024, rss["canopyd_hwm_kib"] / 1024, rss["daemons_seen"],
                 rss["canopy_rss_kib"] / 1024, rss["command"], rss["rc"]))
    timing = report.get("canopy_timing")
    if timing:
        print("\n$ %s   (exit %s)\n%s" % (timing["command"], timing["rc"], timing["table"].rstrip()))
    print("\nresults written to %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
