#!/usr/bin/python3
# Launch benchmark: wall time of canopy vs MPICH hydra, Open MPI mpirun, pdsh and clush on N simulated nodes x 1 rank.
"""Times `true` and `hostname` launched on N simulated nodes (one rank each) by:

  canopy        canopy --sim-nodes N PROG                      (daemons started directly, agent "local")
  canopy-nopmix canopy --sim-nodes N --pmix off PROG                 (no PMIx server on the nodes)
  canopy-nopmi  canopy --sim-nodes N --pmi none PROG      (neither PMIx nor simple PMI: no PMI_FD either)
  canopy-agent  canopy --hosts sim0000,... --agent "exec:local_agent.sh %h" PROG
  canopy-base   CANOPY_BASE --sim-nodes N PROG      (another build, e.g. before a change: --canopy-base PATH)
  hydra         mpiexec.hydra -launcher ssh -launcher-exec local_agent.sh -f HOSTFILE -ppn 1 -n N PROG
                (HOSTFILE: sim0000, ... one a line; its -hosts list fails at 1,024 names: "too many hosts listed")
  mpirun        Open MPI mpirun --mca plm_rsh_agent local_agent.sh --host sim0000,... -np N PROG
  pdsh          pdsh -S -f 32 -R exec -w ^HOSTFILE local_agent.sh %h PROG
                (flat: at most 32 agents at a time, pdsh's default fanout)
  clush         clush -S -f 64 --hostfile HOSTFILE -O ssh_path=local_agent.sh PROG
                (ClusterShell, flat: at most 64 agents at a time, clush.conf's default fanout)
  clush-tree    clush ... --topology FILE: this host reaches G gateways (--clush-gateways, default 32), each a
                `python3 -m ClusterShell.Gateway` started through local_agent.sh that runs PROG on its N/G hosts,
                with the same fanout
  floor         spawn_floor N CANOPYD: posix_spawn of N `canopyd --version` and N `/bin/true`, all at once, then
                wait (tests/bench/spawn_floor.c): the least this machine can do to start a daemon and a rank per
                node; PROG is not run. canopy/floor is the launch's ratio to it (issue 39 asks for at most 1.3x)

local_agent.sh stands in for ssh: it drops the host and runs the daemon command on this machine,
so every launcher really starts N daemons (proxies/orteds/canopyds), one per fake host.

pdsh and clush only run a command on every host: they serve no PMI and give the ranks no job environment
(no rank, size or node list), so they do less than the MPI launchers and canopy.

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
Each run must exit 0 and, for `hostname`, print exactly N lines (pdsh and clush label each line with its host:
each fake host exactly once); otherwise the cell is marked failed. CPU is that of everything the launch started
(a cpuacct cgroup per run, so Open MPI's orteds, which detach from mpirun, count), or where there is no cgroup v1,
what the launcher waited for.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import AGENT, REPO, host_file, host_list, markdown_table, reap_session, session_pids, sim_name, summarize

ALL_LAUNCHERS = ["canopy", "canopy-nopmix", "canopy-nopmi", "canopy-agent", "canopy-base", "hydra", "mpirun",
                 "pdsh", "clush", "clush-tree", "floor"]
# what runs without --launchers: the rows of the default run docs/performance.md reports
DEFAULT_LAUNCHERS = ["canopy", "canopy-nopmix", "canopy-agent", "hydra", "mpirun", "floor"]
# (numerator, denominator) ratio columns of the wall-time table, each shown when both launchers ran
RATIO_COLUMNS = [("canopy", "floor"), ("canopy", "hydra"), ("canopy", "mpirun"), ("canopy", "canopy-nopmi"),
                 ("canopy-nopmix", "canopy-nopmi"), ("canopy-base", "hydra"), ("canopy", "canopy-base"),
                 ("canopy", "pdsh"), ("canopy", "clush"), ("canopy", "clush-tree")]
# launchers whose every output line starts "HOST: " (pdsh, clush): check() wants each fake host once
LABELLED_OUTPUT = ("pdsh", "clush", "clush-tree")
# what to install for a peer that is missing: (launcher, option holding its command, Debian package)
PEER_PACKAGES = [("hydra", "hydra", "mpich"), ("mpirun", "mpirun", "openmpi-bin"), ("pdsh", "pdsh", "pdsh"),
                 ("clush", "clush", "clustershell"), ("clush-tree", "clush", "clustershell")]


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
                "-f", host_file(args.scratch, n), "-ppn", "1", "-n", str(n), program]
    if launcher == "mpirun":
        return [args.mpirun, "--allow-run-as-root", "--oversubscribe",
                "--mca", "plm_rsh_agent", AGENT,
                # keep Open MPI's out-of-band and TCP traffic on loopback
                "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
                "--host", host_list(n), "-np", str(n), program]
    if launcher == "pdsh":
        # the exec module runs `local_agent.sh HOST PROG` per host, as its ssh module would run ssh; -S: fail if any did
        return [args.pdsh, "-S", "-f", str(args.pdsh_fanout), "-R", "exec", "-w", "^" + host_file(args.scratch, n),
                AGENT, "%h", program]
    if launcher in ("clush", "clush-tree"):
        argv = [args.clush, "-S", "-f", str(args.clush_fanout), "--hostfile", host_file(args.scratch, n),
                "-O", "ssh_path=" + AGENT]
        if launcher == "clush-tree":
            argv += ["--topology", clush_topology(args.scratch, n, args.clush_gateways)]
        return argv + [program]
    if launcher == "floor":
        return [args.spawn_floor, str(n), os.path.join(os.path.dirname(args.canopy), "..", "daemon", "canopyd")]
    raise ValueError(launcher)


def clush_topology(directory, n, gateways):
    """directory/topology-N-G, written once: ClusterShell's routes from this host to G gateways, each with N/G hosts."""
    path = os.path.join(directory, "topology-%d-%d" % (n, gateways))
    if os.path.exists(path):
        return path
    gateways = min(gateways, n)
    names = ["clushgw%02d" % g for g in range(gateways)]
    # clush finds itself in the routes by its short host name
    lines = ["[routes]", "%s: %s" % (socket.gethostname().split(".")[0], ",".join(names))]
    for g, name in enumerate(names):
        hosts = range(g * n // gateways, (g + 1) * n // gateways)
        lines.append("%s: %s" % (name, ",".join(sim_name(i) for i in hosts)))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def script_interpreter(path):
    """The interpreter on a script's #! line (clush's gateways must run in the Python that has ClusterShell)."""
    with open(shutil.which(path) or path, "rb") as f:
        first = f.readline().decode(errors="replace")
    return first[2:].split()[0] if first.startswith("#!") else None


def check(result, n, program, launcher):
    if result["rc"] != 0:
        return "exit %s: %s" % (result["rc"], " | ".join(result["stderr_tail"]))
    if program == "hostname" and result["lines"] != n and launcher != "floor":
        return "printed %d lines, expected %d" % (result["lines"], n)
    if program == "hostname" and launcher in LABELLED_OUTPUT:
        labels = sorted(line.split(":", 1)[0] for line in result["stdout"].splitlines())
        if labels != [sim_name(i) for i in range(n)]:
            return "output lines labelled with %d distinct hosts, expected each of the %d once" % (len(set(labels)), n)
    return None


def bench_cell(n, program, launchers, args, env):
    """Warm up, then interleave timed runs of every launcher for one (nodes, program) pair."""
    cells = {}
    for launcher in launchers:
        argv = command_for(launcher, n, program, args)
        cells[launcher] = {"times": [], "cpu_times": [], "waited_cpu_times": [],
                           "errors": [], "stragglers": 0, "runs_planned": args.runs}
        for _ in range(args.warmup):
            r, _ = benchlib.run_for_cell(cells[launcher], argv, env, args.timeout)
            problem = check(r, n, program, launcher)
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
            r, record = benchlib.run_for_cell(cell, command_for(launcher, n, program, args), env, args.timeout)
            problem = check(r, n, program, launcher)
            if problem:
                cell["errors"].append(problem)
            else:
                cell["times"].append(record["seconds"])
                cell["cpu_times"].append(record["cpu_seconds"])
                cell["waited_cpu_times"].append(record["waited_cpu_seconds"])
                cell["cpu_source"] = record["cpu_source"]
            print("  %-8s %4d nodes  %-12s run %d: %s" % (
                program, n, launcher, round_ + 1,
                ("%.3f s (CPU %.3f s)" % (record["seconds"], record["cpu_seconds"])) if not problem
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
    print("Median user+system CPU of everything the launch started (launcher, agents, daemons, ranks; a cpuacct "
          "cgroup per run, else what the launcher waited for).", file=out)


def print_relative_table(results, launchers, out=sys.stdout):
    """Per cell and launcher: median wall and CPU, each also as a multiple of canopy's and of the floor's."""
    bases = [b for b in ("canopy", "floor") if b in launchers]
    header = ["program", "nodes", "launcher", "wall [s]"] + ["x %s" % b for b in bases]
    header += ["CPU [s]"] + ["CPU x %s" % b for b in bases]
    rows = []
    for e in results:
        cells = e["launchers"]
        for l in launchers:
            row = [e["program"], str(e["nodes"]), l]
            for key in ("summary", "cpu_summary"):
                row += [fmt_seconds(cells[l][key])] + [ratio(cells[l][key], cells[b][key]) for b in bases]
            rows.append(row)
    markdown_table(header, rows, out)


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
    p.add_argument("--pdsh", default="pdsh")
    p.add_argument("--pdsh-fanout", type=int, default=32, help="pdsh -f: agents at a time (default 32, pdsh's)")
    p.add_argument("--clush", default="clush")
    p.add_argument("--clush-fanout", type=int, default=64,
                   help="clush -f: agents at a time, on the head and on each gateway (default 64, clush.conf's)")
    p.add_argument("--clush-gateways", type=int, default=32, help="gateways of the clush-tree row (default 32)")
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
    for needed, option, package in PEER_PACKAGES:
        tool = getattr(args, option)
        if needed in launchers and not shutil.which(tool):
            p.error("%s not found for launcher %s; install %s (apt-get install %s) or drop it with --launchers"
                    % (tool, needed, package, package))

    hosts_namespace = benchlib.enter_hosts_namespace(__file__, argv, max(args.nodes), args.no_namespace)
    report = {**benchlib.report_header("canopy.launch_bench/1", __file__, argv),
              "hosts_namespace": hosts_namespace, "agent": os.path.relpath(AGENT, REPO), "results": []}
    benchlib.print_machine(report["machine"], [("mpich", "mpich"), ("openmpi", "openmpi-bin"), ("pdsh", "pdsh"),
                                               ("clustershell", "clustershell")], with_loadavg=False)
    # the hostfiles, clush's topologies and spawn_floor go in args.scratch, the fake hosts' TMPDIRs under it
    with benchlib.scratch_dir("canopy-bench-launch-") as (args.scratch, env):
        if "floor" in launchers:
            args.spawn_floor = benchlib.compile_c(args.cc, os.path.join(benchlib.HERE, "spawn_floor.c"),
                                                  os.path.join(args.scratch, "spawn_floor"), __file__)
        if "clush-tree" in launchers:
            # the gateways are started as `python3 -m ClusterShell.Gateway`: make that the Python clush runs in
            env["CLUSTERSHELL_GW_PYTHON_EXECUTABLE"] = script_interpreter(args.clush) or "python3"
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

    benchlib.write_report(report, args.json)
    print()
    print_table(report["results"], launchers, args.runs)
    print()
    print_cpu_table(report["results"], launchers)
    if "canopy" in launchers or "floor" in launchers:
        print()
        print_relative_table(report["results"], launchers)
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
