#!/usr/bin/python3
# Large fence results down the tree over TCP and over libfabric, and what opening a fabric plane costs a job.
"""Times allgathers whose results are large enough to go down the tree on the bulk route (64 KiB or more:
docs/fabric.md), through the tree's TCP links (--fabric off) and through libfabric providers (--fabric shm,
--fabric 'tcp;ofi_rxm'), in one run, interleaved.

Each cell runs `canopy --sim-nodes N --fanout K --fabric F python3 ALLGATHER` (one rank per node). Every rank
contributes SIZE bytes to ROUNDS allgathers through libcanopy (canopy.allgather: a PMIx fence over the tree) and
checks every part; rank 0 reports the median round. Keep ROUNDS at 1 for large SIZEs: each call's fence also
carries every earlier call's values (docs/libcanopy.md), so round r moves r times the data. Next to it, the same job's wall time and CPU-seconds, and the
wall time of `true` under the same --fabric: what opening the plane costs a job that moves no bulk data.

Usage: /usr/bin/python3 tests/bench/bulk_fence_bench.py --nodes 8,32 --size 256KiB --runs 5
Options: --canopy PATH, --fabrics off,shm,tcp;ofi_rxm, --fanout K (default 32), --runs R, --json FILE, --timeout S.
"""

import json
import os
import statistics
import sys
import tempfile

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

ALLGATHER = r"""
import os, sys, time, canopy
size, rounds = int(sys.argv[1]), int(sys.argv[2])
me, world = canopy.rank(), canopy.size()
canopy.barrier()
times = []
for round in range(rounds):
    mine = bytes([(me + round) % 256]) * size
    start = time.perf_counter()
    parts = canopy.allgather(mine)
    times.append(time.perf_counter() - start)
    assert all(part == bytes([(r + round) % 256]) * size for r, part in enumerate(parts)), "wrong allgather"
if me == 0:
    times.sort()
    print("ROUND", times[len(times) // 2], flush=True)
"""


def parse_bytes(text):
    for suffix, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("", 1)):
        if text.endswith(suffix) and text[:len(text) - len(suffix)].isdigit():
            return int(text[:len(text) - len(suffix)]) * scale
    raise SystemExit(f"--size {text}: a number of bytes, KiB or MiB, e.g. 256KiB")


def run_cell(args, script, nodes, fabric, command):
    argv = [args.canopy, "--sim-nodes", str(nodes), "--fanout", str(args.fanout), "--fabric", fabric] + command
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "lib", "python"), "PYTHONDONTWRITEBYTECODE": "1",
           "CANOPY_LIBRARY": os.path.join(os.path.dirname(os.path.dirname(args.canopy)), "lib", "api",
                                          "libcanopy.so")}
    run = benchlib.run_once(argv, env, args.timeout)
    round_s = None
    for line in run["stdout"].splitlines():
        if line.startswith("ROUND "):
            round_s = float(line.split()[1])
    return {"rc": run["rc"], "wall": run["seconds"], "cpu": run["cpu_seconds"], "round": round_s,
            "stderr": run["stderr_tail"]}


def median(cells, key):
    values = [c[key] for c in cells if c["rc"] == 0 and c[key] is not None]
    return statistics.median(values) if values else None


def main():
    p = benchlib.arg_parser(__doc__)
    benchlib.add_canopy_option(p)
    p.add_argument("--nodes", default="8,32", help="comma-separated simulated node counts (default 8,32)")
    p.add_argument("--size", default="256KiB", help="bytes each rank contributes to each allgather")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--fabrics", default="off,shm,tcp;ofi_rxm")
    p.add_argument("--fanout", type=int, default=32)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    size = parse_bytes(args.size)
    fabrics = args.fabrics.split(",")

    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="fence-bench-") as scratch:
        script = os.path.join(scratch, "allgather.py")
        with open(script, "w") as f:
            f.write(ALLGATHER)
        for nodes in [int(n) for n in args.nodes.split(",")]:
            cells = {fabric: {"allgather": [], "true": []} for fabric in fabrics}
            for _ in range(args.runs):
                for fabric in fabrics:   # interleaved, so that drift in the machine's load hits each alike
                    cells[fabric]["allgather"].append(
                        run_cell(args, script, nodes, fabric,
                                 ["/usr/bin/python3", script, str(size), str(args.rounds)]))
                    cells[fabric]["true"].append(run_cell(args, script, nodes, fabric, ["true"]))
            base = None
            for fabric in fabrics:
                results.append({"nodes": nodes, "fabric": fabric, "size": size, "rounds": args.rounds,
                                "runs": cells[fabric]})
                gather, trivial = cells[fabric]["allgather"], cells[fabric]["true"]
                round_s = median(gather, "round")
                if round_s is None:
                    rows.append([str(nodes), fabric, "failed: " + str(gather[-1]["rc"]), "", "", "", "", ""])
                    print(f"  {fabric} x {nodes}: {gather[-1]['stderr']}", file=sys.stderr)
                    continue
                base = base if base is not None else round_s
                result_bytes = nodes * size
                rows.append([str(nodes), fabric, f"{round_s * 1e3:.1f}", f"{round_s / base:.2f}",
                             f"{nodes * result_bytes / round_s / 1e9:.2f}", f"{median(gather, 'wall'):.2f}",
                             f"{median(gather, 'cpu'):.1f}", f"{median(trivial, 'wall'):.3f}"])
    print(f"each rank {size} bytes per allgather, {args.rounds} rounds, {args.runs} runs per cell; medians")
    benchlib.markdown_table(["nodes", "fabric", "allgather ms", "vs first", "GB/s of results delivered",
                             "job wall s", "job CPU s", "`true` wall s"], rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "machine": benchlib.machine_info(), "git": benchlib.git_state()}, f,
                      indent=1)


if __name__ == "__main__":
    main()
