# Helpers the benchmarks share: fake host names, timed runs with stragglers reaped, idle waits, machine info,
# common options, interleaved rounds of launchers and the report's closing lines.
"""Shared code of tests/bench/*_bench.py.

Fake hosts are named sim0000, sim0001, ... and map to 127.1.X.Y, the addresses `canopy --sim-nodes` uses.
`enter_namespace` re-runs a benchmark script in a private mount namespace whose /etc/hosts knows them, so
Open MPI and MPICH resolve them without DNS; nothing outside the namespace sees it.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
AGENT = os.path.join(HERE, "local_agent.sh")
NS_ENV = "CANOPY_BENCH_HOSTS_FILE"


def sim_name(i):
    return "sim%04d" % i


def sim_address(i):
    # Same scheme as canopy --sim-nodes: node i binds 127.1.(i/254).(i%254+1).
    return "127.1.%d.%d" % (i // 254, i % 254 + 1)


def host_list(n):
    return ",".join(sim_name(i) for i in range(n))


def host_file(directory, n):
    """directory/hosts-N, written once: sim0000 ... sim{n-1}, one a line, as hostfiles (hydra's -f, pdsh's -w ^FILE,
    clush's --hostfile) take them; a list on the command line has limits (hydra's -hosts fails at 1,024 names)."""
    path = os.path.join(directory, "hosts-%d" % n)
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.writelines(sim_name(i) + "\n" for i in range(n))
    return path


def host_slots(n, slots):
    """sim0000:SLOTS,...,sim{n-1}:SLOTS: n fake hosts with `slots` slots each, as mpirun's --host takes them."""
    return ",".join("%s:%d" % (sim_name(i), slots) for i in range(n))


def session_pids(sid):
    """Processes still alive in session `sid` (daemons a launcher left behind)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def reap_session(sid, grace):
    """Wait up to `grace` s for the launcher's leftovers to exit, then SIGKILL them; returns how many were left."""
    deadline = time.monotonic() + grace
    left = session_pids(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_pids(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


CPUACCT_ROOT = "/sys/fs/cgroup/cpuacct"


def make_cpu_cgroup():
    """A fresh cgroup-v1 cpuacct group for one run, or None where there is none (then CPU comes from wait4)."""
    path = os.path.join(CPUACCT_ROOT, "canopy-bench-%d-%d" % (os.getpid(), time.monotonic_ns()))
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path


def run_once(argv, env, timeout, stderr_filter=("setpgid",), cgroup_cpu=False):
    """One timed launch in its own session.

    Returns dict(seconds, cpu_seconds, rc, lines, stdout, stderr_head, stderr_tail, stragglers, started_epoch,
    cgroup_cpu_seconds); rc is a string when the run was killed after `timeout` s. Stderr lines containing any
    of `stderr_filter` are dropped from stderr_tail (Open MPI warns once per daemon that setpgid failed in
    sandboxes: noise). cpu_seconds counts only processes the launcher (or its daemons) waited for; with
    `cgroup_cpu` the run also goes into its own cpuacct cgroup, whose total (cgroup_cpu_seconds) includes
    daemons that detach from the launcher, as Open MPI's orteds do (None when no cgroup could be made).
    """
    cgroup = make_cpu_cgroup() if cgroup_cpu else None

    def join_cgroup():
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started_epoch = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=env, start_new_session=True, preexec_fn=join_cgroup if cgroup else None)
        # Popen.wait(timeout=...) polls with sleeps of up to 50 ms, which would blur the measurement:
        # wait blocking in waitpid and let a timer kill a hung launch instead.
        timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        rc = proc.returncode = os.waitstatus_to_exitcode(status)
        # CPU of the launcher and every descendant it (or they) waited for: the daemons and ranks.
        cpu = usage.ru_utime + usage.ru_stime
        if not timer.is_alive():
            rc = "timeout after %.0f s" % timeout
        timer.cancel()
        stragglers = reap_session(proc.pid, grace=5.0)
        cgroup_seconds = None
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cpuacct.usage")) as f:
                    cgroup_seconds = int(f.read()) / 1e9
            except (OSError, ValueError):
                pass
            try:
                os.rmdir(cgroup)  # empty now: reap_session killed what was left of the launch
            except OSError:
                pass
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        err_lines = [l for l in err.read().decode(errors="replace").splitlines()
                     if not any(f in l for f in stderr_filter)]
    return {"seconds": seconds, "cpu_seconds": cpu, "rc": rc, "lines": len(stdout.splitlines()),
            "stdout": stdout, "stderr_head": err_lines[:5], "stderr_tail": err_lines[-5:], "stragglers": stragglers,
            "started_epoch": started_epoch, "cgroup_cpu_seconds": cgroup_seconds}


def timed_job(command, bench):
    """(wall seconds, CPU seconds of every process it started) of one job run to its end; a failure stops `bench`."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{bench}: {' '.join(map(str, command))} failed: {stderr.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def option_cost_table(rows, runs, nodes, reference, bench):
    """Runs each row's command (name -> argv) once untimed, then `runs` times interleaved round by round, so the
    machine's drift falls on every row alike; prints the medians against row `reference`, with the CPU above it per
    node."""
    results = {name: [] for name in rows}
    for command in rows.values():   # page cache, first dlopen
        timed_job(command, bench)
    for _ in range(runs):
        for name, command in rows.items():
            results[name].append(timed_job(command, bench))
    ref_wall = statistics.median(w for w, _ in results[reference])
    ref_cpu = statistics.median(c for _, c in results[reference])
    print(f"{nodes} simulated nodes, `true`, {runs} interleaved runs, medians; against '{reference}'")
    print("| row | wall [s] | CPU [s] | wall ratio | CPU ratio | CPU above it per node |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, measured in results.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / ref_wall:.3f} | {cpu / ref_cpu:.3f} | "
              f"{(cpu - ref_cpu) / nodes * 1000:.2f} ms |")


def summarize(times):
    if not times:
        return None
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "mean": statistics.fmean(times),
            "stdev": statistics.stdev(times) if len(times) > 1 else 0.0, "runs": len(times)}


def cpu_busy(sample=0.5):
    """Busy CPUs (0..nproc) over `sample` s, from /proc/stat: load from other work on the machine."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v) - idle, sum(v)
    busy0, total0 = read()
    time.sleep(sample)
    busy1, total1 = read()
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(1, total1 - total0)


def wait_for_idle(wait_idle, idle_cpus):
    """Wait (up to `wait_idle` s) until other work uses under `idle_cpus` CPUs; returns the last sample."""
    deadline = time.monotonic() + wait_idle
    busy = cpu_busy()
    while busy > idle_cpus and time.monotonic() < deadline:
        time.sleep(1.0)
        busy = cpu_busy()
    return busy


def reclaimed_pages():
    """Pages the kernel has scanned so far to take memory back (kswapd and direct reclaim), from /proc/vmstat. A
    row whose count grows ran while the kernel was freeing memory, with that CPU and those stalls in its time."""
    total = 0
    with open("/proc/vmstat") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name.startswith("pgscan_"):
                total += int(value)
    return total


def same_memory_for_every_row(warm_dir):
    """Drops the page cache and reads `warm_dir` back into it, so that each row starts with the same free memory and
    the same files cached, whatever the rows before it left (root only). Returns False when it cannot."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    for root, _, files in os.walk(warm_dir):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    while f.read(1 << 20):
                        pass
    return True


def background_load(args):
    """wait_for_idle as --wait-idle and --idle-cpus say; returns the last load seen, rounded as the reports keep it."""
    return round(wait_for_idle(args.wait_idle, args.idle_cpus), 2)


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def dpkg_version(package):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def git_state():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "none") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info():
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu": cpu,
            "mpich": dpkg_version("mpich"), "openmpi-bin": dpkg_version("openmpi-bin"),
            "libpmix": dpkg_version("libpmix2"), "pdsh": dpkg_version("pdsh"),
            "clustershell": dpkg_version("clustershell"),
            "loadavg_start": loadavg(), "canopy_git": git_state()}


def report_header(schema, script, argv):
    """What every benchmark's JSON report starts with: its schema, when, the command that reproduces it, the machine."""
    return {"schema": schema,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([os.path.relpath(os.path.abspath(script), REPO)] + list(argv)),
            "machine": machine_info()}


def enter_namespace(script, argv, max_nodes):
    """Re-run `script argv` as root in a private mount namespace whose /etc/hosts knows sim0000...; exits."""
    name = os.path.basename(script)
    if os.geteuid() != 0:
        sys.exit("%s: must run as root to bind-mount /etc/hosts in a private namespace "
                 "(fake host names must resolve without DNS); use --no-namespace to skip that "
                 "(Open MPI then does a DNS lookup per host and gets slow)" % name)
    tmp = tempfile.mkdtemp(prefix="canopy-bench-hosts-")
    path = os.path.join(tmp, "hosts")
    with open("/etc/hosts") as f:
        base = f.read()
    with open(path, "w") as f:
        f.write(base.rstrip("\n") + "\n# canopy benchmarks: fake nodes\n")
        for i in range(max_nodes):
            f.write("%s %s\n" % (sim_address(i), sim_name(i)))
    env = dict(os.environ, **{NS_ENV: path})
    rc = subprocess.call(["unshare", "-m", "--propagation", "private", sys.executable,
                          os.path.abspath(script)] + argv, env=env)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(rc)


def mount_hosts_if_in_namespace():
    """Inside the namespace enter_namespace made: bind-mount its /etc/hosts; returns whether it did."""
    hosts_file = os.environ.get(NS_ENV)
    if hosts_file:
        subprocess.run(["mount", "--bind", hosts_file, "/etc/hosts"], check=True)
    return bool(hosts_file)


def markdown_table(header, rows, out=sys.stdout):
    """Prints rows (lists of strings) as a Markdown table with aligned columns."""
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |", file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |", file=out)


def read_timing(path):
    """canopy's --timing JSON (schema canopy.timing/1) as {steps: {name: s}, phases: {name: phase}}, or None."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return {"wall_seconds": data.get("wall_seconds"), "exit_code": data.get("exit_code"),
            "fanout": data.get("fanout"), "tree_depth": data.get("tree_depth"),
            "steps": {s["name"]: s["seconds"] for s in data.get("timeline", [])},
            "phases": {p["name"]: {k: p.get(k) for k in ("count", "min", "median", "p90", "max", "max_who", "sum")}
                       for p in data.get("phases", [])}}


# --- command line: options the benchmarks share, each added where the script's --help lists it ---

def arg_parser(doc):
    """A benchmark's ArgumentParser: the first line of its docstring as description, the rest kept as written."""
    return argparse.ArgumentParser(description=doc.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)


def add_size_options(p, all_launchers, runs, warmup, default_launchers=None):
    """What interleaved_rounds runs: --sizes, --runs, --warmup, --only (see parse_size_options), then --canopy.
    default_launchers: what --only runs when not given (default all)."""
    p.add_argument("--sizes", default="16x1,64x1,256x1,4x16",
                   help="comma-separated NODESxPPN (default 16x1,64x1,256x1,4x16)")
    p.add_argument("--runs", type=int, default=runs, help="timed runs per launcher and size (default %d)" % runs)
    p.add_argument("--warmup", type=int, default=warmup, help="untimed rounds first (default %d)" % warmup)
    default = default_launchers or all_launchers
    p.add_argument("--only", default=",".join(default),
                   help="launchers to run, comma-separated subset of %s (default %s)" %
                   (",".join(all_launchers), ",".join(default)))
    add_canopy_option(p)


def add_run_options(p, timeout, json_default, why):
    """How interleaved_rounds runs and reports: --timeout, --max-failures, the idle wait, --json, --no-namespace."""
    add_timeout_options(p, timeout)
    add_idle_options(p, 60.0)
    add_json_option(p, json_default)
    add_namespace_option(p, why)


def add_canopy_option(p):
    """--canopy: the canopy binary under test (see check_canopy)."""
    p.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"),
                   help="canopy binary (default build/launcher/canopy; canopyd is found next to it)")


def add_timeout_options(p, timeout, what="run", failures="stop running a cell after this many failures"):
    """--timeout (when a `what` counts as hung) and --max-failures (whose help is `failures`)."""
    p.add_argument("--timeout", type=float, default=timeout,
                   help="seconds before a %s counts as hung (default %g)" % (what, timeout))
    p.add_argument("--max-failures", type=int, default=2, help=failures)


def add_idle_options(p, wait_idle, before="round"):
    """--wait-idle and --idle-cpus: how long and for what to wait before each `before` (see background_load)."""
    p.add_argument("--wait-idle", type=float, default=wait_idle,
                   help="before each %s wait up to this many seconds for the machine to go idle (default %g)"
                   % (before, wait_idle))
    p.add_argument("--idle-cpus", type=float, default=0.3,
                   help="idle means other work uses under this many CPUs (default 0.3)")


def add_json_option(p, default):
    """--json: where the report goes (default ./`default`)."""
    p.add_argument("--json", default=default, help="write results here (default ./%s)" % default)


def add_namespace_option(p, why=None):
    """--no-namespace: skip enter_hosts_namespace's private /etc/hosts (`why` says what that costs)."""
    p.add_argument("--no-namespace", action="store_true",
                   help="do not bind-mount /etc/hosts in a private mount namespace" + (" (%s)" % why if why else ""))


def parse_size(text):
    """One NODESxPPN size as (nodes, ppn); an argparse error otherwise."""
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError("size %r is not NODESxPPN, e.g. 256x1" % text)
    return int(m.group(1)), int(m.group(2))


def parse_size_options(p, args, all_launchers):
    """--sizes and --only of add_size_options as ([(nodes, ppn)], [launcher]); a usage error for a bad launcher."""
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    launchers = [l for l in args.only.split(",") if l]
    bad = [l for l in launchers if l not in all_launchers]
    if bad or not launchers:
        p.error("unknown launcher %s; choose from %s" % (",".join(bad), ",".join(all_launchers)))
    return sizes, launchers


def check_canopy(p, args, needed=True):
    """Makes args.canopy absolute; a usage error when it is `needed` and not an executable."""
    args.canopy = os.path.abspath(args.canopy)
    if needed and not os.access(args.canopy, os.X_OK):
        p.error("canopy binary %s not found; build it (meson setup build && ninja -C build) or pass --canopy"
                % args.canopy)


# --- setting up: the namespace, scratch directories, the programs the ranks run, the report ---

def enter_hosts_namespace(script, argv, max_nodes, no_namespace):
    """Unless `no_namespace`, runs `script` where sim0000... resolve (see enter_namespace); whether it does."""
    if not no_namespace and not os.environ.get(NS_ENV):
        enter_namespace(script, argv, max_nodes)  # does not return
    return mount_hosts_if_in_namespace()


def agent_env(node_tmp):
    """The launchers' environment: ours without enter_namespace's variable, the fake hosts' TMPDIRs under node_tmp."""
    env = dict(os.environ)
    env.pop(NS_ENV, None)
    env["LOCAL_AGENT_TMPDIR_ROOT"] = node_tmp  # each fake host gets its own TMPDIR, as a real node would
    return env


@contextlib.contextmanager
def scratch_dir(prefix):
    """A temporary directory, removed on leaving, with the fake hosts' TMPDIRs in its nodes/; gives (it, agent_env)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        node_tmp = os.path.join(tmp, "nodes")
        os.mkdir(node_tmp)
        yield tmp, agent_env(node_tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mpirun_argv(mpirun, hosts):
    """Open MPI's mpirun on fake hosts (`hosts`: its --host value, e.g. host_slots(2, 2)), up to its -np.

    local_agent.sh stands in for ssh, so every fake host's orted runs on this machine in its own TMPDIR; Open MPI's
    out-of-band and TCP traffic stay on loopback; root may run it, and a host may get more ranks than slots.
    """
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "plm_rsh_agent", AGENT,
            "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo", "--host", hosts]


def compile_c(compiler, source, path, script, flags=()):
    """Compiles C `source` with `compiler` -O2 (plus `flags`) into `path`, returned; exits naming `script` if not."""
    cmd = [compiler, "-O2", "-o", path, source] + list(flags)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("%s: %s failed: %s" % (os.path.basename(script), " ".join(cmd), r.stderr.strip()[-500:]))
    return path


def print_machine(machine, packages, with_loadavg=True):
    """The report's machine on stderr in one line: CPUs, kernel, the (label, machine_info key) `packages`, canopy."""
    print("machine: %s CPUs, kernel %s, " % (machine["nproc"], machine["kernel"]) +
          "".join("%s %s, " % (label, machine[key]) for label, key in packages) + "canopy %s" % machine["canopy_git"] +
          (", loadavg %s" % " ".join(machine["loadavg_start"]) if with_loadavg else ""), file=sys.stderr)


def write_report(report, path):
    """Writes the JSON report (again: partial results survive an interrupted run)."""
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def bench_sizes(report, sizes, path, bench):
    """Appends bench(nodes, ppn) of each (nodes, ppn) in `sizes` to the report's results, writing it after each."""
    for nodes, ppn in sizes:
        report["results"].append(bench(nodes, ppn))
        write_report(report, path)  # partial results survive an interrupted run


def finish_report(report, path):
    """Notes the load average at the end in the report's machine and writes the report; returns its results."""
    report["machine"]["loadavg_end"] = loadavg()
    write_report(report, path)
    return report["results"]


# --- interleaved rounds: every launcher once a round, the order rotating; cells of runs, errors and stragglers ---

# (cell key, run key): what summarize_cells summarizes unless told otherwise
CELL_SUMMARIES = (("summary", "seconds"), ("cpu_summary", "cpu_seconds"))


def interleaved_rounds(nodes, ppn, launchers, args, one_run, width, summaries=CELL_SUMMARIES):
    """One size's runs, args.warmup untimed then args.runs timed rounds of every launcher; its entry of the report."""
    # Each round runs the launchers in an order rotated by one from the round before, so background load and
    # caches hit them alike; each timed round first waits for an idle machine, whose load is kept; a cell stops
    # after --max-failures failed runs. one_run(launcher, cell, round_) runs once and returns (run, problem, note):
    # a problem goes into cell["errors"], else a timed round's run into cell["runs"]; either is printed on stderr
    # after a label whose launcher column is `width` wide.
    cells = {l: {"runs": [], "errors": [], "stragglers": 0} for l in launchers}
    background = []
    for round_ in range(args.warmup + args.runs):
        timed = round_ >= args.warmup
        if timed:
            background.append(background_load(args))
        shift = round_ % len(launchers)
        for launcher in launchers[shift:] + launchers[:shift]:
            cell = cells[launcher]
            if len(cell["errors"]) >= args.max_failures:
                continue
            run, problem, note = one_run(launcher, cell, round_)
            label = "%dx%d %-*s %s %d" % (nodes, ppn, width, launcher, "run" if timed else "warm-up",
                                          round_ - args.warmup + 1 if timed else round_ + 1)
            if problem:
                cell["errors"].append(problem)
                print("  %s: FAILED %s" % (label, problem), file=sys.stderr, flush=True)
                continue
            print("  %s: %s" % (label, note), file=sys.stderr, flush=True)
            if timed:
                cell["runs"].append(run)
    summarize_cells(cells, summaries)
    return {"nodes": nodes, "ppn": ppn, "ranks": nodes * ppn, "launchers": cells,
            "background_cpus_before_rounds": background}


def summarize_cells(cells, summaries=CELL_SUMMARIES):
    """Adds to each cell the summarize() of its runs' values (cell key, run key) and its median-wall run."""
    for cell in cells.values():
        for cell_key, run_key in summaries:
            cell[cell_key] = summarize([r[run_key] for r in cell["runs"]])
        # the run whose wall time is the median one (lower median): its details go in the tables
        ordered = sorted(cell["runs"], key=lambda r: r["seconds"])
        cell["median_run"] = ordered[(len(ordered) - 1) // 2] if ordered else None


def run_for_cell(cell, argv, env, timeout):
    """run_once in a cpuacct cgroup for an interleaved_rounds cell; (its result, the run record's wall time and CPU)."""
    cell["argv"] = " ".join(argv)
    r = run_once(argv, env, timeout, cgroup_cpu=True)
    cell["stragglers"] += r["stragglers"]
    # all CPU of the launch (cgroup), else what the launcher waited for (Open MPI's orteds detach from mpirun)
    cgroup = r["cgroup_cpu_seconds"] is not None
    return r, {"seconds": r["seconds"], "cpu_seconds": r["cgroup_cpu_seconds"] if cgroup else r["cpu_seconds"],
               "cpu_source": "cgroup" if cgroup else "wait4", "waited_cpu_seconds": r["cpu_seconds"], "rc": r["rc"]}


def rank_summary(ranks, keys):
    """Median and max over ranks ({rank: {key: value}}) of each of `keys`, and the sum of the ranks' CPU."""
    if not ranks:
        return None
    out = {}
    for key in keys:
        values = [r[key] for r in ranks.values()]
        out[key] = {"median": statistics.median(values), "max": max(values)}
    out["cpu_sum"] = sum(r["cpu"] for r in ranks.values())
    return out


def check_ranks(result, n, ranks, expected):
    """Why a run of n ranks does not count (exit code, no `expected` line, stamps missing from ranks), or None."""
    if result["rc"] != 0:
        return "exit %s: %s" % (result["rc"], " | ".join(result["stderr_tail"]))
    if expected not in result["stdout"]:
        return "no '%s' line in the output" % expected
    if sorted(ranks) != list(range(n)):
        return "timing lines from %d of %d ranks" % (len(ranks), n)
    return None


# --- the report's tables and closing lines ---

def ratio_pairs(ratios, launchers):
    """The ratios (tuples starting numerator, denominator) whose two launchers both ran."""
    return [r for r in ratios if r[0] in launchers and r[1] in launchers]


def size_cell(entry):
    """A report entry's size as a table cell: "NODES x PPN"."""
    return "%d x %d" % (entry["nodes"], entry["ppn"])


def median_cell(summary, runs, fmt):
    """A summary's median as a table cell (`fmt`), with " (k)" when only k of `runs` runs counted; "failed" for none."""
    if not summary:
        return "failed"
    return fmt % summary["median"] + ("" if summary["runs"] == runs else " (%d)" % summary["runs"])


def median_runs(results, launchers):
    """(entry, launcher, median-wall run or None) for each size and launcher: the rows of a table per run."""
    return [(e, l, e["launchers"][l]["median_run"]) for e in results for l in launchers]


def breakdown_rows(runs, breakdown, value, scale, digits):
    """Breakdown table rows: per (key, kind, stat, what), each run's value (x scale) and its change since the last."""
    # value(run, key, kind, stat) is None where the run did not record the step: "-", and the next change
    # counts from the row above that has a value (from 0 for the first)
    rows = []
    previous = [0.0] * len(runs)
    for key, kind, stat, what in breakdown:
        row = [key + (" (%s)" % stat if stat else "")]
        for i, run in enumerate(runs):
            v = value(run, key, kind, stat)
            if v is None:
                row.append("-")
                continue
            row.append("%.*f (%+.*f)" % (digits, v * scale, digits, (v - previous[i]) * scale))
            previous[i] = v
        rows.append(row + [what])
    return rows


def print_sections(sections):
    """Prints each (heading, table function, its arguments...) of `sections` under a "## heading"; None: no section."""
    for section in sections:
        if section:
            heading, table, *table_args = section
            print("\n## %s\n" % heading)
            table(*table_args)


def breakdown_launchers(results, launchers, canopy_launchers):
    """The canopy rows among `launchers` with a median run at some size: those whose time can be broken down."""
    return [l for l in launchers if l in canopy_launchers and any(e["launchers"][l]["median_run"] for e in results)]


def busiest_background(results):
    """The most CPUs other work used before any round (or job) of the results."""
    return max((max(e["background_cpus_before_rounds"] or [0]) for e in results), default=0)


def print_failures(results, where):
    """Per cell: how many runs failed (the first problem), how many stragglers were killed; where(entry) names it."""
    for e in results:
        for l, cell in e["launchers"].items():
            if cell["errors"]:
                print("%s %s: %d failed run(s): %s" % (where(e), l, len(cell["errors"]), cell["errors"][0]))
            if cell["stragglers"]:
                print("%s %s: %d process(es) outlived the launcher and were killed" % (where(e), l, cell["stragglers"]))


def print_load_average(machine, results, before="round"):
    """The load average at start and end and the busiest background load seen before a `before`."""
    print("Load average at start %s, at end %s; busiest background load before a %s: %.2f CPUs of %d."
          % (" ".join(machine["loadavg_start"]), " ".join(machine["loadavg_end"]), before,
             busiest_background(results), machine["nproc"] or 1))


def print_closing(report, path):
    """The last lines of an interleaved_rounds report: failed runs and stragglers, load, where the JSON went."""
    print()
    print_failures(report["results"], size_cell)
    print_load_average(report["machine"], report["results"])
    print("results written to %s" % path)
