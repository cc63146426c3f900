# canopy on four real hosts in namespaces: daemons started over ssh, MPI across hosts, nothing left on any host.
import re

import pytest

from conftest import CANOPY, MPICH_PROGRAMS, OMPI_PROGRAMS, Jobs, bring_up, canopy_lines, check_hosts_clean, \
    parse_labelled, take_down

HOSTS = 4


@pytest.fixture(scope="module")
def cluster():
    made = bring_up("ssh", HOSTS)
    yield made
    take_down(made)


@pytest.fixture
def jobs(cluster):
    yield Jobs(cluster)
    check_hosts_clean(cluster)


def test_each_host_has_its_own_name_address_files_and_processes(cluster, jobs):
    def on(host, command):
        result = jobs.run(["sh", "-c", command], host=host.name)
        assert result.returncode == 0, result.describe()
        return result.stdout.splitlines()

    for index, host in enumerate(cluster.hosts, 1):
        assert on(host, "hostname") == [host.name]
        assert f"inet 198.18.0.{10 + index}/15" in on(host, "ip -4 -o addr show dev eth0")[0]
        # The only route is the test network's own: nothing can leave the namespaces the test made.
        assert [line.split()[:3] for line in on(host, "ip route")] == [["198.18.0.0/15", "dev", "eth0"]]
        assert [line.split() for line in on(host, "getent hosts node1 node4")] == \
            [["198.18.0.11", "node1"], ["198.18.0.14", "node4"]]
        assert on(host, "df --output=source /tmp /dev/shm /run")[1:] == \
            [f"{cluster.marker}-{host.name}-{name}" for name in ("tmp", "shm", "run")]
        # Files left by the hosts before this one are not here.
        on(host, "touch /tmp/mark-$(hostname) /dev/shm/mark-$(hostname)")
        for directory in ("tmp", "dev/shm"):
            assert set(on(host, f"ls /{directory}")) - cluster.shared_entries(directory) == {f"mark-{host.name}"}
        # Its own PID namespace: its PID 1 (hostinit), its sshd and this command; no other host's processes.
        processes = [line.split() for line in on(host, "ps -e -o pid=,comm=")]
        assert processes[0] == ["1", "python3"], processes
        assert {comm for pid, comm in processes[1:]} - {"sh"} == {"sshd", "ps"}, processes
    for host in cluster.hosts:
        for directory in ("tmp", "dev/shm"):
            (host.root / directory / f"mark-{host.name}").unlink()


@pytest.mark.parametrize("fanout", [32, 2], ids=["launcher-starts-all", "daemons-start-children"])
def test_canopy_over_ssh_runs_hostname_on_every_host(jobs, fanout):
    # The launcher runs on node4, as on a login node that is also in the job.
    # A rank's parent is its canopyd, whose environment sshd made: SSH_CONNECTION starts with the client's address.
    ssh_client = 'tr "\\0" "\\n" < /proc/$PPID/environ | sed -n "s/^SSH_CONNECTION=\\([^ ]*\\).*/\\1/p"'
    result = jobs.canopy(["-f", jobs.hostfile(), "--agent", "ssh", "--fanout", str(fanout), "-l",
                          "sh", "-c", f'echo "$(hostname) $CANOPY_NODE $({ssh_client})"'], host="node4")
    assert result.returncode == 0, result.describe()
    by_rank = parse_labelled(result.stdout)
    assert sorted(by_rank) == [0, 1, 2, 3], result.describe()
    for rank, lines in by_rank.items():
        hostname, node, *ssh_from = lines[0].split()
        assert hostname == node == f"node{rank + 1}", result.describe()
        # With fanout 2 the launcher starts node1 and node2, and node1's daemon starts node3 and node4 itself.
        # The launcher starts its own node's daemon directly, without ssh.
        started_by = "node4" if fanout == 32 or rank < 2 else "node1"
        expected = [] if started_by == node else [{"node1": "198.18.0.11", "node4": "198.18.0.14"}[started_by]]
        assert ssh_from == expected, result.describe()
    assert not canopy_lines(result.stderr), result.describe()


def test_plain_hostname_comes_back_from_every_host(jobs):
    result = jobs.canopy(["-f", jobs.hostfile(), "--agent", "ssh", "hostname"])
    assert result.returncode == 0, result.describe()
    assert sorted(result.stdout.split()) == ["node1", "node2", "node3", "node4"], result.describe()


# MPICH 4.0.2 (Debian 12) over UCX's TCP transport hangs in MPI_Finalize now and then, under Hydra as under canopy,
# once ranks on two hosts talk: a rank waits there for a peer already blocked in the finalize PMI barrier (fixed
# upstream by pmodels/mpich#6596). Its ranks leave after a barrier instead (MPI_TEST_SKIP_FINALIZE, mpi_common.h).
MPI_JOBS = pytest.mark.parametrize("programs, env", [(OMPI_PROGRAMS / "mpi_", {}),
                                                     (MPICH_PROGRAMS / "mpich_", {"MPI_TEST_SKIP_FINALIZE": "1"})],
                                   ids=["openmpi", "mpich"])


@MPI_JOBS
def test_mpi_hello_and_allreduce_across_four_hosts(jobs, programs, env):
    hello = jobs.canopy(["-f", jobs.hostfile(), "--ppn", "2", f"{programs}hello", "8"], env=env, timeout=90)
    assert hello.returncode == 0, hello.describe()
    seen = re.findall(r"rank (\d+) of 8 on (\S+), (\d+) on this node", hello.stdout)
    assert sorted((int(rank), host, int(local)) for rank, host, local in seen) == \
        [(rank, f"node{rank // 2 + 1}", 2) for rank in range(8)], hello.describe()
    allreduce = jobs.canopy(["-f", jobs.hostfile(), "--ppn", "2", f"{programs}allreduce", "8"], env=env, timeout=90)
    assert allreduce.returncode == 0, allreduce.describe()
    assert "mpi_allreduce: 8 ranks, sum 36 max 8 vector OK" in allreduce.stdout, allreduce.describe()


@MPI_JOBS
def test_mpmd_programs_across_hosts_share_one_world(jobs, programs, env):
    result = jobs.canopy(["-f", jobs.hostfile(), "--ppn", "2", "-n", "1", f"{programs}appnum", "server", "8", ":",
                          "-n", "7", f"{programs}appnum", "worker", "8"], env=env, timeout=90)
    assert result.returncode == 0, result.describe()
    seen = re.findall(r"rank (\d+) of 8 runs (\w+), appnum (\d+), \d+ of (\d+) in its program, rank sum 28",
                      result.stdout)
    assert sorted((int(rank), label, int(app), int(size)) for rank, label, app, size in seen) == \
        [(0, "server", 0, 1)] + [(rank, "worker", 1, 7) for rank in range(1, 8)], result.describe()


def test_a_rank_failing_on_one_host_ends_the_job_naming_it(jobs):
    result = jobs.canopy(["-f", jobs.hostfile(), "sh", "-c", '[ "$(hostname)" != node3 ] || exit 5; sleep 30'],
                         timeout=60)
    assert result.returncode == 5, result.describe()
    assert result.seconds < 20, result.describe()
    lines = canopy_lines(result.stderr)
    assert lines and "rank 2" in lines[0] and "node3" in lines[0], result.describe()


def test_a_host_name_that_does_not_resolve_fails_naming_it(jobs):
    result = jobs.canopy(["--hosts", "node1,node9", "--agent", "ssh", "true"], timeout=60)
    assert result.returncode == 255, result.describe()
    lines = canopy_lines(result.stderr)
    assert len(lines) == 1 and "node9" in lines[0], result.describe()
