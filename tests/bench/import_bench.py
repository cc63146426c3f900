#!/usr/bin/python3
# Import benchmark: `import torch` on simulated nodes from a slowfs mount with metadata latency, as on a loaded Lustre.
"""Measures what `import torch` costs when the Python environment lives on a slow shared filesystem.

A copy of Debian's python3-torch environment (tests/tools/make_pyenv.sh) is mounted through slowfs
(tests/tools/slowfs), which counts every filesystem operation and adds --delay-ms to each metadata
operation. Then, one row each:

  plain      MOUNT/bin/python3 imports torch once, no launcher
  unstaged   canopy --sim-nodes 16 --ppn 4: 64 ranks import torch from the mount and compute a tiny matmul
  staged     (only with --staged-args) the same job with extra canopy arguments, e.g. "--stage {mount}"

Each rank prints its own import time; the table gives, per row, the operations that reached slowfs
(all, and the metadata ones that paid the delay), the min/median/max import time of the ranks and the
job's wall time. Every rank must exit 0 and compute the same result, or the row is marked failed.

Usage (as root, after `ninja -C build`; needs fuse3, libfuse3-dev and python3-torch):

  sudo /usr/bin/python3 tests/bench/import_bench.py                  # 16 nodes x 4 ranks, 1 ms: ~2 min
  sudo /usr/bin/python3 tests/bench/import_bench.py --nodes 4 --ppn 2 --delay-ms 0.5   # quicker
  sudo /usr/bin/python3 tests/bench/import_bench.py --staged-args "--stage {mount}"    # once staging exists

Options: --canopy PATH (canopyd is found next to it), --slowfs PATH, --pyenv DIR (built or refreshed with
make_pyenv.sh, fast when up to date), --mount DIR, --rows plain,unstaged, --json FILE, --timeout S.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_PYENV = os.path.join(REPO, "tests", "tools", "make_pyenv.sh")
MARK = "IMPORT_BENCH "

# What each rank runs: the import it times itself, then a tiny computation whose result every rank must agree on.
RANK_CODE = r"""
import os, time
started = time.perf_counter()
import torch
imported = time.perf_counter()
x = torch.arange(16, dtype=torch.float64).reshape(4, 4)
result = float((x @ x.T).sum())
ticks = os.sysconf("SC_CLK_TCK")
age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
import json
print("IMPORT_BENCH " + json.dumps({"rank": int(os.environ.get("RANK", "0")), "node": os.environ.get("CANOPY_NODE", ""),
      "import_s": imported - started, "process_s": age, "result": result, "torch": torch.__version__}), flush=True)
"""


def log(message):
    print(f"import_bench: {message}", file=sys.stderr, flush=True)


class Slowfs:
    """slowfs serving the environment at the mount point, for the length of the benchmark."""

    def __init__(self, binary, source, point, delay_ms):
        self.point = point
        os.makedirs(point, exist_ok=True)
        if os.path.ismount(point):   # left over from an interrupted run
            subprocess.run(["fusermount3", "-u", "-z", point], check=False)
        self.process = subprocess.Popen([binary, source, point, "-f", "--delay-ms", str(delay_ms)],
                                        stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not os.path.ismount(point):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                sys.exit(f"import_bench: slowfs could not mount {point}: {self.process.stderr.read().decode()[:2000]}")
            time.sleep(0.05)

    def stats(self):
        with open(os.path.join(self.point, ".slowfs-stats")) as f:
            return json.load(f)

    def reset(self):
        with open(os.path.join(self.point, ".slowfs-stats"), "w"):
            pass

    def close(self):
        if os.path.ismount(self.point):
            subprocess.run(["fusermount3", "-u", self.point], check=False)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def rank_env():
    env = dict(os.environ)
    # 64 ranks share 2 cores: one thread each; and never write .pyc files through the mount.
    env.update({"OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"})
    for name in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(name, None)
    return env


def measure(name, command, fs, ranks, timeout, workdir):
    """Runs `command` once with fresh counters; returns the row: ops, per-rank import times, wall time."""
    log(f"{name}: {' '.join('RANK_CODE' if arg == RANK_CODE else arg for arg in command)}")
    fs.reset()
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=rank_env(), cwd=workdir, timeout=timeout)
        failure = None if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
        stdout = done.stdout
    except subprocess.TimeoutExpired as e:
        failure, stdout = f"no end within {timeout} s", (e.stdout or b"").decode(errors="replace")
    wall = time.monotonic() - started
    stats = fs.stats()
    reports = []
    for line in stdout.splitlines():
        if MARK in line:
            reports.append(json.loads(line.split(MARK, 1)[1]))
    if failure is None and len(reports) != ranks:
        failure = f"{len(reports)} of {ranks} ranks reported"
    if failure is None and len({r["result"] for r in reports}) != 1:
        failure = f"ranks disagree on the result: {sorted({r['result'] for r in reports})}"
    imports = sorted(r["import_s"] for r in reports)
    row = {
        "row": name, "ranks": ranks, "failure": failure, "wall_s": wall,
        "ops": stats["total"], "metadata_ops": stats["metadata"], "misses": stats["misses"],
        "reads": stats["ops"]["read"], "ops_by_type": stats["ops"],
        "import_s": {"min": imports[0], "median": statistics.median(imports), "max": imports[-1]} if imports else None,
        "process_s_median": statistics.median(r["process_s"] for r in reports) if reports else None,
        "torch": reports[0]["torch"] if reports else None,
        "command": command,
    }
    log(f"{name}: {'FAILED ' + failure if failure else 'ok'}, {wall:.1f} s, {stats['total']} ops")
    return row


def run_plain(args, fs):
    python = os.path.join(args.mount, "bin", "python3")
    return measure("plain", [python, "-c", RANK_CODE], fs, 1, args.timeout, args.workdir)


def run_canopy(args, fs, name="unstaged", extra_args=()):
    """The job under canopy; `extra_args` (e.g. ["--stage", MOUNT]) makes the staged row."""
    python = os.path.join(args.mount, "bin", "python3")
    command = [args.canopy, "--sim-nodes", str(args.nodes), "--ppn", str(args.ppn),
               "--timeout", str(args.timeout - 5), *extra_args, python, "-c", RANK_CODE]
    return measure(name, command, fs, args.nodes * args.ppn, args.timeout, args.workdir)


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows, args, torch_version):
    print(f"\n`import torch` ({torch_version}) from slowfs, {args.delay_ms:g} ms per metadata op, "
          f"{args.nodes} simulated nodes x {args.ppn} ranks, {os.cpu_count()} CPUs\n")
    print("| row | ranks | ops to slowfs | metadata ops | metadata ops per rank | import s min / median / max "
          "| python start + import s (median) | job wall s |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for r in rows:
        if r["failure"]:
            print(f"| {r['row']} | {r['ranks']} | {r['ops']} | {r['metadata_ops']} | - | FAILED: "
                  f"{r['failure'][:80]} | - | {fmt(r['wall_s'], 1)} |")
            continue
        i = r["import_s"]
        print(f"| {r['row']} | {r['ranks']} | {r['ops']} | {r['metadata_ops']} | "
              f"{r['metadata_ops'] // r['ranks']} | {fmt(i['min'])} / {fmt(i['median'])} / {fmt(i['max'])} | "
              f"{fmt(r['process_s_median'])} | {fmt(r['wall_s'], 1)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"))
    parser.add_argument("--slowfs", default=None, help="default: tests/tools/slowfs/slowfs in canopy's build dir")
    parser.add_argument("--pyenv", default="/tmp/canopy-bench/pyenv", help="environment copy (made if missing)")
    parser.add_argument("--mount", default="/tmp/canopy-bench/mnt")
    parser.add_argument("--workdir", default="/tmp/canopy-bench", help="working directory of the ranks")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--ppn", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--rows", default="plain,unstaged", help="comma-separated: plain, unstaged")
    parser.add_argument("--staged-args", default=None,
                        help='extra canopy arguments for a "staged" row; {mount} is replaced, e.g. "--stage {mount}"')
    parser.add_argument("--timeout", type=float, default=600, help="seconds per row before it counts as failed")
    parser.add_argument("--json", default=None, help="also write every row, with ops by type, to this file")
    args = parser.parse_args()

    args.canopy = os.path.abspath(args.canopy)
    build_dir = os.path.dirname(os.path.dirname(args.canopy))
    args.slowfs = os.path.abspath(args.slowfs or os.path.join(build_dir, "tests", "tools", "slowfs", "slowfs"))
    rows_wanted = [r for r in args.rows.split(",") if r]
    for path, what in ((args.slowfs, "slowfs (needs libfuse3-dev at meson setup)"),
                       (args.canopy, "canopy")):
        if not os.access(path, os.X_OK):
            sys.exit(f"import_bench: {what} not found at {path}; build it (ninja -C {build_dir}) or pass its path")
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        sys.exit("import_bench: FUSE is not usable here: needs /dev/fuse and fusermount3 (apt-get install -y fuse3)")
    os.makedirs(args.workdir, exist_ok=True)

    started = time.monotonic()
    subprocess.run([MAKE_PYENV, args.pyenv], check=True, stdout=sys.stderr)
    fs = Slowfs(args.slowfs, args.pyenv, args.mount, args.delay_ms)
    rows = []
    try:
        if "plain" in rows_wanted:
            rows.append(run_plain(args, fs))
        if "unstaged" in rows_wanted:
            rows.append(run_canopy(args, fs))
        if args.staged_args:
            extra = [a.replace("{mount}", args.mount) for a in args.staged_args.split()]
            rows.append(run_canopy(args, fs, "staged", extra))
    finally:
        fs.close()
    torch_version = next((r["torch"] for r in rows if r["torch"]), "?")
    print_table(rows, args, torch_version)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"delay_ms": args.delay_ms, "nodes": args.nodes, "ppn": args.ppn, "cpus": os.cpu_count(),
                       "machine": platform.platform(), "torch": torch_version, "rows": rows}, f, indent=1)
    log(f"done in {time.monotonic() - started:.0f} s")
    return 1 if any(r["failure"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
