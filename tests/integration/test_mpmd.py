# MPMD jobs: several programs in one world (`canopy -n 1 ./a : -n 8 ./b`, Hydra's -configfile), each rank told
# its program's app number through PMIx (Open MPI), simple PMI (MPICH) and the environment.
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import BUILD_DIR

OMPI_APPNUM = BUILD_DIR / "tests" / "pmix" / "mpi_appnum"
MPICH_APPNUM = BUILD_DIR / "tests" / "pmi" / "mpich_appnum"
PMI_CLIENT = Path(__file__).resolve().parent.parent / "pmi" / "pmi_client.py"
SHOW = 'echo "$CANOPY_RANK $CANOPY_APPNUM $WORLD_SIZE ${A:-} ${G:-} $PWD"'


def shown(result):
    """rank -> (appnum, world size, A, G, wdir) from SHOW's lines."""
    rows = {}
    for line in result.stdout.splitlines():
        fields = line.split(" ")
        rows[int(fields[0])] = (int(fields[1]), int(fields[2]), fields[3], fields[4], fields[5])
    return rows


def appnum_lines(result, size):
    """rank -> (label, appnum, rank in program, program size), checking every rank saw one world of `size`."""
    found = {}
    for rank, label, appnum, program_rank, program_size, total in re.findall(
            rf"mpi_appnum: rank (\d+) of {size} runs (\w+), appnum (-?\d+), (\d+) of (\d+) in its program, "
            rf"rank sum (\d+)", result.stdout):
        assert int(total) == size * (size - 1) // 2, result.describe()
        found[int(rank)] = (label, int(appnum), int(program_rank), int(program_size))
    return found


@pytest.mark.parametrize("binary", [OMPI_APPNUM, MPICH_APPNUM], ids=["openmpi-pmix", "mpich-simple-pmi"])
def test_mpi_programs_share_one_world_and_know_their_app_number(run_canopy, binary):
    assert binary.exists(), f"{binary} is missing; build first"
    result = run_canopy(["--sim-nodes", "3", "--ppn", "2", "-n", "1", binary, "server", "6", ":",
                         "-n", "3", binary, "worker", "6", ":", "-n", "2", binary, "logger", "6"], timeout=90)
    assert result.returncode == 0, result.describe()
    assert appnum_lines(result, 6) == {
        0: ("server", 0, 0, 1),
        1: ("worker", 1, 0, 3), 2: ("worker", 1, 1, 3), 3: ("worker", 1, 2, 3),
        4: ("logger", 2, 0, 2), 5: ("logger", 2, 1, 2),
    }, result.describe()


def test_mpi4py_reads_the_app_number(run_canopy):
    code = ("from mpi4py import MPI; w = MPI.COMM_WORLD; "
            "print('mpi4py', w.Get_rank(), w.Get_size(), w.Get_attr(MPI.APPNUM), flush=True)")
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-n", "2", sys.executable, "-c", code, ":",
                         "-n", "2", sys.executable, "-c", code], timeout=90)
    assert result.returncode == 0, result.describe()
    found = sorted(tuple(map(int, m)) for m in re.findall(r"mpi4py (\d+) (\d+) (\d+)", result.stdout))
    assert found == [(0, 4, 0), (1, 4, 0), (2, 4, 1), (3, 4, 1)], result.describe()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_simple_pmi_serves_each_rank_its_app_number(run_canopy, version):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-n", "3", PMI_CLIENT, version, "appnum", "first", ":",
                         "-n", "1", PMI_CLIENT, version, "appnum", "second"], timeout=60)
    assert result.returncode == 0, result.describe()
    found = {int(rank): (label, int(appnum), int(env)) for rank, label, appnum, env in re.findall(
        rf"pmi_client rank (\d+): {version} (\w+) appnum (\d+), PMI_APPNUM (\d+)", result.stdout)}
    assert found == {0: ("first", 0, 0), 1: ("first", 0, 0), 2: ("first", 0, 0), 3: ("second", 1, 1)}, \
        result.describe()


def test_each_program_gets_its_own_environment_and_directory(run_canopy, sandbox):
    work = sandbox.root / "worker-dir"
    work.mkdir()
    # -env, -x and --wdir belong to the program they come with (as in Hydra and Open MPI); -genv to every rank.
    result = run_canopy(["--sim-nodes", "2", "-genv", "G", "all", "-n", "1", "-env", "A", "server", "sh", "-c", SHOW,
                         ":", "-n", "2", "-x", "A=worker", "--wdir", work, "sh", "-c", SHOW], timeout=30)
    assert result.returncode == 0, result.describe()
    assert shown(result) == {
        0: (0, 3, "server", "all", str(sandbox.root)),
        1: (1, 3, "worker", "all", str(work)),
        2: (1, 3, "worker", "all", str(work)),
    }, result.describe()


def test_hydra_configfile_runs_a_program_per_line(run_canopy, sandbox):
    work = sandbox.root / "logger dir"
    work.mkdir()
    config = sandbox.root / "programs.txt"
    config.write_text(f"# two programs, as mpiexec -configfile takes them\n"
                      f"-n 2 -env A 'first program' sh -c '{SHOW}'\n"
                      f"\n"
                      f"   -n 1 -wdir \"{work}\" sh -c '{SHOW}'\n")
    result = run_canopy(["--sim-nodes", "3", "-genv", "G", "g", "-configfile", config], timeout=30)
    assert result.returncode == 0, result.describe()
    lines = {int(line.split(" ")[0]): line for line in result.stdout.splitlines()}
    assert lines[0] == f"0 0 3 first program g {sandbox.root}", result.describe()
    assert lines[1] == f"1 0 3 first program g {sandbox.root}", result.describe()
    assert lines[2] == f"2 1 3  g {work}", result.describe()   # A is the first program's alone


def test_timing_report_names_every_program(run_canopy, sandbox):
    report = sandbox.root / "t.json"
    result = run_canopy(["--sim-nodes", "2", f"--timing={report}", "-n", "1", "true", ":", "-n", "1", "echo", "x y"],
                        timeout=30)
    assert result.returncode == 0, result.describe()
    assert json.loads(report.read_text())["command"] == "true : echo 'x y'"


def test_a_missing_program_in_a_later_app_fails_the_job_naming_it(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "-n", "1", "sleep", "30", ":", "-n", "1", "canopy-no-such-worker"],
                        timeout=30)
    assert result.returncode == 127, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and "canopy-no-such-worker" in lines[0] and "sim0001" in lines[0], result.describe()
    assert result.seconds < 10, result.describe()


def test_a_failing_rank_of_one_program_ends_every_program(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "-n", "1", "sleep", "60", ":", "-n", "2", "sh", "-c",
                         '[ "$RANK" = 2 ] && exit 7; sleep 60'], timeout=30)
    assert result.returncode == 7, result.describe()
    assert "rank 2" in result.canopy_lines()[0], result.describe()
    assert result.seconds < 10, result.describe()


@pytest.mark.parametrize("args,words", [
    (["-n", "1", "true", ":"], "':' separates programs and needs one after it"),
    (["-n", "1", ":", "-n", "1", "true"], "':' separates programs and needs one before it"),
    (["-n", "1", "true", ":", "true"], "program 2 of 2 (true) needs -n N"),
    (["-n", "1", "true", ":", "-n", "1", "--ppn", "1", "true"], "option --ppn is for the whole job"),
    (["-n", "1", "true", ":", "-n", "1", "--wdir", "/canopy/no/such/dir", "true"],
     "--wdir /canopy/no/such/dir: no such directory"),
])
def test_a_malformed_mpmd_command_line_fails_before_launch(run_canopy, args, words):
    result = run_canopy(["--sim-nodes", "2"] + args, timeout=20)
    assert result.returncode == 2, result.describe()
    assert len(result.stderr_lines()) == 1 and words in result.stderr, result.describe()
    assert result.stdout == "", result.describe()


def test_a_colon_after_double_dash_is_the_programs_argument(run_canopy):
    result = run_canopy(["-n", "1", "--", "echo", "a", ":", "b"], timeout=20)
    assert result.returncode == 0, result.describe()
    assert result.stdout == "a : b\n", result.describe()
