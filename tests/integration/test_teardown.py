# Stopping a job from outside and losing parts of the tree: signals, dead daemons, a dead launcher, bad hosts.
import os
import signal
import time

import pytest

from conftest import daemon_for_node, wait_until

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
    job = sandbox.start(["--sim-nodes", "3", "sh", "-c", f"{ready.touch}; sleep 60; true"])
    ready.wait(3, job)
    pid = daemon_for_node("sim0002", sandbox.marker)
    assert pid, "no canopyd for sim0002 found in /proc"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    result = sandbox.finish(job, timeout=15)
    assert result.returncode == 255, result.describe()
    assert len(result.canopy_lines()) == 1 and "sim0002" in result.canopy_lines()[0], result.describe()
    assert time.monotonic() - killed < 5, "losing a daemon should end the job within seconds"
    # The sandbox fixture then checks that no rank process of sim0002, children included, is left.


def test_killing_the_launcher_takes_every_daemon_and_rank_with_it(sandbox, ready):
    job = sandbox.start(["--sim-nodes", "7", "--fanout", "2", "--ppn", "2", "sh", "-c", f"{ready.touch}; sleep 60"])
    ready.wait(14, job)
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
    assert result.seconds < 6
