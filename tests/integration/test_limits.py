# Jobs at the limits a user or a node sets: the process and descriptor limits, and what a rank may store. Each fails
# with one line naming the limit, and leaves nothing behind.
import os
import re

import pytest

from conftest import BUILD_DIR, REPO, PeakMemory, measures_memory, wait_until


def run_under_ulimit(stranger, ulimit, canopy_args):
    """Runs canopy as the second user under `ulimit ULIMIT`, with a TMPDIR of its own, and checks that nothing of
    the job is left: no process of the user's, no temp dir."""
    tmpdir = stranger.home / "tmp"
    tmpdir.mkdir()
    os.chown(tmpdir, stranger.uid, stranger.gid)
    result = stranger.run(["/bin/bash", "-c", f'ulimit {ulimit} && exec "$0" {canopy_args}', stranger.canopy()],
                          env={"TMPDIR": str(tmpdir)}, timeout=60)
    wait_until(lambda: not stranger.pids(), 10)
    assert not stranger.pids(), f"processes left: {stranger.pids()}\n{result.describe()}"
    assert not [p.name for p in tmpdir.iterdir()], result.describe()
    return result


@pytest.mark.parametrize("limit", [4, 6])
def test_a_job_at_the_users_process_limit_fails_with_one_line_naming_the_limit(limit, stranger):
    # Issue 38: an ordinary user under `ulimit -u 6` (or 4, 8) got "terminate called ... std::system_error" and a
    # SIGABRT from the launcher. The limit counts threads too, and root is exempt from it: the job runs as a second,
    # unprivileged user.
    # Four daemons and four ranks that sleep must all live at once, whatever the machine's speed: more than the limit.
    result = run_under_ulimit(stranger, f"-u {limit}", "--sim-nodes 4 -n 4 sleep 5")
    assert result.returncode not in (0, 134) and result.returncode > 0, result.describe()
    assert "terminate called" not in result.stderr and "Aborted" not in result.stderr, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "Resource temporarily unavailable" in lines[0] and f"ulimit -u is {limit}" in lines[0], result.describe()
    assert result.seconds < 4, f"the job should end as the fork fails, not after its ranks\n{result.describe()}"


def test_a_job_at_the_descriptor_limit_fails_with_one_line_naming_the_limit(stranger):
    # Issue 39: the descriptor limit gave "cannot create a pipe: Too many open files", naming neither the limit nor
    # what to raise. 64 nodes at fanout 32: the launcher needs more than 40 descriptors for its children alone.
    result = run_under_ulimit(stranger, "-n 40", "--sim-nodes 64 sleep 5")
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and re.search(r"cannot start canopyd on sim\d{4} via local: ", lines[0]), result.describe()
    assert "Too many open files (ulimit -n is 40: " in lines[0], result.describe()
    assert result.seconds < 4, f"the job should end as descriptors run out, not after its ranks\n{result.describe()}"


# What a rank may store: every way a rank stores data that the tree carries or a daemon holds (PMI puts, PMIx
# commits and publishes, the canopy store) ends the job once the rank goes past the job's limit per rank (16 MiB by
# default), before canopyd or canopy has grown by much more than that.

PYTHON = "/usr/bin/python3"
PMI_CLIENT = REPO / "tests" / "pmi" / "pmi_client.py"
BIG_PUT = BUILD_DIR / "tests" / "pmix" / "client_big_put"
PYTHON_ENV = {"PYTHONPATH": str(REPO / "lib" / "python"), "PYTHONDONTWRITEBYTECODE": "1"}
LIMIT_LINE = re.compile(r"canopy: rank (\d+) on (sim\d+) (?:would store [\d.]+ \w+ with|sent [\d.]+ \w+ to) (.+), "
                        r"over the limit of (\S+ \w+) a rank \(raise it with --rank-store-limit or \[job\] "
                        r"rank_store_limit\); tearing down the job")
# Peak sizes canopyd and canopy stay under, with the default limit: about 5 MiB to start, with the PMIx server
# loaded 20, and at most a rank's 16 MiB of data at a time, twice over while it is copied. Before, a job reached
# 130 to 1,185 MiB.
PEAK_MIB = 100

STORE_FLOOD = r"""
import os, sys, time
import canopy
rank = canopy.rank()
value = b"x" * (1 << 20)
for i in range(120):
    try:
        canopy.store_set(f"rank{rank}-{i}", value)
    except canopy.CanopyError as error:
        os.write(1, f"rank {rank}: set {i} refused: {error}\n".encode())
        time.sleep(60)   # the job must end without this rank's help
        sys.exit(3)
os.write(1, f"rank {rank}: stored 120 MiB\n".encode())
"""


def run_measured(sandbox, args, env=None, timeout=100):
    job = sandbox.start([str(arg) for arg in args], env=env)
    memory = PeakMemory(sandbox, job)
    result = sandbox.finish(job, timeout=timeout)
    return result, memory.wait()


def assert_ended_by_the_limit(result, memory, how, limit="16 MiB"):
    assert result.returncode == 1, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    match = LIMIT_LINE.fullmatch(lines[0])
    assert match and match.group(3) == how and match.group(4) == limit, result.describe()
    assert result.seconds < 60, result.describe()   # no rank ended it: each waits 60 s once refused
    if measures_memory:
        assert memory.launcher < PEAK_MIB and max(memory.daemons.values()) < PEAK_MIB, memory.describe()


def test_pmi_puts_past_the_limit_end_the_job_naming_the_rank(sandbox):
    # Issue 38: 100,000 PMI-1 puts of 1 KB over 10 barriers took canopyd to 130 MiB; nothing bounded it.
    result, memory = run_measured(sandbox, ["--sim-nodes", "2", "-n", "2", PYTHON, PMI_CLIENT, "v1", "flood",
                                            "100000", "1000", "10"])
    assert_ended_by_the_limit(result, memory, "PMI's put")


def test_a_pmix_commit_past_the_limit_ends_the_job_before_canopyd_holds_it(sandbox):
    # Issue 38: two ranks each putting 120 MB and fencing took canopyd to 1,185 MiB and canopy to 569 MiB.
    result, memory = run_measured(sandbox, ["--sim-nodes", "2", "-n", "2", BIG_PUT, "put", "120"])
    assert_ended_by_the_limit(result, memory, "PMIx_Commit")


@pytest.mark.parametrize("mib,times", [(120, 1), (4, 8)], ids=["one-request", "in-all"])
def test_pmix_publishes_past_the_limit_end_the_job_before_canopyd_holds_them(sandbox, mib, times):
    # One request past the limit is refused as it arrives; smaller ones count until the rank has published too much.
    result, memory = run_measured(sandbox, ["--sim-nodes", "2", "-n", "2", BIG_PUT, "publish", mib, times])
    assert_ended_by_the_limit(result, memory, "PMIx_Publish")


def test_canopy_store_writes_past_the_limit_end_the_job_naming_the_rank(sandbox, tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(STORE_FLOOD)
    result, memory = run_measured(sandbox, ["--sim-nodes", "2", "-n", "2", PYTHON, script], env=PYTHON_ENV)
    assert_ended_by_the_limit(result, memory, "a write to the canopy store")


def test_a_job_within_a_raised_limit_stores_what_it_needs(sandbox, tmp_path):
    # The line names the way to raise the limit; raised, the same job succeeds.
    config = tmp_path / "canopy.toml"
    config.write_text('[job]\nrank_store_limit = "1MiB"\n')
    small = sandbox.run(["--config", config, "--sim-nodes", "2", "-n", "2", BIG_PUT, "put", "2"], timeout=60)
    assert small.returncode == 1 and "over the limit of 1 MiB a rank" in small.stderr, small.describe()
    raised = sandbox.run(["--config", config, "--rank-store-limit", "6MiB", "--sim-nodes", "2", "-n", "2", BIG_PUT,
                          "put", "2"], timeout=60)
    assert raised.returncode == 0, raised.describe()
    assert sorted(re.findall(r"big_put rank (\d): stored 2 MiB", raised.stdout)) == ["0", "1"], raised.describe()
