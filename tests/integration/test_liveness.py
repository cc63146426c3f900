# Liveness on tree links: a node that hangs (SIGSTOP) ends the job naming it, a hung launcher makes every daemon
# leave, and quiet or busy jobs that run many heartbeat timeouts are never declared lost.
import os
import pty
import re
import select
import signal
import time

import pytest

from conftest import CANOPY, daemon_for_node, daemon_pids, proc_state_and_ppid, wait_until

HEARTBEAT_TIMEOUT = 2.0
# The stopped side's last heartbeat may have left up to a quarter of the timeout before it stopped: silence is counted
# from then, so detection can come that much sooner after the SIGSTOP.
EARLIEST = HEARTBEAT_TIMEOUT * 3 / 4 - 0.1
# Detection takes the timeout (plus the scheduling of a loaded 2-core machine), then a failure teardown.
ENDS_WITHIN = HEARTBEAT_TIMEOUT + 4.0


def heartbeat_config(sandbox, seconds=HEARTBEAT_TIMEOUT):
    path = sandbox.root / "heartbeat.toml"
    path.write_text(f"[tree]\nheartbeat_timeout = {seconds}\n")
    return path


def resume(pid):
    """Lets a stopped process go on, so it can be reaped or notice it is alone; gone already is fine."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


# Fanout 2 over 7 nodes: sim0001 is a child of the launcher with children of its own (sim0004, sim0005); sim0005 is a
# leaf, so its own parent daemon is the one that notices.
@pytest.mark.parametrize("node", ["sim0005", "sim0001"], ids=["leaf", "inner"])
def test_stopped_daemon_ends_the_job_naming_it_and_the_missing_heartbeat(node, sandbox, ready):
    config = heartbeat_config(sandbox)
    job = sandbox.start(["--config", config, "--sim-nodes", "7", "--fanout", "2", "sh", "-c",
                         f"{ready.touch}; exec sleep 60"])
    ready.wait(7, job)
    pid = daemon_for_node(node, sandbox.marker)
    assert pid, f"no canopyd for {node} found in /proc"
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        result = sandbox.finish(job, timeout=30)
    finally:
        resume(pid)
    took = time.monotonic() - stopped
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert node in lines[0] and "no heartbeat for" in lines[0], lines[0]
    assert f"; canopyd (pid {pid}) still runs: state T, stopped" in lines[0], lines[0]
    assert EARLIEST <= took < ENDS_WITHIN, \
        f"the job ended {took:.1f} s after {node} stopped, with heartbeat_timeout {HEARTBEAT_TIMEOUT} s"
    # The sandbox fixture then checks that no daemon, guard or rank of the stopped subtree is left, nor a temp dir.


def test_stopped_launcher_makes_every_daemon_end_its_ranks_and_leave(sandbox, ready):
    config = heartbeat_config(sandbox)
    job = sandbox.start(["--config", config, "--sim-nodes", "7", "--fanout", "2", "--ppn", "2", "sh", "-c",
                         f"{ready.touch}; exec sleep 60"])
    ready.wait(14, job)
    assert len(sandbox.leftovers()) >= 7 + 14, "the job's daemons and ranks should be visible while it runs"
    job.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        # The launcher stays stopped: what ends is the daemons' own doing (a stopped parent reaps nothing, so they
        # linger as zombies, which do not count).
        gone = wait_until(lambda: not sandbox.leftovers(), ENDS_WITHIN + 2)
        took = time.monotonic() - stopped
        left = sandbox.leftovers()
        dirs = sandbox.job_dirs()
    finally:
        job.send_signal(signal.SIGCONT)
    assert gone, f"still running {took:.1f} s after the launcher stopped: {left}"
    assert EARLIEST <= took < ENDS_WITHIN, f"the daemons left {took:.1f} s after the launcher stopped"
    assert not dirs, f"temp dirs left by daemons whose launcher stopped: {dirs}"
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == 255, result.describe()   # resumed, the launcher finds its daemons gone


class InteractiveShell:
    """bash on a pseudo-terminal, typed at as a user would: Ctrl-Z and fg work as at a terminal."""

    def __init__(self, env, cwd):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(cwd)
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.output = ""

    def type(self, text):
        os.write(self.fd, text.encode())

    def read_until(self, pattern, timeout):
        """Everything the terminal showed so far, once `pattern` (a regex) appears in it; fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output) and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self.output += os.read(self.fd, 65536).decode(errors="replace").replace("\r", "")
                except OSError:
                    break
        if not re.search(pattern, self.output):
            pytest.fail(f"the terminal did not show {pattern!r} within {timeout} s:\n{self.output[-3000:]}",
                        pytrace=False)
        return self.output

    def poll(self):   # for Readiness.wait: the shell is the job's stand-in
        return None

    def close(self):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def test_ctrl_z_suspends_the_whole_job_and_fg_resumes_it(sandbox, ready):
    # A shell stops only the launcher; left at that, the ranks would run on and the daemons would take the stopped
    # launcher for hung and leave. Suspended for three heartbeat timeouts, the job must pause as a whole and go on.
    config = heartbeat_config(sandbox)
    shell = InteractiveShell({**sandbox.env, "PS1": "$ "}, sandbox.root)
    try:
        shell.type(f"{CANOPY} --config {config} --sim-nodes 3 --fanout 2 sh -c "
                   f"'{ready.touch}; sleep 2; echo finished $RANK'\n")
        ready.wait(3, shell)
        shell.type("\x1a")   # Ctrl-Z
        shell.read_until(r"Stopped", 10)
        time.sleep(3 * HEARTBEAT_TIMEOUT)
        running = sandbox.leftovers()
        # The ranks are the three shells; a shell stopped between its touch and its fork has no `sleep` yet.
        ranks = [pid for pid, command in running.items() if os.path.basename(command.split()[0]) == "sh"]
        rank_processes = ranks + [pid for pid, command in running.items() if command.startswith("sleep 2")]
        daemons = [pid for pid, command in running.items() if "canopyd --parent" in command]
        states = {pid: proc_state_and_ppid(pid)[0] for pid in rank_processes}
        shell.type("fg\n")
        # The job's end is the shell's next prompt after the ranks' lines; only then is its status there to ask for
        # (typed before, the line would be rank 0's standard input).
        shell.read_until(r"fg\n(.*\n)*(.*finished \d.*\n(.*\n)*){3}.*\$ $", 30)
        shell.type("echo EXIT=$?\n")
        output = shell.read_until(r"EXIT=\d+", 10)
    finally:
        shell.close()
    assert len(daemons) == 3, f"daemons left while the launcher was suspended: {running}\n{output}"
    assert len(ranks) == 3 and set(states.values()) == {"T"}, f"ranks not stopped while suspended: {states} {running}"
    assert "EXIT=0" in output, output
    assert sorted(re.findall(r"finished (\d)", output)) == ["0", "1", "2"], output
    after_fg = output.split("fg\n", 1)[1]
    assert not re.search(r"^canopy: |canopyd\[", after_fg, re.MULTILINE), output   # no warning, no error


def test_quiet_job_running_five_heartbeat_timeouts_succeeds(run_canopy, sandbox):
    config = heartbeat_config(sandbox, 1.0)
    result = run_canopy(["--config", config, "--sim-nodes", "4", "--fanout", "2", "sleep", "5"], timeout=30)
    assert result.returncode == 0, result.describe()
    assert result.stderr == "", result.describe()


def test_job_flooding_output_through_the_tree_is_not_lost(run_canopy, sandbox):
    # Every daemon's io thread is busy forwarding output the whole time: heartbeats (or the output itself) still
    # reach every parent within the 1 s timeout.
    config = heartbeat_config(sandbox, 1.0)
    per_rank = 8_000_000
    result = run_canopy(["--config", config, "--sim-nodes", "4", "--fanout", "2", "sh", "-c",
                         f"yes canopy-output | head -c {per_rank}; sleep 2"], timeout=60)
    assert result.returncode == 0, result.describe()
    assert len(result.stdout) == 4 * per_rank, result.describe()
    assert result.stderr == "", result.describe()


def test_reader_that_stalls_for_several_timeouts_loses_neither_the_job_nor_its_output(sandbox):
    # `canopy ... | less`, left paused: the launcher cannot write its stdout, and must still keep its heartbeats.
    config = heartbeat_config(sandbox, 1.0)
    per_rank = 2_000_000
    job = sandbox.start(["--config", config, "--sim-nodes", "2", "sh", "-c", f"yes canopy-output | head -c {per_rank}"])
    time.sleep(4)   # nothing reads canopy's stdout meanwhile: the pipe filled long ago
    result = sandbox.finish(job, timeout=30)
    assert result.returncode == 0, result.describe()
    assert len(result.stdout) == 2 * per_rank, result.describe()
    assert result.stderr == "", result.describe()


def rss_mib(pid):
    """The process's resident size in MiB; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0) // 1024
    except FileNotFoundError:
        return 0


def test_a_stalled_reader_holds_output_at_the_daemons_not_in_the_launchers_memory(sandbox):
    # 200 MB of output while nobody reads canopy's stdout: the launcher holds at most its queue's mark (32 MiB) and
    # the daemons stop reading their ranks' pipes, so the ranks wait in write() as at a stalled terminal. Before,
    # the launcher's memory grew by all of it (198 MiB peak, measured on this same job).
    # Rank 1 writes a little and exits while the output is held: what its pipe holds must wait for the release,
    # not be cut off by the grace that stops background processes holding a finished rank's pipes.
    per_rank, late = 100_000_000, 50_000
    script = (f"if [ $RANK = 1 ]; then sleep 2; head -c {late} /dev/zero | tr '\\0' y; "
              f"else head -c {per_rank} /dev/zero | tr '\\0' x; fi")
    job = sandbox.start(["--sim-nodes", "1", "-n", "3", "sh", "-c", script])
    peak = 0
    for _ in range(16):
        time.sleep(0.5)
        peak = max(peak, rss_mib(job.pid))
    result = sandbox.finish(job, timeout=60)
    assert result.returncode == 0, result.describe()
    assert len(result.stdout) == 2 * per_rank + late, f"{len(result.stdout)} bytes of {2 * per_rank + late}"
    assert result.stdout.count("x") == 2 * per_rank and result.stdout.count("y") == late
    # Under AddressSanitizer (tests/sanitize.sh sets ASAN_OPTIONS) freed memory waits in a quarantine of up to
    # 256 MiB, so the launcher's size says nothing there.
    if "ASAN_OPTIONS" not in os.environ:
        assert peak < 100, f"the launcher grew to {peak} MiB while its reader stalled"


@pytest.mark.parametrize("nodes", [1, 2], ids=["leaf", "through-an-inner-daemon"])
def test_a_launcher_that_reads_the_tree_late_finds_the_output_held_in_the_ranks_pipes_not_in_the_daemons(nodes,
                                                                                                     sandbox, ready):
    # The launcher stopped (as a loaded machine may leave it unscheduled) while the ranks write 200 MB: a daemon
    # reads its ranks' pipes, and lets its children send, only while little output waits on its link to its
    # parent, so neither the daemons nor the launcher, once it runs again, hold the job's output. Before, the
    # daemon queued 122-192 MiB and the launcher grew to 203 MiB (the flake of the test above on a loaded machine).
    # With two nodes in a chain (fanout 1), sim0000 also relays sim0001's rank.
    per_rank = 100_000_000
    go = sandbox.root / "go"
    script = f"{ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; head -c {per_rank} /dev/zero | tr '\\0' x"
    job = sandbox.start(["--sim-nodes", str(nodes), "--fanout", "1", "-n", "2", "sh", "-c", script])
    ready.wait(2, job)
    daemons = daemon_pids(sandbox.marker)
    assert len(daemons) == nodes, f"{len(daemons)} canopyd for {nodes} nodes"
    daemon_peak = 0
    os.kill(job.pid, signal.SIGSTOP)
    try:
        go.touch()
        for _ in range(10):
            time.sleep(0.1)
            daemon_peak = max([daemon_peak] + [rss_mib(pid) for pid in daemons])
    finally:
        os.kill(job.pid, signal.SIGCONT)
    launcher_peak = 0
    for _ in range(8):   # nobody reads canopy's stdout yet
        time.sleep(0.5)
        launcher_peak = max(launcher_peak, rss_mib(job.pid))
        daemon_peak = max([daemon_peak] + [rss_mib(pid) for pid in daemons])
    result = sandbox.finish(job, timeout=60)
    assert result.returncode == 0, result.describe()
    assert len(result.stdout) == 2 * per_rank and result.stdout.count("x") == 2 * per_rank, \
        f"{len(result.stdout)} bytes of {2 * per_rank}"
    if "ASAN_OPTIONS" not in os.environ:   # see above
        assert daemon_peak < 48, f"a daemon grew to {daemon_peak} MiB while the launcher did not read"
        assert launcher_peak < 100, f"the launcher grew to {launcher_peak} MiB"


@pytest.mark.parametrize("value", ["0", "-1", "1e308", "\"soon\"", "0.1"],
                         ids=["zero", "negative", "absurdly-large", "not-a-number", "below-half-a-second"])
def test_bad_heartbeat_timeout_gives_one_line_naming_file_and_key(value, run_canopy, sandbox):
    path = sandbox.root / "liveness.toml"
    path.write_text(f"[tree]\nheartbeat_timeout = {value}\n")
    result = run_canopy(["--config", path, "--sim-nodes", "1", "true"], timeout=10)
    assert result.returncode == 2, result.describe()
    lines = result.stderr_lines()
    assert len(lines) == 1, result.describe()
    assert lines[0].startswith("canopy: ") and "liveness.toml:2" in lines[0] and "heartbeat_timeout" in lines[0], \
        lines[0]
    assert "0.5 to 86400" in lines[0], lines[0]
