# Strangers on the tree's ports cannot disturb a job, and the job secret never shows in a process listing.
import os
import re
import resource
import socket
import struct
import time

import pytest

from conftest import BUILD_DIR, PROTOCOL, daemon_for_node, daemon_pids, listening_ports, parse_labelled, read_proc

MPI_HELLO = BUILD_DIR / "tests" / "pmix" / "mpi_hello"

HELLO = PROTOCOL["messages"]["hello"]
CHALLENGE = PROTOCOL["messages"]["challenge"]


def frame(kind, payload):
    return struct.pack("<IB", len(payload), kind) + payload


def varint(value):
    out = b""
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def recv_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def closed_by_peer(sock, timeout=12.0):
    """True when the other side closes the connection (EOF or reset) within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def connect(port_address):
    address, port = port_address
    return socket.create_connection((address, port), timeout=5)


def port_of(pid, address):
    ports = [p for p in listening_ports([pid]) if p[0] == address]
    assert ports, f"pid {pid} listens on nothing at {address}: {listening_ports([pid])}"
    return ports[0]


def finish_hello_job(sandbox, job, ranks_on_node, timeout):
    """Waits for a job of two ranks that each run mpi_hello and then echo "done RANK", and checks that both did.
    Returns its Completed and how long it took from this call on (the ranks were released just before)."""
    released = time.monotonic()
    result = sandbox.finish(job, timeout=timeout)
    ended = time.monotonic() - released
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: [f"mpi_hello: rank {r} of 2 on {socket.gethostname()}, "
                                                 f"{ranks_on_node} on this node", f"done {r}"] for r in range(2)}, \
        result.describe()
    return result, ended


# Seven nodes with fanout 2: the launcher and the daemons of sim0000..sim0002 listen for children. Without PMIx,
# the tree port is the only one a daemon listens on (the PMIx relay's port has its own test below).
JOB = ["--sim-nodes", "7", "--fanout", "2", "--pmix", "off", "-l", "sh", "-c"]


def rank_script(touch):
    return f'{touch}; sleep 3; echo "done $RANK"'


def check_job_unharmed(result):
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: [f"done {r}"] for r in range(7)}, result.describe()
    assert not result.canopy_lines(), result.describe()


@pytest.mark.parametrize("target", ["launcher", "daemon"])
def test_strangers_on_the_tree_port_do_not_disturb_the_job(target, sandbox, ready):
    job = sandbox.start(JOB + [rank_script(ready.touch)])
    ready.wait(7, job)
    if target == "launcher":
        port = port_of(job.pid, "127.0.0.1")
    else:
        pid = daemon_for_node("sim0000", sandbox.marker)
        assert pid, "no canopyd for sim0000"
        port = port_of(pid, "127.1.0.1")

    silent = connect(port)   # connects and says nothing until the job is over

    garbage = connect(port)
    garbage.sendall(os.urandom(2048))
    assert closed_by_peer(garbage), "garbage should get the connection dropped"

    huge = connect(port)
    huge.sendall(struct.pack("<IB", 1 << 30, HELLO))
    assert closed_by_peer(huge), "a stranger announcing a 1 GiB frame should be dropped"

    impostor = connect(port)
    header = recv_exactly(impostor, 5)
    assert len(header) == 5, "the tree port should open with a challenge"
    length, kind = struct.unpack("<IB", header)
    assert kind == CHALLENGE and length == 32, (length, kind)
    recv_exactly(impostor, length)
    impostor.sendall(frame(HELLO, varint(1) + os.urandom(32) + os.urandom(32)))
    assert closed_by_peer(impostor), "a wrong proof must not be welcomed"

    result = sandbox.finish(job, timeout=30)
    check_job_unharmed(result)
    assert result.seconds < 10, "a silent stranger must not hold the job up"
    silent.close()


def test_strangers_on_the_pmix_port_do_not_disturb_the_job(sandbox, ready):
    # The relay answers on the address ranks get for PMIx. A stranger there must neither break the job nor stall
    # the PMIx server the ranks then start (PMIx 4.2.2 would wait for a silent one's handshake), nor hold the
    # job's end up.
    go = sandbox.root / "go"
    script = (f'{ready.touch}; [ "$RANK" = 0 ] && echo "uri $PMIX_SERVER_URI41" >&2; '
              f'while [ ! -e {go} ]; do sleep 0.05; done; {MPI_HELLO} && echo "done $RANK"')
    job = sandbox.start(["--sim-nodes", "2", "-l", "sh", "-c", script])
    ready.wait(2, job)
    uri = None
    for _ in range(50):
        line = job.stderr.readline().decode()
        match = re.search(r"tcp4://([0-9.]+):(\d+)", line)
        if match:
            uri = (match.group(1), int(match.group(2)))
            break
    assert uri, "rank 0 should have printed its PMIx server address"
    silent = connect(uri)
    halfway = connect(uri)
    halfway.sendall(b"\xff" * 8)   # the start of a connect-ack header
    garbage = connect(uri)
    garbage.sendall(os.urandom(2048))
    go.touch()
    result, _ = finish_hello_job(sandbox, job, ranks_on_node=1, timeout=30)
    assert result.seconds < 10, "strangers on the PMIx port must not hold the job up"
    for stranger in (silent, halfway, garbage):
        assert closed_by_peer(stranger, timeout=5)


@pytest.mark.parametrize("mode", ["on", "eager"])
def test_strangers_on_the_pmix_servers_own_port_neither_get_in_nor_hold_up_the_jobs_end(mode, sandbox, ready):
    # PMIx 4.2.2 waits on its progress thread for a new connection's handshake, so a silent connection to the
    # server's own port stalls it. On demand only the relay gets through to that port. With eager the ranks
    # connect to it directly, so a stranger gets in too, and must at least not keep the daemons from leaving.
    go = sandbox.root / "go"   # the ranks outlive the checks, however slowly the machine gets through them
    script = f'{MPI_HELLO} && {ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; echo "done $RANK"'
    job = sandbox.start(["--sim-nodes", "2", "--pmix", mode, "-l", "sh", "-c", script])
    ready.wait(2, job)
    strangers = []
    for node in ("sim0000", "sim0001"):
        pid = daemon_for_node(node, sandbox.marker)
        assert pid, f"no canopyd for {node}"
        server = port_of(pid, "127.0.0.1")   # PMIx listens on loopback, canopy on the node's own address
        if mode == "on":
            with pytest.raises(socket.timeout):
                socket.create_connection(server, timeout=1)
        else:
            strangers.append(connect(server))
    go.touch()
    result, ended = finish_hello_job(sandbox, job, ranks_on_node=1, timeout=30)
    assert not result.canopy_lines(), result.describe()
    assert ended < 5, f"the job took {ended:.1f} s to end: a daemon waited to be killed\n{result.describe()}"
    for stranger in strangers:
        stranger.close()


def limit_descriptors(limit):
    """preexec_fn for a job started as under `ulimit -n LIMIT`: soft and hard limit alike, so canopy cannot raise it."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def open_silent_connections(ports, count):
    """`count` connections to each of `ports` that never say a word; the peer may drop them as it likes."""
    needed = len(ports) * count + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"this test needs {needed} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    return [socket.create_connection(port, timeout=5) for port in ports for _ in range(count)]


def test_many_silent_connections_to_an_inner_daemon_under_a_low_ulimit_leave_the_mpi_job_unharmed(sandbox, ready):
    """Issue 15, item 2: 1,100 silent connections to an inner daemon's tree port under `ulimit -n 1024` made it
    spin on accept (EMFILE), and the MPI job failed when the daemon could not dlopen its PMIx module. As many to
    its PMIx relay's port left the daemon no descriptor to start the PMIx server with, and it died (CI, stop 36)."""
    go = sandbox.root / "go"
    script = (f'{ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; '
              f'{MPI_HELLO} > /dev/null && echo "done $RANK"')
    job = sandbox.start(["--sim-nodes", "7", "--fanout", "2", "-l", "sh", "-c", script],
                        preexec_fn=limit_descriptors(1024))
    ready.wait(7, job)
    pid = daemon_for_node("sim0000", sandbox.marker)
    assert pid, "no canopyd for sim0000"
    ports = [port for port in listening_ports([pid]) if port[0] == "127.1.0.1"]
    assert len(ports) == 2, f"sim0000's canopyd should listen on its tree port and its PMIx relay: {ports}"
    strangers = open_silent_connections(ports, 1100)
    try:
        # The tree port and the PMIx relay's alike: strangers may hold no more than a share of the daemon's
        # descriptors, or the PMIx server it starts for the ranks finds none (and libevent exits the daemon).
        time.sleep(0.5)
        held = len(os.listdir(f"/proc/{pid}/fd"))
        assert held < 512, f"strangers hold the daemon's descriptors: {held} open under a limit of 1024"
        go.touch()
        result = sandbox.finish(job, timeout=60)
    finally:
        for stranger in strangers:
            stranger.close()
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: [f"done {r}"] for r in range(7)}, result.describe()
    assert not result.canopy_lines(), result.describe()
    assert len(result.stderr_lines()) <= 10, f"the strangers flooded stderr:\n{result.stderr[:4000]}"


@pytest.mark.parametrize("target", ["launcher", "daemon"])
def test_two_hundred_strangers_at_once_leave_the_job_unharmed_and_give_a_few_warnings(target, sandbox, ready):
    """Issue 15, items 2 and 7: 200 connections at once to a tree port from a peer without the key must not harm
    the job, and must not print 200 warning lines on the user's stderr: a few, then a count."""
    go = sandbox.root / "go"
    job = sandbox.start(JOB + [f'{ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; echo "done $RANK"'])
    ready.wait(7, job)
    if target == "launcher":
        port = port_of(job.pid, "127.0.0.1")
    else:
        pid = daemon_for_node("sim0000", sandbox.marker)
        assert pid, "no canopyd for sim0000"
        port = port_of(pid, "127.1.0.1")
    strangers = [connect(port) for _ in range(200)]
    for stranger in strangers:
        stranger.sendall(os.urandom(64))
    for stranger in strangers:
        assert closed_by_peer(stranger, timeout=5), "a stranger's garbage should get its connection dropped"
        stranger.close()
    # The count comes within 2 s. A daemon's lines written as the job ends may not reach canopy before it exits.
    time.sleep(2.5)
    go.touch()
    released = time.monotonic()
    result = sandbox.finish(job, timeout=30)
    ended = time.monotonic() - released
    check_job_unharmed(result)
    warnings = result.stderr_lines()
    assert 1 <= len(warnings) <= 5, f"200 refused connections gave {len(warnings)} lines:\n{result.stderr[:4000]}"
    counted = [int(m.group(1)) for line in warnings for m in [re.search(r"(\d+) more connections refused", line)] if m]
    assert sum(counted) + len(warnings) - len(counted) == 200, result.stderr


AGENT_SCRIPT = """#!/bin/sh
# Test agent: runs the daemon here, recording the secret it passes on stdin so the test can look for it.
host=$1; shift
IFS= read -r secret
printf '%s\\n' "$secret" >> "$CANOPY_IT_SECRETS"
exec "$@" <<EOF
$secret
EOF
"""


def test_secret_never_appears_in_daemon_argv_or_environment(sandbox, ready, loopback_config):
    agent = sandbox.root / "agent.sh"
    agent.write_text(AGENT_SCRIPT)
    agent.chmod(0o755)
    secrets = sandbox.root / "secrets.txt"
    sandbox.env["CANOPY_IT_SECRETS"] = str(secrets)
    args = ["--config", loopback_config, "--agent", f"exec:{agent} %h", "--hosts", "s[1-5]", "--fanout", "2"]

    job = sandbox.start(args + ["sh", "-c", f"{ready.touch}; sleep 2"])
    ready.wait(5, job)
    recorded = secrets.read_text().split()
    assert len(recorded) == 5 and len(set(recorded)) == 1, f"every daemon gets the job's one secret: {recorded}"
    secret = recorded[0]
    assert re.fullmatch(r"[0-9a-f]{64}", secret), "the secret is 32 random bytes in hex"
    pids = daemon_pids(sandbox.marker)
    assert len(pids) == 5, f"expected 5 daemons, found {pids}"
    exposed = []
    for pid in pids + [job.pid] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        for part in ("cmdline", "environ"):
            if secret.encode() in read_proc(pid, part):
                exposed.append(f"/proc/{pid}/{part}")
    assert not exposed, f"the job secret is readable at {exposed}"
    result = sandbox.finish(job, timeout=30)
    assert result.returncode == 0, result.describe()

    secrets.unlink()
    again = sandbox.run(args + ["true"], timeout=30)
    assert again.returncode == 0, again.describe()
    assert secret not in secrets.read_text(), "each job must get a fresh secret"


@pytest.mark.parametrize("served", ["all", "pmix"])
def test_ranks_hold_no_descriptor_but_their_standard_streams_and_pmi_fd(run_canopy, served):
    # An inherited tree socket would let any rank talk on its daemon's authenticated link, and keeps a dead
    # daemon's connection open so its parent never notices. The one extra a rank may hold is its own end of its
    # simple-PMI socketpair, named by PMI_FD, and only when simple PMI is served.
    result = run_canopy(["--sim-nodes", "3", "--fanout", "2", "--ppn", "2", "--pmi", served, "-l", "sh", "-c",
                         "echo PMI_FD=${PMI_FD:-none}; ls -l /proc/$$/fd"])   # listed by a child of the rank
    assert result.returncode == 0, result.describe()
    by_rank = parse_labelled(result.stdout)
    assert sorted(by_rank) == list(range(6))
    for rank, lines in by_rank.items():
        pmi_fd = next(line.split("=", 1)[1] for line in lines if line.startswith("PMI_FD="))
        fds = dict(re.search(r"(\d+) -> (.*)$", line).groups() for line in lines if "->" in line)
        expected = ["0", "1", "2"] + ([pmi_fd] if served == "all" else [])
        assert pmi_fd != "none" if served == "all" else pmi_fd == "none", f"rank {rank}: PMI_FD={pmi_fd}"
        assert sorted(fds, key=int) == sorted(expected, key=int), f"rank {rank} inherited descriptors: {fds}"
        if served == "all":
            assert fds[pmi_fd].startswith("socket:"), f"rank {rank}: PMI_FD is {fds[pmi_fd]}"

CLIENT_ABORT = BUILD_DIR / "tests" / "pmix" / "client_abort"
FAKE_UID = BUILD_DIR / "tests" / "pmix" / "fake_uid.so"


def pmix_environment(path):
    """The PMIx variables a rank dumped with `env > PATH`: what an attacker learns from /dev/shm and /proc/net/tcp."""
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.startswith("PMIX_"):
            found[name] = value
    assert "PMIX_NAMESPACE" in found, f"rank 0 dumped no PMIx variables: {found}"
    return found


@pytest.mark.parametrize("mode", ["on", "eager"])
def test_another_user_claiming_to_be_the_jobs_user_cannot_join_its_pmix_server_nor_wedge_its_ranks(
        mode, sandbox, ready, stranger):
    # The attack of issue 38: a second user runs a PMIx client with the job's namespace, rank 0, the address its
    # ranks were given (the relay on demand, the server's own port with eager) and a shim that makes it claim the
    # job's uid, as PMIx's native security over TCP trusts. Let in, it would abort the victim's job. It must be
    # refused before the server hears a word, and the victim's ranks must then get through MPI_Init as fast as ever.
    go = sandbox.root / "go"
    dump = sandbox.root / "rank0.env"
    script = (f'[ "$RANK" = 0 ] && env > {dump}; {ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; '
              f'{MPI_HELLO} && echo "done $RANK"')
    job = sandbox.start(["--sim-nodes", "1", "-n", "2", "--pmix", mode, "-l", "sh", "-c", script])
    ready.wait(2, job)
    attacker_env = {**pmix_environment(dump), "PMIX_RANK": "0", "PMIX_SECURITY_MODE": "native",
                    "LD_PRELOAD": str(stranger.tool(FAKE_UID)),
                    "CANOPY_FAKE_UID": str(os.geteuid()), "CANOPY_FAKE_GID": str(os.getegid())}
    attack = stranger.run([stranger.tool(CLIENT_ABORT), "0", "42"], env=attacker_env, timeout=60)
    assert attack.returncode == 1 and "PMIx_Init failed" in attack.stderr, (
        f"the stranger's PMIx client was not refused:\n{attack.describe()}")

    go.touch()
    result, ended = finish_hello_job(sandbox, job, ranks_on_node=2, timeout=60)
    assert ended < 15, f"the ranks took {ended:.1f} s after a stranger was refused: wedged\n{result.describe()}"


def test_another_users_connection_to_a_daemons_loopback_ports_is_closed_unread(sandbox, ready, stranger):
    # Every loopback port a daemon listens on (the PMIx relay, and the tree's on simulated nodes) closes another
    # user's connection at once, before reading a byte: the kernel, not the peer, says whose it is.
    go = sandbox.root / "go"
    script = f'{ready.touch}; while [ ! -e {go} ]; do sleep 0.05; done; echo "done $RANK"'
    job = sandbox.start(["--sim-nodes", "2", "-l", "sh", "-c", script])
    ready.wait(2, job)
    pid = daemon_for_node("sim0001", sandbox.marker)
    assert pid, "no canopyd for sim0001"
    ports = [port for port in listening_ports([pid]) if port[0].startswith("127.")]
    assert ports, f"sim0001's canopyd listens on no loopback port: {listening_ports([pid])}"
    probe = stranger.home / "probe.py"
    probe.write_text(
        "import socket, sys\n"
        "for spec in sys.argv[1:]:\n"
        "    host, port = spec.rsplit(':', 1)\n"
        "    s = socket.create_connection((host, int(port)), timeout=5)\n"
        "    s.settimeout(5)\n"
        "    try:\n"
        "        data = s.recv(1)\n"
        "        print(spec, 'closed' if data == b'' else 'answered')\n"
        "    except ConnectionResetError:\n"
        "        print(spec, 'closed')\n"
        "    except socket.timeout:\n"
        "        print(spec, 'open')\n")
    os.chown(probe, stranger.uid, stranger.gid)
    checked = stranger.run(["/usr/bin/python3", probe] + [f"{a}:{p}" for a, p in ports], timeout=60)
    assert checked.returncode == 0, checked.describe()
    assert checked.stdout.split("\n")[:-1] == [f"{a}:{p} closed" for a, p in ports], checked.describe()
    # Our own user still gets in: a silent connection of ours is held until its hello deadline.
    ours = connect(ports[0])
    assert not closed_by_peer(ours, timeout=1), "a connection of the job's own user was closed at once"
    ours.close()
    go.touch()
    result = sandbox.finish(job, timeout=30)
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: [f"done {r}"] for r in range(2)}, result.describe()
