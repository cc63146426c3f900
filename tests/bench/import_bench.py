#!/usr/bin/python3
# Import benchmark: `import torch` on simulated nodes from a slowfs mount with metadata latency, as on a loaded Lustre.
"""Measures what `import torch` costs when the Python environment lives on a slow shared filesystem.

A copy of Debian's python3-torch environment (tests/tools/make_pyenv.sh) is mounted through slowfs
(tests/tools/slowfs), which counts every filesystem operation and adds --delay-ms to each metadata
operation. Then, one row each:

  plain      MOUNT/bin/python3 imports torch once, no launcher
  local      the unstaged job with the environment's own copy (PYENV/bin/python3): no slowfs, no staging, the
             floor that CPU alone sets for any staging on this machine (slowfs counts nothing for it)
  unstaged   canopy --sim-nodes 16 --ppn 4: 64 ranks import torch from the mount and compute a tiny matmul
  staged     the same job with --stage MOUNT --stage-manifest MANIFEST (or --staged-args): before any row, and
             outside every timed part, `canopy stage record` runs the rank code once from the mount and writes
             MANIFEST; the staged job's root validates it, then sends the index and the read files down the tree
  on-demand  the same job with --stage MOUNT and no manifest (or --on-demand-args): a first job, each node fetching
             what its ranks ask for; not run by default
  node-local the fair floor: before the row, and outside its timed part, PYENV is copied with `cp -a` to one
             directory per simulated node under --copy-dir (COPIES/node0, node1, ...); each rank runs
             `sh -c 'exec "$0/node$CANOPY_NODE_RANK/bin/python3" "$@"' COPIES -c CODE`, so it imports from its
             own node's copy (no slowfs, no staging), as if every node had the environment on local disk.
             The copies are removed after the row
  tmp-method the seeds' "/tmp method", all of it timed: in the same job, the node's local rank 0 copies the
             environment from the slowfs MOUNT (where it lives) into COPIES/nodeN.partial with
             `tar -C MOUNT -cf - . | tar -C COPIES/nodeN.partial -xf -` (--tmp-copy tar, the default: about half
             the slowfs operations of cp -a, which stats and reads xattrs by full path) or
             `cp -a MOUNT COPIES/nodeN.partial` (--tmp-copy cp), renames it to COPIES/nodeN and writes a marker
             with its start and end time; the node's other ranks wait for the marker; then every rank imports
             from its node's copy as in node-local. Copy and import time are reported apart as well as the job
             wall; the copies are removed after the row

In node-local and tmp-method every rank must also have imported torch from under its own node's copy.

--module numpy imports numpy instead, from PYENV-numpy: a copy of PYENV with only what `import numpy` uses (the
interpreter, the standard library, numpy and the shared libraries it maps; 119 MiB), made once. 64 node copies of
the torch environment, or 64 node caches of what `import torch` reads (505 MiB each), do not fit in this machine's
24 GiB; 64 of numpy's do, so --module numpy --nodes 64 --ppn 1 runs every row at 64 simulated nodes.

Each rank prints its own import time; the table gives, per row, the operations that reached slowfs
(all, and the metadata ones that paid the delay), the min/median/max import time of the ranks and the
job's wall time. Every rank must exit 0 and compute the same result, or the row is marked failed.
The canopy rows run with --timing=FILE.json; for the staged rows a second table gives the time to stage (the
launcher's timeline steps stage_indexed and stage_sent, the daemons' daemon.stage_ready) and the node cache size
(du of /dev/shm/canopy-<job>-sim0000 while the job runs, its largest, and the manifest's content bytes). For
tmp-method a third gives the copy: each node's copy time, when the last copy was done and the import times (its
"python start + import" column includes the wait for the node's copy, as the rank's process starts with the
wrapper). After the tables, a summary gives the ratios issue 16 sets as targets, each only where its rows ran in
this run: staged (manifest) import / node-local import (medians, target <= 1.1); on demand (a first job without a
manifest) import / node-local import (<= 1.5); staged job wall (staging + import) / tmp-method job wall (copy +
import) (<= 0.5); and the share of slowfs operations saved against unstaged (>= 99%). A staged row counts as
"manifest" when its arguments name a --stage-manifest file that existed when it started, otherwise as on demand.

Usage (as root, after `ninja -C build`; needs fuse3, libfuse3-dev and python3-torch):

  sudo /usr/bin/python3 tests/bench/import_bench.py                  # 16 nodes x 4 ranks, 1 ms: ~10 min
  sudo /usr/bin/python3 tests/bench/import_bench.py --nodes 4 --ppn 2 --delay-ms 0.5   # quicker
  sudo /usr/bin/python3 tests/bench/import_bench.py --rows staged --staged-args "--stage {mount}"   # metadata only
  sudo /usr/bin/python3 tests/bench/import_bench.py --rows unstaged,staged,node-local,tmp-method --reuse-manifest
  sudo /usr/bin/python3 tests/bench/import_bench.py --module numpy --nodes 64 --ppn 1 \
      --rows unstaged,staged,on-demand,node-local,tmp-method --timeout 1500          # every row at 64 nodes: ~4 min

Options: --module torch|numpy, --canopy PATH (canopyd is found next to it), --slowfs PATH, --pyenv DIR (built or
refreshed with make_pyenv.sh, fast when up to date), --mount DIR, --rows plain,unstaged,staged,on-demand,local,
node-local,tmp-method, --manifest FILE (--reuse-manifest: do not record it again), --staged-args ARGS and
--on-demand-args ARGS ({mount} and {manifest} are replaced), --copy-dir DIR (where the per-node copies go: one copy of PYENV per
node must fit there, which is checked before any row; default /var/tmp/canopy-bench-nodes), --tmp-copy tar|cp,
--wait-idle S / --idle-cpus N (wait for an idle machine before each row), --interpreter (every row but plain runs
ROOT/bin/python3.11 with LD_LIBRARY_PATH=ROOT/lib/x86_64-linux-gnu, as a conda environment's python runs, rather
than the bin/python3 wrapper script, whose exec canopy cannot see ahead), --json FILE, --timeout S (per row; the
tmp-method row at 64 nodes needs more than the default 600), --keep-page-cache (by default each row starts with
the page cache dropped and the environment read back, as root; the table ends with the pages the kernel scanned
to reclaim memory during each job, which should be 0).
"""

import argparse
import glob
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_PYENV = os.path.join(REPO, "tests", "tools", "make_pyenv.sh")
MARK = "IMPORT_BENCH "
ROWS = ("plain", "unstaged", "staged", "on-demand", "local", "node-local", "tmp-method")   # in the order they run

MODULES = ("torch", "numpy")   # both have arange, reshape, @ and __version__, which the rank code uses

# What each rank runs: the import it times itself, then a tiny computation whose result every rank must agree on.
# MODULE is replaced by --module.
RANK_CODE_TEMPLATE = r"""
import os, time
started = time.perf_counter()
import MODULE as module
imported = time.perf_counter()
x = module.arange(16, dtype=module.float64).reshape(4, 4)
result = float((x @ x.T).sum())
ticks = os.sysconf("SC_CLK_TCK")
age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
import json
print("IMPORT_BENCH " + json.dumps({"rank": int(os.environ.get("RANK", "0")), "node": os.environ.get("CANOPY_NODE", ""),
      "node_rank": os.environ.get("CANOPY_NODE_RANK"), "module_file": module.__file__,
      "import_s": imported - started, "process_s": age, "result": result, "version": module.__version__}), flush=True)
"""
RANK_CODE = None   # set from --module in main


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


def disk_usage(path):
    """(bytes allocated, files) under path, as du counts them; (None, None) if it vanished meanwhile."""
    total, files = 0, 0
    try:
        for top, dirs, names in os.walk(path, onerror=lambda e: None):
            for name in dirs + names:
                st = os.lstat(os.path.join(top, name))
                total += st.st_blocks * 512
                files += 0 if name in dirs else 1
    except OSError:
        return None, None
    return total, files


class CacheWatcher:
    """Watches /dev/shm while a staged job runs: each node cache that appears is measured once it is complete."""

    def __init__(self, base="/dev/shm"):
        self.base = base
        self.before = set(glob.glob(os.path.join(base, "canopy-*")))
        self.sizes = {}   # cache dir -> (bytes, files); other jobs' caches too, sorted out by job id later
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        polls = 0
        while not self.stop_event.wait(0.2):
            polls += 1
            for d in glob.glob(os.path.join(self.base, "canopy-*")):
                # The daemon writes a cache's index last, so its presence means the manifest's part is complete.
                if d in self.before or not os.path.exists(os.path.join(d, "index")):
                    continue
                # On demand a cache keeps growing while the ranks run: the first node's is measured again
                # every second (the largest size counts); the others once, to count them.
                again = d.endswith("-sim0000") and polls % 5 == 0
                if d not in self.sizes or again:
                    size = disk_usage(d)
                    if size[0] is not None and size[0] >= self.sizes.get(d, (0, 0))[0]:
                        self.sizes[d] = size

    def stop(self):
        self.stop_event.set()
        self.thread.join()


def stage_summary(timing_path, watcher, job_id):
    """Time to stage, from the launcher's --timing JSON, and the node cache size, from the watcher."""
    summary = {"timing_json": timing_path}
    try:
        with open(timing_path) as f:
            timing = json.load(f)
    except (OSError, ValueError) as e:
        summary["error"] = f"no timing JSON: {e}"
        return summary
    steps = {step["name"]: step["seconds"] for step in timing.get("timeline", [])}
    phases = {phase["name"]: phase for phase in timing.get("phases", [])}
    ready = phases.get("daemon.stage_ready", {})
    summary.update({
        "tree_up_s": steps.get("tree_up"), "stage_indexed_s": steps.get("stage_indexed"),
        "stage_sent_s": steps.get("stage_sent"), "stage_ready_median_s": ready.get("median"),
        "stage_ready_max_s": ready.get("max"), "stage_ready_max_who": ready.get("max_who"),
        "ranks_spawned_s": steps.get("ranks_spawned"), "job_id": timing.get("job_id"),
    })
    if watcher is not None:
        mine = {d: size for d, size in watcher.sizes.items() if job_id and f"/canopy-{job_id}-" in d}
        first = next((d for d in sorted(mine) if d.endswith("-sim0000")), None)
        node_bytes, node_files = mine[first] if first else (None, None)
        summary.update({"caches_installed": len(mine), "node_cache_bytes": node_bytes,
                        "node_cache_files": node_files, "node_cache_dir": first})
        summary["caches_left"] = sorted(glob.glob(os.path.join(watcher.base, f"canopy-{job_id}-*"))) if job_id else []
    return summary


def rank_env():
    env = dict(os.environ)
    # 64 ranks share 2 cores: one thread each; and never write .pyc files through the mount.
    env.update({"OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"})
    for name in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(name, None)
    return env


def measure(name, command, fs, ranks, timeout, workdir, timing_path=None, watch_caches=False, check=None):
    """Runs `command` once with fresh counters; returns the row: ops, per-rank import times, wall time.
    `check(reports)` may name what else makes the row fail."""
    names = {RANK_CODE: "RANK_CODE", TMP_METHOD_PROGRAM: "TMP_METHOD_PROGRAM"}
    log(f"{name}: {' '.join(names.get(arg, arg) for arg in command)}")
    fs.reset()
    watcher = CacheWatcher() if watch_caches else None
    started_epoch = time.time()
    started = time.monotonic()
    # CPU of the job: the launcher and all it waited for (daemons, ranks), not slowfs.
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    reclaimed_before = benchlib.reclaimed_pages()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=rank_env(), cwd=workdir, timeout=timeout)
        failure = None if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
        stdout = done.stdout
    except subprocess.TimeoutExpired as e:
        failure, stdout = f"no end within {timeout} s", (e.stdout or b"").decode(errors="replace")
    wall = time.monotonic() - started
    reclaimed = benchlib.reclaimed_pages() - reclaimed_before
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (children_after.ru_utime + children_after.ru_stime) - (children_before.ru_utime + children_before.ru_stime)
    if watcher:
        watcher.stop()
    time.sleep(0.5)   # the kernel sends release after the last close a little later: let the counters settle
    stats = fs.stats()
    reports = []
    for line in stdout.splitlines():
        if MARK in line:
            reports.append(json.loads(line.split(MARK, 1)[1]))
    if failure is None and len(reports) != ranks:
        failure = f"{len(reports)} of {ranks} ranks reported"
    if failure is None and len({r["result"] for r in reports}) != 1:
        failure = f"ranks disagree on the result: {sorted({r['result'] for r in reports})}"
    if failure is None and check:
        failure = check(reports)
    imports = sorted(r["import_s"] for r in reports)
    row = {
        "row": name, "ranks": ranks, "failure": failure, "wall_s": wall, "cpu_s": cpu, "started_epoch": started_epoch,
        "reclaimed_pages": reclaimed,
        "ops": stats["total"], "metadata_ops": stats["metadata"], "misses": stats["misses"],
        "reads": stats["ops"]["read"], "ops_by_type": stats["ops"],
        "import_s": {"min": imports[0], "median": statistics.median(imports), "max": imports[-1]} if imports else None,
        "process_s_median": statistics.median(r["process_s"] for r in reports) if reports else None,
        "version": reports[0]["version"] if reports else None,
        "command": command,
    }
    if timing_path:
        job_id = None
        try:
            with open(timing_path) as f:
                job_id = json.load(f).get("job_id")
        except (OSError, ValueError):
            pass
        row["stage"] = stage_summary(timing_path, watcher, job_id)
    log(f"{name}: {'FAILED ' + failure if failure else 'ok'}, {wall:.1f} s, {stats['total']} ops")
    return row


# How the rows run the environment's python: its wrapper script, or (--interpreter) the interpreter itself with the
# library directory the wrapper would have set.
WRAPPER = "bin/python3"
INTERPRETER = "bin/python3.11"
INTERPRETER_LIBS = "lib/x86_64-linux-gnu"


def python_exec(args, root):
    """The sh line a per-node row ends with: run ROOT's python with the line's arguments."""
    if args.interpreter:
        return f'LD_LIBRARY_PATH="{root}/{INTERPRETER_LIBS}" exec "{root}/{INTERPRETER}" "$@"'
    return f'exec "{root}/{WRAPPER}" "$@"'


def run_plain(args, fs):
    python = os.path.join(args.mount, WRAPPER)
    return measure("plain", [python, "-c", RANK_CODE], fs, 1, args.timeout, args.workdir)


def run_canopy(args, fs, name="unstaged", extra_args=(), root=None, program=None, check=None):
    """The job under canopy; `extra_args` (e.g. ["--stage", MOUNT]) makes the staged rows, `root` (the pyenv)
    the local one, `program` (what runs instead of python3, followed by -c CODE) the per-node ones."""
    if not program:
        root = root or args.mount
        if args.interpreter:
            extra_args = [*extra_args, "--env", f"LD_LIBRARY_PATH={os.path.join(root, INTERPRETER_LIBS)}"]
        program = [os.path.join(root, INTERPRETER if args.interpreter else WRAPPER)]
    timing = os.path.join(args.workdir, f"timing-{name}.json")
    if os.path.exists(timing):
        os.unlink(timing)
    command = [args.canopy, "--sim-nodes", str(args.nodes), "--ppn", str(args.ppn),
               "--timeout", str(args.timeout - 5), f"--timing={timing}", *extra_args, *program, "-c", RANK_CODE]
    return measure(name, command, fs, args.nodes * args.ppn, args.timeout, args.workdir, timing,
                   watch_caches=name in ("staged", "on-demand"), check=check)


def staged_kind(extra_args):
    """"manifest" when the staged arguments name a --stage-manifest file that exists now, else "on demand"
    (no manifest, or one the job will learn)."""
    for i, arg in enumerate(extra_args):
        path = extra_args[i + 1] if arg == "--stage-manifest" and i + 1 < len(extra_args) else \
            arg.split("=", 1)[1] if arg.startswith("--stage-manifest=") else None
        if path and os.path.exists(path):
            return "manifest"
    return "on demand"


def run_staged(args, fs, name, template):
    extra = [a.replace("{mount}", args.mount).replace("{manifest}", args.manifest) for a in template.split()]
    kind = staged_kind(extra)
    row = run_canopy(args, fs, name, extra)
    row["staged_kind"] = kind
    return row


# --- the per-node rows: node-local (copies made before the timed part) and tmp-method (the copy timed too) ---

# Each rank execs its own node's copy; canopy sets CANOPY_NODE_RANK in every rank. Arguments: COPIES -c CODE.
NODE_COPY_PROGRAM = None   # set in main: python_exec(args, "$0/node$CANOPY_NODE_RANK")

# The /tmp method as a job script does it: the node's local rank 0 copies the environment from the shared
# filesystem, the others wait for its marker, then all import from the copy. Arguments: COPIES MOUNT TOOL -c CODE.
# A failed copy leaves a .failed marker, so the waiting ranks end instead of waiting for the job's timeout
# (with tar, also when the reading side fails: sh has no pipefail).
TMP_METHOD_TEMPLATE = r"""
node="$0/node$CANOPY_NODE_RANK"
mount=$1
tool=$2
shift 2
copy() {
  if [ "$tool" = tar ]; then
    mkdir "$node.partial" && { tar -C "$mount" -cf - . || : > "$node.failed"; } | tar -C "$node.partial" -xf - &&
      [ ! -e "$node.failed" ]
  else
    cp -a "$mount" "$node.partial"
  fi
}
if [ "$CANOPY_LOCAL_RANK" = 0 ]; then
  start=$(date +%s.%N)
  if copy && mv "$node.partial" "$node"; then
    echo "$start $(date +%s.%N)" > "$node.tmp" && mv "$node.tmp" "$node.copied"
  else
    : > "$node.failed"
    exit 1
  fi
else
  while [ ! -e "$node.copied" ]; do
    [ -e "$node.failed" ] && exit 1
    sleep 0.05
  done
fi
EXEC_PYTHON
"""
TMP_METHOD_PROGRAM = None   # set in main: EXEC_PYTHON replaced by python_exec(args, "$node")


def mounts_type(path):
    """The filesystem type of the mount that holds `path` (the longest mount point above it)."""
    path, best, kind = os.path.realpath(path), "", None
    with open("/proc/self/mounts") as f:
        for line in f:
            point, fstype = line.split()[1], line.split()[2]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, fstype
    return kind


def mem_available():
    with open("/proc/meminfo") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))


def check_copies_fit(args, env_bytes):
    """Exits unless one copy of the environment per node fits under --copy-dir (in RAM too where it is tmpfs),
    with room to spare for the rest of the machine: checked before any row, not an hour into the run."""
    os.makedirs(args.copy_dir, exist_ok=True)
    need = args.nodes * env_bytes
    room = shutil.disk_usage(args.copy_dir).free
    where = f"free space in {args.copy_dir}"
    if mounts_type(args.copy_dir) == "tmpfs" and mem_available() < room:
        room, where = mem_available(), f"available memory ({args.copy_dir} is tmpfs)"
    spare = max(2 << 30, need // 10)
    log(f"per-node copies: {args.nodes} x {env_bytes / 2**20:.0f} MiB = {need / 2**30:.1f} GiB under "
        f"{args.copy_dir}, {where}: {room / 2**30:.1f} GiB")
    if need + spare > room:
        sys.exit(f"import_bench: {args.nodes} copies of the environment ({need / 2**30:.1f} GiB, plus "
                 f"{spare / 2**30:.1f} GiB to spare) do not fit in the {room / 2**30:.1f} GiB of {where}; "
                 f"pass --copy-dir elsewhere or leave out the node-local and tmp-method rows")


def remove_stale_copies(copy_dir):
    """Copies left by a run that was killed (nodes-PID-*, PID gone): they hold gigabytes."""
    for d in glob.glob(os.path.join(copy_dir, "nodes-*-*")):
        pid = os.path.basename(d).split("-")[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            log(f"removing {d}, left by an interrupted run")
            remove_copies(d)
            os.rmdir(d)


def node_copy_check(copies):
    """A rank fails the row unless the module came from under its own node's copy."""
    def check(reports):
        for r in reports:
            mine = os.path.join(copies, f"node{r['node_rank']}") + "/"
            if not r["module_file"].startswith(mine):
                return f"rank {r['rank']} imported {r['module_file']}, not from under {mine}"
        return None
    return check


def same_memory(args):
    """Every row starts from the same memory: the page cache dropped, the environment read back (it is what slowfs
    serves). Otherwise a row runs while the kernel reclaims what the rows before it cached (a staged row after
    the floor's copies, say), and pays for it: at 16 x 4 that made the staged row 1.22-1.27x the floor instead of
    1.02x."""
    if args.keep_page_cache:
        return
    if not benchlib.same_memory_for_every_row(args.pyenv):
        log("cannot drop the page cache (not root?): rows start with what the rows before them cached")
        args.keep_page_cache = True


def run_node_local(args, fs, copies):
    """The floor: the copies are made (and written back) before the timed job; returns the row."""
    same_memory(args)
    started = time.monotonic()
    for node in range(args.nodes):
        subprocess.run(["cp", "-a", args.pyenv, os.path.join(copies, f"node{node}")], check=True)
    os.sync()   # write the copies back now, not while the job runs
    setup = time.monotonic() - started
    log(f"node-local: {args.nodes} copies of {args.pyenv} made in {setup:.1f} s (not timed)")
    busy_before = benchlib.wait_for_idle(args.wait_idle, args.idle_cpus)
    row = run_canopy(args, fs, "node-local", program=["/bin/sh", "-c", NODE_COPY_PROGRAM, copies],
                     check=node_copy_check(copies))
    row.update({"busy_cpus_before": busy_before, "copies": copies, "copy_setup_s": setup})
    return row


def run_tmp_method(args, fs, copies):
    """The /tmp method: copy from the mount inside the job, then import; returns the row with the copy times."""
    row = run_canopy(args, fs, "tmp-method", check=node_copy_check(copies),
                     program=["/bin/sh", "-c", TMP_METHOD_PROGRAM, copies, args.mount, args.tmp_copy])
    row.update({"copies": copies, "copy_tool": args.tmp_copy, "copy": copy_summary(copies, row)})
    if row["copy"]["nodes_copied"] != args.nodes and not row["failure"]:
        row["failure"] = f"{row['copy']['nodes_copied']} of {args.nodes} nodes wrote their copy marker"
    return row


def copy_summary(copies, row):
    """Each node's copy time and when the copies started and ended, in seconds since the job started."""
    spans = []
    for path in glob.glob(os.path.join(copies, "node*.copied")):
        try:
            with open(path) as f:
                start, end = (float(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
        spans.append((start - row["started_epoch"], end - row["started_epoch"]))
    if not spans:
        return {"nodes_copied": 0}
    seconds = sorted(end - start for start, end in spans)
    return {"nodes_copied": len(spans), "copy_s": {"min": seconds[0], "median": statistics.median(seconds),
                                                   "max": seconds[-1]},
            "first_start_s": min(s for s, _ in spans), "last_start_s": max(s for s, _ in spans),
            "all_copied_s": max(e for _, e in spans)}


def remove_copies(copies):
    """Empties the copy directory (kept for the next row), every entry at once: on a disk mounted with online
    discard each unlink waits for the disk, and one copy after another took about 40 s a copy here, 4 at once 6 s."""
    removals = [subprocess.Popen(["rm", "-rf", "--", os.path.join(copies, entry)]) for entry in os.listdir(copies)]
    for removal in removals:
        removal.wait()


def make_module_env(pyenv, module):
    """PYENV-MODULE: PYENV with only what `import MODULE` uses (the interpreter, the standard library, the packages
    it imports whole and the shared libraries it maps), made once and again when PYENV changes."""
    dest = f"{pyenv}-{module}"
    with open(os.path.join(pyenv, ".make_pyenv-stamp")) as f:
        stamp = f.read() + f"\nmodule {module}\n"
    stamp_path = os.path.join(dest, ".module-env-stamp")
    if os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read() == stamp:
                return dest
    probe = ("import json, sys, " + module + "\n"
             "maps = {l.split(None, 5)[5].strip() for l in open('/proc/self/maps') if len(l.split(None, 5)) == 6}\n"
             "files = [getattr(m, '__file__', None) for m in list(sys.modules.values())]\n"
             "print(json.dumps({'maps': sorted(maps), 'files': sorted(f for f in files if f)}))")
    used = json.loads(subprocess.run([os.path.join(pyenv, "bin", "python3"), "-c", probe], check=True,
                                     capture_output=True, text=True).stdout)
    work = dest + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(work, "lib", "python3", "dist-packages"))
    os.makedirs(os.path.join(work, "lib", "x86_64-linux-gnu"))
    for part in ("bin", os.path.join("lib", "python3.11")):
        subprocess.run(["cp", "-a", os.path.join(pyenv, part), os.path.join(work, part)], check=True)
    packages = os.path.join(pyenv, "lib", "python3", "dist-packages") + "/"
    for top in sorted({f[len(packages):].split("/")[0] for f in used["files"] if f.startswith(packages)}):
        subprocess.run(["cp", "-a", packages + top, os.path.join(work, "lib", "python3", "dist-packages")],
                       check=True)
    libraries = os.path.join(pyenv, "lib", "x86_64-linux-gnu")
    mapped = {os.path.realpath(p) for p in used["maps"] if p.startswith(libraries + "/")}
    for entry in os.listdir(libraries):   # each mapped library with every name that leads to it
        if os.path.realpath(os.path.join(libraries, entry)) in mapped:
            subprocess.run(["cp", "-a", os.path.join(libraries, entry), os.path.join(work, "lib", "x86_64-linux-gnu")],
                           check=True)
    with open(os.path.join(work, ".module-env-stamp"), "w") as f:
        f.write(stamp)
    os.rename(work, dest)
    log(f"made {dest}: {disk_usage(dest)[0] / 2**20:.0f} MiB, what `import {module}` uses from {pyenv}")
    return dest


def record_manifest(args, fs):
    """`canopy stage record` of the rank code from the mount, once, before the timed rows; returns its summary."""
    python = os.path.join(args.mount, "bin", "python3")
    command = [args.canopy, "stage", "record", "--stage", args.mount, "-o", args.manifest, "--",
               python, "-c", RANK_CODE]
    log(f"recording the manifest: {' '.join('RANK_CODE' if a == RANK_CODE else a for a in command)}")
    fs.reset()
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=rank_env(), cwd=args.workdir,
                          timeout=args.timeout)
    seconds = time.monotonic() - started
    time.sleep(0.5)
    if done.returncode != 0 or not os.path.exists(args.manifest):
        sys.exit(f"import_bench: recording failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    # canopy stage: recorded N paths under P: F files, X MiB to stage; wrote M
    line = next((l for l in done.stderr.splitlines() if "recorded" in l), "")
    found = re.search(r"recorded (\d+) paths .*: (\d+) files, ([\d.]+) MiB to stage", line)
    summary = {"seconds": seconds, "ops": fs.stats()["total"], "message": line,
               "manifest_bytes": os.path.getsize(args.manifest)}
    if found:
        summary.update({"paths": int(found.group(1)), "files": int(found.group(2)),
                        "content_mib": float(found.group(3))})
    log(f"recorded in {seconds:.1f} s: {line}")
    return summary


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows, args, version):
    print(f"\n`import {args.module}` ({version}) from slowfs, {args.delay_ms:g} ms per metadata op, "
          f"{args.nodes} simulated nodes x {args.ppn} ranks, {os.cpu_count()} CPUs\n")
    print("| row | ranks | ops to slowfs | metadata ops | metadata ops per rank | import s min / median / max "
          "| python start + import s (median) | job wall s | job CPU s |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        if r["failure"]:
            print(f"| {r['row']} | {r['ranks']} | {r['ops']} | {r['metadata_ops']} | - | FAILED: "
                  f"{r['failure'][:80]} | - | {fmt(r['wall_s'], 1)} | {fmt(r.get('cpu_s'), 1)} |")
            continue
        i = r["import_s"]
        print(f"| {r['row']} | {r['ranks']} | {r['ops']} | {r['metadata_ops']} | "
              f"{r['metadata_ops'] // r['ranks']} | {fmt(i['min'])} / {fmt(i['median'])} / {fmt(i['max'])} | "
              f"{fmt(r['process_s_median'])} | {fmt(r['wall_s'], 1)} | {fmt(r.get('cpu_s'), 1)} |")


def print_stage(rows, recording):
    staged = [r for r in rows if r.get("stage") and r["row"] in ("staged", "on-demand")]
    if recording:
        print(f"\nmanifest: recorded once in {recording['seconds']:.1f} s ({recording['ops']} slowfs ops, not in any "
              f"row): {recording.get('paths', '?')} paths, {recording.get('files', '?')} files, "
              f"{recording.get('content_mib', '?')} MiB of content, manifest {recording['manifest_bytes']} bytes")
    for r in staged:
        st = r["stage"]
        if "error" in st:
            print(f"\nstaging: {st['error']}")
            continue
        size = st.get("node_cache_bytes")
        cache = "-" if size is None else f"{size / 2**20:.0f} MiB, {st['node_cache_files']} files"
        print(f"\n| {staged_label(r)} job: seconds since launcher start | tree_up | stage_indexed | stage_sent "
              "| daemon.stage_ready median / max | ranks_spawned | node cache (sim0000) | caches installed |")
        print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
        print(f"| {r['ranks']} ranks | {fmt(st['tree_up_s'])} | {fmt(st['stage_indexed_s'])} | "
              f"{fmt(st['stage_sent_s'])} | {fmt(st['stage_ready_median_s'])} / {fmt(st['stage_ready_max_s'])} "
              f"({st['stage_ready_max_who']}) | {fmt(st['ranks_spawned_s'])} | {cache} | {st['caches_installed']} |")
        if st.get("caches_left"):
            print(f"\nWARNING: node caches left after the job: {st['caches_left']}")


def print_copy(rows):
    for r in rows:
        copy = r.get("copy")
        if not copy or not copy["nodes_copied"]:
            continue
        c, i = copy["copy_s"], r["import_s"] or {}
        tool = "cp -a" if r["copy_tool"] == "cp" else "tar pipe"
        print(f"\n| tmp-method job: seconds | {tool} per node min / median / max | copies started (first / last) "
              "| all nodes copied | import median / max | job wall |")
        print("| --- | --- | --- | ---: | --- | ---: |")
        print(f"| {r['ranks']} ranks, {copy['nodes_copied']} copies | {fmt(c['min'])} / {fmt(c['median'])} / "
              f"{fmt(c['max'])} | {fmt(copy['first_start_s'])} / {fmt(copy['last_start_s'])} | "
              f"{fmt(copy['all_copied_s'])} | {fmt(i.get('median'))} / {fmt(i.get('max'))} | {fmt(r['wall_s'], 1)} |")


def staged_label(row):
    """The row's name, and what it staged from where the name does not say it: "staged (manifest)", "on-demand"."""
    same = {"staged": "manifest", "on-demand": "on demand"}.get(row["row"]) == row["staged_kind"]
    return row["row"] + ("" if same and row["row"] == "on-demand" else f" ({row['staged_kind']})")


def summary_targets(rows):
    """Issue 16's ratios, each only where both its rows ran and did not fail: a list of dicts."""
    ok = {r["row"]: r for r in rows if not r["failure"]}
    staged = [r for r in (ok.get("staged"), ok.get("on-demand")) if r]
    floor, tmp, unstaged = ok.get("node-local"), ok.get("tmp-method"), ok.get("unstaged")
    targets = []
    for r in staged:
        label = staged_label(r)
        if floor:
            limit = 1.1 if r["staged_kind"] == "manifest" else 1.5
            mine, base = r["import_s"]["median"], floor["import_s"]["median"]
            targets.append({"what": f"{label} import / node-local import (medians)",
                            "values": f"{mine:.2f} / {base:.2f} s", "value": mine / base,
                            "target": f"<= {limit}", "met": mine <= limit * base})
        if tmp:
            targets.append({"what": f"{label} staging + import / tmp-method copy + import (job walls)",
                            "values": f"{r['wall_s']:.1f} / {tmp['wall_s']:.1f} s",
                            "value": r["wall_s"] / tmp["wall_s"], "target": "<= 0.5",
                            "met": r["wall_s"] <= 0.5 * tmp["wall_s"]})
    # tmp-method's count only for comparison: its copies read the whole environment through slowfs
    compared = [(r, True) for r in staged] + ([(tmp, False)] if tmp else [])
    for r, is_staged in compared:
        if unstaged and unstaged["ops"]:
            saved = 100.0 * (1 - r["ops"] / unstaged["ops"])
            targets.append({"what": f"{r['row']}: slowfs ops saved vs unstaged",
                            "values": f"{r['ops']:,} vs {unstaged['ops']:,}", "value": saved, "percent": True,
                            "target": ">= 99%" if is_staged else "(for comparison)",
                            "met": saved >= 99.0 if is_staged else None})
    return targets


def print_summary(targets):
    if not targets:
        return
    print("\n| issue 16 target | rows | value | target | |")
    print("| --- | --- | ---: | --- | --- |")
    for t in targets:
        value = f"{t['value']:.2f}%" if t.get("percent") else f"{t['value']:.2f}x"
        met = "-" if t["met"] is None else "**met**" if t["met"] else "**not met**"
        print(f"| {t['what']} | {t['values']} | {value} | {t['target']} | {met} |")


def print_targets(rows):
    by_name = {r["row"]: r for r in rows if not r["failure"]}
    if "unstaged" in by_name and "staged" in by_name:
        unstaged, staged = by_name["unstaged"], by_name["staged"]
        fewer = 100.0 * (1 - staged["ops"] / unstaged["ops"]) if unstaged["ops"] else 0.0
        faster = unstaged["import_s"]["median"] / staged["import_s"]["median"]
        print(f"\nstaged vs unstaged: {fewer:.2f}% fewer ops reach slowfs (target >= 99%), "
              f"median import {faster:.1f}x faster (target >= 10x), job wall {unstaged['wall_s'] / staged['wall_s']:.1f}x "
              f"shorter")


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
    parser.add_argument("--rows", default="plain,unstaged,staged",
                        help="comma-separated: " + ", ".join(ROWS))
    parser.add_argument("--module", choices=MODULES, default="torch",
                        help="what each rank imports; numpy runs from a copy of PYENV with only what `import numpy` "
                             "uses (PYENV-numpy, made if missing), small enough for 64 node copies in this "
                             "machine's memory")
    parser.add_argument("--interpreter", action="store_true",
                        help="every row runs the environment's interpreter itself (ROOT/bin/python3.11, with "
                             "LD_LIBRARY_PATH=ROOT/lib/x86_64-linux-gnu: canopy's --env, or the per-node rows' sh "
                             "line), as a conda environment's python runs, instead of its bin/python3 wrapper "
                             "script; canopy can read an interpreter's start ahead, not a script's")
    parser.add_argument("--manifest", default=None,
                        help="where to record the manifest (default: WORKDIR/MODULE.manifest)")
    parser.add_argument("--reuse-manifest", action="store_true",
                        help="use an existing --manifest instead of recording it again (recording takes minutes)")
    parser.add_argument("--staged-args", default="--stage {mount} --stage-manifest {manifest}",
                        help='canopy arguments of the "staged" row; {mount} and {manifest} are replaced')
    parser.add_argument("--on-demand-args", default="--stage {mount}",
                        help='canopy arguments of the "on-demand" row; {mount} and {manifest} are replaced')
    parser.add_argument("--tmp-copy", choices=("tar", "cp"), default="tar",
                        help="how the tmp-method row copies from the mount: tar -cf - . | tar -xf - (the default: "
                             "half the slowfs operations of cp -a) or cp -a")
    parser.add_argument("--copy-dir", default="/var/tmp/canopy-bench-nodes",
                        help="where the node-local and tmp-method rows put one copy of the environment per node "
                             "(local disk; a tmpfs such as /dev/shm holds them in RAM)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per row before it counts as failed")
    parser.add_argument("--wait-idle", type=float, default=60,
                        help="before each row, wait up to this many seconds for the machine to be idle")
    parser.add_argument("--idle-cpus", type=float, default=0.5, help="idle means other work uses fewer CPUs than this")
    parser.add_argument("--json", default=None, help="also write every row, with ops by type, to this file")
    parser.add_argument("--keep-page-cache", action="store_true",
                        help="do not drop the page cache before each row (by default, as root, every row starts with "
                             "only the environment cached, so that no row pays to reclaim what an earlier one left)")
    args = parser.parse_args()

    args.canopy = os.path.abspath(args.canopy)
    build_dir = os.path.dirname(os.path.dirname(args.canopy))
    args.slowfs = os.path.abspath(args.slowfs or os.path.join(build_dir, "tests", "tools", "slowfs", "slowfs"))
    rows_wanted = [r for r in args.rows.split(",") if r]
    unknown = set(rows_wanted) - set(ROWS)
    if unknown:
        sys.exit(f"import_bench: unknown rows {sorted(unknown)}; the rows are {', '.join(ROWS)}")
    args.manifest = os.path.abspath(args.manifest or os.path.join(args.workdir, f"{args.module}.manifest"))
    global RANK_CODE, NODE_COPY_PROGRAM, TMP_METHOD_PROGRAM
    RANK_CODE = RANK_CODE_TEMPLATE.replace("MODULE", args.module)
    NODE_COPY_PROGRAM = python_exec(args, "$0/node$CANOPY_NODE_RANK")
    TMP_METHOD_PROGRAM = TMP_METHOD_TEMPLATE.replace("EXEC_PYTHON", python_exec(args, "$node"))
    for path, what in ((args.slowfs, "slowfs (needs libfuse3-dev at meson setup)"),
                       (args.canopy, "canopy")):
        if not os.access(path, os.X_OK):
            sys.exit(f"import_bench: {what} not found at {path}; build it (ninja -C {build_dir}) or pass its path")
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        sys.exit("import_bench: FUSE is not usable here: needs /dev/fuse and fusermount3 (apt-get install -y fuse3)")
    os.makedirs(args.workdir, exist_ok=True)

    started = time.monotonic()
    subprocess.run([MAKE_PYENV, args.pyenv], check=True, stdout=sys.stderr)
    if args.module != "torch":
        args.pyenv = make_module_env(args.pyenv, args.module)
    per_node = {"node-local", "tmp-method"} & set(rows_wanted)
    copies = None
    if per_node:
        args.copy_dir = os.path.abspath(args.copy_dir)
        os.makedirs(args.copy_dir, exist_ok=True)
        remove_stale_copies(args.copy_dir)
        check_copies_fit(args, disk_usage(args.pyenv)[0])
    # SIGTERM too must unmount slowfs and remove the copies (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    fs = Slowfs(args.slowfs, args.pyenv, args.mount, args.delay_ms)
    rows = []
    recording = None
    try:
        if per_node:
            copies = tempfile.mkdtemp(prefix=f"nodes-{os.getpid()}-", dir=args.copy_dir)
        if ("staged" in rows_wanted and "{manifest}" in args.staged_args) or \
                ("on-demand" in rows_wanted and "{manifest}" in args.on_demand_args):
            if args.reuse_manifest and os.path.exists(args.manifest):
                log(f"reusing {args.manifest}; the staged job validates it and refreshes what changed")
            else:
                recording = record_manifest(args, fs)
        for name in ROWS:
            if name not in rows_wanted:
                continue
            if name == "node-local":
                try:
                    rows.append(run_node_local(args, fs, copies))   # waits for idle after making the copies
                finally:
                    remove_copies(copies)
                continue
            same_memory(args)
            # The machine may be shared: wait a while for it to go idle, and keep the other work seen with the row.
            busy_before = benchlib.wait_for_idle(args.wait_idle, args.idle_cpus)
            if name == "plain":
                row = run_plain(args, fs)
            elif name == "unstaged":
                row = run_canopy(args, fs)
            elif name == "local":
                row = run_canopy(args, fs, "local", root=args.pyenv)
            elif name == "tmp-method":
                try:
                    row = run_tmp_method(args, fs, copies)
                finally:
                    remove_copies(copies)
            else:
                row = run_staged(args, fs, name, args.staged_args if name == "staged" else args.on_demand_args)
            row["busy_cpus_before"] = busy_before
            rows.append(row)
    finally:
        fs.close()
        if copies:
            shutil.rmtree(copies, ignore_errors=True)
    version = next((r["version"] for r in rows if r["version"]), "?")
    print_table(rows, args, version)
    print_stage(rows, recording)
    print_copy(rows)
    print_targets(rows)
    targets = summary_targets(rows)
    print_summary(targets)
    print("\nCPUs busy with other work just before each row (of %d): " % os.cpu_count() +
          ", ".join(f"{r['row']} {r['busy_cpus_before']:.2f}" for r in rows))
    print("Pages the kernel scanned to reclaim memory during each job (0: no memory pressure): " +
          ", ".join(f"{r['row']} {r['reclaimed_pages']}" for r in rows if "reclaimed_pages" in r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"delay_ms": args.delay_ms, "nodes": args.nodes, "ppn": args.ppn, "cpus": os.cpu_count(),
                       "machine": platform.platform(), "machine_info": benchlib.machine_info(),
                       "module": args.module, "version": version, "recording": recording,
                       "copy_dir": args.copy_dir if per_node else None, "rows": rows, "targets": targets}, f, indent=1)
    log(f"done in {time.monotonic() - started:.0f} s")
    return 1 if any(r["failure"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
