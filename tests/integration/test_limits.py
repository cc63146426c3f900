# Jobs at the limits a user or a node sets: the process limit. Each fails with one line naming the limit, and
# leaves nothing behind.
import os
import time

import pytest


@pytest.mark.parametrize("limit", [4, 6])
def test_a_job_at_the_users_process_limit_fails_with_one_line_naming_the_limit(limit, stranger):
    # Issue 38: an ordinary user under `ulimit -u 6` (or 4, 8) got "terminate called ... std::system_error" and a
    # SIGABRT from the launcher. The limit counts threads too, and root is exempt from it: the job runs as a second,
    # unprivileged user.
    canopy = stranger.canopy()
    tmpdir = stranger.home / "tmp"
    tmpdir.mkdir()
    os.chown(tmpdir, stranger.uid, stranger.gid)
    result = stranger.run(["/bin/bash", "-c", f'ulimit -u {limit} && exec "$0" --sim-nodes 2 -n 2 echo ran',
                           canopy], env={"TMPDIR": str(tmpdir)}, timeout=60)
    assert result.returncode not in (0, 134) and result.returncode > 0, result.describe()
    assert "terminate called" not in result.stderr and "Aborted" not in result.stderr, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "Resource temporarily unavailable" in lines[0] and f"ulimit -u is {limit}" in lines[0], result.describe()
    # Nothing of the job is left: no process of the user's, no temp dir.
    deadline = time.monotonic() + 10
    while stranger.pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not stranger.pids(), f"processes left: {stranger.pids()}\n{result.describe()}"
    assert not [p.name for p in tmpdir.iterdir()], result.describe()
