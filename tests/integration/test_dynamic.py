# PMIx dynamic processes under canopy (issue 12): connect/accept, MPI_Comm_join, and what canopy does not serve.
import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import BUILD_DIR, daemon_pids, timing_phases, wait_until

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


def shm_entries(prefix):
    return {path.name for path in Path("/dev/shm").glob(prefix + "*")}


def test_open_mpi_ranks_killed_leave_no_shared_memory_segments(run_canopy):
    # Open MPI registers its vader segments with PMIx for cleanup; PMIx removes them once canopyd deregisters the
    # job, which it does after an abnormal end too. The node temp dir is not on tmpfs here (TMPDIR is the test's),
    # so the segments go to /dev/shm, Open MPI's default.
    before = shm_entries("vader_segment")
    result = run_canopy(["-n", "4", program("mpi_linger"), "2"], timeout=60)
    assert result.returncode != 0, result.describe()
    assert "rank 2 on" in result.stderr and "killed by signal 9" in result.stderr, result.describe()
    assert result.stdout.count("ready") == 4, result.describe()
    assert shm_entries("vader_segment") - before == set(), result.describe()


@pytest.mark.parametrize("tmpfs", [True, False], ids=["tmpfs", "disk"])
def test_a_killed_canopyd_leaves_no_shared_memory_segments(sandbox, tmpfs):
    # On tmpfs the segments live in the node temp dir, which the node guard removes however canopyd ends.
    # Elsewhere they go to /dev/shm, and the guard removes them because it saw Open MPI register them.
    before = shm_entries("vader_segment") | shm_entries("canopy-")
    job = sandbox.start(["-n", "2", program("mpi_linger"), "-1"], env={"TMPDIR": "/dev/shm"} if tmpfs else None)
    assert wait_until(lambda: len(daemon_pids(sandbox.marker)) == 1, 20)
    lines = []
    deadline = time.monotonic() + 30
    while len(lines) < 2 and time.monotonic() < deadline:
        line = job.stdout.readline().decode()
        if "ready" in line:
            lines.append(line)
    assert len(lines) == 2, lines
    in_dev_shm = shm_entries("vader_segment") - before   # other tests' jobs may add theirs meanwhile
    assert len(in_dev_shm) >= 2 if not tmpfs else in_dev_shm == set(), in_dev_shm
    ours = shm_entries("canopy-") - before   # the node temp dir, on tmpfs
    for pid in daemon_pids(sandbox.marker):
        os.kill(pid, signal.SIGKILL)
    result = sandbox.finish(job, timeout=30)
    assert result.returncode != 0, result.describe()
    assert wait_until(lambda: not (shm_entries("vader_segment") | shm_entries("canopy-")) & (in_dev_shm | ours), 10), \
        (shm_entries("vader_segment") | shm_entries("canopy-")) & (in_dev_shm | ours)


@pytest.mark.parametrize("mode", ["finalize", "exit", "kill"])
def test_files_a_pmix_client_registers_for_cleanup_are_removed_however_it_ends(run_canopy, sandbox, mode):
    work = sandbox.root / "registered"
    work.mkdir()
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", program("client_cleanup"), work, mode], timeout=60)
    assert "0 failed" in result.stdout, result.describe()
    if mode == "finalize":
        assert result.returncode == 0, result.describe()
        assert len(re.findall(r"client_cleanup rank \d: registered .* 0 failed", result.stdout)) == 4, \
            result.describe()
    else:
        assert result.returncode != 0, result.describe()
    assert sorted(path.name for path in work.iterdir()) == [], result.describe()


def test_files_registered_for_cleanup_are_removed_by_the_node_guard_when_canopyd_is_killed(sandbox):
    # PMIx keeps the registrations to itself and a killed canopyd deregisters nothing: the guards remove them.
    work = sandbox.root / "registered"
    work.mkdir()
    job = sandbox.start(["--sim-nodes", "2", "--ppn", "2", program("client_cleanup"), work, "wait"])
    registered = []
    deadline = time.monotonic() + 30
    while len(registered) < 4 and time.monotonic() < deadline:
        line = job.stdout.readline().decode()
        if not line:
            break
        if "registered" in line:
            registered.append(line)
    assert len(registered) == 4, registered
    assert len(list(work.iterdir())) == 8, sorted(path.name for path in work.iterdir())
    for pid in daemon_pids(sandbox.marker):
        os.kill(pid, signal.SIGKILL)
    result = sandbox.finish(job, timeout=30)
    assert result.returncode != 0, result.describe()
    assert wait_until(lambda: not list(work.iterdir()), 5), sorted(path.name for path in work.iterdir())


@pytest.mark.parametrize("mode,code,words", [
    ("kill", 137, "exited without calling PMIx_Finalize (killed by signal 9)"),
    ("exit", 1, "exited without calling PMIx_Finalize (exit code 0)"),
])
def test_a_rank_lost_while_others_wait_in_pmix_connect_ends_the_job_naming_it(run_canopy, mode, code, words):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", program("client_lost"), "2", mode, "connect"], timeout=60)
    assert result.returncode == code, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert f"rank 2 on sim0001 {words}" in lines[0], lines[0]
    assert "connect returned SUCCESS" not in result.stdout, result.describe()


@pytest.mark.parametrize("nodes,ppn", [(2, 2), (3, 1)], ids=["2x2", "3x1"])
def test_pmix_connect_disconnect_query_and_log_are_served(run_canopy, nodes, ppn):
    n = nodes * ppn
    result = run_canopy(["--sim-nodes", nodes, "--ppn", ppn, program("client_dynamic")], timeout=60)
    assert result.returncode == 0, result.describe()
    assert len(re.findall(rf"client_dynamic rank \d of {n}: \d+ checks, 0 failed", result.stdout)) == n, \
        result.describe()
    for rank in range(n):   # PMIx_Log(PMIX_LOG_STDERR) arrives as the rank's own stderr
        assert f"client_dynamic rank {rank} logs to stderr through PMIx_Log" in result.stderr, result.describe()


# Calls canopy does not serve, and what each must answer: an error at once. PMIx answers two of them itself
# (a monitor request it takes locally, and an event whose delivery it does not confirm), so those are only timed.
UNSERVED = {
    "PMIx_Allocation_request": "NOT-SUPPORTED",
    "PMIx_Job_control(pause)": "NOT-SUPPORTED",
    "PMIx_Get_credential": "NOT-SUPPORTED",
    "PMIx_Validate_credential": "NOT-SUPPORTED",
    "PMIx_Log(email)": "NOT-SUPPORTED",
    "PMIx_Query_info(unknown key)": "NOT-FOUND",
    "PMIx_Group_construct": "NOT-SUPPORTED",
    "PMIx_Process_monitor": None,
    "PMIx_Notify_event(global)": None,
}


def test_pmix_calls_canopy_does_not_serve_return_at_once_with_an_error(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", program("client_unserved")], timeout=60)
    assert result.returncode == 0, result.describe()
    answers = re.findall(r"client_unserved rank (\d): (.+?) -> (\S+) in (\d+) ms", result.stdout)
    assert len(answers) == 4 * len(UNSERVED), result.describe()
    for rank, call, status, ms in answers:
        assert call in UNSERVED, call
        assert int(ms) < 1000, f"rank {rank}: {call} took {ms} ms"
        if UNSERVED[call]:
            assert status == UNSERVED[call], f"rank {rank}: {call} answered {status}"


# MPI_Comm_spawn (issue 12): new ranks in a namespace of their own, placed on the job's nodes in --spawn-slots.
def spawn_children(result):
    return re.findall(r"mpi_spawn child (\d+) of (\d+) on (sim\d+)", result.stdout)


def test_mpi_comm_spawn_from_the_world_places_children_across_nodes(run_canopy):
    result = run_canopy(["--sim-nodes", 4, "--ppn", 1, "--spawn-slots", 1, program("mpi_spawn"), "world", 4],
                        timeout=90)
    assert result.returncode == 0, result.describe()
    assert "mpi_spawn world: 4 parents, 4 children each spawn, merged sums OK" in result.stdout, result.describe()
    children = spawn_children(result)
    assert sorted(int(rank) for rank, _, _ in children) == [0, 1, 2, 3], result.describe()
    assert {node for _, _, node in children} == {"sim0000", "sim0001", "sim0002", "sim0003"}, result.describe()


def test_mpi_comm_spawn_from_one_rank_while_the_others_wait(run_canopy):
    result = run_canopy(["--sim-nodes", 3, "--ppn", 1, "--spawn-slots", 1, program("mpi_spawn"), "one", 3],
                        timeout=90)
    assert result.returncode == 0, result.describe()
    assert "mpi_spawn one: 1 parents, 3 children each spawn, merged sums OK" in result.stdout, result.describe()
    assert {node for _, _, node in spawn_children(result)} == {"sim0000", "sim0001", "sim0002"}, result.describe()


def test_every_rank_spawning_its_own_children_gets_them_merged_and_summed(run_canopy):
    result = run_canopy(["--sim-nodes", 2, "--ppn", 2, "--spawn-slots", 4, program("mpi_spawn"), "self", 2],
                        timeout=90)
    assert result.returncode == 0, result.describe()
    assert "mpi_spawn self: 4 parents, 2 children each spawn, merged sums OK" in result.stdout, result.describe()
    assert len(spawn_children(result)) == 8, result.describe()


def test_a_spawned_child_that_fails_ends_the_job_naming_it(run_canopy):
    result = run_canopy(["--sim-nodes", 2, "--ppn", 1, "--spawn-slots", 1, program("mpi_spawn"), "fail", 2],
                        timeout=60)
    assert result.returncode == 5, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert re.search(r"rank [01] of spawned canopy\.\w+\.1 on sim000[01] exited without calling PMIx_Finalize "
                     r"\(exit code 5\)", lines[0]), lines[0]


def test_spawning_a_missing_program_ends_the_job_naming_the_child_and_node(run_canopy):
    result = run_canopy(["--sim-nodes", 2, "--ppn", 1, "--spawn-slots", 1, program("mpi_spawn"), "missing", 2],
                        timeout=60)
    assert result.returncode == 127, result.describe()
    assert re.search(r"rank [01] of spawned canopy\.\w+\.1 on sim000[01] could not start: program "
                     r"'/nonexistent/canopy-test-program' not found", result.stderr), result.describe()


@pytest.mark.parametrize("slots,words", [
    (0, "canopy was started without spawn slots; start it with --spawn-slots N"),
    (1, "PMIx_Spawn asks for 4 ranks, but the job's nodes have 2 free spawn slots (--spawn-slots 1 on each of 2 nodes"),
])
def test_a_spawn_that_does_not_fit_fails_and_names_the_limit(run_canopy, slots, words):
    result = run_canopy(["--sim-nodes", 2, "--ppn", 1, "--spawn-slots", slots, program("mpi_spawn"), "world", 4],
                        timeout=60)
    assert result.returncode != 0, result.describe()
    assert words in result.stderr, result.describe()
    assert not spawn_children(result), result.describe()   # nothing started, nothing oversubscribed


def test_a_pmix_client_spawns_and_connects_across_namespaces(run_canopy, sandbox):
    timing = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", 2, "--ppn", 1, "--spawn-slots", 2, f"--timing={timing}",
                         program("client_spawn"), 3], timeout=60)
    assert result.returncode == 0, result.describe()
    assert re.search(r"client_spawn parent: spawned canopy\.\w+\.1 with 3 ranks", result.stdout), result.describe()
    parents = re.findall(r"client_spawn child (\d) of (canopy\.\w+\.1): parent is rank 0 of (canopy\.\w+)\n",
                         result.stdout)
    assert sorted(rank for rank, _, _ in parents) == ["0", "1", "2"], result.describe()
    assert all(child.startswith(parent + ".") for _, child, parent in parents), result.describe()
    assert "FAIL" not in result.stdout + result.stderr, result.describe()
    # Rank 1 ends at once, so node 1 has reported done when its child starts: that child's timing comes late.
    phases = timing_phases(timing)
    assert phases["spawned_rank.spawned"]["count"] == 3, phases.get("spawned_rank.spawned")
    assert phases["spawned_rank.exited"]["count"] == 3, phases.get("spawned_rank.exited")


MPI4PY_SPAWN = """
import sys
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
if parent != MPI.COMM_NULL:
    parent.send(parent.Get_rank() * 10 + 1, dest=0, tag=7)
    parent.Disconnect()
else:
    comm = MPI.COMM_SELF.Spawn(sys.executable, args=[__file__], maxprocs=2)
    got = sorted(comm.recv(source=i, tag=7) for i in range(2))
    comm.Disconnect()
    print("mpi4py spawned workers answered", got)
"""

MPI4PY_FUTURES = """
from mpi4py.futures import MPIPoolExecutor

def square(x):
    return x * x

if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=3) as pool:
        squares = list(pool.map(square, range(40)))
    assert squares == [x * x for x in range(40)], squares
    print("mpi4py futures mapped", len(squares), "sum", sum(squares))
"""


def test_mpi4py_comm_self_spawn_of_a_python_worker(run_canopy, sandbox):
    script = sandbox.root / "spawn.py"
    script.write_text(MPI4PY_SPAWN)
    result = run_canopy(["--sim-nodes", 2, "--ppn", 1, "-n", 1, "--spawn-slots", 2, "/usr/bin/python3", script],
                        timeout=90)
    assert result.returncode == 0, result.describe()
    assert "mpi4py spawned workers answered [1, 11]" in result.stdout, result.describe()


def test_mpi4py_pool_executor_maps_over_workers_it_spawned(run_canopy, sandbox):
    script = sandbox.root / "futures.py"
    script.write_text(MPI4PY_FUTURES)
    # The job's nodes are those with ranks: one here, so its three workers share it.
    result = run_canopy(["--sim-nodes", 1, "--ppn", 1, "--spawn-slots", 3, "/usr/bin/python3", script], timeout=90)
    assert result.returncode == 0, result.describe()
    assert f"mpi4py futures mapped 40 sum {sum(x * x for x in range(40))}" in result.stdout, result.describe()


@pytest.mark.parametrize("args", [
    ["--sim-nodes", 2, "--ppn", 2, "mpi_allreduce", 4],
    ["--sim-nodes", 2, "--ppn", 1, "--spawn-slots", 1, "mpi_spawn", "world", 2],
    ["-n", 4, "mpi_linger", 1],
], ids=["finished", "spawned", "killed"])
def test_open_mpi_jobs_leave_no_session_directory(run_canopy, sandbox, args):
    # Under a PMIx server no orted removes Open MPI's ompi.<host>.<uid>/jf.<job> tree from $TMPDIR (or /tmp): it
    # goes in the node temp dir, which canopy removes however the job ends.
    args = [program(arg) if arg in ("mpi_allreduce", "mpi_spawn", "mpi_linger") else arg for arg in args]
    before = {path.name for path in Path("/tmp").glob("ompi.*")}
    result = run_canopy(args, timeout=90)
    assert "killed by signal 9" in result.stderr if "mpi_linger" in str(args) else result.returncode == 0, \
        result.describe()
    assert sorted(path.name for path in sandbox.tmpdir.glob("ompi.*")) == [], result.describe()
    assert {path.name for path in Path("/tmp").glob("ompi.*")} <= before
