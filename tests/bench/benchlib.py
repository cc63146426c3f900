# Helpers the benchmarks share: fake host names, timed runs with stragglers reaped, idle waits, machine info.
"""Shared code of tests/bench/*_bench.py.

Fake hosts are named sim0000, sim0001, ... and map to 127.1.X.Y, the addresses `canopy --sim-nodes` uses.
`enter_namespace` re-runs a benchmark script in a private mount namespace whose /etc/hosts knows them, so
Open MPI and MPICH resolve them without DNS; nothing outside the namespace sees it.
"""

import datetime
import json
import os
import platform
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

    Returns dict(seconds, cpu_seconds, rc, lines, stdout, stderr_tail, stragglers, started_epoch,
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
            "stdout": stdout, "stderr_tail": err_lines[-5:], "stragglers": stragglers,
            "started_epoch": started_epoch, "cgroup_cpu_seconds": cgroup_seconds}


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
            "libpmix": dpkg_version("libpmix2"),
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
