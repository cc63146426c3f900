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

from conftest import Completed, PeakMemory, measures_memory, process_tree


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


# Stdin, read no faster than rank 0 takes it.

# What a launcher or daemon may reach while stdin flows: it starts at about 5 MiB, holds at most a 1 MiB window of
# stdin, and keeps up to 32 MiB of freed memory for reuse. Before, 3 s of /dev/zero took them past 700 MiB.
STDIN_PEAK_MIB = 48


def test_stdin_that_rank_0_never_reads_costs_no_memory(sandbox):
    with open("/dev/zero", "rb") as zero:
        job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2", "sleep", "3"], stdin=zero)
        memory = PeakMemory(sandbox, job)
        result = finish(job, timeout=60)
    memory.wait()
    assert result.returncode == 0, result.describe()
    assert len(memory.daemons) == 2, memory.describe()
    if measures_memory:
        assert memory.launcher < STDIN_PEAK_MIB and max(memory.daemons.values()) < STDIN_PEAK_MIB, memory.describe()


def test_stdin_rank_0_reads_late_arrives_whole_without_costing_memory(sandbox):
    """256 MiB piped in while rank 0 first sleeps, then reads it all: byte-exact, and held back where it comes from,
    not in canopy."""
    size_mib = 256
    read_end, write_end = os.pipe()
    job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2", "sh", "-c",
                                 'if [ "$RANK" = 0 ]; then sleep 2; sha256sum; fi'], stdin=read_end)
    os.close(read_end)
    memory = PeakMemory(sandbox, job)
    digest = hashlib.sha256()

    def feed():
        block = bytearray(os.urandom(1 << 20))
        with open(write_end, "wb") as pipe:
            for i in range(size_mib):
                block[:8] = i.to_bytes(8, "little")   # no two blocks alike: a repeated or lost one shows
                digest.update(block)
                pipe.write(block)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    result = finish(job, timeout=90)
    feeder.join(timeout=10)
    memory.wait()
    assert result.returncode == 0, result.describe()
    assert result.stdout.split() == [digest.hexdigest(), "-"], result.describe()
    if measures_memory:
        assert memory.launcher < STDIN_PEAK_MIB and max(memory.daemons.values()) < STDIN_PEAK_MIB, memory.describe()


# Lines longer than any buffer on the way.

# Rank 0 writes its lines of 8 MiB in pieces, going on all the while, so that rank 1's output, written meanwhile at
# full speed, has to wait behind each of them; rank 1 writes lines of 8 MiB at once.
LONG_LINES = r"""
import os, sys, time
rank, size = os.environ["RANK"], 8 << 20
out = sys.stdout.buffer
if rank == "0":
    for i in range(2):
        out.write(b"r0l%d:" % i)
        for _ in range(8):
            out.write(b"0" * (size // 8))
            out.flush()
            time.sleep(0.1)
        out.write(b"\n")
        out.flush()
else:
    time.sleep(0.3)
    for i in range(4):
        out.write(b"r1l%d:" % i + b"1" * size + b"\n")
        out.flush()
"""


def whole_lines(stdout, labelled):
    """{(rank, line number): whether it came whole and labelled as its rank} for every line of LONG_LINES' output."""
    found = {}
    for line in stdout.split(b"\n")[:-1]:
        label = b""
        if labelled:
            label, _, line = line.partition(b" ")
        head, _, body = line.partition(b":")
        rank, number = head[1:2], head[3:]
        whole = (len(head) == 4 and head[:1] == b"r" and head[2:3] == b"l" and len(body) == 8 << 20
                 and body.count(rank) == len(body) and label in (b"", b"[" + rank + b"]"))
        found[(rank.decode(errors="replace"), number[:12].decode(errors="replace"))] = whole
    return found


@pytest.mark.parametrize("mode", [[], ["--line-buffer"], ["-l"]], ids=["default", "line-buffer", "label"])
def test_lines_of_8_mib_from_two_ranks_arrive_whole(mode, sandbox):
    script = sandbox.root / "long_lines.py"
    script.write_text(LONG_LINES)
    job = start_canopy(sandbox, ["--sim-nodes", "2", "-n", "2"] + mode + ["python3", script])
    memory = PeakMemory(sandbox, job)
    out, err = job.communicate(timeout=90)
    memory.wait()
    assert job.returncode == 0, err.decode(errors="replace")
    expected = {("0", "0"), ("0", "1"), ("1", "0"), ("1", "1"), ("1", "2"), ("1", "3")}
    found = whole_lines(out, labelled=mode == ["-l"])
    lines = out.count(b"\n")
    assert set(found) == expected and all(found.values()), f"{len(out)} bytes in {lines} lines; whole: {found}"
    assert len(out) == 6 * ((8 << 20) + 6) + (6 * 4 if mode == ["-l"] else 0)
    if measures_memory:   # the output waits in the ranks' pipes, not here: 48 MiB went through
        assert memory.launcher < 100, memory.describe()

