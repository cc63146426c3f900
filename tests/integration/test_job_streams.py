# The job's standard streams end to end: output canopy cannot write, stdin that rank 0 takes slowly or never, and
# lines longer than any buffer on the way.
import hashlib
import os
import resource
import signal
import subprocess
import threading
import time

import pytest

from conftest import Completed, daemon_pids, process_tree


def start_canopy(sandbox, args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw):
    """sandbox.start with the standard streams the test chooses (a full device, a closed descriptor)."""
    process = subprocess.Popen(sandbox.command(args), stdin=stdin, stdout=stdout, stderr=stderr, env=sandbox.env,
                               cwd=sandbox.root, **kw)
    process.started_at = time.monotonic()
    sandbox.popens.append(process)
    sandbox.known_pids.add(process.pid)
    return process


def finish(process, timeout):
    """sandbox.finish for a job whose stdout or stderr the test chose: what was not captured reads as empty."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = process_tree(process.pid)
        process.kill()
        process.communicate()
        pytest.fail(f"canopy did not finish within {timeout} s: {process.args}\nstill running:\n{tree}")
    return Completed(process.args, process.returncode, (out or b"").decode(errors="replace"),
                     (err or b"").decode(errors="replace"), time.monotonic() - process.started_at)


# Standard output a job cannot write.

# A rank that prints for as long as it runs: ended by canopy, or the test's deadline fails it.
ENDLESS_OUTPUT = ["sh", "-c", "while :; do seq 1000; done"]


def test_a_full_disk_ends_the_job_with_one_line_and_a_failing_status(sandbox):
    with open("/dev/full", "wb") as full:
        job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2"] + ENDLESS_OUTPUT, stdout=full)
        result = finish(job, timeout=30)
    assert result.returncode == 1, result.describe()
    assert result.stderr.splitlines() == [
        "canopy: cannot write the job's standard output: No space left on device"], result.describe()


def test_output_cut_off_part_way_is_a_prefix_and_a_failing_status(sandbox):
    """As `> /small-tmpfs/out`: the first 64 KiB are written, then the file cannot grow (EFBIG here)."""
    out = sandbox.root / "out"

    def small_file_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails rather than killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))

    with open(out, "wb") as file:
        job = start_canopy(sandbox, ["-n", "1", "seq", "200000"], stdout=file, preexec_fn=small_file_limit)
        result = finish(job, timeout=30)
    expected = b"".join(b"%d\n" % i for i in range(1, 200001))
    written = out.read_bytes()
    assert result.returncode == 1, result.describe()
    assert result.stderr.splitlines() == ["canopy: cannot write the job's standard output: File too large"], \
        result.describe()
    assert len(written) == 65536 and expected.startswith(written)


def test_a_closed_standard_output_is_a_failed_write_not_a_lost_one(sandbox):
    """`canopy ... >&-`: nothing else may take descriptor 1 and swallow the output."""
    job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2", "echo", "hello"], stdout=None,
                       preexec_fn=lambda: os.close(1))
    result = finish(job, timeout=30)
    assert result.returncode == 1, result.describe()
    assert result.stderr.splitlines() == [
        "canopy: cannot write the job's standard output: Bad file descriptor"], result.describe()


def test_standard_error_that_cannot_be_written_still_fails_the_job(sandbox):
    """The line about it cannot be read; the exit code says so, and the job does not run on."""
    with open("/dev/full", "wb") as full:
        job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2", "sh", "-c", "echo oops >&2; exec sleep 60"],
                           stderr=full)
        result = finish(job, timeout=30)
    assert result.returncode == 1, result.describe()
    assert result.seconds < 20, result.describe()
