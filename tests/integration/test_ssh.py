# The ssh agent for real: a private sshd on loopback plays four nodes, and daemons start their children over ssh.
import getpass
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import all_pids, cmdline, parse_labelled, proc_state_and_ppid, unused_port, wait_until

SSHD = Path("/usr/sbin/sshd")
NODES = {f"node{i}": f"127.0.0.{i + 1}" for i in range(1, 5)}   # node1 -> 127.0.0.2 ... node4 -> 127.0.0.5
DOWN_NODE = ("node9", "127.0.0.10")                              # nothing listens there


def descendants(root):
    children = {}
    for pid in all_pids():
        state, ppid = proc_state_and_ppid(pid)
        if state not in (None, "Z", "X"):
            children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Sshd:
    def __init__(self, directory: Path):
        self.directory = directory
        self.port = unused_port()
        keygen = shutil.which("ssh-keygen")
        for key in ("host_key", "client_key"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(directory / key)], check=True,
                           timeout=30)
        (directory / "authorized_keys").write_text((directory / "client_key.pub").read_text())
        listen = "".join(f"ListenAddress {address}:{self.port}\n" for address in NODES.values())
        (directory / "sshd_config").write_text(
            f"{listen}"
            f"HostKey {directory / 'host_key'}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
            f"PidFile {directory / 'sshd.pid'}\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\n"
            "MaxStartups 64\n"
            "LogLevel ERROR\n")
        hosts = "".join(f"Host {name}\n  HostName {address}\n" for name, address in NODES.items())
        hosts += f"Host {DOWN_NODE[0]}\n  HostName {DOWN_NODE[1]}\n"
        self.client_config = directory / "ssh_config"
        self.client_config.write_text(
            f"{hosts}"
            "Host *\n"
            f"  Port {self.port}\n"
            f"  User {getpass.getuser()}\n"
            f"  IdentityFile {directory / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n"
            "  ConnectTimeout 5\n")
        os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege separation directory
        self.log = open(directory / "sshd.log", "wb")
        self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(directory / "sshd_config")],
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        if not wait_until(self.accepting, 10):
            self.stop()
            pytest.fail(f"sshd did not start: {(directory / 'sshd.log').read_text()}")

    def accepting(self):
        if self.process.poll() is not None:
            return True   # died: reported by the check that follows
        try:
            for address in NODES.values():
                socket.create_connection((address, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not SSHD.exists():
        pytest.skip("openssh-server is not installed (/usr/sbin/sshd); tests/setup-deps.sh installs it")
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    assert server.process.poll() is None, (server.directory / "sshd.log").read_text()
    yield server
    server.stop()


@pytest.fixture
def ssh_config(sshd, sandbox):
    """A canopy --config that starts daemons through the real ssh and keeps job dirs in the sandbox."""
    path = sandbox.root / "ssh.toml"
    path.write_text(
        "[launch]\n"
        'agent = "ssh"\n'
        f'ssh_args = ["-F", "{sshd.client_config}", "-o", "BatchMode=yes"]\n'
        "[tree]\n"
        'bind_address = "127.0.0.1"\n'
        "[job]\n"
        f'tmpdir = "{sandbox.tmpdir}"\n')
    sandbox.known_pids.add(sshd.process.pid)
    yield path
    # Daemons started over ssh descend from sshd, not from canopy: they too must be gone after the job.
    wait_until(lambda: not daemons_under(sshd), 3.0)
    left = daemons_under(sshd)
    assert not left, f"processes left under sshd after the job: {left}"


def daemons_under(sshd):
    return {pid: " ".join(cmdline(pid))[:160] for pid in descendants(sshd.process.pid)
            if any("canopyd" in part for part in cmdline(pid)[:1]) or "CANOPY_RANK" in open_environ(pid)}


def open_environ(pid):
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_four_node_tree_over_ssh_runs_every_rank(run_canopy, ssh_config, sshd):
    result = run_canopy(["--config", ssh_config, "--hosts", "node[1-4]", "--fanout", "2", "--ppn", "2", "-l",
                         "sh", "-c", 'echo "$CANOPY_NODE $LOCAL_RANK $SSH_CONNECTION"'], timeout=60)
    assert result.returncode == 0, result.describe()
    by_rank = parse_labelled(result.stdout)
    assert sorted(by_rank) == list(range(8)), result.describe()
    for rank, lines in by_rank.items():
        node, local, *ssh_connection = lines[0].split()
        assert (node, int(local)) == (f"node{rank // 2 + 1}", rank % 2), lines
    assert result.canopy_lines() == [], result.describe()


def test_daemons_start_their_children_over_ssh(sandbox, ssh_config, sshd, ready):
    # With fanout 2, node1's daemon starts node3 and node4: their ssh clients must run under node1's canopyd.
    # Every rank waits for the test to look: a daemon whose subtree is done leaves (docs/architecture.md), and its
    # ssh client with it, so a leaf (node2) whose rank only slept could be gone before node3 and node4 were up.
    go = sandbox.root / "go"
    job = sandbox.start(["--config", ssh_config, "--hosts", "node[1-4]", "--fanout", "2", "sh", "-c",
                         f"{ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done"])
    ready.wait(4, job, timeout=30)
    ssh_clients = {}
    for pid in all_pids():
        args = cmdline(pid)
        if args and os.path.basename(args[0]) == "ssh" and "-F" in args:
            _, ppid = proc_state_and_ppid(pid)
            parent = cmdline(ppid)
            ssh_clients[pid] = (parent, [a for a in args if a.startswith("node")])
    by_launcher = [hosts for parent, hosts in ssh_clients.values() if parent and "canopy" == Path(parent[0]).name]
    by_daemon = [hosts for parent, hosts in ssh_clients.values() if parent and "canopyd" == Path(parent[0]).name]
    assert sorted(sum(by_launcher, [])) == ["node1", "node2"], ssh_clients
    assert sorted(sum(by_daemon, [])) == ["node3", "node4"], ssh_clients
    go.touch()
    result = sandbox.finish(job, timeout=60)
    assert result.returncode == 0, result.describe()


def test_node_whose_sshd_is_down_fails_the_job_naming_it(run_canopy, ssh_config):
    result = run_canopy(["--config", ssh_config, "--hosts", f"node1,{DOWN_NODE[0]}", "true"], timeout=60)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert DOWN_NODE[0] in lines[0] and "refused" in lines[0], lines[0]
