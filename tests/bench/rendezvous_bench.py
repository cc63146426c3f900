#!/usr/bin/python3
# Rendezvous benchmark: time from "torch imported" to a usable Gloo process group, canopy's Store vs TCPStore.
"""For 8, 32 and 64 ranks (4 per simulated node), in one run, interleaved:

  canopy     canopy --sim-nodes N/4 --ppn 4: canopy.torch.init_process_group("gloo"), whose c10d store is canopy's
             job store (every rank talks to its own node's canopyd; requests go up the daemon tree)
  env        the same canopy job with torch.distributed.init_process_group("gloo", init_method="env://"): every
             rank connects to a TCPStore on rank 0 at the MASTER_ADDR/MASTER_PORT canopy sets
  torchrun   torch's elastic launcher (what `torchrun --nproc_per_node N --rdzv_backend c10d` runs) on one node,
             as a reference (no simulated nodes; it starts its own workers). Called through
             torch.distributed.launcher.api: Debian's torchrun 1.13 command fails under Python 3.11 while
             parsing its --redirects default (an Enum change), before starting any worker.

Each rank times init_process_group + one barrier (dist.barrier over Gloo) after its imports, so import time
(the same for all rows) is left out; the table gives the slowest rank's time, median over --runs.

Connections: while each job runs, the number of distinct TCP peers that connected to rank 0's store port (env,
torchrun) and to the canopy launcher's tree port (canopy: the root of the store) is sampled from /proc/net/tcp.
The point is the shape: TCPStore's count grows with the ranks, the canopy root's stays at its number of children.

usage: /usr/bin/python3 tests/bench/rendezvous_bench.py [--sizes 8,32,64] [--runs 3] [--canopy build/launcher/canopy]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"

ELASTIC_DRIVER = r"""
import sys
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
n, port, code = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, rdzv_backend="c10d",
                      rdzv_endpoint=f"127.0.0.1:{port}", run_id="rendezvous-bench", max_restarts=0,
                      monitor_interval=0.1)
elastic_launch(config, "/usr/bin/python3")(code, "env")
"""

RANK_CODE = r"""
import os, sys, time
import torch, torch.distributed as dist
mode = sys.argv[1]
start = time.perf_counter()
if mode == "canopy":
    import canopy.torch
    canopy.torch.init_process_group("gloo")
else:
    dist.init_process_group("gloo", init_method="env://")
dist.barrier()
took = time.perf_counter() - start
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
n = dist.get_world_size()
ok = int(t.item()) == n * (n - 1) // 2
os.write(1, f"RDZV rank={dist.get_rank()} size={n} seconds={took:.4f} ok={int(ok)}\n".encode())
dist.destroy_process_group()
"""


def established_peers(port):
    """Distinct remote endpoints with an established TCP connection to local `port` (IPv4 and IPv6)."""
    peers = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, remote, state = fields[1], fields[2], fields[3]
                    if state == "01" and int(local.split(":")[1], 16) == port:
                        peers.add(remote)
        except OSError:
            pass
    return peers


class PeerSampler(threading.Thread):
    """Counts distinct peers that connected to a port while a job runs; the port is found by `find_port`."""

    def __init__(self, find_port):
        super().__init__(daemon=True)
        self.find_port = find_port
        self.seen = set()
        self.stop = threading.Event()
        self.port = None

    def run(self):
        while not self.stop.is_set():
            if self.port is None:
                self.port = self.find_port()
            if self.port:
                self.seen |= established_peers(self.port)
            time.sleep(0.005)


def launcher_listen_ports(pid):
    """TCP ports the canopy launcher (pid) listens on: its tree port."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            m = re.fullmatch(r"socket:\[(\d+)\]", target)
            if m:
                inodes.add(m.group(1))
    except OSError:
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    return int(fields[1].split(":")[1], 16)
    return None


def run_job(args, mode, ranks, code_path):
    env = dict(os.environ)
    env.update({"PYTHONPATH": os.path.join(REPO, "lib", "python"),
                "CANOPY_LIBRARY": os.path.join(os.path.dirname(os.path.dirname(args.canopy)), "lib", "api",
                                               "libcanopy.so"),
                "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"})
    if mode == "torchrun":
        port = 29400 + ranks
        command = [PYTHON, "-c", ELASTIC_DRIVER, str(ranks), str(port), code_path]
        find_port = lambda: port   # noqa: E731
    else:
        port = 31000 + ranks
        timing_path = os.path.join(os.path.dirname(code_path), f"timing-{mode}-{ranks}.json")
        command = [args.canopy, "--sim-nodes", str(ranks // 4), "--ppn", "4", "--env", f"MASTER_PORT={port}",
                   f"--timing={timing_path}", PYTHON, code_path, mode]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    if mode == "canopy":
        find_port = lambda: launcher_listen_ports(process.pid)   # noqa: E731
    elif mode == "env":
        find_port = lambda: port   # noqa: E731
    sampler = PeerSampler(find_port)
    sampler.start()
    try:
        out, err = process.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    sampler.stop.set()
    sampler.join()
    wall = time.monotonic() - started
    lines = [dict(kv.split("=") for kv in line.split()[1:]) for line in out.splitlines() if line.startswith("RDZV ")]
    ok = process.returncode == 0 and len(lines) == ranks and all(line["ok"] == "1" for line in lines)
    slowest = max(float(line["seconds"]) for line in lines) if lines else None
    if not ok:
        sys.stderr.write(f"rendezvous_bench: {mode} x {ranks} failed (exit {process.returncode}):\n{err[-1500:]}\n")
    result = {"mode": mode, "ranks": ranks, "ok": ok, "slowest_rank_s": slowest, "wall_s": wall,
              "peers_at_root": len(sampler.seen)}
    if mode == "canopy":
        result.update(store_counts(timing_path))
    return result


def store_counts(timing_path):
    """Job-store requests the root served and the daemons answered themselves, from canopy's timing JSON."""
    try:
        with open(timing_path) as f:
            phases = {p["name"]: p for p in json.load(f).get("phases", [])}
    except (OSError, ValueError):
        return {}

    def total(name):   # count phases carry one value per node: their sum is the job's total
        return round(phases[name]["sum"]) if name in phases else 0

    return {"root_store_requests": total("root.store_read_messages") + total("root.store_write_messages"),
            "daemon_store_answers": total("daemon.store_local_messages")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--canopy", default=os.path.join(REPO, "build", "launcher", "canopy"))
    parser.add_argument("--sizes", default="8,32,64")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="canopy,env,torchrun")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="canopy-rendezvous-bench-") as work:
        code_path = os.path.join(work, "rank.py")
        with open(code_path, "w") as f:
            f.write(RANK_CODE)
        results = run_all(args, sizes, modes, code_path)
    report(args, sizes, modes, results)


def run_all(args, sizes, modes, code_path):
    results = []
    for ranks in sizes:
        for run in range(args.runs):
            for mode in modes:   # interleaved, so background load hits every mode alike
                result = run_job(args, mode, ranks, code_path)
                result["run"] = run
                results.append(result)
                sys.stderr.write(f"rendezvous_bench: {mode} x {ranks} run {run}: {result}\n")
    return results


def report(args, sizes, modes, results):
    print(f"\nRendezvous to a usable Gloo process group (init_process_group + barrier), slowest rank, median of "
          f"{args.runs}; {os.cpu_count()} CPUs, 4 ranks per simulated node\n")
    print("| ranks | " + " | ".join(f"{m} s" for m in modes) + " | " +
          " | ".join(f"{m} peers at root" for m in modes) + " |")
    print("| ---: | " + " | ".join("---:" for _ in modes * 2) + " |")
    for ranks in sizes:
        cells, peers = [], []
        for mode in modes:
            rows = [r for r in results if r["ranks"] == ranks and r["mode"] == mode]
            good = [r["slowest_rank_s"] for r in rows if r["ok"]]
            cells.append(f"{statistics.median(good):.3f}" if good else "failed")
            peers.append(str(max(r["peers_at_root"] for r in rows)) if rows else "-")
        print(f"| {ranks} | " + " | ".join(cells) + " | " + " | ".join(peers) + " |")
    if "canopy" in modes:
        print("\ncanopy's job store, per job (median): requests the root served / answered by the nodes' daemons\n")
        print("| ranks | at the root | by the daemons |")
        print("| ---: | ---: | ---: |")
        for ranks in sizes:
            rows = [r for r in results if r["ranks"] == ranks and r["mode"] == "canopy" and r["ok"]
                    and "root_store_requests" in r]
            if rows:
                print(f"| {ranks} | {statistics.median(r['root_store_requests'] for r in rows):.0f} | "
                      f"{statistics.median(r['daemon_store_answers'] for r in rows):.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
