# libcanopy under launchers other than canopy: the real mpirun (Open MPI), mpiexec.hydra (MPICH) and torch's
# elastic agent (what torchrun runs), and Slurm's and PALS's variables set by hand (no Slurm runs here).
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from conftest import BUILD_DIR, REPO, unused_port

LIBRARY = BUILD_DIR / "lib" / "api" / "libcanopy.so"
PYTHON = "/usr/bin/python3"
# Variables that would make a process think a launcher started it.
LAUNCHER_PREFIXES = ("CANOPY_", "PMIX_", "PMI_", "OMPI_", "SLURM_", "PALS_", "TORCHELASTIC_", "MPI_LOCAL")
LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "MASTER_ADDR", "MASTER_PORT")

# Prints what one rank learnt: its place, its launcher, what a thousand marks cost, and whether exchange works.
RANK_CHECK = r"""
import json, logging, sys, time
logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
import canopy
found = {"mode": canopy.mode(), "place": [canopy.rank(), canopy.size(), canopy.local_rank(), canopy.local_size(),
                                          canopy.node_rank(), canopy.num_nodes()]}
start = time.perf_counter()
for _ in range(1000):
    canopy.mark("step")
found["mark_us"] = (time.perf_counter() - start) * 1000   # microseconds per mark
with canopy.phase("block"):
    pass
try:
    found["allgather"] = [part.decode() for part in canopy.allgather(str(canopy.rank()))]
except canopy.NotAvailableError as error:
    found["allgather"] = "not available: " + str(error)
found["store"] = canopy.store_available()
sys.stdout.write("rankcheck " + json.dumps(found) + "\n")   # one write: Hydra interleaves partial lines
sys.stdout.flush()
"""

# canopy.torch under a launcher: env:// where MASTER_ADDR/MASTER_PORT are set, then one all_reduce.
TORCH_CHECK = r"""
import datetime, json, sys
import canopy
import canopy.torch
import torch, torch.distributed as dist
store = canopy.torch.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
total = torch.tensor([float(canopy.rank())])
dist.all_reduce(total)
sys.stdout.write("torchcheck " + json.dumps({"mode": canopy.mode(), "rendezvous": canopy.torch.rendezvous(),
                                             "rank": dist.get_rank(), "size": dist.get_world_size(),
                                             "sum": total.item(), "store": store is not None}) + "\n")
sys.stdout.flush()   # one write: Hydra interleaves partial lines
dist.destroy_process_group()
"""

# torch's elastic agent, which is what torchrun runs: Debian's torchrun 1.13 command fails under Python 3.11
# while parsing its --redirects default, before it starts any worker (tests/bench/rendezvous_bench.py).
ELASTIC_DRIVER = r"""
import sys
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
n, port, script = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, rdzv_backend="c10d",
                      rdzv_endpoint=f"127.0.0.1:{port}", run_id="canopy-launchers", max_restarts=0,
                      monitor_interval=0.1)
elastic_launch(config, sys.executable)(script)
"""


def clean_env(base):
    """`base` without any launcher's variables, and with the build's Python package and library."""
    env = {k: v for k, v in base.items() if not k.startswith(LAUNCHER_PREFIXES) and k not in LAUNCHER_NAMES}
    env.update({"PYTHONPATH": str(REPO / "lib" / "python"), "CANOPY_LIBRARY": str(LIBRARY),
                "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"})
    return env


def results(output, tag):
    found = [json.loads(line.split(f"{tag} ", 1)[1]) for line in output.splitlines() if f"{tag} " in line]
    return sorted(found, key=lambda entry: entry["place"][0] if "place" in entry else entry["rank"])


def run(command, env, timeout=90):
    # A session of its own, so that a launcher that hangs is killed with everything it started.
    process = subprocess.Popen([str(part) for part in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{command} did not end within {timeout} s\nstdout:\n{stdout[-3000:]}\nstderr:\n{stderr[-3000:]}")
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return result, f"{command}\nexit {result.returncode}\nstdout:\n{stdout[-3000:]}\nstderr:\n{stderr[-3000:]}"


@pytest.fixture
def rank_check(tmp_path):
    script = tmp_path / "rank_check.py"
    script.write_text(RANK_CHECK)
    return script


def check_places(found, mode, places, exchange, output):
    """Every rank reports `mode` and its place; exchange works or says why not; marks cost next to nothing."""
    assert [entry["place"] for entry in found] == places, output
    for entry in found:
        assert entry["mode"] == mode, output
        assert entry["store"] is False, output
        # A mark outside canopy is a name check and no I/O, about a microsecond; the bound leaves room for a
        # loaded machine but not for a system call per mark that blocks.
        assert entry["mark_us"] < 200, entry
        if exchange:
            assert entry["allgather"] == [str(rank) for rank in range(len(places))], output
        else:
            assert entry["allgather"].startswith(f"not available: canopy_allgather: {mode} started this job of "
                                                 f"{len(places)} ranks without a PMIx server"), entry
    # Each rank says once, at debug level, that its marks go nowhere.
    said = re.findall(rf"canopy DEBUG canopy: marks are dropped without any I/O: this process was started by "
                      rf"{mode}, not canopy", output)
    assert len(said) == len(places), output


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI's mpirun is not installed")
def test_open_mpis_mpirun_gives_each_rank_its_place_and_pmix_exchange(sandbox, rank_check):
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4", PYTHON, rank_check]
    result, output = run(command, clean_env(sandbox.env))
    assert result.returncode == 0, output
    found = results(result.stdout, "rankcheck")
    check_places(found, "open-mpi", [[r, 4, r, 4, 0, 1] for r in range(4)], True, output)


@pytest.mark.skipif(not shutil.which("mpiexec.hydra"), reason="MPICH's mpiexec.hydra is not installed")
def test_mpich_hydra_gives_each_rank_its_place_and_says_exchange_is_not_available(sandbox, rank_check):
    result, output = run(["mpiexec.hydra", "-n", "3", PYTHON, rank_check], clean_env(sandbox.env))
    assert result.returncode == 0, output
    found = results(result.stdout, "rankcheck")
    check_places(found, "hydra", [[r, 3, r, 3, 0, 1] for r in range(3)], False, output)


def torch_available():
    return subprocess.run([PYTHON, "-c", "import torch.distributed.launcher.api"], capture_output=True,
                          timeout=60).returncode == 0


@pytest.mark.skipif(not torch_available(), reason="python3-torch is not installed")
def test_torchruns_agent_gives_each_rank_its_place(sandbox, rank_check):
    command = [PYTHON, "-c", ELASTIC_DRIVER, "3", unused_port(), rank_check]
    result, output = run(command, clean_env(sandbox.env))
    assert result.returncode == 0, output
    found = results(result.stdout, "rankcheck")
    check_places(found, "torchrun", [[r, 3, r, 3, 0, 1] for r in range(3)], False, output)


@pytest.mark.skipif(not torch_available(), reason="python3-torch is not installed")
def test_canopy_torch_under_torchrun_uses_torchs_env_rendezvous(sandbox, tmp_path):
    script = tmp_path / "torch_check.py"
    script.write_text(TORCH_CHECK)
    for attempt in range(3):
        result, output = run([PYTHON, "-c", ELASTIC_DRIVER, "2", unused_port(), script], clean_env(sandbox.env))
        # torchrun's agent chooses MASTER_PORT as free and its rank binds it later: a test running beside this
        # one can take it in between. That race is torch's, not canopy's; try again with fresh ports.
        if result.returncode == 0 or "Address already in use" not in output:
            break
    assert result.returncode == 0, output
    found = results(result.stdout, "torchcheck")
    assert [(e["rank"], e["size"], e["sum"]) for e in found] == [(0, 2, 1.0), (1, 2, 1.0)], output
    assert all(e["mode"] == "torchrun" and e["rendezvous"] == "env" and not e["store"] for e in found), output


@pytest.mark.skipif(not torch_available() or not shutil.which("mpiexec.hydra"),
                    reason="needs python3-torch and mpiexec.hydra")
def test_canopy_torch_under_hydra_needs_master_addr_and_then_uses_env(sandbox, tmp_path):
    script = tmp_path / "torch_check.py"
    script.write_text(TORCH_CHECK)
    # Without MASTER_ADDR/MASTER_PORT Hydra's ranks have no way to find rank 0: one line that says what to set.
    result, output = run(["mpiexec.hydra", "-n", "2", PYTHON, script], clean_env(sandbox.env))
    assert result.returncode != 0, output
    assert "canopy.torch: rank 0 was started by hydra without a PMIx server, and MASTER_ADDR and MASTER_PORT are " \
           "not set" in result.stderr, output
    env = {**clean_env(sandbox.env), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(unused_port())}
    result, output = run(["mpiexec.hydra", "-n", "2", PYTHON, script], env)
    assert result.returncode == 0, output
    found = results(result.stdout, "torchcheck")
    assert [(e["rank"], e["size"], e["sum"], e["rendezvous"]) for e in found] == \
        [(0, 2, 1.0, "env"), (1, 2, 1.0, "env")], output


def run_ranks(script, base, per_rank, timeout=60):
    """Starts one process per environment in `per_rank` at once, as a launcher would; returns their outputs."""
    processes = [subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**base, **extra}) for extra in per_rank]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        outputs.append((process.returncode, out, err))
    return outputs


def srun_variables(rank, nodes, per_node):
    """What srun sets for task `rank` of a step of nodes x per_node tasks (Slurm's documented variables)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(nodes * per_node), "SLURM_STEP_NUM_TASKS": str(nodes * per_node),
            "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID": str(rank // per_node),
            "SLURM_NNODES": str(nodes), "SLURM_STEP_NUM_NODES": str(nodes),
            "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})", "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})"}


def test_srun_variables_give_each_rank_its_place(sandbox, rank_check):
    # Emulated: no Slurm runs on this machine, so the variables srun sets are set by hand.
    outputs = run_ranks(rank_check, clean_env(sandbox.env), [srun_variables(r, 2, 2) for r in range(4)])
    text = "\n".join(out + err for _, out, err in outputs)
    assert [code for code, _, _ in outputs] == [0] * 4, text
    found = results(text, "rankcheck")
    check_places(found, "slurm", [[r, 4, r % 2, 2, r // 2, 2] for r in range(4)], False, text)


def test_pals_variables_give_each_rank_its_place(sandbox, rank_check):
    # Emulated, as for Slurm: PALS names the rank, local rank and node; Cray PMI the sizes.
    per_rank = [{"PALS_RANKID": str(r), "PALS_LOCAL_RANKID": str(r % 2), "PALS_NODEID": str(r // 2),
                 "PMI_SIZE": "4", "PMI_LOCAL_SIZE": "2"} for r in range(4)]
    outputs = run_ranks(rank_check, clean_env(sandbox.env), per_rank)
    text = "\n".join(out + err for _, out, err in outputs)
    assert [code for code, _, _ in outputs] == [0] * 4, text
    found = results(text, "rankcheck")
    check_places(found, "pals", [[r, 4, r % 2, 2, r // 2, -1] for r in range(4)], False, text)


@pytest.mark.parametrize("variables, message", [
    ({**srun_variables(1, 2, 2), "SLURM_PROCID": "4"},
     "SLURM_PROCID=4 is not below SLURM_STEP_NUM_TASKS=4: the slurm variables contradict each other"),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "1"},
     "TORCHELASTIC_RUN_ID is set, so torchrun started this process, but WORLD_SIZE is not"),
    ({"RANK": "3", "WORLD_SIZE": "4"},
     "WORLD_SIZE=4 says this process is one of 4 ranks, but no launcher libcanopy knows started it"),
])
def test_contradicting_or_partial_launcher_variables_are_an_error_not_a_singleton(sandbox, variables, message):
    env = {**clean_env(sandbox.env), **variables}
    result, output = run([PYTHON, "-c", "import canopy; print(canopy.rank(), canopy.size(), canopy.mode())"], env,
                         timeout=30)
    assert result.returncode != 0, output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("canopy.CanopyError: ") and message in last, output


def test_canopys_own_variables_win_over_another_launchers(run_canopy, rank_check, sandbox):
    # A job started from inside an srun step and a torchrun worker: every rank is still canopy's.
    env = {**clean_env(sandbox.env), **srun_variables(0, 1, 8), "TORCHELASTIC_RUN_ID": "outer", "RANK": "0",
           "WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8"}
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", PYTHON, rank_check], timeout=90, env=env)
    assert result.returncode == 0, result.describe()
    found = results(result.stdout, "rankcheck")
    assert [entry["place"] for entry in found] == [[r, 4, r % 2, 2, r // 2, 2] for r in range(4)], result.describe()
    assert all(entry["mode"] == "canopy" and entry["store"] is True for entry in found), result.describe()
    assert all(entry["allgather"] == ["0", "1", "2", "3"] for entry in found), result.describe()
    assert "marks are dropped" not in result.stderr, result.describe()
