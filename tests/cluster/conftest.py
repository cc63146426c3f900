# Fixtures for the tests on a cluster in a box: the hosts (made by cluster.py, as tests/cluster/up makes them), a
# deadline for every test, and after every test a check that no host kept anything of the jobs.
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import Cluster, ClusterError, Unsupported, wait_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("CANOPY_BUILD_DIR", REPO / "build")).resolve()
CANOPY = BUILD_DIR / "launcher" / "canopy"
OMPI_PROGRAMS = BUILD_DIR / "tests" / "pmix"
MPICH_PROGRAMS = BUILD_DIR / "tests" / "pmi"

# Every test gets this long in total, whatever it waits for.
TEST_DEADLINE_SECONDS = 120
# How long a finished job's processes and files may take to leave the hosts.
LEFTOVER_GRACE_SECONDS = 10


class DeadlineExceeded(Exception):
    pass


@pytest.fixture(autouse=True)
def deadline():
    def expire(signo, frame):
        raise DeadlineExceeded(f"test exceeded its {TEST_DEADLINE_SECONDS} s deadline")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_DEADLINE_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def bring_up(kind, count, slurm=False):
    """A cluster of `count` hosts that dies with this test run, even if it is killed. A test skips only when this
    machine cannot make namespaces at all; anything else that stops `up` (no bridge or veth, no Slurm) fails it."""
    assert CANOPY.exists(), f"{CANOPY} is missing; build first (tests/build.sh)"
    cluster = Cluster(f"pytest-{kind}-{os.getpid()}")
    try:
        return cluster.up(count, slurm=slurm, die_with_parent=True)
    except Unsupported as error:
        if error.no_namespaces:
            pytest.skip(f"up: cannot make test hosts here: {error}")
        pytest.fail(f"up: {error}", pytrace=False)
    except (ClusterError, TimeoutError) as error:
        pytest.fail(f"up: {error}", pytrace=False)


def take_down(cluster):
    cluster.down()
    assert not cluster.state_dir.exists(), f"{cluster.state_dir} is still there after down"


def check_hosts_clean(cluster, hosts=None, grace=LEFTOVER_GRACE_SECONDS):
    """Fails the test if, after `grace` seconds, any of `hosts` (default: all) still runs a job's process or holds a
    file in /tmp or /dev/shm; clears them so the next test starts clean."""
    hosts = cluster.hosts if hosts is None else hosts

    def everything_left():
        return {host.name: left for host in hosts if (left := cluster.leftovers(host))}
    wait_for(lambda: not everything_left(), grace, interval=0.2)
    left = everything_left()
    for host in hosts:
        cluster.clear(host)
    if left:
        pytest.fail("left on the hosts after the test:\n" + "\n".join(
            f"  {host}: {what}: {detail}" for host, items in left.items() for what, detail in items.items()),
            pytrace=False)


class Jobs:
    """Runs canopy (or salloc, sbatch, ...) on a host of the cluster, as a user logged in there would."""

    def __init__(self, cluster):
        self.cluster = cluster
        config_home = cluster.shared / "xdg-config"   # keep a developer's own canopy.toml out of the tests
        config_home.mkdir(exist_ok=True)
        self.env = {"XDG_CONFIG_HOME": str(config_home)}

    def run(self, args, host="node1", timeout=60, env=None, input=None):
        try:
            result = self.cluster.run(host, args, timeout=timeout, env={**self.env, **(env or {})},
                                      cwd=self.cluster.shared, input=input)
        except TimeoutError as error:
            pytest.fail(str(error), pytrace=False)
        result.describe = lambda: (f"command on {host}: {args}\nexit: {result.returncode} after "
                                   f"{result.seconds:.2f} s\nstdout:\n{result.stdout[-3000:]}\n"
                                   f"stderr:\n{result.stderr[-4000:]}")
        return result

    def canopy(self, args, **kw):
        return self.run([CANOPY, *args], **kw)

    def hostfile(self, hosts=None, name="hosts.txt"):
        path = self.cluster.shared / name
        path.write_text("".join(f"{host.name}\n" for host in (hosts or self.cluster.hosts)))
        return path


def canopy_lines(stderr):
    """canopy's own messages (its errors and why a job ended), without the ranks' output."""
    return [line for line in stderr.splitlines() if line.startswith("canopy: ")]


def parse_labelled(output):
    """Groups `-l` output by rank: {rank: [line, ...]}."""
    by_rank = {}
    for line in output.splitlines():
        if line.startswith("[") and "] " in line:
            rank, text = line[1:].split("] ", 1)
            by_rank.setdefault(int(rank), []).append(text)
        else:
            raise AssertionError(f"unlabelled output line: {line!r}")
    return by_rank
