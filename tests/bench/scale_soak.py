#!/usr/bin/python3
# Many jobs on thousands of simulated nodes, under pressure if asked: none may hang or leave anything behind.
"""Runs `canopy --sim-nodes N --timing=FILE [--config TREE] PROGRAM` RUNS times for each N, one after
another, and reports per run: exit status, wall time, CPU-seconds, the first line of stderr, and what the job left
behind (processes of its session, /dev/shm/canopy-* files, canopy-* dirs under the nodes' TMPDIRs, cgroups
/sys/fs/cgroup/unified/canopy-*). A run longer than --hang-after seconds counts as a hang: before it is killed,
the script records every canopy and canopyd of the session with its state and wchan, and each thread's, into the
JSON report, so a hang that happens once in twenty runs can be read afterwards.

Pressure (any combination):
  --fill-shm PERCENT    fill /dev/shm to PERCENT of its size with a file of our own while the runs go on
  --cpu-hogs K          K busy loops beside the jobs
  --user NAME           run canopy as NAME (made with useradd if missing, removed after with --remove-user),
                        with --nproc (ulimit -u) and --nofile (ulimit -n) applied to that user's shell
  --kill-one-at SECONDS SIGSTOP one interior daemon that many seconds into each run, and measure how long the job
                        takes from then to fail naming it (the liveness bound: heartbeat timeout + a constant)

Usage: /usr/bin/python3 tests/bench/scale_soak.py --nodes 4096 --runs 20 --json /tmp/soak.json
"""

import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import benchlib

CGROUP_ROOT = "/sys/fs/cgroup/unified"


def leftovers(session, node_tmp, before, job_id):
    """What a finished run left: its session's processes, and canopy files that were not there before it. /dev/shm
    and the cgroups are the machine's: only names with this run's job id (canopy-JOB-...) are its own, so another
    user's or session's jobs running meanwhile are not counted (with no id seen, everything new is)."""
    def ours(names):
        return sorted(name for name in names if job_id is None or name.split("-")[1:2] == [job_id])
    found = {"processes": [" ".join(cmdline(pid))[:120] for pid in benchlib.session_pids(session)]}
    found["shm"] = ours(set(os.listdir("/dev/shm")) - before["shm"])
    found["node_dirs"] = sorted(set(node_dirs(node_tmp)) - before["node_dirs"])
    found["cgroups"] = ours(set(cgroups()) - before["cgroups"])
    return {key: value for key, value in found.items() if value}


def job_id_of(stderr):
    """The job id canopy's report names ("canopy job 30afdb0f: ..."), or None."""
    for line in stderr:
        match = re.match(r"canopy job ([0-9a-f]+):", line)
        if match:
            return match.group(1)
    return None


def snapshot(node_tmp):
    return {"shm": set(os.listdir("/dev/shm")), "node_dirs": set(node_dirs(node_tmp)), "cgroups": set(cgroups())}


def node_dirs(node_tmp):
    out = []
    for root, dirs, _ in os.walk(node_tmp):
        out += [os.path.join(root, d) for d in dirs if d.startswith("canopy-")]
        dirs[:] = [d for d in dirs if not d.startswith("canopy-")]
    return out


def cgroups():
    try:
        return [name for name in os.listdir(CGROUP_ROOT) if name.startswith("canopy-")]
    except OSError:
        return []


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def hang_report(session):
    """Each canopy process of a hung run: its command, state, wchan, and its threads' names, states and wchans."""
    report = []
    for pid in benchlib.session_pids(session):
        argv = cmdline(pid)
        if not argv or "canopy" not in os.path.basename(argv[0]):
            continue
        threads = []
        for tid in sorted(os.listdir("/proc/%d/task" % pid)) if os.path.isdir("/proc/%d/task" % pid) else []:
            stat = read("/proc/%d/task/%s/stat" % (pid, tid))
            state = stat[stat.rfind(")") + 2:].split()[0] if ")" in stat else "?"
            threads.append({"tid": int(tid), "comm": read("/proc/%d/task/%s/comm" % (pid, tid)), "state": state,
                            "wchan": read("/proc/%d/task/%s/wchan" % (pid, tid))})
        report.append({"pid": pid, "argv": " ".join(argv)[:200], "threads": threads})
    return report


def stop_one_daemon(session, stopped):
    """SIGSTOPs one canopyd that has children of its own in the tree (an interior node), if there is one."""
    daemons = {pid: cmdline(pid) for pid in benchlib.session_pids(session)}
    daemons = {pid: argv for pid, argv in daemons.items() if argv and argv[0].endswith("canopyd")}
    parents = set()
    for pid in daemons:
        stat = read("/proc/%d/stat" % pid)
        if ")" in stat:
            parents.add(int(stat[stat.rfind(")") + 2:].split()[1]))
    interior = sorted(pid for pid in daemons if pid in parents)
    if not interior:
        return
    victim = interior[len(interior) // 2]
    argv = daemons[victim]
    node = next((argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--node"), "?")
    os.kill(victim, signal.SIGSTOP)
    stopped.update({"pid": victim, "node": node, "at": time.monotonic()})


def one_run(args, nodes, env, node_tmp, index):
    before = snapshot(node_tmp)
    timing = os.path.join(node_tmp, "timing-%d.json" % index)
    canopy = [args.canopy, "--sim-nodes", str(nodes), "--timing=" + timing]
    tree = {"heartbeat_timeout": args.heartbeat_timeout, "connect_timeout": args.connect_timeout}
    if any(tree.values()):
        config = os.path.join(node_tmp, "tree.toml")
        with open(config, "w") as f:
            f.write("[tree]\n" + "".join("%s = %g\n" % (key, value) for key, value in tree.items() if value))
        canopy += ["--config", config]
    canopy += shlex.split(args.program)
    argv = canopy
    if args.user:
        limits = "".join(" ulimit -%s %d;" % (flag, value) for flag, value in (("u", args.nproc), ("n", args.nofile))
                         if value)
        # bash, not sh: dash has no `ulimit -u`. -e: a limit that cannot be set ends the run instead of being left out.
        argv = ["runuser", "-u", args.user, "--", "bash", "-ec", limits + " exec " + shlex.join(canopy)]
    err = tempfile.TemporaryFile()
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                            start_new_session=True)
    hang, stopped = None, {}
    if args.kill_one_at:
        threading.Timer(args.kill_one_at, stop_one_daemon, (proc.pid, stopped)).start()
    deadline = start + args.hang_after
    launcher = LauncherUse(proc.pid, args.canopy)
    while True:
        launcher.sample()
        try:
            _, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            break
        if _:
            break
        if time.monotonic() > deadline and hang is None:
            hang = hang_report(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.05)
    seconds = time.monotonic() - start
    if stopped:
        try:
            os.kill(stopped["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass   # its parent killed it once it was declared lost
    stragglers = benchlib.reap_session(proc.pid, grace=5.0)
    err.seek(0)
    stderr = err.read().decode(errors="replace").splitlines()
    result = {"nodes": nodes, "rc": os.waitstatus_to_exitcode(status), "seconds": round(seconds, 2),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2), "stderr_head": stderr[:3],
              "stderr_lines": len(stderr), "stragglers": stragglers, **launcher.result()}
    if hang is not None:
        result["hang"] = hang
    if stopped:
        result["stopped"] = {"node": stopped["node"], "failed_after_s": round(start + seconds - stopped["at"], 2),
                             "named": any(stopped["node"] in line for line in stderr)}
    left = leftovers(proc.pid, node_tmp, before, job_id_of(stderr))
    if left:
        result["leftovers"] = left
    try:
        os.unlink(timing)
    except OSError:
        pass
    return result


class LauncherUse:
    """The launcher's own CPU-seconds and peak memory (VmHWM), read from /proc while it runs: the run's CPU-seconds
    count every daemon too. The last sample is at most one poll before it exits."""

    def __init__(self, session, canopy):
        self.session, self.canopy, self.pid = session, os.path.realpath(canopy), None
        self.ticks, self.peak_kib = 0, 0

    def sample(self):
        if self.pid is None:
            self.pid = next((pid for pid in benchlib.session_pids(self.session)
                             if os.path.realpath((cmdline(pid) or ["?"])[0]) == self.canopy), None)
            if self.pid is None:
                return
        stat = read("/proc/%d/stat" % self.pid)
        if ")" in stat:
            fields = stat[stat.rfind(")") + 2:].split()
            self.ticks = max(self.ticks, int(fields[11]) + int(fields[12]))
        match = re.search(r"VmHWM:\s+(\d+)", read("/proc/%d/status" % self.pid))
        if match:
            self.peak_kib = max(self.peak_kib, int(match.group(1)))

    def result(self):
        return {"launcher_cpu_seconds": round(self.ticks / os.sysconf("SC_CLK_TCK"), 2),
                "launcher_peak_mib": round(self.peak_kib / 1024, 1)}


def ensure_user(name):
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return True


class ShmFiller:
    """A file in /dev/shm taking `percent` of the mount, removed on close."""

    def __init__(self, percent):
        stat = os.statvfs("/dev/shm")
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        want = stat.f_blocks * stat.f_frsize * percent // 100 - used
        # /dev/shm is memory: a filler as large as the machine's RAM gets the jobs OOM-killed, not pressed.
        with open("/proc/meminfo") as f:
            meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        keep = max(4 << 30, meminfo["MemTotal"] // 5)
        if want > meminfo["MemAvailable"] - keep:
            want = max(0, meminfo["MemAvailable"] - keep)
            print("--fill-shm: /dev/shm is memory; filling %d GiB only, to keep %d GiB for the jobs" % (
                want >> 30, keep >> 30), flush=True)
        self.path = "/dev/shm/canopy-bench-filler-%d" % os.getpid()
        with open(self.path, "wb") as f:
            chunk = b"\xa5" * (1 << 20)
            for _ in range(max(0, want) >> 20):
                f.write(chunk)

    def close(self):
        os.unlink(self.path)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--nodes", default="4096", help="comma-separated node counts (default 4096)")
    p.add_argument("--runs", type=int, default=20, help="runs per node count (default 20)")
    p.add_argument("--program", default="sleep 5", help="what each rank runs (default 'sleep 5')")
    p.add_argument("--hang-after", type=float, default=180.0, help="seconds after which a run is a hang")
    p.add_argument("--heartbeat-timeout", type=float, help="[tree] heartbeat_timeout in a --config for every run")
    p.add_argument("--connect-timeout", type=float, help="[tree] connect_timeout in a --config for every run")
    p.add_argument("--fill-shm", type=int, help="fill /dev/shm to this percent of its size during the runs")
    p.add_argument("--cpu-hogs", type=int, default=0, help="busy loops beside the jobs")
    p.add_argument("--user", help="run canopy as this user (made if missing)")
    p.add_argument("--remove-user", action="store_true", help="userdel --user afterwards if this script made it")
    p.add_argument("--nproc", type=int, help="ulimit -u for --user")
    p.add_argument("--nofile", type=int, help="ulimit -n for --user")
    p.add_argument("--kill-one-at", type=float, help="SIGSTOP an interior daemon this many seconds into each run")
    benchlib.add_canopy_option(p)
    benchlib.add_json_option(p, "scale_soak.json")
    args = p.parse_args(argv)
    benchlib.check_canopy(p, args)
    if (args.nproc or args.nofile) and not args.user:
        p.error("--nproc and --nofile apply to --user's shell; name the user")
    made_user = ensure_user(args.user) if args.user else False
    node_tmp = tempfile.mkdtemp(prefix="canopy-soak-")
    os.chmod(node_tmp, 0o1777)
    env = dict(os.environ, TMPDIR=node_tmp)
    filler = ShmFiller(args.fill_shm) if args.fill_shm else None
    # The hogs die with this script, however it ends (PR_SET_PDEATHSIG): left running, they skew every later bench.
    hog = "import ctypes, signal; ctypes.CDLL(None).prctl(1, signal.SIGKILL)\nwhile True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(args.cpu_hogs)]
    report = {**benchlib.report_header("canopy.scale_soak/1", __file__, argv), "runs": []}
    try:
        for nodes in [int(n) for n in args.nodes.split(",")]:
            for index in range(args.runs):
                result = one_run(args, nodes, env, node_tmp, index)
                report["runs"].append(result)
                print("%5d nodes run %2d: exit %s in %.1f s, %.1f CPU-s (launcher %.2f CPU-s, %.1f MiB)%s%s%s" % (
                    nodes, index + 1, result["rc"], result["seconds"], result["cpu_seconds"],
                    result["launcher_cpu_seconds"], result["launcher_peak_mib"],
                    "  HANG" if "hang" in result else "",
                    "  stopped %(node)s: failed after %(failed_after_s)s s, named: %(named)s" % result["stopped"]
                    if "stopped" in result else "",
                    "  LEFT %s" % result["leftovers"] if "leftovers" in result else ""), flush=True)
                if result["rc"] != 0:
                    print("    " + " | ".join(result["stderr_head"]), flush=True)
    finally:
        for hog in hogs:
            hog.kill()
        if filler:
            filler.close()
        shutil.rmtree(node_tmp, ignore_errors=True)
        if made_user and args.remove_user:
            subprocess.run(["userdel", args.user])
    benchlib.write_report(report, args.json)
    runs = report["runs"]
    print("\n%d runs: %d exit 0, %d hangs, %d with leftovers" % (
        len(runs), sum(r["rc"] == 0 for r in runs), sum("hang" in r for r in runs),
        sum("leftovers" in r for r in runs)))
    print("results written to %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
