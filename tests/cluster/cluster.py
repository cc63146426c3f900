# A cluster in a box: N hosts in namespaces on this machine, each with its own network, name, mounts, PIDs and sshd.
#
# Used by tests/cluster/up and down and by the pytest fixture in tests/cluster/conftest.py. Layout:
#   switch   a network and PID namespace holding the bridge br0; nothing else, no uplink
#   nodeI    network, UTS, mount, IPC and PID namespaces: address 198.18.0.(10+I)/15 on eth0 (a veth whose peer
#            is a port of br0), hostname nodeI, its own tmpfs /tmp, /dev/shm and /run, the run's /etc/hosts,
#            /etc/ssh/ssh_config and /etc/slurm bound over the machine's, a real sshd on port 22 and, with slurm,
#            munged and slurmd (slurmctld too on node1)
# Every file of a run lives in its state dir (STATE_ROOT/NAME), seen by every host as a shared file system is; the
# repository, and so canopyd, is at the same path on every host too. Each host's PID 1 is hostinit.py; killing it
# ends the whole host, which is how `down` and the fixture remove a host: by PID namespace.
import ctypes
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOSTINIT = HERE / "hostinit.py"
PYTHON = "/usr/bin/python3"
STATE_ROOT = Path(os.environ.get("CANOPY_CLUSTER_STATE", "/var/tmp/canopy-test"))
PREFIX = "canopy-test"
NETWORK = ipaddress.ip_network("198.18.0.0/15")   # RFC 2544's benchmarking range: never a real network's
SSH_PORT = 22
HOST_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "SHELL": "/bin/bash",
    "LC_ALL": "C.UTF-8",
}
# Slurm's daemons and munged, and the sshd listener: what a host runs when no job does.
SERVICES = ("sshd", "munged", "slurmd", "slurmctld", "slurmscriptd")

_PR_SET_PDEATHSIG = 1
_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21


class Unsupported(Exception):
    """`up` cannot make hosts here. `no_namespaces` is True when this machine cannot make namespaces at all (no
    privilege, or a kernel or container that refuses them): the only reason a test may skip. Anything else (no
    bridge or veth, a program missing, an address clash) fails the tests."""

    def __init__(self, message, no_namespaces):
        super().__init__(message)
        self.no_namespaces = no_namespaces


class ClusterError(Exception):
    pass


def host_name(index):
    return f"node{index}"


def host_address(index):
    return str(NETWORK[10 + index])


def _run(args, timeout=30, check=True, **kw):
    args = [str(arg) for arg in args]
    stdin = kw.pop("stdin", None if "input" in kw else subprocess.DEVNULL)
    result = subprocess.run(args, stdin=stdin, capture_output=True, text=True, timeout=timeout, **kw)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{' '.join(map(str, args))} exited {result.returncode}: "
                           f"{detail[-1] if detail else 'no output'}")
    return result


def _start_time(pid):
    """The process's start time in clock ticks since boot: with the PID, it names one process, even after reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _cmdline(pid):
    try:
        return [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if part]
    except OSError:
        return []


def _comm(pid):
    """The process's name, or None once it has exited (it may, between listing /proc and reading this)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _namespace(pid, kind):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _alive(pid, start):
    """True while the process that had `start` runs; a zombie child of ours is reaped and counts as gone."""
    if start is None or _start_time(pid) != start:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state in ("Z", "X"):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# What the kernel and the machine must have


def check_support(slurm=False):
    """Raises Unsupported with one line saying what is missing; returns None when hosts can be made."""
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    for cap, name in ((_CAP_SYS_ADMIN, "CAP_SYS_ADMIN"), (_CAP_NET_ADMIN, "CAP_NET_ADMIN")):
        if not effective & (1 << cap):
            raise Unsupported(f"needs {name} to make namespaces (run as root)", no_namespaces=True)
    for kind in ("net", "pid", "uts", "mnt", "ipc"):
        if not Path(f"/proc/self/ns/{kind}").exists():
            raise Unsupported(f"the kernel has no {kind} namespaces (/proc/self/ns/{kind} is missing)",
                              no_namespaces=True)
    programs = ["unshare", "nsenter", "ip", "mount", "/usr/sbin/sshd", "ssh", "ssh-keygen"]
    if slurm:
        programs += ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "salloc", "sbatch", "scontrol"]
    for program in programs:
        if not shutil.which(program):
            package = {"/usr/sbin/sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client",
                       "ip": "iproute2", "/usr/sbin/munged": "munge"}.get(program, "slurm-wlm" if slurm else
                                                                          "util-linux")
            raise Unsupported(f"{program} is missing (Debian package {package}; tests/setup-deps.sh installs it)",
                              no_namespaces=False)
    # First the namespaces alone (a container may refuse them), then in a throwaway set all that a host needs: a
    # bridge, a veth pair, tmpfs and a hostname.
    unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--net", "--ipc", "--"]
    probe = ("ip link add canopy-br type bridge && ip link add canopy-a type veth peer name canopy-b && "
             "ip link set canopy-a master canopy-br && mount -t tmpfs canopy-probe /tmp && hostname canopy-probe")
    for command, what, no_namespaces in ((["true"], "make network, PID, mount, UTS and IPC namespaces", True),
                                         (["sh", "-c", probe], "make a host's bridge, veth pair, tmpfs and name",
                                          False)):
        try:
            result = subprocess.run(unshare + command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=30)
        except subprocess.TimeoutExpired:
            raise Unsupported(f"cannot {what}: it did not finish in 30 s", no_namespaces)
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            raise Unsupported(f"cannot {what}: {lines[-1] if lines else 'exit ' + str(result.returncode)}",
                              no_namespaces)
    own = _run(["ip", "-j", "addr"], timeout=10).stdout
    for interface in json.loads(own):
        for info in interface.get("addr_info", []):
            if info.get("family") == "inet":
                network = ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)
                if network.overlaps(NETWORK):
                    raise Unsupported(f"this machine's {interface['ifname']} is on {network}, which overlaps the "
                                      f"test hosts' {NETWORK}", no_namespaces=False)


# ---------------------------------------------------------------------------------------------------------------
# The cluster


@dataclass
class Host:
    name: str
    address: str
    holder: int = 0          # the `unshare` process in this machine's namespaces
    holder_start: int = 0
    init: int = 0            # hostinit.py, PID 1 of the host (this is its PID here)
    init_start: int = 0
    pid_ns: str = ""
    net_ns: str = ""

    @property
    def root(self):
        """The host's file system as it sees it (its own /tmp, /dev/shm and /run), from this machine."""
        return Path(f"/proc/{self.init}/root")


@dataclass
class State:
    name: str
    hosts: list = field(default_factory=list)
    switch: Host = None
    slurm: bool = False
    owner: int = 0           # with die_with_parent: the process whose death ends the hosts, and its start time
    owner_start: int = 0


class Cluster:
    def __init__(self, name, state_root=None):
        if not name or not all(c.isalnum() or c == "-" for c in name):
            raise ClusterError(f"cluster name {name!r}: use letters, digits and '-'")
        self.name = name
        self.state_dir = Path(state_root or STATE_ROOT) / name
        self.state = State(name)

    # -- paths -------------------------------------------------------------------------------------------------
    @property
    def marker(self):
        return f"{PREFIX}-{self.name}"

    def host_dir(self, host):
        return self.state_dir / "hosts" / host

    @property
    def shared(self):
        """A directory every host sees at the same path: for hostfiles, job scripts and their output."""
        return self.state_dir / "shared"

    @property
    def hosts(self):
        return self.state.hosts

    def host(self, name):
        for host in self.state.hosts:
            if host.name == name:
                return host
        raise ClusterError(f"no host {name} in cluster {self.name}")

    def _save(self):
        data = asdict(self.state)
        path = self.state_dir / "state.json"
        path.with_suffix(".part").write_text(json.dumps(data, indent=1))
        path.with_suffix(".part").rename(path)

    @classmethod
    def load(cls, name, state_root=None):
        cluster = cls(name, state_root)
        data = json.loads((cluster.state_dir / "state.json").read_text())
        cluster.state = State(data["name"], [Host(**h) for h in data["hosts"]],
                              Host(**data["switch"]) if data["switch"] else None, data["slurm"],
                              data.get("owner", 0), data.get("owner_start", 0))
        return cluster

    # -- up ----------------------------------------------------------------------------------------------------
    def up(self, count, slurm=False, die_with_parent=False, log=lambda line: None):
        """Makes `count` hosts. die_with_parent: the hosts die when the calling process does (the test fixture)."""
        if count < 1 or count > 200:
            raise ClusterError(f"{count} hosts: give 1 to 200")
        check_support(slurm)
        remove(self.name, self.state_dir.parent)
        remove_orphaned(self.state_dir.parent)
        started = time.monotonic()
        self.state_dir.mkdir(parents=True)
        self.shared.mkdir()
        self.state = State(self.name, [Host(host_name(i), host_address(i)) for i in range(1, count + 1)],
                           slurm=slurm)
        if die_with_parent:
            self.state.owner, self.state.owner_start = os.getpid(), _start_time(os.getpid())
        self._save()
        try:
            self._write_files(slurm)
            self._start_namespaces(die_with_parent)
            self._connect_network()
            log(f"{count} hosts in namespaces after {time.monotonic() - started:.1f} s")
            self._start_sshd()
            log(f"sshd on every host after {time.monotonic() - started:.1f} s")
            if slurm:
                self._start_slurm()
                log(f"slurm up after {time.monotonic() - started:.1f} s")
        except BaseException:
            try:
                self.down()
            except ClusterError:
                pass   # the first error says what went wrong
            raise
        return self

    def _write_files(self, slurm):
        (self.state_dir / "etc-slurm").mkdir()
        ssh = self.state_dir / "ssh"
        ssh.mkdir()
        # One user key for the run (root logs in by key only) and one host key per host, all known in advance,
        # so the client checks every host's key strictly.
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.marker}-user", "-f", ssh / "id_ed25519"])
        (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
        known = []
        for host in self.hosts:
            directory = self.host_dir(host.name)
            directory.mkdir(parents=True)
            key = directory / "ssh_host_ed25519_key"
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.marker}-{host.name}", "-f", key])
            public = key.with_suffix(".pub").read_text().split()
            known.append(f"{host.name},{host.address} {public[0]} {public[1]}\n")
            (directory / "sshd_config").write_text(
                f"ListenAddress {host.address}:{SSH_PORT}\n"
                f"HostKey {key}\n"
                f"AuthorizedKeysFile {ssh / 'authorized_keys'}\n"
                "PidFile /run/sshd.pid\n"
                "UsePAM no\n"
                "StrictModes no\n"   # the state dir sits under the world-writable /var/tmp
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "PubkeyAuthentication yes\n"
                "PermitRootLogin prohibit-password\n"
                "MaxStartups 200\n"
                "MaxSessions 200\n"
                "PrintMotd no\n"
                "LogLevel ERROR\n")
        (ssh / "known_hosts").write_text("".join(known))
        (ssh / "ssh_config").write_text(
            "Host *\n"
            f"  IdentityFile {ssh / 'id_ed25519'}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {ssh / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  ConnectTimeout 10\n"
            "  LogLevel ERROR\n")
        (self.state_dir / "hosts.txt").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{host.address} {host.name}\n" for host in self.hosts))

    def _spawn_init(self, host, die_with_parent, unshare_flags, init_args):
        directory = self.host_dir(host.name)
        directory.mkdir(parents=True, exist_ok=True)
        ready = directory / "ready"
        with open(directory / "init.log", "wb") as log:
            process = subprocess.Popen(
                ["unshare", *unshare_flags, "--", PYTHON, str(HOSTINIT), "--marker", f"{self.marker}-{host.name}",
                 "--ready", str(ready), *init_args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=HOST_ENV,
                preexec_fn=_die_with_parent if die_with_parent else None)
        host.holder, host.holder_start = process.pid, _start_time(process.pid)
        self._save()
        return process, ready

    def _shared_paths(self):
        """Directories every host sees at the same path as this machine: the repository, the build, the state."""
        paths = {HERE.parents[1], self.state_dir}
        if os.environ.get("CANOPY_BUILD_DIR"):
            paths.add(Path(os.environ["CANOPY_BUILD_DIR"]))
        return sorted(str(path.resolve()) for path in paths)

    def _start_namespaces(self, die_with_parent):
        self.state.switch = Host(f"switch", "")
        pending = [(self.state.switch, *self._spawn_init(self.state.switch, die_with_parent,
                                                          ["--pid", "--fork", "--kill-child", "--net"], []))]
        for host in self.hosts:
            binds = [f"{self.state_dir / 'hosts.txt'}:/etc/hosts",
                     f"{self.state_dir / 'ssh' / 'ssh_config'}:/etc/ssh/ssh_config",
                     f"{self.state_dir / 'etc-slurm'}:/etc/slurm"]
            pending.append((host, *self._spawn_init(
                host, die_with_parent,
                ["--pid", "--fork", "--kill-child", "--mount-proc", "--uts", "--net", "--ipc"],
                ["--hostname", host.name] + [arg for bind in binds for arg in ("--bind", bind)] +
                [arg for keep in self._shared_paths() for arg in ("--keep", keep)])))
        deadline = time.monotonic() + 30
        for host, process, ready in pending:
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (self.host_dir(host.name) / "init.log").read_text().strip().splitlines()
                    raise ClusterError(f"{host.name} did not come up: "
                                       f"{log[-1] if log else 'exit ' + str(process.returncode)}")
                time.sleep(0.02)
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
            if len(children) != 1:
                raise ClusterError(f"{host.name}: expected one child of unshare ({process.pid}), found {children}")
            host.init = int(children[0])
            host.init_start = _start_time(host.init)
            host.pid_ns = _namespace(host.init, "pid")
            host.net_ns = _namespace(host.init, "net")
            process.returncode = 0   # not ours to wait for: down() kills it; keep Popen from warning
        self._save()

    def _connect_network(self):
        switch = self.state.switch
        commands = ["link add br0 type bridge", "link set br0 up"]
        for index, host in enumerate(self.hosts, 1):
            commands += [f"link add p{index} type veth peer name eth0 netns {host.init}",
                         f"link set p{index} master br0", f"link set p{index} up"]
        _run(["nsenter", "-t", switch.init, "-n", "ip", "-batch", "-"], input="\n".join(commands) + "\n",
             stdin=None)
        for host in self.hosts:
            _run(["nsenter", "-t", host.init, "-n", "ip", "-batch", "-"], stdin=None,
                 input=f"link set lo up\naddr add {host.address}/{NETWORK.prefixlen} dev eth0\nlink set eth0 up\n")

    # -- services ----------------------------------------------------------------------------------------------
    def _start_sshd(self):
        for host in self.hosts:
            self.run(host.name, ["/usr/sbin/sshd", "-f", self.host_dir(host.name) / "sshd_config",
                                 "-E", self.host_dir(host.name) / "sshd.log"], timeout=30, check=True)
        for host in self.hosts:
            if not wait_for(lambda: self.listening(host, SSH_PORT), 20):
                raise ClusterError(f"sshd on {host.name} is not listening on {host.address}:{SSH_PORT}: "
                                   f"{self._log_tail(host, 'sshd.log')}")

    def listening(self, host, port):
        """True when something in the host listens on TCP `port` (read from the host's own /proc/net/tcp)."""
        try:
            lines = Path(f"/proc/{host.init}/net/tcp").read_text().splitlines()[1:]
        except OSError:
            return False
        return any(line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == port for line in lines)

    def _log_tail(self, host, name):
        try:
            lines = (self.host_dir(host.name) / name).read_text().strip().splitlines()
        except OSError:
            return f"(no {name})"
        return lines[-1] if lines else f"({name} is empty)"

    def _start_slurm(self):
        from slurm import start_slurm   # the Slurm part lives apart: see slurm.py
        start_slurm(self)

    # -- running things on hosts -------------------------------------------------------------------------------
    def command(self, host, args, cwd=None):
        """The argv that runs `args` on `host`, in all its namespaces."""
        return ["nsenter", "-t", str(self.host(host).init), "-m", "-u", "-n", "-i", "-p",
                f"--wd={cwd or HERE}", "--", *map(str, args)]

    def popen(self, host, args, env=None, cwd=None, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(host, args, cwd), env={**HOST_ENV, **(env or {})},
                                start_new_session=True, **kw)

    def run(self, host, args, timeout=60, env=None, cwd=None, input=None, check=False):
        """Runs a command on a host to its end; past `timeout` it is killed, with all it started there, and
        TimeoutError says so."""
        process = self.popen(host, args, env, cwd, stdin=subprocess.PIPE if input is not None else
                             subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started = time.monotonic()
        try:
            out, err = process.communicate(input.encode() if isinstance(input, str) else input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise TimeoutError(f"{host}: {' '.join(map(str, args))} did not finish in {timeout} s\n"
                               f"stdout: {out.decode(errors='replace')[-2000:]}\n"
                               f"stderr: {err.decode(errors='replace')[-4000:]}")
        result = subprocess.CompletedProcess(args, process.returncode, out.decode(errors="replace"),
                                             err.decode(errors="replace"))
        result.seconds = time.monotonic() - started
        if check and result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines()
            raise ClusterError(f"{host}: {' '.join(map(str, args))} exited {result.returncode}: "
                               f"{lines[-1] if lines else 'no output'}")
        return result

    # -- what a host holds -------------------------------------------------------------------------------------
    def processes(self, host):
        """{pid: command line} of every process in the host's PID namespace, PID 1 (hostinit) left out."""
        found = {}
        for pid in _pids():
            if pid != host.init and _namespace(pid, "pid") == host.pid_ns:
                args = _cmdline(pid)
                if args:
                    found[pid] = " ".join(args)
        return found

    def job_processes(self, host):
        """{pid: command line} of the host's processes other than its services (a job's sshd session counts)."""
        found = {}
        for pid, args in self.processes(host).items():
            comm = _comm(pid)   # None: exited since it was listed
            if comm is not None and (comm not in SERVICES or args.startswith("sshd: root")):
                found[pid] = args
        return found

    def leftovers(self, host):
        """What a finished job left on a host: processes other than its services, and files in its /tmp and
        /dev/shm (a run starts with both empty)."""
        problems = {f"process {pid}": args[:200] for pid, args in self.job_processes(host).items()}
        for directory in ("tmp", "dev/shm"):
            try:
                entries = sorted(set(os.listdir(host.root / directory)) - self.shared_entries(directory))
            except OSError as error:
                problems[f"/{directory}"] = f"cannot read: {error}"
                continue
            for entry in entries:
                problems[f"/{directory}/{entry}"] = "left"
        return problems

    def shared_entries(self, directory):
        """Names in a host's /tmp or /dev/shm that lead to a directory every host shares (hostinit.py binds it back
        there): not a job's leftovers, and never to be removed."""
        prefix = f"/{directory}/"
        return {path[len(prefix):].split("/", 1)[0] for path in self._shared_paths() if path.startswith(prefix)}

    def clear(self, host):
        """Removes what leftovers() reports, so the next test starts on a clean host."""
        for pid in self.job_processes(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for directory in ("tmp", "dev/shm"):
            for entry in (host.root / directory).iterdir():
                if entry.name in self.shared_entries(directory):
                    continue   # the repository, the build or the run's state: removing it would remove them
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    # -- faults ------------------------------------------------------------------------------------------------
    def set_link(self, name, up):
        """Takes a host's cable out (up=False) or puts it back: its bridge port goes down, and packets to and from
        the host are dropped without a word, as when a switch port or a cable fails."""
        index = self.hosts.index(self.host(name)) + 1
        _run(["nsenter", "-t", self.state.switch.init, "-n", "ip", "link", "set", f"p{index}",
              "up" if up else "down"])

    def drop_packets(self, name, percent):
        """Drops `percent` of the packets a host sends and receives on its link, picked at random (100: all of them, a
        host whose network black-holes traffic while its link stays up); 0 puts things right. Its loopback, which
        carries its ranks' own PMIx connections, is spared. Uses nftables in the host's network namespace: this
        kernel has no netem."""
        host = self.host(name)
        ruleset = "table inet canopy_fault\ndelete table inet canopy_fault\n"   # declaring first makes delete safe
        if percent:
            verdict = "drop" if percent >= 100 else f"numgen random mod 100 < {int(percent)} drop"
            ruleset += ("table inet canopy_fault {\n"
                        f"  chain input {{ type filter hook input priority 0; iif lo accept; {verdict}; }}\n"
                        f"  chain output {{ type filter hook output priority 0; oif lo accept; {verdict}; }}\n"
                        "}\n")
        _run(["nsenter", "-t", str(host.init), "-n", "nft", "-f", "-"], input=ruleset)

    def fill_shm(self, name, size="1m"):
        """Makes a host's /dev/shm `size` big and fills it to the last byte; returns the filler's path on the
        host, for the test to remove before it looks for leftovers."""
        filler = "/dev/shm/canopy-test-filler"
        self.run(name, ["sh", "-c", f"mount -o remount,size={size} /dev/shm && "
                                    f"! dd if=/dev/zero of={filler} bs=64k 2>/dev/null && "
                                    f"[ \"$(df --output=avail /dev/shm | tail -1)\" -eq 0 ]"], check=True)
        return filler

    def kill_host(self, name):
        """Ends a host at once, as a power cut would: SIGKILL to its PID 1 takes every process of the host."""
        os.kill(self.host(name).init, signal.SIGKILL)

    def host_gone(self, host):
        """True when nothing of the host is left: no process in its PID or network namespace."""
        return not any(_namespace(pid, "pid") == host.pid_ns or _namespace(pid, "net") == host.net_ns
                       for pid in _pids())

    # -- down --------------------------------------------------------------------------------------------------
    def down(self):
        """Kills every host (by its PID namespace's init) and the switch, then removes the state dir."""
        remove(self.name, self.state_dir.parent, state=self.state)


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def wait_for(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def marked_processes(marker):
    """hostinit.py processes (and their unshare holders) whose marker starts with `marker`."""
    found = []
    for pid in _pids():
        args = _cmdline(pid)
        if str(HOSTINIT.name) in " ".join(args) and "--marker" in args:
            value = args[args.index("--marker") + 1] if args.index("--marker") + 1 < len(args) else ""
            if value.startswith(marker):
                found.append(pid)
    return found


def remove_orphaned(state_root=None):
    """Removes the clusters whose owner (a test run) has died: the kernel ended their hosts with it, but their state
    dirs, and anything a half-made host left, are still to go. Clusters made by `up`, which have no owner, stay."""
    state_root = Path(state_root or STATE_ROOT)
    if not state_root.is_dir():
        return
    for directory in sorted(state_root.iterdir()):
        try:
            state = Cluster.load(directory.name, state_root).state
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if state.owner and not _alive(state.owner, state.owner_start):
            remove(directory.name, state_root)


def remove(name, state_root=None, state=None):
    """Removes cluster `name`, or every canopy-test cluster when name is None: kills the hosts recorded in its state
    dir and any hostinit.py still carrying its marker (a state dir may be gone or half written), waits until none
    of their PID namespaces has a process left, then deletes the state dir. Raises ClusterError if something
    will not go."""
    state_root = Path(state_root or STATE_ROOT)
    directories = [state_root / name] if name else (sorted(state_root.iterdir()) if state_root.is_dir() else [])
    targets = []   # (pid, start time or None for a marked process found by its command line)
    namespaces = set()
    for directory in directories:
        recorded = state
        if recorded is None and (directory / "state.json").exists():
            try:
                recorded = Cluster.load(directory.name, state_root).state
            except (OSError, ValueError, KeyError, TypeError):
                recorded = None
        if recorded is not None:
            for host in recorded.hosts + ([recorded.switch] if recorded.switch else []):
                targets += [(host.init, host.init_start), (host.holder, host.holder_start)]
                if host.pid_ns and _alive(host.init, host.init_start):
                    namespaces.add(host.pid_ns)
    marker = f"{PREFIX}-{name}-" if name else f"{PREFIX}-"
    for pid in marked_processes(marker):
        targets.append((pid, _start_time(pid)))
        if _namespace(pid, "pid"):
            namespaces.add(_namespace(pid, "pid"))
    for pid, start in targets:
        if pid and _alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    namespaces.discard(_namespace(os.getpid(), "pid"))

    def gone():
        if any(pid and _alive(pid, start) for pid, start in targets):
            return False
        return not any(_namespace(pid, "pid") in namespaces for pid in _pids())

    if not wait_for(gone, 20):
        left = [f"{pid} {' '.join(_cmdline(pid))[:100]}" for pid in _pids() if _namespace(pid, "pid") in namespaces]
        raise ClusterError(f"processes of cluster {name or '(all)'} would not die: {left[:5]}")
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
    if state_root.is_dir() and not any(state_root.iterdir()):
        state_root.rmdir()
