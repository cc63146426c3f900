# --max-restarts (issue 42): a rank's failure stops every rank and starts them all again in place, keeping the
# daemons and their caches, up to K times in all; each attempt gets fresh PMI state, an empty job store and its
# count in CANOPY_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT, and the report says what ended each attempt.
import json
import os
import re

import signal
import time

from conftest import BUILD_DIR, REPO, daemon_for_node, wait_until

MPICH_PROGRAMS = BUILD_DIR / "tests" / "pmi"
OMPI_PROGRAMS = BUILD_DIR / "tests" / "pmix"
PYTHON = "/usr/bin/python3"
PYTHON_PACKAGE = REPO / "lib" / "python"
LIBRARY = BUILD_DIR / "lib" / "api" / "libcanopy.so"

# Each rank says which attempt it is, then rank FAIL_RANK fails with FAIL_CODE in the attempts FAIL_UNTIL names
# (below it; "always" for every attempt), and the others wait a little so that the restart has ranks to stop.
ATTEMPT = r'''
echo "rank $CANOPY_RANK attempt $CANOPY_RESTART_COUNT torch $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS"
if [ "$CANOPY_RANK" = "$FAIL_RANK" ] && { [ "$FAIL_UNTIL" = always ] || [ "$CANOPY_RESTART_COUNT" -lt "$FAIL_UNTIL" ]; }
then exit "$FAIL_CODE"; fi
sleep "${LINGER:-0.5}"
'''


def attempts_by_rank(stdout):
    """{rank: [attempt, ...]} in the order each rank printed them."""
    seen = {}
    for rank, attempt, torch, most in re.findall(r"rank (\d+) attempt (\d+) torch (\d+) of (\d+)", stdout):
        assert attempt == torch, f"CANOPY_RESTART_COUNT {attempt} but TORCHELASTIC_RESTART_COUNT {torch}"
        seen.setdefault(int(rank), []).append(int(attempt))
    return seen


def fail_env(rank, until, code):
    return {"FAIL_RANK": str(rank), "FAIL_UNTIL": str(until), "FAIL_CODE": str(code)}


def restarted_once(run_canopy, nodes, script, failure):
    """Runs `sh -c script` on `nodes` nodes of 2 ranks with one restart allowed: the job must succeed after exactly
    one restart, which `failure` (the failure line without its "canopy: ") caused."""
    result = run_canopy(["--sim-nodes", str(nodes), "--ppn", "2", "--max-restarts", "1", "sh", "-c", script],
                        timeout=90)
    assert result.returncode == 0, result.describe()
    assert result.canopy_lines() == [f"canopy: {failure}; restarting every rank (restart 1 of 1)"], result.describe()
    return result


def test_a_rank_that_fails_once_restarts_every_rank_and_the_job_succeeds(sandbox, run_canopy):
    timing = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", "3", "--ppn", "2", "--max-restarts", "2", f"--timing={timing}",
                         "sh", "-c", ATTEMPT], timeout=60, env=fail_env(1, 1, 3))
    assert result.returncode == 0, result.describe()
    assert result.canopy_lines() == [
        "canopy: rank 1 on sim0000 exited with code 3; restarting every rank (restart 1 of 2)"], result.describe()
    attempts = attempts_by_rank(result.stdout)
    assert attempts[1] == [0, 1], attempts   # the failed rank ran twice, the second time told so
    assert sorted(attempts) == list(range(6)) and all(seen[-1] == 1 for seen in attempts.values()), attempts
    assert "of 2" in result.stdout   # TORCHELASTIC_MAX_RESTARTS
    report = json.loads(timing.read_text())
    (restart,) = report["restarts"]
    assert restart["ended_by"] == "rank 1 on sim0000 exited with code 3" and restart["exit_code"] == 3, restart
    # (The failed rank may fail before the others have started: its attempt then ran for no time.)
    assert restart["attempt_running_at"] <= restart["failed_at"] < restart["running_again_at"], restart
    assert restart["restart_seconds"] > 0 and report["time_lost_seconds"] >= restart["restart_seconds"], report
    names = [stamp["name"] for stamp in report["timeline"]]
    assert names.count("ranks_spawned") == 2 and "ranks_restarting" in names and "ranks_stopped" in names, names
    assert report["exit_code"] == 0 and "failure" not in report, report


def test_restarts_used_up_end_with_the_last_failures_code_and_one_line_per_attempt(sandbox, run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--max-restarts", "2", "sh", "-c", ATTEMPT],
                        timeout=60, env={**fail_env(2, "always", 7), "LINGER": "30"})
    assert result.returncode == 7, result.describe()
    assert result.canopy_lines() == [
        "canopy: rank 2 on sim0001 exited with code 7; restarting every rank (restart 1 of 2)",
        "canopy: rank 2 on sim0001 exited with code 7; restarting every rank (restart 2 of 2)",
        "canopy: rank 2 on sim0001 exited with code 7; tearing down the job",
    ], result.describe()
    assert attempts_by_rank(result.stdout)[2] == [0, 1, 2], result.stdout
    assert result.seconds < 20, result.describe()   # the lingering ranks were stopped, not waited for


def test_without_max_restarts_a_failed_rank_still_ends_the_job(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "sh", "-c", ATTEMPT], timeout=60, env=fail_env(1, 1, 4))
    assert result.returncode == 4, result.describe()
    assert result.canopy_lines() == ["canopy: rank 1 on sim0001 exited with code 4; tearing down the job"]
    assert "torch 0 of 0" in result.stdout, result.stdout


def mpich_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith("mpich")}


def test_an_mpich_job_killed_inside_mpi_init_restarts_with_the_right_world_and_no_old_segment(run_canopy):
    before = mpich_segments()
    shim = MPICH_PROGRAMS / "die_in_barrier.so"
    # The first attempt's rank 5 is killed inside MPI_Init, with its node's shared-memory segment made.
    first_attempt_dies = (f'if [ "$CANOPY_RESTART_COUNT" = 0 ]; then export LD_PRELOAD={shim} '
                          f'CANOPY_TEST_DIE_RANK=5; fi; exec {MPICH_PROGRAMS / "mpich_hello"} 8')
    result = restarted_once(run_canopy, 4, first_attempt_dies, "rank 5 on sim0002 was killed by signal 9 (SIGKILL)")
    hello = sorted(int(rank) for rank in re.findall(r"mpi_hello: rank (\d+) of 8 on \S+, 2 on this node",
                                                     result.stdout))
    assert hello == list(range(8)), result.describe()   # only the second attempt got past MPI_Init
    assert not mpich_segments() - before, mpich_segments() - before


def shared_memory_files():
    return set(os.listdir("/dev/shm"))


def test_an_open_mpi_job_killed_inside_a_pmix_fence_restarts_in_a_fresh_namespace(run_canopy):
    before = shared_memory_files()
    shim = OMPI_PROGRAMS / "die_in_fence.so"
    # The first attempt's rank 5 is killed inside MPI_Init's PMIx fence, which the others wait in.
    first_attempt_dies = (f'if [ "$CANOPY_RESTART_COUNT" = 0 ]; then export LD_PRELOAD={shim} '
                          f'CANOPY_TEST_DIE_RANK=5; fi; echo "rank $CANOPY_RANK namespace $PMIX_NAMESPACE"; '
                          f'exec {OMPI_PROGRAMS / "mpi_hello"} 8')
    result = restarted_once(run_canopy, 4, first_attempt_dies,
                            "rank 5 on sim0002 exited without calling PMIx_Finalize (killed by signal 9)")
    namespaces = re.findall(r"rank \d namespace (\S+)", result.stdout)
    first = {ns for ns in namespaces if not ns.endswith(".restart1")}
    assert len(first) == 1 and sorted(namespaces) == sorted([*first] * 8 + [f"{first.pop()}.restart1"] * 8), \
        namespaces
    hello = sorted(int(rank) for rank in re.findall(r"mpi_hello: rank (\d+) of 8 on \S+, 2 on this node",
                                                     result.stdout))
    assert hello == list(range(8)), result.describe()   # only the second attempt got past MPI_Init
    assert not shared_memory_files() - before, shared_memory_files() - before


STORE_CHECK = r'''
import os, sys
sys.path.insert(0, sys.argv[1])
import canopy
canopy.init()
attempt, rank = os.environ["CANOPY_RESTART_COUNT"], canopy.rank()
try:
    canopy.store_get("left.by.attempt0", timeout=0)
    print(f"rank {rank} attempt {attempt}: found the last attempt's key", flush=True)
except (canopy.KeyNotFoundError, canopy.CanopyTimeoutError):
    print(f"rank {rank} attempt {attempt}: store empty", flush=True)
canopy.barrier()   # a PMIx fence: the node's PMIx server runs in both attempts
print(f"rank {rank} attempt {attempt}: allgather {[b.decode() for b in canopy.allgather(attempt + str(rank))]}",
      flush=True)
if attempt == "0":
    if rank == 0:
        canopy.store_add("left.by.attempt0", 1)
    else:
        canopy.store_get("left.by.attempt0", timeout=30)   # the key is in the store before rank 1 fails
        if rank == 1:
            sys.exit(6)
    import time
    time.sleep(30)
canopy.finalize()
'''


def test_each_attempt_finds_the_job_store_empty_and_its_own_pmix_collectives(run_canopy, tmp_path):
    script = tmp_path / "store_check.py"
    script.write_text(STORE_CHECK)
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--max-restarts", "1", PYTHON, script, PYTHON_PACKAGE],
                        timeout=90, env={"CANOPY_LIBRARY": str(LIBRARY)})
    assert result.returncode == 0, result.describe()
    said = sorted(re.findall(r"rank (\d) attempt (\d): (store empty|found the last attempt's key)", result.stdout))
    assert [entry for entry in said if entry[1] == "1"] == [(str(r), "1", "store empty") for r in range(4)], said
    gathered = re.findall(r"rank (\d) attempt 1: allgather (.*)", result.stdout)
    assert sorted(gathered) == [(str(r), "['10', '11', '12', '13']") for r in range(4)], result.describe()


def test_max_restarts_refuses_what_it_cannot_restart_before_any_rank_runs(run_canopy):
    for args, words in ((["--max-restarts", "-1"], "--max-restarts"),
                        (["--max-restarts", "1", "--spawn-slots", "2"], "cannot be combined with --spawn-slots")):
        result = run_canopy(["--sim-nodes", "2", *args, "echo", "ran"], timeout=30)
        assert result.returncode == 2, result.describe()
        assert "ran" not in result.stdout
        (line,) = result.canopy_lines()
        assert words in line, line
    planned = run_canopy(["--sim-nodes", "2", "--max-restarts", "3", "--dry-run", "true"], timeout=30)
    assert planned.returncode == 0, planned.describe()
    assert "up to 3 times in all (CANOPY_RESTART_COUNT 0 to 3)" in planned.stdout, planned.stdout


PMI_CLIENT = REPO / "tests" / "pmi" / "pmi_client.py"


def test_a_barrier_the_first_attempt_left_half_done_does_not_mix_with_the_next_attempts(run_canopy):
    # Ranks 0-2 put their cards and wait in the PMI barrier; rank 3 never joins and fails. Their nodes' halves of
    # that barrier are at the root when the restart comes: the next attempt's barrier must not count them.
    first_attempt_fails = (f'if [ "$CANOPY_RESTART_COUNT" = 0 ] && [ "$CANOPY_RANK" = 3 ]; then sleep 2; exit 3; '
                           f'fi; exec {PYTHON} {PMI_CLIENT} v1 exchange')
    result = restarted_once(run_canopy, 2, first_attempt_fails, "rank 3 on sim0001 exited with code 3")
    said = re.findall(r"pmi_client rank (\d): v1 4 ranks, mapping \S+, (\w+)", result.stdout)
    assert sorted(said) == [(str(rank), "OK") for rank in range(4)], result.describe()


def test_a_node_lost_after_its_ranks_finished_ends_the_job_rather_than_hang_a_restart(sandbox, tmp_path):
    # With --max-restarts a node whose ranks are done stays for the next attempt: losing it is a loss, named, and
    # a restart asked for later must not wait for it at the barrier.
    done = tmp_path / "done"
    script = (f'if [ "$CANOPY_NODE" = sim0002 ]; then touch {done}; exit 0; fi; '
              f'if [ "$CANOPY_RANK" = 0 ]; then while [ ! -e {done}.killed ]; do sleep 0.05; done; exit 5; fi; '
              f'sleep 30')
    job = sandbox.start(["--sim-nodes", "3", "--max-restarts", "1", "sh", "-c", script])
    assert wait_until(lambda: done.exists(), 30), "sim0002's rank never ran"
    time.sleep(0.5)   # its exit reaches the daemon, which reports its subtree done
    daemon = daemon_for_node("sim0002", sandbox.marker)
    assert daemon, "sim0002's daemon left with its ranks: nothing to lose"
    os.kill(daemon, signal.SIGKILL)
    (tmp_path / "done.killed").touch()
    result = sandbox.finish(job, timeout=30)
    assert result.returncode == 255, result.describe()
    assert any("lost canopyd on sim0002" in line for line in result.canopy_lines()), result.describe()
