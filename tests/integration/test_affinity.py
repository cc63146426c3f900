"""GPU, CPU, memory and NIC binding from each node's topology (docs/affinity.md), checked from inside the ranks.

The GPU node types come as hwloc XML files (tests/topologies): with --topology a node plans as that node type, sets
every variable, and binds only the CPUs this machine has. This machine's own topology binds for real."""
import os
import subprocess
import sys
import re
from pathlib import Path

import pytest

from conftest import BUILD_DIR, parse_labelled

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
SHOW = ["sh", "-c", 'echo "$CANOPY_NODE|$LOCAL_RANK|${CANOPY_CPUS-}|${CANOPY_GPUS-}|${CUDA_VISIBLE_DEVICES-}|'
                    '${ROCR_VISIBLE_DEVICES-}|${ZE_AFFINITY_MASK-}|${CANOPY_NICS-}"']


def shown(result):
    """{rank: {node, local, cpus, gpus, cuda, rocr, ze, nics}} from ranks running SHOW."""
    fields = ["node", "local", "cpus", "gpus", "cuda", "rocr", "ze", "nics"]
    ranks = {}
    for rank, lines in parse_labelled(result.stdout).items():
        assert len(lines) == 1, f"rank {rank} printed {lines}"
        ranks[rank] = dict(zip(fields, lines[0].split("|")))
    return ranks


def by_local_rank(ranks, key):
    """The value each local rank got, checked to be the same on every node."""
    seen = {}
    for rank in ranks.values():
        seen.setdefault(int(rank["local"]), set()).add(rank[key])
    assert all(len(values) == 1 for values in seen.values()), f"nodes disagree on {key}: {seen}"
    return [seen[local].pop() for local in sorted(seen)]


@pytest.mark.parametrize("node_type, ppn, cpu_bind, expected_gpus, vendor_key, expected_vendor", [
    # Perlmutter's trap: GPU 0 is next to the last NUMA domain.
    ("perlmutter-gpu", 4, "numa", ["3", "2", "1", "0"], "cuda", ["3", "2", "1", "0"]),
    ("polaris", 4, "gpu", ["3", "2", "1", "0"], "cuda", ["3", "2", "1", "0"]),
    # Frontier's GCDs by L3 (OLCF's map), ROCm's variable.
    ("frontier", 8, "gpu", ["4", "5", "2", "3", "6", "7", "0", "1"], "rocr", ["4", "5", "2", "3", "6", "7", "0", "1"]),
    # Aurora: a tile each, Level Zero's FLAT numbering (tile t of GPU g is 2g+t).
    ("aurora", 12, "gpu", ["0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "3.0", "3.1", "4.0", "4.1", "5.0", "5.1"], "ze",
     [str(i) for i in range(12)]),
])
def test_gpu_bind_closest_on_each_node_type_from_inside_the_ranks(run_canopy, node_type, ppn, cpu_bind,
                                                                   expected_gpus, vendor_key, expected_vendor):
    result = run_canopy(["--sim-nodes", "3", "--ppn", str(ppn), "--topology", TOPOLOGIES / f"{node_type}.xml",
                         "--cpu-bind", cpu_bind, "--gpu-bind", "closest", "-l"] + SHOW)
    assert result.returncode == 0, result.describe()
    ranks = shown(result)
    assert len(ranks) == 3 * ppn, result.describe()
    assert by_local_rank(ranks, "gpus") == expected_gpus
    assert by_local_rank(ranks, vendor_key) == expected_vendor
    assert all(rank["cpus"] and rank["nics"] for rank in ranks.values()), result.describe()


def test_each_cpu_binding_mode_plans_from_the_topology(run_canopy):
    aurora = TOPOLOGIES / "aurora.xml"
    expected = {
        "core": ["0,104", "1,105", "2,106", "3,107"],
        "numa": ["0-51,104-155", "0-51,104-155", "52-103,156-207", "52-103,156-207"],
        "socket": ["0-51,104-155", "0-51,104-155", "52-103,156-207", "52-103,156-207"],
        "depth": ["0-3", "4-7", "8-11", "12-15"],
        "list:1-8:9-16:53-60:61-68": ["1-8", "9-16", "53-60", "61-68"],
    }
    for mode, cpus in expected.items():
        result = run_canopy(["--sim-nodes", "2", "--ppn", "4", "--topology", aurora, "--cpu-bind", mode, "--depth", "4",
                             "-l"] + SHOW)
        assert result.returncode == 0, result.describe()
        assert by_local_rank(shown(result), "cpus") == cpus, mode


def test_a_foreign_topology_binds_no_cpu_this_machine_lacks_and_says_so(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--topology", TOPOLOGIES / "polaris.xml", "--cpu-bind",
                         "gpu", "--gpu-bind", "closest", "--report-bindings", "-l", "grep", "Cpus_allowed_list",
                         "/proc/self/status"])
    assert result.returncode == 0, result.describe()
    own = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("Cpus_allowed_list")]
    for rank, lines in parse_labelled(result.stdout).items():
        assert lines == own, f"rank {rank} was bound: {lines} (this process: {own})"
    assert result.stderr.count("no: not this machine's CPUs") == 4, result.describe()
    assert "topology: " + str(TOPOLOGIES / "polaris.xml") in result.stderr


def test_this_machines_topology_binds_cpus_and_memory_for_real(run_canopy):
    # get_mempolicy from inside the rank: MPOL_BIND (2) to NUMA node 0, as --mem-bind local asked.
    probe = ("import ctypes,os;libc=ctypes.CDLL(None,use_errno=True);mode=ctypes.c_int();mask=(ctypes.c_ulong*16)();"
             "assert libc.syscall(239,ctypes.byref(mode),mask,1024,None,0)==0;"
             "print(os.environ['CANOPY_CPUS'],sorted(os.sched_getaffinity(0)),mode.value,mask[0])")
    result = run_canopy(["--sim-nodes", "2", "--ppn", "1", "--cpu-bind", "numa", "--mem-bind", "local", "-l",
                         "python3", "-c", probe])
    assert result.returncode == 0, result.describe()
    own = sorted(os.sched_getaffinity(0))
    for rank, lines in parse_labelled(result.stdout).items():
        cpus, _, rest = lines[0].partition(" ")
        assert rest == f"{own} 2 1", f"rank {rank}: {lines[0]}"


def test_gpu_binding_on_a_node_without_gpus_is_refused_before_any_rank_runs(run_canopy, sandbox):
    marker = sandbox.root / "ran"
    result = run_canopy(["--sim-nodes", "2", "--gpu-bind", "closest", "touch", marker])
    assert result.returncode == 2, result.describe()
    lines = result.canopy_lines()
    assert lines == ["canopy: --gpu-bind closest: sim0000 has no GPUs (topology: this machine)"], result.describe()
    assert not marker.exists()


@pytest.mark.parametrize("args, expected", [
    (["--ppn", "5", "--gpu-bind", "closest"], "--gpu-bind closest: 5 ranks on sim0000 need 5 GPUs, it has 4"),
    (["--ppn", "2", "--gpu-bind", "list:0:7"], "--gpu-bind list:0:7: sim0000 has no GPU 7 (it has 0,1,2,3"),
    (["--ppn", "2", "--gpu-bind", "list:1:1"], "--gpu-bind list:1:1 gives GPU 1 of sim0000 to ranks 0 and 1"),
    (["--ppn", "1", "--gpu-tiles-per-rank", "2"], "--gpu-tiles-per-rank 2: the GPUs of sim0000 have no tiles"),
    (["--ppn", "1", "--mem-bind", "list:7"], "--mem-bind list:7: sim0000 has no NUMA node 7"),
    (["--ppn", "1", "--cpu-bind", "gpu"], "--cpu-bind gpu binds each rank to the cores nearest its GPUs"),
])
def test_each_binding_that_cannot_be_honoured_is_one_line_before_launch(run_canopy, sandbox, args, expected):
    marker = sandbox.root / "ran"
    result = run_canopy(["--sim-nodes", "2", "--topology", TOPOLOGIES / "polaris.xml"] + args + ["touch", marker])
    assert result.returncode == 2, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and expected in lines[0], result.describe()
    assert not marker.exists()


def test_oversubscribe_lets_ranks_share_gpus(run_canopy):
    result = run_canopy(["--sim-nodes", "1", "--ppn", "6", "--topology", TOPOLOGIES / "polaris.xml", "--gpu-bind",
                         "closest", "--oversubscribe", "-l"] + SHOW)
    assert result.returncode == 0, result.describe()
    # In the order of the cores they sit next to (GPU 3 first on Polaris), then round again.
    assert by_local_rank(shown(result), "cuda") == ["3", "2", "1", "0", "3", "2"], result.describe()


def test_peer_spellings_of_gpu_options_mean_the_same(run_canopy):
    base = ["--sim-nodes", "1", "--ppn", "2", "--topology", TOPOLOGIES / "perlmutter-gpu.xml", "-l"] + SHOW
    for spelling in (["-gpus-per-proc", "2"], ["--gpus-per-task", "2"], ["--gpus-per-rank", "2"]):
        result = run_canopy(spelling + base)
        assert result.returncode == 0, result.describe()
        assert sorted(len(gpus.split(",")) for gpus in by_local_rank(shown(result), "gpus")) == [2, 2], spelling
    result = run_canopy(["--gpu-bind", "map_gpu:2,0"] + base)
    assert by_local_rank(shown(result), "cuda") == ["2", "0"], result.describe()
    result = run_canopy(["--gpu-bind", "verbose,per_task:2"] + base)
    assert result.returncode == 0 and "canopy: bindings on sim0000" in result.stderr, result.describe()
    assert sorted(len(gpus.split(",")) for gpus in by_local_rank(shown(result), "gpus")) == [2, 2]
    aurora = ["--sim-nodes", "1", "--ppn", "2", "--topology", TOPOLOGIES / "aurora.xml", "-l"] + SHOW
    result = run_canopy(["-gpu-subdevs-per-proc", "3"] + aurora)
    assert result.returncode == 0, result.describe()
    assert [len(gpus.split(",")) for gpus in by_local_rank(shown(result), "gpus")] == [3, 3]


def test_a_node_refuses_what_it_cannot_honour_naming_itself(run_canopy, loopback_config):
    # Fake hosts: the launcher does not know their topology, so each node checks its own and the job ends with 126.
    result = run_canopy(["--config", loopback_config, "--agent", "exec:env CANOPY_IT_HOST=%h", "--hosts",
                         "nodeA,nodeB", "--gpu-bind", "closest", "true"])
    assert result.returncode == 126, result.describe()
    lines = result.canopy_lines()
    assert lines and re.search(r"--gpu-bind closest: node[AB] has no GPUs", lines[0]), result.describe()


def test_dry_run_shows_the_plan_of_a_topology(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "4", "--topology", TOPOLOGIES / "perlmutter-gpu.xml",
                         "--cpu-bind", "gpu", "--gpu-bind", "closest", "--mem-bind", "local", "--dry-run", "true"])
    assert result.returncode == 0, result.describe()
    rows = re.findall(r"^  (\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", result.stdout, re.M)
    assert rows[:4] == [("0", "0-15,64-79", "0", "3", "cxi3"), ("1", "16-31,80-95", "1", "2", "cxi2"),
                        ("2", "32-47,96-111", "2", "1", "cxi1"), ("3", "48-63,112-127", "3", "0", "cxi0")], \
        result.stdout


def test_a_site_profile_binds_gpus_only_where_a_node_has_them(run_canopy):
    # Perlmutter's profile (its job dir is /tmp, which this machine has): CPU nodes and GPU nodes alike.
    result = run_canopy(["--profile", "perlmutter", "--sim-nodes", "2", "--ppn", "2", "-l"] + SHOW)
    assert result.returncode == 0, result.describe()
    assert by_local_rank(shown(result), "gpus") == ["", ""]
    result = run_canopy(["--profile", "perlmutter", "--sim-nodes", "2", "--ppn", "4", "--topology",
                         TOPOLOGIES / "perlmutter-gpu.xml", "-l"] + SHOW)
    assert by_local_rank(shown(result), "cuda") == ["3", "2", "1", "0"], result.describe()


def test_pmix_tells_a_bound_rank_its_cpuset_and_locality_and_an_unbound_one_nothing(run_canopy):
    client = BUILD_DIR / "tests" / "pmix" / "client_locality"
    assert client.exists(), f"{client} is missing; build first"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--cpu-bind", "core", client], timeout=60)
    assert result.returncode == 0, result.describe()
    said = dict(re.findall(r"^locality rank (\d+) (cpuset .*)$", result.stdout, re.M))
    allowed = sorted(os.sched_getaffinity(0))
    assert len(said) == 4, result.describe()
    for rank, text in said.items():
        cpu = allowed[int(rank) % 2 % len(allowed)]
        cpuset, locality = re.match(r"cpuset (\S+) locality (\S+)", text).groups()
        assert cpuset == f"hwloc:{cpu}", text
        assert locality.startswith("SK") and f"CR" in locality and ":NM" in locality, text
    result = run_canopy(["--sim-nodes", "1", "--ppn", "2", client], timeout=60)
    assert result.returncode == 0, result.describe()
    assert sorted(re.findall(r"cpuset (\S+) locality (\S+)", result.stdout)) == [("-", "-")] * 2, result.describe()


def hwloc_pus(topology, location):
    """The CPUs (kernel numbers) hwloc's own hwloc-calc gives for a location such as core:3, numa:1 or os=cuda0."""
    out = subprocess.run(["hwloc-calc", "-i", str(topology), "--po", "-I", "pu", location], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return sorted(int(cpu) for cpu in out.strip().split(","))


def cpu_list(text):
    cpus = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


GPU_DEVICE = {"polaris": "nvml", "perlmutter-gpu": "nvml", "frontier": "rsmi", "aurora": "ze"}


@pytest.mark.parametrize("node_type", ["polaris", "aurora", "perlmutter-gpu", "frontier"])
def test_every_cpu_mode_on_every_node_type_agrees_with_hwloc_calc(run_canopy, node_type):
    topology = TOPOLOGIES / f"{node_type}.xml"
    ppn = 4
    numa, packages = (int(subprocess.run(["hwloc-calc", "-i", str(topology), "-N", kind, "all"], capture_output=True,
                                         text=True, timeout=30, check=True).stdout) for kind in ("numa", "package"))
    expected = {
        "core": [hwloc_pus(topology, f"core:{local}") for local in range(ppn)],
        "numa": [hwloc_pus(topology, f"numa:{local * numa // ppn}") for local in range(ppn)],
        "socket": [hwloc_pus(topology, f"package:{local * packages // ppn}") for local in range(ppn)],
    }
    for mode, cpus in expected.items():
        result = run_canopy(["--sim-nodes", "2", "--ppn", str(ppn), "--topology", topology, "--cpu-bind", mode, "-l"]
                            + SHOW)
        assert result.returncode == 0, result.describe()
        assert [cpu_list(text) for text in by_local_rank(shown(result), "cpus")] == cpus, mode
    # gpu: each rank's cores lie next to its GPU (as hwloc-calc places the GPU), and no two ranks share one.
    result = run_canopy(["--sim-nodes", "2", "--ppn", str(ppn), "--topology", topology, "--cpu-bind", "gpu",
                         "--gpu-bind", "closest", "--gpus-per-rank", "1", "-l"] + SHOW)
    assert result.returncode == 0, result.describe()
    seen = set()
    for cpus, gpu in zip(by_local_rank(shown(result), "cpus"), by_local_rank(shown(result), "gpus")):
        near = hwloc_pus(topology, f"os={GPU_DEVICE[node_type]}{gpu}")
        assert set(cpu_list(cpus)) <= set(near), f"{node_type}: CPUs {cpus} are not next to GPU {gpu} ({near})"
        assert not seen & set(cpu_list(cpus)), f"{node_type}: CPUs {cpus} given twice"
        seen |= set(cpu_list(cpus))


SPAWN_AND_REPORT = """
import os, sys
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
if parent != MPI.COMM_NULL:
    parent.send((sorted(os.sched_getaffinity(0)), os.environ.get("CANOPY_CPUS")), dest=0, tag=7)
    parent.Disconnect()
else:
    comm = MPI.COMM_SELF.Spawn(sys.executable, args=[__file__], maxprocs=1)
    child = comm.recv(source=0, tag=7)
    comm.Disconnect()
    print("parent", sorted(os.sched_getaffinity(0)), os.environ.get("CANOPY_CPUS"), "child", *child)
"""


def test_spawned_ranks_are_not_bound_where_the_jobs_ranks_are(run_canopy, sandbox):
    script = sandbox.root / "spawn.py"
    script.write_text(SPAWN_AND_REPORT)
    result = run_canopy(["--sim-nodes", "1", "--ppn", "1", "--cpu-bind", "core", "--spawn-slots", "1",
                         "/usr/bin/python3", script], timeout=90)
    assert result.returncode == 0, result.describe()
    own = sorted(os.sched_getaffinity(0))
    every = f"{own[0]}-{own[-1]}" if own == list(range(own[0], own[-1] + 1)) else ",".join(map(str, own))
    assert f"parent [{own[0]}] {own[0]} child {own} {every}" in result.stdout, result.describe()


def test_every_rank_learns_its_cpus_an_unbound_one_all_it_may_use(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l"] + SHOW)
    assert result.returncode == 0, result.describe()
    own = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("Cpus_allowed_list")]
    assert by_local_rank(shown(result), "cpus") == [own[0].split(":", 1)[1].strip()] * 2, result.describe()


def test_the_checked_in_topologies_are_what_their_generator_writes():
    result = subprocess.run([sys.executable, TOPOLOGIES / "make_topologies.py", "--check"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
