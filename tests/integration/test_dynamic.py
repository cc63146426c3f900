# PMIx dynamic processes under canopy (issue 12): connect/accept, MPI_Comm_join, and what canopy does not serve.
import pytest

from conftest import BUILD_DIR

PROGRAMS = BUILD_DIR / "tests" / "pmix"


def program(name):
    path = PROGRAMS / name
    assert path.exists(), f"{path} is missing; build first"
    return str(path)


@pytest.mark.parametrize("nodes,ppn", [(2, 1), (2, 2), (3, 2), (1, 4)], ids=["2x1", "2x2", "3x2", "1x4"])
def test_two_halves_of_a_job_connect_accept_merge_and_allreduce(run_canopy, nodes, ppn):
    n = nodes * ppn
    result = run_canopy(["--sim-nodes", nodes, "--ppn", ppn, program("mpi_connect_accept"), n], timeout=90)
    assert result.returncode == 0, result.describe()
    total = n * (n + 1) // 2
    assert (f"mpi_connect_accept: {n} ranks, two halves of {n // 2} and {n - n // 2}, merged sum {total} OK"
            in result.stdout), result.describe()


@pytest.mark.parametrize("nodes,ppn", [(2, 1), (2, 2), (1, 4)], ids=["2x1", "2x2", "1x4"])
def test_pairs_of_ranks_meet_through_mpi_comm_join(run_canopy, nodes, ppn):
    n = nodes * ppn
    result = run_canopy(["--sim-nodes", nodes, "--ppn", ppn, program("mpi_comm_join"), n], timeout=90)
    assert result.returncode == 0, result.describe()
    assert f"mpi_comm_join: {n} ranks, {n // 2} pairs joined OK" in result.stdout, result.describe()
