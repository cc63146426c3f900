# How a job ends: canopy's exit code and the one line that says which rank on which node failed.
import json
import re
import subprocess
import time

import pytest

from conftest import parse_labelled


def test_all_ranks_succeeding_exits_0_quietly(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", "true"])
    assert result.returncode == 0, result.describe()
    assert result.stdout == "" and result.stderr == "", result.describe()


def test_failing_rank_exit_code_becomes_the_job_exit_code(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", "sh", "-c", '[ "$RANK" = 5 ] && exit 7; sleep 20'],
                        timeout=20)
    assert result.returncode == 7, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "rank 5" in lines[0] and "sim0002" in lines[0] and "7" in lines[0], lines[0]


def test_a_failing_rank_gives_one_error_line_not_one_per_daemon(run_canopy):
    result = run_canopy(["--sim-nodes", "8", "--ppn", "2", "sh", "-c", '[ "$RANK" = 3 ] && exit 4; sleep 20'],
                        timeout=20)
    assert result.returncode == 4, result.describe()
    assert result.stderr_lines() == result.canopy_lines(), f"stderr has more than canopy's error:\n{result.stderr}"
    assert len(result.canopy_lines()) == 1, result.describe()


def test_first_failure_wins_over_later_ones(run_canopy):
    result = run_canopy(["--sim-nodes", "3", "sh", "-c",
                         'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1; exit 9'], timeout=20)
    assert result.returncode == 3, result.describe()
    assert len(result.canopy_lines()) == 1 and "rank 1 on sim0001" in result.canopy_lines()[0], result.describe()


def test_rank_killed_by_a_signal_exits_128_plus_signal(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "sh", "-c", '[ "$RANK" = 2 ] && kill -KILL $$; sleep 20'],
                        timeout=20)
    assert result.returncode == 128 + 9, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "rank 2" in lines[0] and "sim0001" in lines[0] and "SIGKILL" in lines[0], lines[0]


def test_rank_crashing_with_sigsegv_exits_139(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "sh", "-c", '[ "$RANK" = 0 ] && kill -SEGV $$; sleep 20'], timeout=20)
    assert result.returncode == 139, result.describe()
    assert "SIGSEGV" in result.canopy_lines()[0], result.describe()


def test_program_not_found_exits_127_naming_program_and_node(run_canopy):
    result = run_canopy(["--sim-nodes", "3", "canopy-no-such-program"], timeout=20)
    assert result.returncode == 127, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "canopy-no-such-program" in lines[0] and re.search(r"sim000[0-2]", lines[0]), lines[0]


def test_program_that_is_not_executable_fails_naming_it(run_canopy, sandbox):
    script = sandbox.root / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = run_canopy(["--sim-nodes", "2", str(script)], timeout=20)
    assert result.returncode == 126, result.describe()   # 127 is for a program that does not exist
    assert str(script) in result.canopy_lines()[0], result.describe()


def test_teardown_is_quick_when_one_rank_fails_and_others_sleep(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", "sh", "-c",
                         'if [ "$RANK" = 6 ]; then sleep 0.5; exit 1; fi; sleep 60'], timeout=30)
    assert result.returncode == 1, result.describe()
    assert result.seconds < 3.5, f"teardown took {result.seconds:.1f} s after the failure at 0.5 s"


def test_timeout_stops_the_job_with_124(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--timeout", "1", "sleep", "60"], timeout=30)
    assert result.returncode == 124, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and "--timeout" in lines[0], result.describe()
    assert 1.0 <= result.seconds < 5.0, f"job ended after {result.seconds:.1f} s"


def test_timeout_longer_than_the_job_changes_nothing(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--timeout", "30", "sh", "-c", "exit 0"], timeout=30)
    assert result.returncode == 0, result.describe()
    assert result.seconds < 5


def test_timeout_kills_ranks_that_ignore_sigterm(run_canopy, sandbox):
    config = sandbox.root / "grace.toml"
    config.write_text("[job]\nkill_grace = 1.0\n")
    result = run_canopy(["--config", config, "--sim-nodes", "2", "--timeout", "1", "sh", "-c",
                         "trap '' TERM; sleep 60 & while :; do sleep 1; done"], timeout=30)
    assert result.returncode == 124, result.describe()
    assert result.seconds < 8, f"ranks ignoring SIGTERM kept the job alive {result.seconds:.1f} s"


def test_closing_standard_output_ends_the_job_as_sigpipe_would(sandbox):
    """Issue 15, item 7: with `canopy ... | head -1` the job ran on to its end and exited 0. A command whose reader
    has gone dies of SIGPIPE; canopy ends the job instead, with one line and the shell's status for that: 141."""
    job = sandbox.start(["--sim-nodes", "2", "sh", "-c", "while :; do echo y; sleep 0.01; done"])
    assert job.stdout.readline() == b"y\n"
    job.stdout.close()
    started = time.monotonic()
    try:
        job.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("the job ran on after its standard output was closed")
    assert job.returncode == 141, job.stderr.read().decode()
    assert time.monotonic() - started < 5
    assert job.stderr.read().decode().splitlines() == ["canopy: standard output was closed; ending the job"]


# torch.distributed.elastic's @record writes the exception that ends a rank to TORCHELASTIC_ERROR_FILE, which
# canopy sets per rank as torchrun does.
RECORDED = """\
import os
from torch.distributed.elastic.multiprocessing.errors import record

def check(lr):
    if float(lr) > 1:
        raise ValueError(f"learning rate {lr} is too large")

@record
def main():
    if os.environ["RANK"] == "1":
        check("3")

main()
"""


def test_a_rank_that_raises_under_record_names_the_exception_and_where(run_canopy, sandbox):
    script = sandbox.root / "train.py"
    script.write_text(RECORDED)
    timing = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", "2", f"--timing={timing}", "/usr/bin/python3", script], timeout=90)
    assert result.returncode == 1, result.describe()
    failure = (f"rank 1 on sim0001 exited with code 1: ValueError: learning rate 3 is too large "
               f"(at {script}:6 in check)")
    assert result.canopy_lines() == [f"canopy: {failure}; tearing down the job"], result.describe()
    recorded = json.loads(timing.read_text())["failure"]
    assert recorded["line"] == failure
    assert 'raise ValueError(f"learning rate {lr} is too large")' in recorded["traceback"], recorded
    report = run_canopy(["report", timing])
    lines = report.stdout.splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("  failed: "))
    wrapped = [lines[failed][len("  failed: "):]] + [line.strip() for line in lines[failed + 1:failed + 4]
                                                    if line.startswith(" " * 10) and line.strip()]
    # Wrapped at spaces, or inside a word (a long path) longer than a line.
    assert "".join(wrapped).replace(" ", "") == failure.replace(" ", ""), report.describe()
    assert all(len(line) <= 100 for line in lines), report.describe()


def test_each_rank_gets_an_error_file_of_its_own(run_canopy):
    # One inherited from an outer torchrun would be shared by every rank: it is replaced.
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", "sh", "-c", 'echo "$TORCHELASTIC_ERROR_FILE"'],
                        env={"TORCHELASTIC_ERROR_FILE": "/tmp/outer-torchrun-error.json"})
    assert result.returncode == 0, result.describe()
    files = {rank: lines[0] for rank, lines in parse_labelled(result.stdout).items()}
    assert len(set(files.values())) == 4, files
    for rank, path in files.items():
        node_dir = rf"canopy-[0-9a-f]+-sim000{rank // 2}-[A-Za-z0-9]{{6}}"
        assert re.fullmatch(rf".*/{node_dir}/rank-{rank}\.error\.json", path), files
