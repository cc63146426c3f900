# Load: a job on 1,024 simulated nodes, and a short soak of back-to-back jobs (soak.py runs the long one).
import faultlib
import soak
from faultlib import JobSandbox, wait_until

SOAK_JOBS = 100


def test_a_job_on_1024_simulated_nodes_runs_and_tears_down_cleanly(tmp_path):
    sandbox = JobSandbox(tmp_path)
    result = sandbox.run(["--sim-nodes", 1024, "sh", "-c", "echo rank $RANK of $WORLD_SIZE"], timeout=180)
    assert result.returncode == 0, result.describe()
    assert sorted(result.stdout.splitlines()) == sorted(f"rank {r} of 1024" for r in range(1024)), result.describe()
    assert wait_until(lambda: not sandbox.leftovers(), 10), f"still running: {sandbox.leftovers()}"
    assert wait_until(lambda: not any(sandbox.tmpdir.iterdir()), faultlib.GRACE_SECONDS), \
        f"left in TMPDIR: {sorted(p.name for p in sandbox.tmpdir.iterdir())}"
    sandbox.close()


def test_back_to_back_jobs_leave_nothing_growing(tmp_path):
    failures, before, after, _ = soak.soak(SOAK_JOBS, tmp_path)
    assert not failures, failures[:3]
    assert not soak.grown(before, after), (before, after)
