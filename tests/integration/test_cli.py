# The command line as a user meets it: --help, --version, and one clear line for each kind of bad input.
import re
import subprocess

import pytest

from conftest import REPO, daemon_pids

HELP_GROUPS = ["Ranks and hosts:", "Rank environment:", "Output:", "Binding:", "Job:", "Tree and launch agent:",
               "Timing:", "Config:", "General:"]


def project_version():
    match = re.search(r"version\s*:\s*'([^']+)'", (REPO / "meson.build").read_text())
    assert match, "meson.build has no project version"
    return match.group(1)


def test_help_lists_every_option_group_on_stdout(run_canopy):
    result = run_canopy(["--help"], timeout=10)
    assert result.returncode == 0, result.describe()
    assert result.stdout.startswith("Usage: canopy [options] PROGRAM [ARGS...]")
    positions = [result.stdout.find(group) for group in HELP_GROUPS]
    assert all(pos >= 0 for pos in positions), f"missing groups in --help:\n{result.stdout}"
    assert positions == sorted(positions), "option groups are out of order"
    for option in ["--sim-nodes", "--ppn", "--hostfile", "--env", "--cpu-bind", "--timeout", "--timing", "--config",
                   "--spawn-slots"]:
        assert option in result.stdout
    assert result.stderr == ""


def test_help_wins_over_a_missing_program(run_canopy):
    result = run_canopy(["-n", "4", "-h"], timeout=10)
    assert result.returncode == 0, result.describe()
    assert "Ranks and hosts:" in result.stdout


def test_version_prints_the_project_version(run_canopy):
    result = run_canopy(["--version"], timeout=10)
    assert result.returncode == 0, result.describe()
    assert result.stdout == f"canopy {project_version()}\n"


def write(path, text):
    path.write_text(text)
    return path


# Each case: the arguments (built from the test's temp dir), and what the single error line must mention.
BAD_INPUT = {
    "unknown option suggests the near miss": (lambda d: ["--hots", "n1", "hostname"], ["'--hots'", "'--hosts'"]),
    "unknown option far from any": (lambda d: ["--frobnicate", "hostname"], ["'--frobnicate'", "--help"]),
    "zero ranks": (lambda d: ["-n", "0", "hostname"], ["-n", "0"]),
    "ranks not a number": (lambda d: ["-n", "four", "hostname"], ["-n", "'four'"]),
    "no program": (lambda d: ["-n", "2"], ["no program"]),
    "missing hostfile": (lambda d: ["--hostfile", str(d / "nope.txt"), "hostname"], ["nope.txt"]),
    "empty hostfile": (lambda d: ["--hostfile", str(write(d / "empty.txt", "# nothing\n\n")), "hostname"],
                       ["empty.txt", "no hosts"]),
    "malformed hostfile names file and line": (
        lambda d: ["-f", str(write(d / "bad.txt", "n1\nn2 slots=lots\nn3\n")), "hostname"],
        ["bad.txt:2", "slots"]),
    "hostlist syntax error": (lambda d: ["--hosts", "nid[001-", "hostname"], ["nid[001-"]),
    "trace file that is a directory": (lambda d: ["--trace", str(d), "hostname"], ["--trace", "is a directory"]),
    "hosts with bad slots": (lambda d: ["--hosts", "n1:2,n2:two", "hostname"], ["--hosts", "n2:two", "slots"]),
    "hosts and hostfile together": (
        lambda d: ["--hosts", "n1", "--hostfile", str(write(d / "h.txt", "n1\n")), "hostname"],
        ["--hosts", "--hostfile"]),
    "sim-nodes and hosts together": (lambda d: ["--sim-nodes", "2", "--hosts", "n1,n2", "hostname"],
                                     ["--sim-nodes", "--hosts"]),
    "bad config value names file and line": (
        lambda d: ["--config", str(write(d / "site.toml", "[tree]\nfanout = 4\nwindow = 0\n")), "hostname"],
        ["site.toml:3", "window"]),
    "config with a typo key": (
        lambda d: ["--config", str(write(d / "typo.toml", "[tree]\nfanot = 4\n")), "hostname"],
        ["typo.toml:2", "'fanot'", "fanout"]),
    "config that is not TOML": (
        lambda d: ["--config", str(write(d / "broken.toml", "[launch]\nagent = ssh\n")), "hostname"],
        ["broken.toml:2"]),
    "missing config file": (lambda d: ["--config", str(d / "absent.toml"), "hostname"], ["absent.toml"]),
    "unknown launch agent": (lambda d: ["--hosts", "n1", "--agent", "telnet", "hostname"], ["telnet"]),
    "ppn needs more hosts than given": (lambda d: ["--sim-nodes", "2", "--ppn", "2", "-n", "6", "hostname"],
                                        ["-n 6", "--ppn 2"]),
    "negative spawn slots": (lambda d: ["--spawn-slots", "-1", "hostname"], ["--spawn-slots", "at least 0", "-1"]),
    "spawn slots not a number": (lambda d: ["--spawn-slots", "many", "hostname"], ["--spawn-slots", "'many'"]),
    # Each of these once hung, overflowed a timer or crashed (issue 15's probe).
    "more ranks on a node than PMIx can number": (lambda d: ["--sim-nodes", "2", "-n", "2147483648", "true"],
                                                  ["-n 2147483648", "1073741824 ranks on sim0000", "65535"]),
    "ranks per node beyond any node": (lambda d: ["--sim-nodes", "2", "--ppn", "99999999999", "true"],
                                       ["--ppn", "at most 65535"]),
    "more simulated nodes than addresses": (lambda d: ["--sim-nodes", "99999", "true"], ["--sim-nodes", "65024"]),
    "a timeout past what timers hold": (lambda d: ["--timeout", "1e10", "--sim-nodes", "1", "true"],
                                        ["--timeout", "a year", "1e10"]),
    "kill grace past what timers hold": (
        lambda d: ["--config", str(write(d / "grace.toml", "[job]\nkill_grace = 1e308\n")), "--sim-nodes", "1", "true"],
        ["grace.toml:2", "kill_grace", "86400"]),
    "hostfile that is a device": (lambda d: ["-f", "/dev/zero", "true"], ["/dev/zero", "is a device"]),
    "config that is a directory": (lambda d: ["--config", str(d), "true"], ["config", "is a directory"]),
    "config that is a device": (lambda d: ["--config", "/dev/zero", "true"], ["config /dev/zero", "is a device"]),
    "hostfile that is a directory": (lambda d: ["-f", str(d), "true"], ["is a directory"]),
    "stage manifest that is a directory": (
        lambda d: ["--sim-nodes", "1", "--stage", "/usr/lib/python3", "--stage-manifest", str(d), "true"],
        ["stage manifest", "is a directory"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=list(BAD_INPUT))
def test_bad_input_gives_one_line_and_exit_2(case, run_canopy, sandbox):
    make_args, mentions = BAD_INPUT[case]
    result = run_canopy(make_args(sandbox.root), timeout=10)
    assert result.returncode == 2, result.describe()
    lines = result.stderr_lines()
    assert len(lines) == 1, f"expected one error line:\n{result.describe()}"
    assert lines[0].startswith("canopy: "), lines[0]
    for word in mentions:
        assert word in lines[0], f"error line should mention {word!r}: {lines[0]}"
    assert result.stdout == ""
    assert result.seconds < 5, "a usage error should not start anything"


def test_canopyd_run_by_hand_says_canopy_starts_it(canopyd_bin):
    result = subprocess.run([str(canopyd_bin)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    assert result.returncode == 2, result
    assert result.stderr.startswith("canopyd: ") and "started by canopy" in result.stderr, result.stderr


def test_canopyd_without_a_secret_on_stdin_refuses_to_join(canopyd_bin):
    result = subprocess.run([str(canopyd_bin), "--parent", "127.0.0.1:9", "--position", "1", "--node", "n1"],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=40)
    assert result.returncode != 0, result
    assert "secret" in result.stderr, result.stderr


def test_canopyd_version_matches_canopy(canopyd_bin):
    result = subprocess.run([str(canopyd_bin), "--version"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0 and result.stdout == f"canopyd {project_version()}\n", result


def test_dry_run_prints_the_plan_and_starts_nothing(run_canopy, sandbox):
    marker = sandbox.tmpdir.parent / "ran"
    result = run_canopy(["--dry-run", "--sim-nodes", "5", "--fanout", "2", "--ppn", "2", "--cpu-bind", "core",
                         "sh", "-c", f"touch {marker}"])
    assert result.returncode == 0, result.describe()
    out = result.stdout
    assert "Job: 10 ranks on 5 nodes (hosts from --sim-nodes)" in out, out
    assert "  node 4 sim0004: ranks 8-9\n" in out, out
    assert re.search(r"^canopy: bindings on sim000\d \(topology: this machine\):\n  rank CPUs NUMA GPUs NICs\n"
                     r"  0    \d+\s+-    -    -\n  1    \d+\s+-    -    -$", out, re.M), out
    # fanout 2: the launcher starts sim0000 and sim0001, sim0000 starts sim0002 and sim0003, sim0001 sim0004.
    assert "  launcher -> sim0000 sim0001\n  sim0000 -> sim0002 sim0003\n  sim0001 -> sim0004\n" in out, out
    commands = [line for line in out.splitlines() if "canopyd --parent" in line]
    assert len(commands) == 5, out
    assert commands[2].startswith("  sim0000: ") and "--position 3 --node sim0002" in commands[2], out
    assert not marker.exists(), "a rank ran under --dry-run"
    assert not daemon_pids(sandbox.marker), "a canopyd was started under --dry-run"


def test_a_longer_connect_timeout_reaches_every_daemon_which_waits_as_long_for_its_parent(run_canopy, sandbox):
    # A parent slow to let a child in (thousands of simulated nodes on two cores) must not make the child leave
    # before the parent's own bound: the child is told it.
    config = sandbox.root / "slow-start.toml"
    config.write_text("[tree]\nconnect_timeout = 45\n")
    daemon_args = ["--sim-nodes", "7", "--fanout", "2", "sh", "-c", "ps -o args= -p $PPID"]
    result = run_canopy(["--config", config] + daemon_args)
    assert result.returncode == 0, result.describe()
    lines = result.stdout.splitlines()
    assert len(lines) == 7 and all(line.endswith("--join-timeout 45") for line in lines), result.describe()
    result = run_canopy(daemon_args)
    assert result.returncode == 0 and "--join-timeout" not in result.stdout, result.describe()


def test_dry_run_on_ten_thousand_hosts_shows_every_node_and_agent_command(run_canopy):
    # Its speed is measured in tests/bench/dry_run_bench.py; here, that every node is there.
    result = run_canopy(["--dry-run", "--hosts", "n[00001-10000]", "--ppn", "4", "--agent", "ssh",
                         "python3", "train.py"], timeout=30)
    assert result.returncode == 0, result.describe()
    lines = result.stdout.splitlines()
    assert "Job: 40000 ranks on 10000 nodes (hosts from --hosts): python3 train.py" in lines, result.stdout[:500]
    assert "  node 9999 n10000: ranks 39996-39999" in lines
    ssh = [line for line in lines if "ssh " in line and "canopyd --parent" in line]
    assert len(ssh) == 10000
    assert "--position 10000 --node n10000" in ssh[-1], ssh[-1]


def test_dry_run_still_refuses_bad_input(run_canopy):
    result = run_canopy(["--dry-run", "--hosts", "a,b", "--cpu-bind", "list:3-1", "true"])
    assert result.returncode == 2, result.describe()
    assert result.stderr.startswith("canopy: ") and "3-1" in result.stderr, result.describe()
