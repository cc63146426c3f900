# Stopping a job from outside and losing parts of the tree: signals, dead daemons, a dead launcher, bad hosts.
import fcntl
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import daemon_for_node, proc_state_and_ppid, wait_until

# A rank that reports a forwarded signal and exits 0, so the exit code canopy returns is canopy's decision.
TRAPPING_RANK = ("trap 'echo \"rank $RANK got {name}\"; exit 0' {name}; " + "{touch}; " +
                 "while :; do sleep 0.2; done")


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_canopy_is_forwarded_to_every_rank(signo, sandbox, ready):
    name = signal.Signals(signo).name[3:]
    job = sandbox.start(["--sim-nodes", "3", "--ppn", "2", "sh", "-c",
                         TRAPPING_RANK.format(name=name, touch=ready.touch)])
    ready.wait(6, job)
    job.send_signal(signo)
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == 128 + signo, result.describe()
    assert sorted(result.stdout.splitlines()) == sorted(f"rank {r} got {name}" for r in range(6)), result.describe()
    assert any(f"SIG{name}" in line for line in result.canopy_lines()), result.describe()


def test_ranks_ignoring_sigterm_are_killed_after_the_grace(sandbox, ready):
    config = sandbox.root / "grace.toml"
    config.write_text("[job]\nkill_grace = 1.0\n")
    job = sandbox.start(["--config", config, "--sim-nodes", "2", "--ppn", "2", "sh", "-c",
                         f"trap '' TERM; {ready.touch}; while :; do sleep 0.2; done"])
    ready.wait(4, job)
    signalled = time.monotonic()
    job.send_signal(signal.SIGTERM)
    result = sandbox.finish(job, timeout=20)
    took = time.monotonic() - signalled
    assert result.returncode == 128 + signal.SIGTERM, result.describe()
    assert 0.9 <= took < 5.0, f"the job ended {took:.1f} s after SIGTERM with kill_grace 1 s"


def test_second_sigint_stops_the_job_at_once(sandbox, ready):
    job = sandbox.start(["--sim-nodes", "2", "sh", "-c", f"trap '' INT; {ready.touch}; while :; do sleep 0.2; done"])
    ready.wait(2, job)
    job.send_signal(signal.SIGINT)
    time.sleep(0.3)
    job.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == 128 + signal.SIGINT, result.describe()
    assert time.monotonic() - interrupted < 2.5, "a second Ctrl-C should not wait for the 3 s kill grace"


# Fanout 2 over 7 nodes: sim0000 and sim0001 have children of their own, sim0005 is a leaf.
@pytest.mark.parametrize("node", ["sim0005", "sim0001"], ids=["leaf", "inner"])
def test_daemon_killed_mid_job_fails_the_job_naming_its_node(node, sandbox, ready):
    # Each rank is the sleep itself (exec), so the kernel can take it along when its daemon dies outright.
    job = sandbox.start(["--sim-nodes", "7", "--fanout", "2", "sh", "-c", f"{ready.touch}; exec sleep 60"])
    ready.wait(7, job)
    pid = daemon_for_node(node, sandbox.marker)
    assert pid, f"no canopyd for {node} found in /proc"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert node in lines[0], lines[0]
    assert time.monotonic() - killed < 5, "losing a daemon should end the job within seconds"


def test_daemon_killed_while_its_ranks_have_children_ends_the_job_and_leaves_nothing(sandbox, ready):
    # Real ranks are often a shell or a wrapper with the program as its child; those children must neither keep
    # the dead daemon's connection open (the job would never end) nor outlive the job.
    job = sandbox.start(["--sim-nodes", "3", "sh", "-c", f'echo "job $CANOPY_JOBID"; {ready.touch}; sleep 60; true'])
    ready.wait(3, job)
    job_id = job.stdout.readline().decode().split()[1]
    pid = daemon_for_node("sim0002", sandbox.marker)
    assert pid, "no canopyd for sim0002 found in /proc"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    result = sandbox.finish(job, timeout=15)
    assert result.returncode == 255, result.describe()
    assert len(result.canopy_lines()) == 1 and "sim0002" in result.canopy_lines()[0], result.describe()
    assert time.monotonic() - killed < 5, "losing a daemon should end the job within seconds"
    # The dead daemon's guard kills and removes its ranks' cgroup, where there is one (root here).
    assert wait_until(lambda: not cgroups_of_job(job_id), 3), f"cgroups left: {cgroups_of_job(job_id)}"
    # The sandbox fixture then checks that no rank process of sim0002, children included, is left.


# Busy: every rank floods its output, which nobody reads, so the launcher and every daemon have writes queued.
@pytest.mark.parametrize("ranks", ["sleeping", "busy"])
def test_killing_the_launcher_takes_every_daemon_and_rank_with_it(ranks, sandbox, ready):
    work = "sleep 60" if ranks == "sleeping" else "exec yes"
    job = sandbox.start(["--sim-nodes", "7", "--fanout", "2", "--ppn", "2", "sh", "-c", f"{ready.touch}; {work}"])
    ready.wait(14, job)
    if ranks == "busy":
        time.sleep(1)
    assert len(sandbox.leftovers()) >= 7 + 14, "the job's daemons and ranks should be visible while it runs"
    job.kill()
    job.wait(timeout=5)
    gone = wait_until(lambda: not sandbox.leftovers(), 2.0)
    assert gone, f"still running 2 s after canopy was killed: {sandbox.leftovers()}"
    assert wait_until(lambda: not sandbox.job_dirs(), 2.0), f"temp dirs left: {sandbox.job_dirs()}"


def test_agent_that_fails_reports_the_host_and_what_the_agent_said(run_canopy, loopback_config):
    agent = "exec:sh -c 'echo \"agent cannot reach $0\" >&2; exit 255' %h"
    result = run_canopy(["--config", loopback_config, "--agent", agent, "--hosts", "deadhost1", "true"], timeout=30)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "deadhost1" in lines[0] and "agent cannot reach deadhost1" in lines[0], lines[0]
    assert result.seconds < 5


def test_agent_false_reports_the_host(run_canopy, loopback_config):
    result = run_canopy(["--config", loopback_config, "--agent", "exec:false %h", "--hosts", "deadhost2", "true"],
                        timeout=30)
    assert result.returncode == 255, result.describe()
    assert len(result.canopy_lines()) == 1 and "deadhost2" in result.canopy_lines()[0], result.describe()


def test_one_unreachable_host_among_good_ones_fails_the_job_and_cleans_up(run_canopy, loopback_config):
    # The agent starts the daemon for good hosts and fails for bad ones, like ssh to a node that is down.
    agent = ("exec:sh -c 'case $0 in bad*) echo \"ssh: connect to host $0 port 22: Connection refused\" >&2; "
             "exit 255;; esac; exec \"$@\"' %h")
    result = run_canopy(["--config", loopback_config, "--agent", agent, "--hosts", "good1,good2,bad3,good4",
                         "--fanout", "2", "sh", "-c", "sleep 20"], timeout=30)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert "bad3" in lines[0] and "Connection refused" in lines[0], lines[0]
    assert result.seconds < 8, "the job should end soon after the host fails"


def test_daemon_that_never_connects_back_times_out_naming_the_host(run_canopy, sandbox):
    config = sandbox.root / "fast.toml"
    config.write_text('[tree]\nbind_address = "127.0.0.1"\nconnect_timeout = 1.0\n')
    result = run_canopy(["--config", config, "--agent", "exec:sh -c 'sleep 60' %h", "--hosts", "slowhost", "true"],
                        timeout=30)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and "slowhost" in lines[0] and "1 s" in lines[0], result.describe()
    # What the agent's process was doing: a user tells a slow node from one whose kernel holds the daemon.
    assert "; sh (pid " in lines[0] and ") still runs: state S, asleep" in lines[0], result.describe()
    assert result.seconds < 6


def _group_leader_with_pid(pid, attempts=100):
    """A `sleep` leading its own process group whose pid is `pid`, got by asking the kernel for that pid next
    (ns_last_pid, as CRIU does); None where this machine will not let us (not root) or others forked first."""
    for _ in range(attempts):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as last:
                last.write(str(pid - 1))
        except OSError:
            return None
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
        if stranger.pid == pid:
            return stranger
        stranger.kill()
        stranger.wait()
    return None


# Rank 0 prints its pid and exits at once; the others wait until the test says go.
EARLY_EXIT_RANK = ('if [ "$RANK" = 0 ]; then echo $$; exit 0; fi; '
                   'while [ ! -e "$GO" ]; do sleep 0.05; done')


@pytest.mark.parametrize("ending", ["job_ends", "daemon_killed"])
def test_a_process_that_reuses_an_exited_ranks_pid_survives_the_job(ending, sandbox):
    """Issue 15, item 3: an exited rank's process group, once empty, is neither the daemon's nor its guard's to
    kill, even when an unrelated process now leads a group of the same number."""
    go = sandbox.root / "go"
    sandbox.env["GO"] = str(go)
    job = sandbox.start(["--sim-nodes", "1", "-n", "2", "sh", "-c", EARLY_EXIT_RANK])
    pid = int(job.stdout.readline())
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10), f"rank 0 (pid {pid}) was never reaped"
    stranger = _group_leader_with_pid(pid)
    if stranger is None:
        go.touch()
        sandbox.finish(job, timeout=20)
        pytest.skip(f"could not start a process with pid {pid} (needs root, and no other fork in between)")
    try:
        if ending == "daemon_killed":
            daemon = daemon_for_node("sim0000", sandbox.marker)
            assert daemon, "no canopyd for sim0000 found in /proc"
            os.kill(daemon, signal.SIGKILL)
        else:
            go.touch()
        result = sandbox.finish(job, timeout=20)
        assert result.returncode == (255 if ending == "daemon_killed" else 0), result.describe()
        time.sleep(0.5)   # the guard's cleanup runs once the daemon is gone
        assert stranger.poll() is None, f"the unrelated process with rank 0's old pid {pid} was killed ({ending})"
    finally:
        stranger.kill()
        stranger.wait()


def test_what_an_exited_rank_left_running_is_killed_at_job_end(sandbox):
    """The other side of the same rule: while an exited rank's background process is in its group, the group is
    still the job's, and the job's end kills it."""
    go = sandbox.root / "go"
    sandbox.env["GO"] = str(go)
    job = sandbox.start(["--sim-nodes", "1", "-n", "2", "sh", "-c",
                         'if [ "$RANK" = 0 ]; then sleep 60 & echo $!; exit 0; fi; '
                         'while [ ! -e "$GO" ]; do sleep 0.05; done'])
    background = int(job.stdout.readline())
    time.sleep(0.5)   # rank 0's shell has exited and been reaped; its sleep lives on in its group
    assert os.path.exists(f"/proc/{background}"), "rank 0's background sleep should still run"
    go.touch()
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == 0, result.describe()
    assert wait_until(lambda: proc_state_and_ppid(background)[0] in (None, "Z"), 3), \
        f"rank 0's background sleep (pid {background}) outlived the job"


@pytest.mark.parametrize("ending", ["ranks_exit", "interrupted"])
def test_what_a_rank_started_in_a_session_of_its_own_is_killed_at_job_end(ending, sandbox, ready):
    """Issue 15, item 7: a rank's `setsid` child outlived the job; no group kill reaches it."""
    go = sandbox.root / "go"
    rank = (f'setsid sleep 60 < /dev/null > /dev/null 2>&1 & echo $!; {ready.touch}; '
            + (f'while [ ! -e {go} ]; do sleep 0.05; done' if ending == "ranks_exit" else 'while :; do sleep 0.2; done'))
    job = sandbox.start(["--sim-nodes", "2", "sh", "-c", rank])
    escaped = [int(job.stdout.readline()) for _ in range(2)]
    ready.wait(2, job)
    assert all(os.path.exists(f"/proc/{pid}") for pid in escaped), "the ranks' setsid sleeps should run"
    if ending == "interrupted":
        job.send_signal(signal.SIGINT)
    else:
        go.touch()
    result = sandbox.finish(job, timeout=20)
    assert result.returncode == (0 if ending == "ranks_exit" else 128 + signal.SIGINT), result.describe()
    assert wait_until(lambda: all(proc_state_and_ppid(pid)[0] in (None, "Z") for pid in escaped), 2), \
        f"the ranks' setsid children {escaped} outlived the job"


ESCAPEES = Path(__file__).with_name("escapees.py")
ESCAPE_MODES = ["setsid", "new_group", "double_fork", "double_fork_cleared_env", "ignores_term", "parent_outlives",
                "parent_outlives.parent", "cleared_env_own_group"]


def cgroups_of_job(job_id):
    """The cgroup dirs a job's daemons made (proc/rank_cgroup.hpp), wherever cgroup v2 is mounted. Other tests' jobs
    make and remove theirs meanwhile: a directory that goes while it is read is passed over."""
    found = set()
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        for parent, children, _ in os.walk(mount, onerror=lambda error: None):
            found.update(os.path.join(parent, name) for name in children if name.startswith(f"canopy-{job_id}-"))
    return sorted(found)


@pytest.mark.parametrize("who", ["root_with_a_cgroup", "a_user_without_one"])
def test_nothing_a_rank_starts_outlives_the_job_whichever_way_it_leaves(who, sandbox, request):
    """Issue 38, item 11: a rank's helpers left the job's process tree by setsid, a new group, a double fork, a
    cleared environment block (as setproctitle does), by ignoring SIGTERM, or with a parent that outlives the rank.
    Each of them is killed at the job's end: by the ranks' cgroup where the kernel lets the user make one (root
    here), and otherwise by the daemon, their subreaper, which kills every child it did not start itself."""
    if who == "root_with_a_cgroup":
        if os.geteuid() != 0:
            pytest.skip("only root may make a cgroup on this machine")
        out = sandbox.root / "escaped"
        out.mkdir()
        result = sandbox.run(["--sim-nodes", "1", "-n", "1", "/usr/bin/python3", ESCAPEES, out], timeout=60)
    else:
        user = request.getfixturevalue("stranger")
        out = user.home / "escaped"
        out.mkdir()
        tmp = user.home / "tmp"
        tmp.mkdir()
        for path in (out, tmp):
            os.chown(path, user.uid, user.gid)
        result = user.run([user.canopy(), "--sim-nodes", "1", "-n", "1", "/usr/bin/python3", user.tool(ESCAPEES),
                           out], env={"TMPDIR": str(tmp)}, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("started "), result.describe()
    pids = {path.name[:-len(".pid")]: int(path.read_text()) for path in out.glob("*.pid")}
    assert sorted(pids) == sorted(ESCAPE_MODES), f"not every escape started: {sorted(pids)}\n{result.describe()}"
    alive = lambda: {mode: pid for mode, pid in pids.items() if proc_state_and_ppid(pid)[0] not in (None, "Z")}
    left = alive() if not wait_until(lambda: not alive(), 3) else {}
    for pid in left.values():
        os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived the job: {left}"
    job_id = result.stdout.split()[1]
    assert wait_until(lambda: not cgroups_of_job(job_id), 3), f"cgroups left: {cgroups_of_job(job_id)}"


def test_sigint_early_in_start_up_stops_the_job_without_waiting_the_kill_grace(sandbox):
    """Issue 15, item 7: SIGINT 35 ms into start-up let most ranks start, and the job took the whole kill_grace."""
    early = stopped = 0
    # How far start-up gets in a given time depends on the machine and the build (a sanitizer's is slower): the
    # delay moves later after a SIGINT that came before the launcher took it over, and sooner after one that came
    # once every rank had started.
    delay = 0.02
    for attempt in range(12):
        if early >= 3 and stopped:
            break
        ready = sandbox.root / f"ready{attempt}"
        ready.mkdir()
        job = sandbox.start(["--sim-nodes", "16", "--ppn", "2", "sh", "-c", 'touch "$READY/$RANK"; sleep 60'],
                            env={"READY": str(ready)})
        time.sleep(delay)
        job.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        result = sandbox.finish(job, timeout=20)
        took = time.monotonic() - interrupted
        if result.returncode == -signal.SIGINT:
            # It came before the launcher took over SIGINT (a sanitizer's build starts slower), so the default
            # action ended it, as any program: nothing had started yet, and nothing is left behind.
            assert not list(ready.iterdir()), result.describe()
            delay *= 1.5
            continue
        assert result.returncode == 128 + signal.SIGINT, result.describe()
        if any("SIGINT" in line and "start-up" in line for line in result.canopy_lines()):
            early += 1
            assert took < 2.5, f"the job took {took:.1f} s to end after SIGINT at {delay * 1000:.0f} ms (kill_grace 3 s)"
            # The daemons may all have started their ranks just before the root heard of it: then a little sooner.
            if len(list(ready.iterdir())) < 32:
                stopped += 1
            else:
                delay /= 1.1
        else:
            # Every rank had started, so the ranks got the signal. A shell whose foreground command has just exited
            # normally may ignore it and go on, as a rank may: then the kill grace ends the job.
            assert took < 3 + 2, f"the job took {took:.1f} s to end after SIGINT at {delay * 1000:.0f} ms (kill_grace 3 s)"
            delay /= 1.25   # unlike the step up, so the delays narrow in on the window
    assert early, "no SIGINT came during start-up: the test did not test anything"
    assert stopped, f"none of {early} interrupts during start-up kept a rank from starting"


def _exited(process):
    """Whether `process` has exited, without reaping it: a zombie's pid cannot go to another process meanwhile."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def test_a_signal_as_a_successful_job_ends_gives_128_plus_its_number(sandbox):
    """Issue 15, item 7: SIGTERM just after every rank exited 0 gave 0, 143 or death by the signal depending on
    timing. Canopy was interrupted before it exited: like any command, it exits 128+N (README, exit codes)."""
    hits = 0
    for attempt in range(40):   # the teardown after the last rank takes about 10 ms: not every try lands in it
        job = sandbox.start(["--sim-nodes", "8", "sh", "-c", 'echo "bye $RANK"'])
        for _ in range(8):
            assert job.stdout.readline().startswith(b"bye"), "every rank should say bye"
        time.sleep(0.001 * (attempt % 3))
        signalled = 0
        while not _exited(job):
            os.kill(job.pid, signal.SIGTERM)
            signalled += 1
            time.sleep(0.01)
        result = sandbox.finish(job, timeout=20)
        # A signal that lands inside canopy's exit() may be lost, as for any process; one sent 10 ms earlier is not.
        # (2 ms was too tight on a loaded 2-core machine: the first CI-style run of session 15 lost both.)
        allowed = [128 + signal.SIGTERM] if signalled > 1 else [0, 128 + signal.SIGTERM]
        assert result.returncode in allowed, f"{signalled} SIGTERM sent before canopy exited\n{result.describe()}"
        hits += result.returncode == 128 + signal.SIGTERM
        if hits == 3:
            break
    assert hits, "no SIGTERM reached canopy before it exited: the test did not test anything"


def test_a_job_removes_temp_dirs_that_jobs_killed_outright_left_behind(sandbox):
    # A job whose canopyd and guard were both SIGKILLed (a Slurm step cancelled as it starts) leaves its node temp
    # dir; the next job on the host removes it, and only it: never a dir that a live process holds, a fresh one, or
    # one that is not a node temp dir.
    def node_dir(name, locked=True):
        path = sandbox.tmpdir / name
        path.mkdir()
        (path / "app.sock").write_text("x")
        if locked:
            (path / ".canopyd.lock").write_text("")
        return path

    def make_old(path):
        an_hour_ago = time.time() - 3600
        os.utime(path, (an_hour_ago, an_hour_ago))

    abandoned, held, fresh, foreign = (node_dir("canopy-deadjob-sim0001"), node_dir("canopy-livejob-sim0001"),
                                       node_dir("canopy-newjob-sim0001"), node_dir("canopy-stage-x", locked=False))
    for path in (abandoned, held, foreign):
        make_old(path)
    holder = open(held / ".canopyd.lock")
    try:
        fcntl.flock(holder, fcntl.LOCK_SH)
        result = sandbox.run(["--sim-nodes", "2", "sleep", "1"], timeout=30)
        assert result.returncode == 0, result.describe()
        assert not abandoned.exists(), "the abandoned node temp dir was not removed"
        for kept in (held, fresh, foreign):
            assert (kept / "app.sock").exists(), f"{kept.name} was removed"
    finally:
        holder.close()
        for path in (held, fresh, foreign):
            shutil.rmtree(path, ignore_errors=True)
