# Shared fixtures for the integration tests: the binaries, a per-test job sandbox, and leftover checks.
import ctypes
import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("CANOPY_BUILD_DIR", REPO / "build")).resolve()
CANOPY = BUILD_DIR / "launcher" / "canopy"
CANOPYD = BUILD_DIR / "daemon" / "canopyd"
# Message, routed-request and frame-size numbers, from their one definition in lib/wire (tests/tools/protocol_numbers).
PROTOCOL = json.loads(subprocess.run([BUILD_DIR / "tests" / "protocol-numbers"], check=True, capture_output=True,
                                     text=True, timeout=30).stdout)

# Every test gets this long in total; a hang anywhere fails the test instead of stalling the suite.
TEST_DEADLINE_SECONDS = 120
# How long processes from a finished job may take to disappear before the test fails.
LEFTOVER_GRACE_SECONDS = 3.0

# Orphans of the jobs we start (daemons or ranks whose parent died) are re-parented to this process
# rather than to init, so the leftover check sees them even when they carry no marker.
_PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

_OWN_PID = os.getpid()


@dataclass
class Completed:
    args: list
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def stderr_lines(self):
        return [line for line in self.stderr.splitlines() if line.strip()]

    def canopy_lines(self):
        """The launcher's own messages: the lines a user reads to learn what went wrong."""
        return [line for line in self.stderr.splitlines() if line.startswith("canopy: ")]

    def describe(self):
        return (f"command: {self.args}\nexit: {self.returncode} after {self.seconds:.2f} s\n"
                f"stdout (first 2000 chars):\n{self.stdout[:2000]}\nstderr (first 4000 chars):\n{self.stderr[:4000]}")


def read_proc(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def proc_state_and_ppid(pid):
    stat = read_proc(pid, "stat").decode(errors="replace")
    # The command name in parentheses may itself contain spaces or parentheses.
    close = stat.rfind(")")
    if close < 0:
        return None, None
    fields = stat[close + 2:].split()
    return fields[0], int(fields[1])


def all_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def cmdline(pid):
    return [part.decode(errors="replace") for part in read_proc(pid, "cmdline").split(b"\0") if part]


def daemon_pids(marker=None):
    """Live canopyd processes, optionally only those whose environment carries `marker`."""
    found = []
    for pid in all_pids():
        args = cmdline(pid)
        if not args or os.path.basename(args[0]) != "canopyd":
            continue
        # Each daemon forks a guard that shares its command line but renames itself.
        if read_proc(pid, "comm").strip() == b"canopyd-guard":
            continue
        if marker is not None and marker.encode() not in read_proc(pid, "environ"):
            continue
        state, _ = proc_state_and_ppid(pid)
        if state not in (None, "Z", "X"):
            found.append(pid)
    return found


def daemon_for_node(node, marker):
    for pid in daemon_pids(marker):
        args = cmdline(pid)
        if "--node" in args and args[args.index("--node") + 1] == node:
            return pid
    return None


def listening_ports(pids):
    """TCP ports on which any of `pids` listens, read from /proc (no ss needed)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                match = re.fullmatch(r"socket:\[(\d+)\]", target)
                if match:
                    inodes.add(match.group(1))
        except OSError:
            continue
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:   # 0A: LISTEN
                address_hex, port_hex = local.split(":")
                address = socket.inet_ntoa(bytes.fromhex(address_hex)[::-1]) if len(address_hex) == 8 else "::"
                ports.append((address, int(port_hex, 16)))
    return ports


def unused_port():
    """A free loopback TCP port for a server a test starts, taken below the kernel's ephemeral range.

    A port the kernel picks (bind to 0) comes from the ephemeral range, where any outgoing connection of a test
    running alongside may take it before our server binds it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(10000, low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in 10000-{low - 1} after 100 tries")


def peak_mib(pid):
    """The process's peak resident size so far in MiB (VmHWM); None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


class PeakMemory:
    """Samples the peak resident size of a job's launcher and daemons until it ends, as a user watching top would."""

    def __init__(self, sandbox, job):
        self.launcher, self.daemons = 0, {}
        self._thread = threading.Thread(target=self._sample, args=(sandbox, job), daemon=True)
        self._thread.start()

    def _sample(self, sandbox, job):
        while job.poll() is None:
            self.launcher = max(self.launcher, peak_mib(job.pid) or 0)
            for pid in daemon_pids(sandbox.marker):
                self.daemons[pid] = max(self.daemons.get(pid, 0), peak_mib(pid) or 0)
            time.sleep(0.05)

    def wait(self):
        self._thread.join(timeout=10)
        return self

    def describe(self):
        return f"launcher {self.launcher} MiB, daemons {sorted(self.daemons.values())} MiB"


# Under AddressSanitizer (tests/sanitize.sh sets ASAN_OPTIONS) freed memory waits in a quarantine of up to 256 MiB,
# so sizes say nothing there (test_liveness.py does the same).
measures_memory = "ASAN_OPTIONS" not in os.environ


def wait_until(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def process_tree(root):
    """One line per process under `root` (itself included): pid, parent, state, where the kernel has it waiting,
    and the command, so that a job that hangs in a test says which process it is waiting for."""
    parents, lines = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/wchan") as f:
                wchan = f.read().strip() or "-"
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        lines[int(entry)] = f"{entry} ppid={fields[1]} state={fields[0]} wchan={wchan} {cmd}"
    keep, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in keep and pid not in keep:
                keep.add(pid)
                grew = True
    return "\n".join(lines[pid] for pid in sorted(keep) if pid in lines) or "(nothing)"


def completed_within(process, timeout, what, input=None):
    """Waits for a started `process` (with started_at set) and returns its Completed; one still running after
    `timeout` seconds is killed and fails the test, saying what still ran below it."""
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = process_tree(process.pid)
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"{what} did not finish within {timeout} s\n"
                    f"stderr: {err.decode(errors='replace')[:4000]}\n"
                    f"stdout: {out.decode(errors='replace')[-2000:]}\nstill running:\n{tree}")
    return Completed(process.args, process.returncode, out.decode(errors="replace"),
                     err.decode(errors="replace"), time.monotonic() - process.started_at)


class JobSandbox:
    """One test's jobs: a private TMPDIR, a marker in the environment, and every process started."""

    def __init__(self, root: Path):
        self.root = root
        self.marker = f"canopy-it-{uuid.uuid4().hex}"
        self.tmpdir = root / "tmp"
        self.tmpdir.mkdir()
        config_home = root / "xdg-config"
        config_home.mkdir()
        env = dict(os.environ)
        for name in ("CANOPY_CONFIG", "PBS_NODEFILE", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"):
            env.pop(name, None)
        env.update({
            "TMPDIR": str(self.tmpdir),
            "XDG_CONFIG_HOME": str(config_home),   # keep a developer's own canopy.toml out of the tests
            "CANOPY_IT_MARKER": self.marker,
            "LC_ALL": "C.UTF-8",
        })
        self.env = env
        self.popens = []
        self.known_pids = set()

    def command(self, args):
        return [str(CANOPY)] + [str(arg) for arg in args]

    def run(self, args, timeout=30, input=None, env=None, cwd=None):
        """Runs canopy to completion; a job still running after `timeout` seconds fails the test."""
        command = self.command(args)
        process = subprocess.Popen(command, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**self.env, **(env or {})}, cwd=cwd or self.root)
        process.started_at = time.monotonic()
        self.known_pids.add(process.pid)
        return completed_within(process, timeout, f"canopy ({command})",
                                input.encode() if isinstance(input, str) else input)

    def start(self, args, env=None, **kw):
        """Starts canopy in the background; the test waits for it with finish()."""
        process = subprocess.Popen(self.command(args), stdin=kw.pop("stdin", subprocess.DEVNULL),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**self.env, **(env or {})}, cwd=self.root, **kw)
        process.started_at = time.monotonic()
        self.popens.append(process)
        self.known_pids.add(process.pid)
        return process

    def finish(self, process, timeout=30):
        return completed_within(process, timeout, f"canopy ({process.args})")

    def leftovers(self):
        """Live processes from this test's jobs: marked ones, and orphans re-parented to us."""
        found = {}
        for pid in all_pids():
            if pid == _OWN_PID or pid in self.known_pids:
                continue
            state, ppid = proc_state_and_ppid(pid)
            if state is None:
                continue
            if state in ("Z", "X"):
                if ppid == _OWN_PID:
                    try:
                        os.waitpid(pid, os.WNOHANG)   # an orphan that died: reap it, it is gone
                    except ChildProcessError:
                        pass
                continue
            if ppid == _OWN_PID or self.marker.encode() in read_proc(pid, "environ"):
                found[pid] = " ".join(cmdline(pid))[:200]
        return found

    def job_dirs(self):
        return sorted(path.name for path in self.tmpdir.glob("canopy-*"))

    def close(self):
        for process in self.popens:
            if process.poll() is None:
                process.kill()
            process.communicate()


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class DeadlineExceeded(Exception):
    pass


@pytest.fixture(autouse=True)
def deadline():
    """Fails a test that runs longer than TEST_DEADLINE_SECONDS, wherever it is stuck."""
    def expire(signo, frame):
        raise DeadlineExceeded(f"test exceeded its {TEST_DEADLINE_SECONDS} s deadline")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_DEADLINE_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def sandbox(tmp_path):
    """A job sandbox; after the test, nothing from its jobs may still run and no job temp dir may remain."""
    box = JobSandbox(tmp_path)
    yield box
    box.close()
    wait_until(lambda: not box.leftovers(), LEFTOVER_GRACE_SECONDS)
    left = box.leftovers()
    _kill_all(left)
    dirs = box.job_dirs()
    problems = []
    if left:
        problems.append("processes left running after the job: " +
                        "; ".join(f"pid {pid}: {cmd}" for pid, cmd in left.items()))
    if dirs:
        problems.append(f"job temp dirs left in {box.tmpdir}: {dirs}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def run_canopy(sandbox):
    """run_canopy(args, timeout=30, input=None, env=None, cwd=None) -> Completed; a hang fails the test."""
    return sandbox.run


@pytest.fixture
def canopy_bin():
    assert CANOPY.exists(), f"{CANOPY} is missing; build first (ninja -C {BUILD_DIR})"
    return CANOPY


@pytest.fixture
def canopyd_bin():
    assert CANOPYD.exists(), f"{CANOPYD} is missing; build first (ninja -C {BUILD_DIR})"
    return CANOPYD


@pytest.fixture
def loopback_config(tmp_path):
    """A --config file that makes fake host names run here: the launcher and daemons listen on loopback."""
    path = tmp_path / "loopback.toml"
    path.write_text('[tree]\nbind_address = "127.0.0.1"\n')
    return path


def parse_labelled(output):
    """Groups `-l` output by rank: {rank: [line, ...]} in arrival order."""
    by_rank = {}
    for line in output.splitlines():
        match = re.match(r"^\[(\d+)\] (.*)$", line)
        assert match, f"unlabelled output line: {line!r}"
        by_rank.setdefault(int(match.group(1)), []).append(match.group(2))
    return by_rank


def timing_phases(path):
    """The phases of a `--timing=FILE.json` report, by name."""
    return {phase["name"]: phase for phase in json.loads(Path(path).read_text())["phases"]}


class Readiness:
    """Ranks touch a file here when they are ready, so a test acts only once the whole job is running."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir()
        self.env = {"CANOPY_IT_READY": str(directory)}

    # Shell snippet for a rank: mark itself ready.
    touch = 'touch "$CANOPY_IT_READY/$RANK"'

    def count(self):
        return len(list(self.directory.iterdir()))

    def wait(self, ranks, job, timeout=20):
        """Waits until `ranks` ranks of `job` (a started canopy) are ready; fails if the job ends first."""
        if not wait_until(lambda: self.count() >= ranks or job.poll() is not None, timeout):
            pytest.fail(f"only {self.count()} of {ranks} ranks became ready within {timeout} s")
        if self.count() < ranks:
            _, err = job.communicate()
            pytest.fail(f"canopy exited with {job.returncode} before its ranks were ready:\n"
                        f"{err.decode(errors='replace')[:4000]}")


@pytest.fixture
def ready(sandbox):
    readiness = Readiness(sandbox.root / "ready")
    sandbox.env.update(readiness.env)
    return readiness


class Stranger:
    """A second, unprivileged Unix user on this machine: the other user who shares every node with the job.

    It gets a home of its own (0700, its own) that holds copies of the tools a test hands it, so that it needs no
    access to the build directory, wherever that is."""

    def __init__(self, name, uid, gid, home: Path):
        self.name, self.uid, self.gid, self.home = name, uid, gid, home
        self.popens = []

    def tool(self, path):
        """A copy of `path` (a program, a script, a shared object) that this user can read and run."""
        copy = self.home / Path(path).name
        copy.write_bytes(Path(path).read_bytes())
        copy.chmod(0o755)
        os.chown(copy, self.uid, self.gid)
        return copy

    def canopy(self):
        """A copy of the built canopy that this user can run, laid out as in the build directory: the launcher, the
        daemon beside it with its guard and its PMIx module."""
        for part in ("launcher/canopy", "daemon/canopyd", "daemon/canopy-guard", "daemon/pmix/canopyd-pmix.so"):
            copy = self.home / "build" / part
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes((BUILD_DIR / part).read_bytes())
            copy.chmod(0o755)
        subprocess.run(["chown", "-R", f"{self.uid}:{self.gid}", str(self.home / "build")], check=True, timeout=30)
        return self.home / "build" / "launcher" / "canopy"

    def _popen_args(self, env):
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "LC_ALL": "C.UTF-8",
                "USER": self.name, "LOGNAME": self.name}
        return dict(user=self.uid, group=self.gid, extra_groups=[], env={**base, **(env or {})}, cwd=self.home)

    def start(self, args, env=None, **kw):
        """Starts `args` as this user in the background; every process of the user is killed at the test's end."""
        process = subprocess.Popen([str(arg) for arg in args], stdin=kw.pop("stdin", subprocess.DEVNULL),
                                   stdout=kw.pop("stdout", subprocess.PIPE), stderr=kw.pop("stderr", subprocess.PIPE),
                                   **self._popen_args(env), **kw)
        process.started_at = time.monotonic()
        self.popens.append(process)
        return process

    def run(self, args, timeout=30, env=None, input=None):
        """Runs `args` as this user to completion; still running after `timeout` seconds fails the test."""
        process = self.start(args, env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        return completed_within(process, timeout, f"{args} as {self.name}",
                                input.encode() if isinstance(input, str) else input)

    def pids(self):
        """Live processes of this user."""
        found = []
        for pid in all_pids():
            try:
                if os.stat(f"/proc/{pid}").st_uid == self.uid:
                    state, _ = proc_state_and_ppid(pid)
                    if state not in (None, "Z", "X"):
                        found.append(pid)
            except OSError:
                continue
        return found


@pytest.fixture
def stranger():
    """A second Unix user, made for this test with useradd and removed after it with everything it ran.

    Needs root (CI and the test machines run as root); elsewhere the test is skipped, saying why."""
    if os.geteuid() != 0:
        pytest.skip("a second Unix user needs root to create (useradd)")
    import pwd
    name = f"cnpx{os.getpid() % 100000}{random.randrange(1000):03d}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", name], check=True,
                   capture_output=True, timeout=30)
    entry = pwd.getpwnam(name)
    home = Path(subprocess.run(["mktemp", "-d", "/tmp/canopy-stranger-XXXXXX"], check=True, capture_output=True,
                               text=True, timeout=10).stdout.strip())
    user = Stranger(name, entry.pw_uid, entry.pw_gid, home)
    try:
        os.chown(home, user.uid, user.gid)
        home.chmod(0o700)
        yield user
    finally:
        for process in user.popens:
            if process.poll() is None:
                process.kill()
            process.communicate()
        subprocess.run(["pkill", "-KILL", "-U", str(user.uid)], capture_output=True, timeout=10)
        wait_until(lambda: not user.pids(), 5)
        subprocess.run(["userdel", name], capture_output=True, timeout=30)
        subprocess.run(["rm", "-rf", str(home)], timeout=30)
