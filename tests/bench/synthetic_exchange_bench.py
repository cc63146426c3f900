#!/usr/bin/env python3
"""The exchange at scale with synthetic ranks: fence time, CPU, every daemon's peak memory, messages, bytes moved.

Usage:
  tests/bench/synthetic_exchange_bench.py [--nodes 1024] [--ppn 120] [--fit-nodes N] [--cells a,b,...]
                                          [--fanout K] [--json FILE]

Each cell runs `canopy --sim-nodes N --synthetic-ranks R:BYTES:PATH --timing=FILE.json` once: every simulated node
(a real canopyd on this machine) drives R in-process ranks through the exchange (docs/scale.md). Cells:
  pmi-100      R x 100 B over PMI-1 to each node's PMI server, barrier = a tree fence (full allgather)
  pmix-100     the same values through the PMIx paths' tree fence (full allgather)
  dmodex-1k    1 KiB a rank, fence without data, each value fetched from its node on first get (direct modex)
  pmix-1k      1 KiB a rank, full allgather, at --fit-nodes (default: the largest node count whose copies fit
               in half of this machine's available memory)
Reported per cell: wall seconds; CPU-seconds of the whole job (canopy and every canopyd, from wait4); the fence
(max of fence_done minus max of fence_entered: from the last node in to the last node out); each daemon's peak
memory over its baseline against the result it holds (target <= 1.5x); tree messages per daemon and at the root;
bytes the fence moved on the tree's links against the least any exchange must move (every node receives every other
node's values). Timings on a shared 2-core machine are noisy: compare ratios and CPU-seconds.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CELLS = {
    "pmi-100": ("pmi", 100),
    "pmix-100": ("pmix", 100),
    "dmodex-1k": ("dmodex", 1024),
    "pmix-1k": ("pmix", 1024),
}
KEY_AND_FRAMING = 9   # per rank in a result: its key or rank number and two length prefixes, about


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fit_nodes(ppn, value_bytes, fraction=0.5, baseline=6 << 20):
    """The largest node count whose daemons' results (each every rank's values, 1.5x at peak) fit `fraction` of
    the available memory."""
    budget, nodes = available_bytes() * fraction, 1
    while (nodes + 1) * ((nodes + 1) * ppn * (value_bytes + KEY_AND_FRAMING) * 1.5 + baseline) <= budget:
        nodes += 1
    return nodes


def subtree_sizes(nodes, fanout):
    """Nodes in each position's subtree (positions 1..nodes; position p's children are p*k+1 .. p*k+k)."""
    size = [1] * (nodes + 1)
    for p in range(nodes, 0, -1):
        parent = (p - 1) // fanout
        if parent >= 1:
            size[parent] += size[p]
    return size


def peak_sampler(pid, peak):
    """Samples the launcher's VmHWM until it exits: the last sample is its peak."""
    while True:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        except OSError:
            return
        time.sleep(0.2)


def run_cell(args, name, nodes, tmp):
    path, value_bytes = CELLS[name]
    timing_path = os.path.join(tmp, "timing-%s-%d.json" % (name, nodes))
    spec = "%d:%d:%s" % (args.ppn, value_bytes, path)
    argv = [args.canopy, "--sim-nodes", str(nodes), "--synthetic-ranks", spec, "--timeout", str(args.timeout),
            "--timing=" + timing_path]
    if args.fanout:
        argv += ["--fanout", str(args.fanout)]
    print("%s: %s" % (name, " ".join(argv)), file=sys.stderr, flush=True)
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]
    sampler = threading.Thread(target=peak_sampler, args=(process.pid, peak), daemon=True)
    sampler.start()
    out, err = process.communicate()   # wait4 below still finds the status: communicate only reads
    seconds = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - args.cpu_so_far
    args.cpu_so_far = usage.ru_utime + usage.ru_stime
    timing = benchlib.read_timing(timing_path)
    record = {"cell": name, "nodes": nodes, "ranks": nodes * args.ppn, "spec": spec, "rc": process.returncode,
              "wall_seconds": seconds, "cpu_seconds": cpu, "launcher_peak_mib": peak[0] / 2**20,
              "stderr_tail": err.decode(errors="replace").splitlines()[-5:]}
    if process.returncode != 0 or not timing:
        return record
    phases = timing["phases"]
    record["fanout"], record["tree_depth"] = timing["fanout"], timing["tree_depth"]
    record["phases"] = {k: v for k, v in phases.items() if k.startswith(("synthetic.", "daemon.tree", "root.tree"))}
    entered, done = phases.get("synthetic.fence_entered"), phases.get("synthetic.fence_done")
    if entered and done:
        record["fence_seconds"] = done["max"] - entered["max"]
    # Bytes: every node receives the whole result on the way down; each position sends its subtree's part up.
    world = nodes * args.ppn
    entry = value_bytes + KEY_AND_FRAMING
    if path != "dmodex":
        sizes = subtree_sizes(nodes, timing["fanout"])
        moved = nodes * world * entry + sum(sizes[p] * args.ppn * entry for p in range(1, nodes + 1))
        least = nodes * (world - args.ppn) * value_bytes
    else:
        fetches = phases.get("synthetic.fetch_messages") or {}
        fetched = (fetches.get("sum") or 0)
        moved = fetched * (value_bytes + 24) * 2 * timing["tree_depth"]   # request and reply, each hop, at most
        least = fetched * value_bytes
    record["bytes_moved"], record["bytes_least"] = moved, least
    return record


def row(record):
    p = record.get("phases", {})

    def stat(name, key, fmt="%.1f"):
        v = p.get(name, {}).get(key)
        return fmt % v if v is not None else "-"
    if record["rc"] != 0 or not p:
        return [record["cell"], str(record["nodes"]), str(record["ranks"]), "exit %s" % record["rc"]] + ["-"] * 8
    return [record["cell"], str(record["nodes"]), str(record["ranks"]),
            "%.1f" % record["wall_seconds"], "%.1f" % record["cpu_seconds"],
            "%.2f" % record.get("fence_seconds", float("nan")),
            stat("synthetic.result_kib", "max", "%.0f"),
            "%s / %s" % (stat("synthetic.peak_over_baseline_kib", "median", "%.0f"), stat("synthetic.peak_over_baseline_kib", "max", "%.0f")),
            "%s%% (%s)" % (stat("synthetic.peak_ratio_percent", "max", "%.0f"), p.get("synthetic.peak_ratio_percent", {}).get("max_who") or "-"),
            "%s / %s" % (stat("daemon.tree_messages", "median", "%d"), stat("daemon.tree_messages", "max", "%d")),
            stat("root.tree_messages", "max", "%d"),
            "%.2f" % (record["bytes_moved"] / record["bytes_least"]) if record.get("bytes_least") else "-"]


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--nodes", type=int, default=1024, help="simulated nodes (default 1024)")
    p.add_argument("--ppn", type=int, default=120, help="synthetic ranks per node (default 120)")
    p.add_argument("--fit-nodes", type=int, default=0, help="nodes for pmix-1k (default: the most that fit)")
    p.add_argument("--cells", default=",".join(CELLS), help="cells to run (default %s)" % ",".join(CELLS))
    p.add_argument("--fanout", type=int, default=0, help="tree fanout (default canopy's, 32)")
    p.add_argument("--timeout", type=int, default=900, help="seconds a job may take (default 900)")
    p.add_argument("--json", default="", help="also write the records here")
    benchlib.add_canopy_option(p)
    args = p.parse_args()
    benchlib.check_canopy(p, args)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    args.cpu_so_far = usage.ru_utime + usage.ru_stime
    records = []
    with tempfile.TemporaryDirectory(prefix="canopy-synthetic-") as tmp:
        for name in args.cells.split(","):
            nodes = args.nodes
            if name == "pmix-1k":
                nodes = args.fit_nodes or fit_nodes(args.ppn, 1024)
            record = run_cell(args, name, nodes, tmp)
            records.append(record)
            print(json.dumps({k: v for k, v in record.items() if k != "phases"}), file=sys.stderr, flush=True)
    header = ["cell", "nodes", "ranks", "wall s", "CPU s", "fence s", "result KiB", "peak over base KiB med/max",
              "peak/result max (who)", "msgs/daemon med/max", "msgs root", "bytes moved / least"]
    benchlib.markdown_table(header, [row(r) for r in records])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": benchlib.machine_info(), "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
