#!/usr/bin/python3
# Content broadcast benchmark: staged files sent down the tree to N simulated nodes over TCP and over libfabric.
"""Times the broadcast of staged contents to N simulated nodes, through the tree's TCP links (--fabric off) and
through libfabric providers (--fabric shm, --fabric 'tcp;ofi_rxm'), in one run, interleaved.

Sets of files (--sets):
  1gib    one 1 GiB file (written once in WORKDIR, a pattern that differs in every block)
  torch   the files `import torch` reads from Debian's python3-torch environment (PYENV, made with
          tests/tools/make_pyenv.sh, about 505 MB): the manifest is recorded once with `canopy stage record`

Each cell runs `canopy --sim-nodes N --fanout K --fabric F --stage DIR --stage-manifest M --timing=T true` with the
node caches on disk under --cache-dir, and reports the slowest node's daemon.stage_ready (seconds from launch until
its cache was installed), the job's wall time and the CPU-seconds of the launcher and everything it waited for.
Next to them, the limit this machine sets: every node must copy the bytes into its cache once, so N x bytes at
the memcpy bandwidth measured here (one core) is a floor no transport beats on one machine.

Usage: sudo /usr/bin/python3 tests/bench/broadcast_bench.py --nodes 8,32 --sets 1gib,torch
Options: --canopy PATH, --fabrics off,shm,tcp;ofi_rxm, --fanout K (default 32, the config's), --runs R,
--workdir DIR, --pyenv DIR, --cache-dir DIR, --heartbeat-timeout S, --json FILE, --timeout S.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_PYENV = os.path.join(REPO, "tests", "tools", "make_pyenv.sh")


def memcpy_gb_per_s(size=1 << 30, rounds=3):
    """One core's memcpy bandwidth: bytearray slice assignment is a memmove of the whole buffer."""
    src = bytearray(os.urandom(1 << 20)) * (size >> 20)
    dst = bytearray(size)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - start)
    return size / best / 1e9


def write_pattern(path, size):
    block = 1 << 20
    seed = os.urandom(block)
    with open(path, "wb") as f:
        for offset in range(0, size, block):
            f.write((offset.to_bytes(8, "little") + seed[8:])[:min(block, size - offset)])


def record(canopy, prefix, manifest, command):
    """`canopy stage record` once; returns the manifest's content bytes from its closing line."""
    result = subprocess.run([canopy, "stage", "record", "--stage", prefix, "-o", manifest, "--"] + command,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"recording {manifest} failed:\n{result.stderr[-2000:]}")
    return result.stderr.strip().splitlines()[-1]


def content_bytes(manifest_line):
    # "canopy stage: recorded P paths under DIR: F files, X MiB to stage; wrote M"
    words = manifest_line.split()
    mib = float(words[words.index("MiB") - 1])
    return int(mib * (1 << 20))


def prepare_sets(args):
    sets = {}
    os.makedirs(args.workdir, exist_ok=True)
    for name in args.sets.split(","):
        if name == "1gib":
            directory = os.path.join(args.workdir, "one-gib")
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, "weights.bin")
            if not os.path.exists(path) or os.path.getsize(path) != 1 << 30:
                write_pattern(path, 1 << 30)
            manifest = os.path.join(args.workdir, "one-gib.manifest")
            line = record(args.canopy, directory, manifest, ["cat", path])
        elif name == "torch":
            subprocess.run([MAKE_PYENV, args.pyenv], check=True, stdout=subprocess.DEVNULL)
            directory = args.pyenv
            manifest = os.path.join(args.workdir, "torch.manifest")
            line = record(args.canopy, directory, manifest,
                          [os.path.join(args.pyenv, "bin", "python3"), "-c", "import torch"])
        else:
            raise SystemExit(f"unknown set {name}; the sets are 1gib and torch")
        sets[name] = {"dir": directory, "manifest": manifest, "bytes": content_bytes(line), "recorded": line}
    return sets


def run_cell(args, stage, nodes, fabric, config):
    with tempfile.TemporaryDirectory(prefix="broadcast-bench-") as scratch:
        timing = os.path.join(scratch, "t.json")
        argv = [args.canopy, "--config", config, "--sim-nodes", str(nodes), "--fanout", str(args.fanout),
                "--fabric", fabric, f"--timing={timing}", "--stage", stage["dir"], "--stage-manifest",
                stage["manifest"], "true"]
        run = benchlib.run_once(argv, dict(os.environ), args.timeout, stderr_filter=("setpgid", "canopy: staging: "))
        parsed = benchlib.read_timing(timing) or {"phases": {}, "steps": {}}
    ready = parsed["phases"].get("daemon.stage_ready", {})
    return {"rc": run["rc"], "wall": run["seconds"], "cpu": run["cpu_seconds"], "ready_max": ready.get("max"),
            "ready_median": ready.get("median"), "stage_sent": parsed["steps"].get("stage_sent"),
            "stderr": run["stderr_head"] + ["..."] + run["stderr_tail"]}   # a failure's line comes before the report


def main():
    p = benchlib.arg_parser(__doc__)
    benchlib.add_canopy_option(p)
    p.add_argument("--nodes", default="8,32", help="comma-separated simulated node counts (default 8,32)")
    p.add_argument("--sets", default="1gib,torch")
    p.add_argument("--fabrics", default="off,shm,tcp;ofi_rxm")
    p.add_argument("--fanout", type=int, default=32)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--workdir", default="/var/tmp/canopy-broadcast-bench")
    p.add_argument("--pyenv", default="/tmp/canopy-bench/pyenv")
    p.add_argument("--cache-dir", default="/var/tmp/canopy-broadcast-bench/caches",
                   help="where the node caches go (on disk: 32 nodes x 1 GiB does not fit in memory here)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--heartbeat-timeout", type=float, default=None,
                   help="[tree] heartbeat_timeout of the jobs (default: the config's 30 s); run 2 of "
                        "docs/performance.md Session 18 used 300, before the stage install left the daemon's loop")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    sets = prepare_sets(args)
    os.makedirs(args.cache_dir, exist_ok=True)
    config = os.path.join(args.workdir, "broadcast.toml")
    with open(config, "w") as f:
        f.write(f'[stage]\ncache_dir = "{args.cache_dir}"\n')
        if args.heartbeat_timeout:
            f.write(f"[tree]\nheartbeat_timeout = {args.heartbeat_timeout:g}\n")
    bandwidth = memcpy_gb_per_s()
    print(f"memcpy on one core: {bandwidth:.1f} GB/s", flush=True)
    for name, stage in sets.items():
        print(f"set {name}: {stage['recorded']}", flush=True)

    rows, results = [], []
    fabrics = args.fabrics.split(",")
    for name, stage in sets.items():
        for nodes in [int(n) for n in args.nodes.split(",")]:
            floor = nodes * stage["bytes"] / (bandwidth * 1e9)
            cells = {fabric: [] for fabric in fabrics}
            for _ in range(args.runs):
                for fabric in fabrics:   # interleaved, so that drift in the machine's load hits each alike
                    cells[fabric].append(run_cell(args, stage, nodes, fabric, config))
                    shutil.rmtree(args.cache_dir, ignore_errors=True)
                    os.makedirs(args.cache_dir, exist_ok=True)
            base = None
            for fabric in fabrics:
                good = [c for c in cells[fabric] if c["rc"] == 0 and c["ready_max"] is not None]
                results.append({"set": name, "nodes": nodes, "fabric": fabric, "bytes": stage["bytes"],
                                "memcpy_floor_s": floor, "runs": cells[fabric]})
                if not good:
                    rows.append([name, str(nodes), fabric, "failed: " + str(cells[fabric][-1]["rc"]), "", "", "", ""])
                    for c in cells[fabric]:
                        print(f"  {fabric} x {nodes}: {c['stderr']}", file=sys.stderr)
                    continue
                ready = sorted(c["ready_max"] for c in good)[len(good) // 2]
                wall = sorted(c["wall"] for c in good)[len(good) // 2]
                cpu = sorted(c["cpu"] for c in good)[len(good) // 2]
                base = base if base is not None else ready
                rows.append([name, str(nodes), fabric, f"{ready:.2f}", f"{ready / base:.2f}",
                             f"{nodes * stage['bytes'] / ready / 1e9:.2f}", f"{wall:.2f}", f"{cpu:.1f}"])
            rows.append([name, str(nodes), "memcpy floor", f"{floor:.2f}", "", f"{bandwidth:.2f}", "", ""])
    print()
    benchlib.markdown_table(["set", "nodes", "fabric", "stage ready s (slowest node)", "vs first",
                             "GB/s into caches", "job wall s", "CPU s"], rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"memcpy_gb_per_s": bandwidth, "sets": sets, "results": results,
                       "machine": benchlib.machine_info(), "git": benchlib.git_state()}, f, indent=1)


if __name__ == "__main__":
    main()
