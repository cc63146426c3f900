# The fault campaign's parts: a job on simulated nodes, a fault aimed at one phase of it, and what the run left.
# campaign.py runs many of these and tabulates them; test_faults.py runs a fixed few in CI.
import os
import random
import signal
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from conftest import BUILD_DIR, CANOPY, JobSandbox, daemon_for_node, daemon_pids, wait_until  # noqa: E402

PROGRAMS = BUILD_DIR / "tests" / "faults"

# The job: 7 nodes, fanout 2, so sim0001 has children of its own and sim0005 is a leaf; 2 ranks per node.
NODES, FANOUT, PPN = 7, 2, 2
RANKS = NODES * PPN
LEAF, INTERIOR = "sim0005", "sim0001"
TARGET_RANK = 7                          # on sim0003
# A stopped node is declared lost after this long without a heartbeat (the config's default is far longer).
HEARTBEAT_BOUND = 3.0
# A run still going this long after its fault is a hang.
HANG_SECONDS = 60.0
# How long processes and files of an ended job may take to go.
GRACE_SECONDS = 3.0
# How long a new file in /dev/shm may stay before it counts as this run's: the directory is shared with any other
# job on the machine.
SHM_SETTLE_SECONDS = 15.0

PHASES = ["tree", "staging", "health_check", "fence", "mpi_init", "pmi_init", "steady", "restart", "teardown"]
FAULTS = ["kill_rank", "kill_leaf", "kill_interior", "kill_launcher", "term_launcher", "int_launcher",
          "stop_leaf", "stop_interior", "slow_leaf"]
# Before any rank exists there is no rank to kill.
NOT_APPLICABLE = {("kill_rank", "tree"), ("kill_rank", "staging"), ("kill_rank", "health_check")}
# --health-check: each node's command runs this long, so that a fault lands while the nodes check themselves.
HEALTH_CHECK_SECONDS = 1.5
# The restart phase: the job runs with --max-restarts RESTARTS; once every rank runs, this rank (on sim0006, a node
# no fault targets) is killed, and the fault lands while every rank stops and starts again. A rank's fault then is
# one more restart, which the job survives.
RESTARTS, RESTART_TRIGGER_RANK = 2, 12


def node_ranks(node):
    first = int(node.removeprefix("sim")) * PPN
    return range(first, first + PPN)


def target_node(fault):
    """The node a fault hits, None for the launcher."""
    if fault == "kill_rank":
        return f"sim{TARGET_RANK // PPN:04d}"
    if fault.endswith("leaf") or fault.endswith("interior"):
        return LEAF if fault.endswith("leaf") else INTERIOR
    return None


def matrix():
    return [(fault, phase) for fault in FAULTS for phase in PHASES if (fault, phase) not in NOT_APPLICABLE]


@dataclass
class Outcome:
    fault: str
    phase: str
    hit: str = ""                 # the phase the job was really in when the fault came ("" if it never came)
    hang: bool = False
    exit_code: int | None = None
    seconds: float = 0.0          # from the fault to the launcher's exit
    orphans: list = field(default_factory=list)
    leftovers: list = field(default_factory=list)
    canopy_lines: list = field(default_factory=list)
    named: bool | None = None     # the error line names what failed (None: nothing to name)
    expected_exit: bool = True
    stderr: str = ""

    @property
    def clean(self):
        return not self.hang and not self.orphans and not self.leftovers and self.named is not False \
            and self.expected_exit

    def describe(self):
        return (f"{self.fault} in {self.phase} (hit: {self.hit or 'never'}): exit {self.exit_code}, "
                f"{self.seconds:.1f} s after the fault, hang={self.hang}, orphans={self.orphans}, "
                f"leftovers={self.leftovers}, named={self.named}, expected exit={self.expected_exit}\n"
                f"canopy lines: {self.canopy_lines}\nstderr: {self.stderr[-3000:]}")


class StagedTree:
    """A directory of small files and the manifest that stages them ahead, made once per campaign."""

    def __init__(self, root: Path, files=3000):
        self.dir = root / "staged"
        self.manifest = root / "staged.manifest"
        if self.manifest.exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            (self.dir / f"f{i:05d}.txt").write_text(f"{i:07d}\n" * 1024)
        recorded = subprocess.run([str(CANOPY), "stage", "record", "--stage", str(self.dir), "-o", str(self.manifest),
                                   "--", "sh", "-c", f"cat {self.dir}/*.txt > /dev/null"],
                                  timeout=120, capture_output=True, text=True)
        if recorded.returncode != 0:
            raise RuntimeError(f"canopy stage record failed: {recorded.stderr}")


def shm_files():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def job_ids_in(tmpdir: Path):
    """The ids of the jobs whose node dirs (canopy-JOB-NODE-XXXXXX) are in tmpdir."""
    return {path.name.split("-")[1] for path in tmpdir.glob("canopy-*-*-*")}


def rank_cgroups(job_ids):
    """The ranks' cgroups (lib/proc/rank_cgroup) of these jobs that are still there; other jobs' are not ours."""
    try:
        return sorted(name for name in os.listdir("/sys/fs/cgroup/unified")
                      if name.startswith("canopy-") and name.split("-")[1] in job_ids)
    except OSError:
        return []


class Marks:
    """The phase marks of a run's ranks (see phase_marks.h)."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir()

    def count(self, phase):
        return len(list(self.directory.glob(f"{phase}.*")))

    def pid(self, phase, rank):
        try:
            return int((self.directory / f"{phase}.{rank}").read_text())
        except (OSError, ValueError):
            return None

    def reached(self, node=None):
        """The furthest phase any rank (of `node`, if given) has marked; "" before the first mark."""
        for phase in ("done", "run", "fence", "init"):
            if node is None and self.count(phase):
                return phase
            if node is not None and any((self.directory / f"{phase}.{rank}").exists() for rank in node_ranks(node)):
                return phase
        return ""


def job_arguments(fault, phase, marks: Marks, staged: StagedTree | None, config: Path):
    """The canopy command line of a run."""
    tree = ["--config", config, "--sim-nodes", NODES, "--fanout", FANOUT, "--ppn", PPN]
    # Long enough for any fault to land in it, except where the job is meant to end well: a slow node.
    steady = 0.3 if phase == "teardown" else 3 if fault == "slow_leaf" or phase == "restart" else 30
    if phase == "fence":
        return tree + [PROGRAMS / "fence_rank", marks.directory, steady]
    program = PROGRAMS / ("mpich_phase_rank" if phase == "pmi_init" else "phase_rank")
    staging = ["--stage", staged.dir, "--stage-manifest", staged.manifest] if phase == "staging" else []
    health = [f"--health-check=sleep {HEALTH_CHECK_SECONDS}"] if phase == "health_check" else []
    restarts = ["--max-restarts", RESTARTS] if phase == "restart" else []
    return tree + staging + health + restarts + [program, marks.directory, steady]


def wait_for_moment(fault, phase, marks: Marks, sandbox: JobSandbox, job, rng: random.Random):
    """Waits until the job is in `phase`; False if it ended first."""
    def alive():
        return job.poll() is None

    if phase == "tree":
        # As soon as the node the fault is for has a daemon (the first one, for a fault elsewhere): the tree is
        # still growing below and beside it.
        node = target_node(fault) if fault != "kill_rank" else None
        return bool(wait_until(lambda: not alive() or daemon_for_node(node or INTERIOR, sandbox.marker), 30, 0.002)) \
            and alive()
    if phase in ("staging", "health_check"):
        # Every daemon is up and the cache is on its way down the tree, or every node checks itself; no rank has
        # started yet.
        if not wait_until(lambda: not alive() or len(daemon_pids(sandbox.marker)) >= NODES, 30, 0.005):
            return False
        time.sleep(rng.uniform(0.0, 0.2 if phase == "staging" else HEALTH_CHECK_SECONDS / 2))
        return alive()
    wanted = {"fence": ("fence", RANKS - 1), "mpi_init": ("init", RANKS), "pmi_init": ("init", RANKS),
              "steady": ("run", RANKS), "restart": ("run", RANKS), "teardown": ("done", 1)}[phase]
    reached = wait_until(lambda: not alive() or marks.count(wanted[0]) >= wanted[1], 45, 0.005)
    if phase == "steady":
        time.sleep(0.3)
    if phase == "restart" and reached and alive():
        # A rank fails: every rank stops and starts again, and the fault lands somewhere in that.
        # (A mark file just made may not hold its pid yet.)
        pid = wait_until(lambda: marks.pid("run", RESTART_TRIGGER_RANK), 5, 0.005)
        try:
            os.kill(pid, signal.SIGKILL)
        except (TypeError, ProcessLookupError):
            return False   # no pid, or the rank ended first: no restart to aim at
        time.sleep(rng.uniform(0.0, 0.3))
    return bool(reached) and alive()


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


class SlowCgroup:
    """A cgroup-v1 CPU cap (5% of one CPU) for one simulated node's daemon and everything it starts."""

    ROOT = Path("/sys/fs/cgroup/cpu")

    def __init__(self, name):
        self.path = self.ROOT / name

    @classmethod
    def missing(cls):
        return None if (cls.ROOT / "cpu.cfs_quota_us").exists() else f"no cgroup-v1 cpu controller at {cls.ROOT}"

    def cap(self, pid):
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text("100000")
        (self.path / "cpu.cfs_quota_us").write_text("5000")
        for member in descendants(pid):
            try:
                (self.path / "cgroup.procs").write_text(str(member))
            except OSError:
                pass   # it ended meanwhile

    def remove(self):
        if not self.path.exists():
            return
        for pid in (self.path / "cgroup.procs").read_text().split():
            try:
                (self.ROOT / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        wait_until(lambda: not (self.path / "cgroup.procs").read_text().split(), 2.0)
        self.path.rmdir()


def inject(fault, marks: Marks, sandbox: JobSandbox, job, slow: SlowCgroup):
    """Delivers the fault; returns what a user should find named in canopy's error line (None: nothing)."""
    if fault == "kill_rank":
        pid = marks.pid("done", TARGET_RANK) or marks.pid("run", TARGET_RANK) or \
            marks.pid("fence", TARGET_RANK) or marks.pid("init", TARGET_RANK)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass   # stopped already, by a restart between its attempts
        return f"rank {TARGET_RANK}"
    node = target_node(fault)
    if node is not None:
        pid = daemon_for_node(node, sandbox.marker)
        if pid is None:
            return None   # it left already (an orderly end)
        if fault == "slow_leaf":
            slow.cap(pid)
            return None
        os.kill(pid, signal.SIGKILL if fault.startswith("kill") else signal.SIGSTOP)
        return node
    signo = {"kill_launcher": signal.SIGKILL, "term_launcher": signal.SIGTERM, "int_launcher": signal.SIGINT}[fault]
    job.send_signal(signo)
    return None if signo == signal.SIGKILL else signal.Signals(signo).name


def expected_exit(fault, code, hit):
    """Whether the exit code is right for the fault; a job hit by a fault must never claim success."""
    if fault == "kill_launcher":
        return code == -signal.SIGKILL
    if fault == "slow_leaf":
        return code == 0
    if hit == "restart" and fault == "kill_rank":
        return code == 0   # one more restart: an old rank being stopped, or a new one that fails in its turn
    if fault in ("term_launcher", "int_launcher"):
        signo = signal.SIGTERM if fault == "term_launcher" else signal.SIGINT
        return code == 128 + signo or (hit == "done" and code == 0)
    if hit == "done" and code == 0:
        return True   # the fault came as the job ended well: any daemon or rank it hit had finished
    return code not in (0, None)


def resume_stopped(sandbox: JobSandbox):
    """SIGCONT for every process of the run, so that whatever a stopped daemon left can be seen and removed."""
    for pid in sandbox.leftovers():
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def run_one(fault, phase, workdir: Path, staged: StagedTree | None, rng: random.Random) -> Outcome:
    outcome = Outcome(fault, phase)
    workdir.mkdir(parents=True)
    sandbox = JobSandbox(workdir)
    config = workdir / "canopy.toml"
    config.write_text(f"[tree]\nheartbeat_timeout = {HEARTBEAT_BOUND}\n")
    marks = Marks(workdir / "marks")
    shm_before = shm_files()
    slow = SlowCgroup(f"canopy-fault-{os.getpid()}-{workdir.name}")
    job_ids = set()
    job = sandbox.start(job_arguments(fault, phase, marks, staged, config),
                        env={"OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_mpi_yield_when_idle": "1"})
    try:
        if wait_for_moment(fault, phase, marks, sandbox, job, rng):
            job_ids = job_ids_in(sandbox.tmpdir)
            daemons = len(daemon_pids(sandbox.marker))
            reached = marks.reached(target_node(fault))
            named = inject(fault, marks, sandbox, job, slow)
            # Where the fault landed: the furthest phase of the ranks it hits; before them, the tree still growing
            # or, once every daemon is up, the staging or the health check.
            outcome.hit = "restart" if phase == "restart" else \
                reached or ("tree" if daemons < NODES or phase == "tree"
                            else "health_check" if phase == "health_check" else "staging")
        else:
            named = None
        faulted = time.monotonic()
        try:
            out, err = job.communicate(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            outcome.hang = True
            resume_stopped(sandbox)
            job.kill()
            out, err = job.communicate()
        outcome.seconds = time.monotonic() - faulted
        outcome.exit_code = job.returncode
        outcome.stderr = err.decode(errors="replace")
        outcome.canopy_lines = [line for line in outcome.stderr.splitlines() if line.startswith("canopy: ")]
        if named is not None and outcome.exit_code != 0 and not outcome.hang:
            outcome.named = any(named in line for line in outcome.canopy_lines)
        outcome.expected_exit = outcome.hang or expected_exit(fault, outcome.exit_code, outcome.hit)
    finally:
        resume_stopped(sandbox)
        slow.remove()
        wait_until(lambda: not sandbox.leftovers(), GRACE_SECONDS)
        left = sandbox.leftovers()
        outcome.orphans = sorted(left.values())
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not any(sandbox.tmpdir.iterdir()) and not (shm_files() - shm_before)
                   and not rank_cgroups(job_ids), GRACE_SECONDS)
        # /dev/shm is the machine's: a file another job made meanwhile goes when that job ends, a leak stays.
        wait_until(lambda: not (shm_files() - shm_before), SHM_SETTLE_SECONDS)
        outcome.leftovers = sorted([f"$TMPDIR/{p.name}" for p in sandbox.tmpdir.iterdir()] +
                                   [f"/dev/shm/{name}" for name in shm_files() - shm_before] +
                                   [f"cgroup {name}" for name in rank_cgroups(job_ids)])
        sandbox.close()
    if outcome.clean:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome
