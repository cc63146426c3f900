# Simple PMI under canopy: MPICH 4.0 programs (PMI-1 over PMI_FD) and a PMI-1/PMI-2 wire client run across
# simulated nodes with no mpiexec, and every way a rank can break the protocol ends the job naming it.
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD_DIR, CANOPY

PROGRAMS = BUILD_DIR / "tests" / "pmi"
OMPI_PROGRAMS = BUILD_DIR / "tests" / "pmix"
CLIENT = Path(__file__).resolve().parent.parent / "pmi" / "pmi_client.py"

SHAPES = [(1, 8), (4, 2), (16, 1)]
SHAPE_IDS = [f"{nodes}x{ppn}" for nodes, ppn in SHAPES]


def program(name, where=PROGRAMS):
    path = where / name
    assert path.exists(), f"{path} is missing; build first"
    return str(path)


def shape_args(nodes, ppn):
    return ["--sim-nodes", str(nodes), "--ppn", str(ppn)]


@pytest.mark.parametrize("nodes,ppn", SHAPES, ids=SHAPE_IDS)
def test_mpich_hello_sees_the_world_and_its_node(run_canopy, nodes, ppn):
    n = nodes * ppn
    result = run_canopy(shape_args(nodes, ppn) + [program("mpich_hello"), str(n)], timeout=90)
    assert result.returncode == 0, result.describe()
    found = {int(rank): (host, int(local)) for rank, host, local in
             re.findall(rf"mpi_hello: rank (\d+) of {n} on (\S+), (\d+) on this node", result.stdout)}
    assert sorted(found) == list(range(n)), result.describe()
    # PMI_process_mapping told MPICH which ranks share a node: its shared-memory communicator is exactly them.
    assert all(local == ppn for host, local in found.values()), result.describe()


@pytest.mark.parametrize("nodes,ppn", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name,expect", [
    ("mpich_ring", r"mpi_ring: {n} ranks, 3 laps, token \d+ OK"),
    ("mpich_allpairs", r"mpi_allpairs: {n} ranks, \d+ pairs OK"),
    ("mpich_allreduce", r"mpi_allreduce: {n} ranks, sum \d+ max {n} vector OK"),
])
def test_mpich_program_runs_with_the_right_world(run_canopy, name, expect, nodes, ppn):
    n = nodes * ppn
    result = run_canopy(shape_args(nodes, ppn) + [program(name), str(n)], timeout=90)
    assert result.returncode == 0, result.describe()
    assert re.search(expect.format(n=n), result.stdout), result.describe()


def test_mpich_with_uneven_nodes_shares_memory_only_within_each(run_canopy):
    # 5 ranks at --ppn 2 over 3 nodes: 2, 2 and 1, which the process mapping must describe as two runs.
    result = run_canopy(["--sim-nodes", "3", "--ppn", "2", "-n", "5", program("mpich_hello"), "5"], timeout=90)
    assert result.returncode == 0, result.describe()
    local = {int(r): int(k) for r, k in re.findall(r"rank (\d+) of 5 on \S+, (\d+) on this node", result.stdout)}
    assert local == {0: 2, 1: 2, 2: 2, 3: 2, 4: 1}, result.describe()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_pmi_wire_client_exchanges_keys_across_nodes(run_canopy, version):
    result = run_canopy(shape_args(3, 2) + [str(CLIENT), version, "exchange"], timeout=60)
    assert result.returncode == 0, result.describe()
    ok = re.findall(rf"pmi_client rank (\d+): {version} 6 ranks, mapping \(vector,\(0,3,2\)\), OK", result.stdout)
    assert sorted(int(r) for r in ok) == list(range(6)), result.describe()


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("kind,words", [
    ("oversized", "over the limit of 65536 bytes"),
    ("unknown", "unknown PMI-{v} command 'teleport'"),
    ("get-before-init", "before init"),
    ("put-after-finalize", "after finalize"),
])
def test_a_bad_pmi_command_gets_an_error_and_a_line_naming_the_rank(run_canopy, version, kind, words):
    result = run_canopy(shape_args(2, 1) + [str(CLIENT), version, "bad", kind], timeout=30)
    # The client exits 0 only if the server's answer to it was an error.
    assert result.returncode == 0, result.describe()
    assert len(re.findall(r"pmi_client rank \d: answer .*'rc': '-1'", result.stdout)) == 2, result.describe()
    words = words.format(v=version[1])
    for rank, node in [(0, "sim0000"), (1, "sim0001")]:
        assert re.search(rf"rank {rank} on {node}: .*{re.escape(words)}", result.stderr), result.describe()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_rank_closing_pmi_fd_in_a_barrier_ends_the_job_naming_it(run_canopy, version):
    result = run_canopy(shape_args(2, 2) + [str(CLIENT), version, "close-in-barrier", "3"], timeout=30)
    assert result.returncode == 1, result.describe()
    assert result.seconds < 10, result.describe()   # the rank itself sleeps 30 s: the job did not wait for it
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "rank 3 on sim0001 closed its PMI connection (PMI_FD) before PMI_Finalize" in lines[0], lines[0]


def shared_memory_files():
    return set(os.listdir("/dev/shm"))


def test_mpich_rank_killed_inside_mpi_init_ends_the_job_naming_it(run_canopy):
    shim = program("die_in_barrier.so")
    before = shared_memory_files()
    result = run_canopy(shape_args(4, 2) + ["--env", f"LD_PRELOAD={shim}", "--env", "CANOPY_TEST_DIE_RANK=5",
                                            program("mpich_hello"), "8"], timeout=60)
    # MPICH's shared-memory segments (/dev/shm/mpich_shar_tmp*) go with the job, even one killed in MPI_Init.
    assert not {f for f in shared_memory_files() - before if f.startswith("mpich")}, shared_memory_files() - before
    assert result.returncode == 137, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "rank 5 on sim0002 was killed by signal 9" in lines[0], lines[0]
    assert "mpi_hello: rank" not in result.stdout, result.describe()   # nobody got past MPI_Init


def test_mpi_abort_from_mpich_ends_the_job_with_its_code(run_canopy):
    result = run_canopy(shape_args(4, 2) + [program("mpich_abort"), "5", "9"], timeout=60)
    assert result.returncode == 9, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "rank 5 on sim0002 called PMI_Abort with exit code 9" in lines[0], lines[0]
    assert "mpi_abort: rank 5 aborts with 9" in result.stderr, result.describe()


@pytest.mark.parametrize("version,code,words", [
    ("v1", 7, "called PMI_Abort with exit code 7"),
    ("v2", 1, "called PMI_Abort with exit code 1: rank 2 gives up"),
])
def test_pmi_abort_names_the_rank_and_its_message(run_canopy, version, code, words):
    result = run_canopy(shape_args(2, 2) + [str(CLIENT), version, "abort", "2", "7"], timeout=30)
    assert result.returncode == code, result.describe()
    assert result.seconds < 10, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert f"rank 2 on sim0001 {words}" in lines[0], lines[0]


def test_mpich_rank_exit_code_and_output_come_back(run_canopy):
    # mpi_hello exits 1 when the world is not the size it was told: every rank does, and canopy says so.
    result = run_canopy(shape_args(2, 2) + ["-l", program("mpich_hello"), "99"], timeout=60)
    assert result.returncode == 1, result.describe()
    assert re.search(r"^\[\d\] mpi_hello: rank \d of 4 on \S+, 2 on this node$", result.stdout, re.M), \
        result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and re.search(r"rank \d on sim000\d exited with code 1", lines[0]), result.describe()


def environment_names(result):
    return {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}


@pytest.mark.parametrize("served,pmi,pmix", [
    ("all", True, True),
    ("simple", True, False),
    ("pmix", False, True),
    ("none", False, False),
])
def test_ranks_see_variables_only_for_the_interfaces_served(run_canopy, served, pmi, pmix):
    # An outer launcher's simple-PMI identity never leaks through, whatever is served.
    outer = {"PMI_FD": "99", "PMI_RANK": "0", "PMI_SIZE": "1", "PMI_PORT": "elsewhere:1"}
    result = run_canopy(shape_args(2, 1) + ["--pmi", served, "env"], timeout=30, env=outer)
    assert result.returncode == 0, result.describe()
    names = environment_names(result)
    assert ("PMI_FD" in names) == pmi and ("PMI_RANK" in names) == pmi, result.describe()
    assert "PMI_PORT" not in names, result.describe()
    assert any(name.startswith("PMIX_") for name in names) == pmix, result.describe()
    if not pmi:
        assert not [name for name in names if name.startswith("PMI_")], result.describe()
    if pmi:
        assert "PMI_FD=99" not in result.stdout, result.describe()


def test_pmi_simple_runs_mpich_without_a_pmix_server(run_canopy):
    result = run_canopy(shape_args(2, 2) + ["--pmi", "simple", program("mpich_allreduce"), "4"], timeout=60)
    assert result.returncode == 0, result.describe()
    assert "mpi_allreduce: 4 ranks, sum 10 max 4 vector OK" in result.stdout, result.describe()


def test_pmix_eager_with_pmix_not_served_is_a_usage_error(run_canopy):
    result = run_canopy(shape_args(2, 1) + ["--pmi", "simple", "--pmix", "eager", "true"], timeout=30)
    assert result.returncode == 2, result.describe()
    assert "--pmix eager needs PMIx served" in result.stderr, result.describe()


def test_one_job_script_runs_open_mpi_then_mpich_with_the_same_options(sandbox, tmp_path):
    # What a user moving from mpiexec writes: the same canopy line whichever MPI built the program.
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/sh
set -e
for program in {program("mpi_allreduce", OMPI_PROGRAMS)} {program("mpich_allreduce")}; do
    "$CANOPY" --sim-nodes 4 --ppn 2 "$program" 8
done
""")
    script.chmod(0o755)
    result = subprocess.run([str(script)], capture_output=True, text=True, timeout=120,
                            env={**sandbox.env, "CANOPY": str(CANOPY)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("mpi_allreduce: 8 ranks, sum 36 max 8 vector OK") == 2, result.stdout + result.stderr
