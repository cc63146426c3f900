# On-demand staging end to end: without a manifest, the ranks' lookups travel up the tree and only the root reads
# the slowfs mount, once per path, whatever the number of ranks and nodes.
import hashlib
import os

import pytest

from conftest import parse_labelled, timing_phases, wait_until
from test_slowfs import _missing_fuse
from test_stage import (EXPECTED_TOTAL, PYTHON, StageCase, assert_caches_gone, assert_nothing_passed,
                        build_origin_app, messages, ok, preload_rows)

needs_fuse = pytest.mark.skipif(_missing_fuse() is not None, reason=str(_missing_fuse()))

# What the root does beyond what one rank would: list the prefix for the index, and lstat each path before
# reading it. A rank's own lookups are all answered by the tree.
ROOT_OVERHEAD_OPS = 40


@pytest.fixture
def counted(sandbox, tmp_path):
    """A StageCase whose slowfs drops cached pages at every open, so every read at the root is counted."""
    made = StageCase(sandbox, tmp_path, ["--no-data-cache"])
    yield made
    made.mount.close()


def fetched_rows(stats):
    return [r for r in preload_rows(stats) if r.get("fetched", 0) > 0]


@needs_fuse
def test_on_demand_job_prints_the_same_and_the_root_reads_each_path_once(counted):
    case = counted
    case.mount.reset()
    one, _, _ = case.job(["--sim-nodes", "1", "--ppn", "1"], case.python())
    one_rank_ops = case.settled_ops()["total"]
    case.mount.reset()
    plain, _, _ = case.job(["--sim-nodes", "3", "--ppn", "2"], case.python())
    six_ranks_ops = case.settled_ops()["total"]
    case.mount.reset()
    staged, reports, stats = case.job(["--sim-nodes", "3", "--ppn", "2", *case.staged_args(manifest=False)],
                                      case.python())
    staged_ops = case.settled_ops()["total"]
    print(f"slowfs operations: 1 rank unstaged {one_rank_ops}, 6 ranks unstaged {six_ranks_ops}, "
          f"6 ranks on demand {staged_ops}")

    by_rank = ok(staged)
    assert by_rank == ok(plain)
    assert sorted(by_rank) == list(range(6))
    assert by_rank[0][0].startswith(f"0 {EXPECTED_TOTAL} ['alpha', 'beta', 'gamma']"), by_rank
    rows = assert_nothing_passed(stats, 6)
    # Each rank asked its daemon, or read what another rank on its node had asked from the node's answer board.
    assert all(r["served_open"] > 0 and r["fetched"] + r["board_hits"] > 0 for r in preload_rows(stats)), rows
    # The time a rank waited for its daemon's answers: some whenever it asked, none when it did not.
    assert all((r["fetch_wait_us"] > 0) == (r["fetched"] + r["fetch_failed"] > 0) for r in preload_rows(stats)), rows
    assert six_ranks_ops > 4 * one_rank_ops, (one_rank_ops, six_ranks_ops)
    assert staged_ops <= one_rank_ops + ROOT_OVERHEAD_OPS, (staged_ops, one_rank_ops, six_ranks_ops)
    assert_caches_gone(reports, 6)


@needs_fuse
def test_many_ranks_opening_one_file_at_once_cause_one_read_at_the_root(counted):
    case = counted
    shared = case.src / "shared"
    shared.mkdir()
    (shared / "data.bin").write_bytes(os.urandom(300_000))
    program = case.root / "same.py"
    program.write_text(
        "import hashlib, sys\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    print(hashlib.sha256(f.read()).hexdigest())\n")
    case.mount.reset()
    timing = case.root / "timing.json"
    done, _, stats = case.job(["--sim-nodes", "2", "--ppn", "4", f"--timing={timing}",
                               *case.staged_args(manifest=False)],
                              [PYTHON, program, case.mnt / "shared" / "data.bin"])
    ops = case.settled_ops()
    expected = hashlib.sha256((shared / "data.bin").read_bytes()).hexdigest()
    assert ok(done) == {rank: [expected] for rank in range(8)}
    assert ops["ops"].get("open", 0) == 1, ops
    assert ops["bytes_read"] == 300_000, ops
    assert_nothing_passed(stats, 8)
    # Each node asked its parent once. Its other ranks were answered on the node: by the daemon (from its
    # cache, or merged with the question in flight), or from the node's answer board without asking at all.
    phases = timing_phases(timing)
    up = phases["daemon.stage_up_messages"]
    assert (up["count"], up["max"], up["sum"]) == (2, 1, 2), up
    rows = preload_rows(stats)
    asked_daemon = sum(r["fetched"] for r in rows)
    assert asked_daemon == up["sum"] + phases["daemon.stage_local_messages"]["sum"], (phases, rows)
    assert all(r["fetched"] + r["board_hits"] > 0 for r in rows), rows


@needs_fuse
def test_ranks_read_what_another_rank_on_their_node_asked_from_the_answer_board(case):
    # The ranks of one node run the same lookups one after the other: only the first asks its daemon.
    turns = case.root / "turns"
    turns.mkdir()
    program = case.root / "walk.py"
    program.write_text(
        "import os, sys, time\n"
        "rank, root, turns = int(os.environ['RANK']), sys.argv[1], sys.argv[2]\n"
        "deadline = time.monotonic() + 60\n"
        "while rank and not os.path.exists(os.path.join(turns, str(rank - 1))):\n"
        "    assert time.monotonic() < deadline, 'the previous rank never finished'\n"
        "    time.sleep(0.02)\n"
        "files = 0\n"
        "for here, dirs, names in os.walk(root):\n"
        "    for name in sorted(names):\n"
        "        with open(os.path.join(here, name), 'rb') as f:\n"
        "            f.read()\n"
        "        files += 1\n"
        "    os.path.exists(os.path.join(here, 'no-such-file'))\n"
        "open(os.path.join(turns, str(rank)), 'w').close()\n"
        "print(files)\n")
    timing = case.root / "timing.json"
    done, _, stats = case.job(["--sim-nodes", "1", "--ppn", "4", f"--timing={timing}",
                               *case.staged_args(manifest=False)],
                              [PYTHON, program, case.mnt, turns])
    by_rank = ok(done)
    assert sorted(by_rank) == [0, 1, 2, 3] and len({tuple(lines) for lines in by_rank.values()}) == 1, by_rank
    assert int(by_rank[0][0]) > 3, by_rank
    rows = assert_nothing_passed(stats, 4)
    asked = sorted(r["fetched"] for r in preload_rows(stats))
    assert asked[:3] == [0, 0, 0] and asked[3] > 0, rows
    # The three others read at least what the first asked from the board (the first also reads there what the
    # root read ahead and pushed).
    assert sum(1 for r in preload_rows(stats) if r["board_hits"] >= asked[3]) >= 3, rows
    # The daemon's socket served the first rank only.
    phases = timing_phases(timing)
    served = phases["daemon.stage_local_messages"]["sum"] + phases["daemon.stage_up_messages"]["sum"]
    assert served == asked[3], (served, rows)


@needs_fuse
def test_a_file_missing_at_the_root_is_enoent_on_every_rank(case):
    program = case.root / "missing.py"
    program.write_text(
        "import os, sys\n"
        "root = sys.argv[1]\n"
        "for path in (os.path.join(root, 'site', 'nothing.txt'), os.path.join(root, 'site', 'calc', 'no', 'x')):\n"
        "    try:\n"
        "        open(path).close()\n"
        "        print('found', path)\n"
        "    except FileNotFoundError:\n"
        "        print('missing', os.path.exists(path))\n")
    command = [PYTHON, program, case.mnt]
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)], command)
    assert ok(staged) == {rank: ["missing False", "missing False"] for rank in (0, 1)}
    assert_nothing_passed(stats, 2)
    # Each rank's "no" came on demand: from its daemon, the board, or the listing the board holds.
    rows = preload_rows(stats)
    assert len(rows) == 2 and all(r["fetched"] + r["board_hits"] + r["listing_misses"] > 0 for r in rows), rows


@needs_fuse
def test_a_large_file_arrives_intact_through_a_two_level_tree(case):
    big = case.src / "big.bin"
    big.write_bytes(os.urandom(20 << 20))
    expected = hashlib.sha256(big.read_bytes()).hexdigest()
    program = case.root / "hash.py"
    program.write_text(
        "import hashlib, os, sys\n"
        "h = hashlib.sha256()\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    for block in iter(lambda: f.read(1 << 20), b''):\n"
        "        h.update(block)\n"
        "print(h.hexdigest(), os.path.getsize(sys.argv[1]))\n")
    case.mount.reset()
    staged, reports, stats = case.job(["--sim-nodes", "4", "--fanout", "2", *case.staged_args(manifest=False)],
                                      [PYTHON, program, case.mnt / "big.bin"])
    assert ok(staged) == {rank: [f"{expected} {20 << 20}"] for rank in range(4)}
    assert case.settled_ops()["bytes_read"] <= (20 << 20) + (1 << 20)   # read once, at the root
    assert_nothing_passed(stats, 4)


@needs_fuse
def test_what_the_root_reads_ahead_reaches_every_node_and_its_ranks_need_not_ask(case):
    # A rank lists a directory and reads one file: the root reads the directory's other small files ahead and
    # pushes them down the whole tree (3 nodes, fanout 2: the third node gets them through the second), so the
    # rank reads the rest from its node's answer board and cache without asking, byte for byte.
    pkg = case.src / "pkg"
    pkg.mkdir()
    for i in range(30):
        (pkg / f"f{i:02}").write_bytes(os.urandom(1000 + 37 * i))
    expected = hashlib.sha256(b"".join((pkg / f"f{i:02}").read_bytes() for i in range(30))).hexdigest()
    program = case.root / "read_all.py"
    program.write_text(
        "import hashlib, os, sys, time\n"
        "root = sys.argv[1]\n"
        "names = sorted(os.listdir(root))\n"
        "h = hashlib.sha256()\n"
        "with open(os.path.join(root, names[0]), 'rb') as f:\n"
        "    h.update(f.read())\n"
        "# Wait for the read-ahead to land in the node cache (outside the prefix: looking costs no question).\n"
        "last = os.environ['CANOPY_STAGE_CACHE'] + '/root' + os.path.join(root, names[-1])\n"
        "deadline = time.monotonic() + 60\n"
        "while not os.path.exists(last):\n"
        "    assert time.monotonic() < deadline, 'the read-ahead never reached this node'\n"
        "    time.sleep(0.05)\n"
        "time.sleep(0.5)   # its board record is published in the same turn of the daemon's loop\n"
        "for name in names[1:]:\n"
        "    with open(os.path.join(root, name), 'rb') as f:\n"
        "        h.update(f.read())\n"
        "print(len(names), h.hexdigest())\n")
    timing = case.root / "timing.json"
    done, _, stats = case.job(["--sim-nodes", "3", "--fanout", "2", f"--timing={timing}",
                               *case.staged_args(manifest=False)], [PYTHON, program, case.mnt / "pkg"])
    assert ok(done) == {rank: [f"30 {expected}"] for rank in range(3)}
    rows = assert_nothing_passed(stats, 3)
    # Each rank asked its daemon about a few paths (the listing, the first file); the other 29 files it found
    # on the board.
    for r in preload_rows(stats):
        assert r["fetched"] < 10 and r["board_hits"] >= 29, rows
    phases = timing_phases(timing)
    assert phases["root.stage_read_ahead_messages"]["sum"] >= 29, phases
    pushed = phases["daemon.stage_pushed_messages"]
    assert pushed["count"] == 3 and pushed["min"] >= 29, pushed


@needs_fuse
def test_with_a_manifest_what_the_recording_missed_is_fetched_on_demand(case):
    case.record(case.python())
    extra = case.root / "extra.py"
    extra.write_text(
        "import os, sys\n"
        "with open(os.path.join(sys.argv[1], 'site', 'calc', 'data.txt')) as f:\n"
        "    print(f.read().split())\n"
        "print(sorted(os.listdir(os.path.join(sys.argv[1], 'extra'))))\n"
        "with open(os.path.join(sys.argv[1], 'extra', 'pthmod.py')) as f:\n"
        "    print(len(f.read()))\n")
    command = [PYTHON, extra, case.mnt]
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args()], command)
    plain, _, _ = case.job(["--sim-nodes", "2"], command)
    assert ok(staged) == ok(plain)
    assert_nothing_passed(stats, 2)
    assert all(r["served_open"] > 0 and r["fetched"] > 0 for r in preload_rows(stats)), preload_rows(stats)


@needs_fuse
def test_a_manifest_that_does_not_exist_is_learned_and_the_next_job_stages_it_up_front(counted):
    case = counted
    learned = case.root / "learned.manifest"
    case.mount.reset()
    first, _, first_stats = case.job(["--sim-nodes", "2", "--ppn", "2", "--stage", case.mnt,
                                      "--stage-manifest", learned], case.python())
    first_ops = case.settled_ops()["total"]
    assert first.returncode == 0, first.describe()
    wrote = [line for line in messages(first) if "wrote stage manifest" in line]
    assert len(wrote) == 1 and str(learned) in wrote[0], first.describe()
    assert learned.exists()
    assert all(r["fetched"] + r["board_hits"] > 0 for r in preload_rows(first_stats)), preload_rows(first_stats)

    case.mount.reset()
    second, _, second_stats = case.job(["--sim-nodes", "2", "--ppn", "2", *case.staged_args(manifest=False),
                                        "--stage-manifest", learned], case.python())
    second_ops = case.settled_ops()["total"]
    assert ok(second) == parse_labelled(first.stdout)
    assert_nothing_passed(second_stats, 4)
    # Everything the first job fetched on demand came with the learned manifest: no rank had to ask.
    assert all(r["fetched"] == 0 and r["served_open"] > 0 for r in preload_rows(second_stats)), \
        preload_rows(second_stats)
    print(f"slowfs operations: learning job {first_ops}, job with the learned manifest {second_ops}")


@needs_fuse
def test_a_manifest_to_learn_needs_the_prefixes(case):
    missing = case.root / "nowhere.manifest"
    done, _, _ = case.job(["--sim-nodes", "1", "--stage-manifest", missing], case.python())
    assert done.returncode != 0
    lines = done.canopy_lines()
    assert len(lines) == 1 and str(missing) in lines[0] and "--stage" in lines[0], done.describe()
    assert not missing.exists()


@needs_fuse
def test_killing_the_launcher_of_an_on_demand_job_removes_its_stage_cache(case, ready, tmp_path):
    # The launcher keeps a copy of every file it fetched (gigabytes of /dev/shm for torch): a SIGKILL must not
    # leave it behind, any more than the nodes' caches.
    base = tmp_path / "cache-base"
    base.mkdir()
    config = tmp_path / "cache.toml"
    config.write_text(f'[stage]\ncache_dir = "{base}"\n')
    reader = f"cat {case.mnt}/site/note.txt >/dev/null && {ready.touch} && sleep 60"
    job = case.sandbox.start(["--config", config, "--sim-nodes", "2", *case.staged_args(manifest=False),
                              "sh", "-c", reader])
    ready.wait(2, job)
    launcher_caches = list(base.glob("canopy-*-launcher-*"))
    assert len(launcher_caches) == 1 and any(launcher_caches[0].rglob("note.txt")), list(base.iterdir())
    job.kill()
    job.wait(timeout=5)
    assert wait_until(lambda: not list(base.iterdir()), 2.0), f"left behind: {list(base.iterdir())}"


@pytest.fixture
def case(sandbox, tmp_path):
    made = StageCase(sandbox, tmp_path)
    yield made
    made.mount.close()


@needs_fuse
def test_a_malformed_question_on_the_stage_socket_is_refused_and_the_node_keeps_serving(case):
    program = case.root / "garbage.py"
    program.write_text(
        "import os, socket, struct, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(os.environ['CANOPY_STAGE_SOCKET'])\n"
        "s.sendall(b'not a stage question at all')\n"
        "reply = s.recv(4096)\n"
        "magic, status = struct.unpack('<Ii', reply[:8])\n"
        "print('refused', status != 0)\n"
        "with open(os.path.join(sys.argv[1], 'site', 'note.txt')) as f:\n"
        "    print(f.read().strip())\n")
    staged, _, stats = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)],
                                [PYTHON, program, case.mnt])
    assert staged.returncode == 0, staged.describe()
    assert parse_labelled(staged.stdout) == {rank: ["refused True", "a note"] for rank in (0, 1)}
    assert_nothing_passed(stats, 2)
    # One line per refused question, from each node's canopyd, and nothing else.
    refusals = [line for line in staged.stderr.splitlines() if "malformed on-demand stage request" in line]
    assert len(refusals) == 2, staged.describe()


@needs_fuse
def test_without_an_answer_the_ranks_fall_back_to_the_real_filesystem(case):
    # A socket nobody listens on stands for a daemon that cannot answer: the lookups still succeed, unstaged.
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    # Short, under /tmp: a socket path must fit in 108 bytes, and the test's own directory may be deeper.
    nobody = f"/tmp/canopy-test-{os.getpid()}-nobody.sock"
    assert not os.path.exists(nobody)
    staged, _, stats = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)],
                                ["/bin/sh", "-c", 'CANOPY_STAGE_SOCKET="$0" exec "$@"', nobody, *case.python()])
    assert ok(staged) == ok(plain)
    rows = preload_rows(stats)
    assert len(rows) == 2 and all(r["fetch_failed"] > 0 and r["passed"] > 0 and r["fetched"] == 0
                                  for r in rows), rows


@needs_fuse
def test_daemons_check_a_program_on_the_mount_through_the_tree_not_each_on_the_mount(case):
    # Every daemon checks that the ranks' program exists and may run before it starts them. On demand, the root
    # reads its metadata once for all: no daemon stats it on the shared filesystem or asks it for access(2).
    tool = case.src / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool ran on \"$CANOPY_NODE_RANK\"\n")
    tool.chmod(0o755)
    case.mount.reset()
    done, _, _ = case.job(["--sim-nodes", "3", *case.staged_args(manifest=False)], [str(case.mnt / "tool.sh")])
    assert done.returncode == 0, done.describe()
    assert sorted(line for line in done.stdout.splitlines() if "tool ran" in line) == \
        [f"[{node}] tool ran on {node}" for node in range(3)], done.describe()
    ops = case.settled_ops()["ops"]
    assert ops["access"] == 0, ops
    # A program the tree says is missing is still one line naming it and the node, as without staging.
    missing, _, _ = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)], [str(case.mnt / "absent.sh")])
    assert missing.returncode != 0
    assert any("absent.sh" in line and "not found" in line and "sim" in line for line in messages(missing)), \
        missing.describe()


@needs_fuse
def test_libraries_found_through_origin_load_from_the_node_cache_on_demand(case):
    # The mirror path of libgreet in the node cache names libdep's $ORIGIN: it must be fetched as the original.
    hello = build_origin_app(case)
    staged, _, stats = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)], hello)
    assert ok(staged) == {0: ["greetings, dep 7"], 1: ["greetings, dep 7"]}
    rows = assert_nothing_passed(stats, 2)
    audits = [c for kind, c in rows if kind == "audit"]
    assert len(audits) == 2 and all(c["loader_redirect"] >= 2 and c["fetched"] > 0 for c in audits), rows


@needs_fuse
def test_libraries_found_through_a_relative_library_path_load_from_the_node_cache(case):
    # LD_LIBRARY_PATH=lib, relative to the ranks' working directory: the loader asks for lib/libgreet.so, a
    # relative path, which is staged as the kernel would open it, from the working directory.
    hello = build_origin_app(case)
    app = case.mnt / "app"
    staged, _, stats = case.job(["--sim-nodes", "2", "--wdir", app, *case.staged_args(manifest=False)],
                                ["bin/hello"], env={"LD_LIBRARY_PATH": "lib"})
    assert ok(staged) == {0: ["greetings, dep 7"], 1: ["greetings, dep 7"]}
    rows = assert_nothing_passed(stats, 2)
    audits = [c for kind, c in rows if kind == "audit"]
    assert len(audits) == 2 and all(c["loader_redirect"] >= 2 for c in audits), rows


@needs_fuse
def test_a_large_library_that_a_loaded_one_needs_is_fetched_by_every_node_before_its_ranks_ask(case):
    # hello needs libgreet (small: it goes down with the read-ahead push), which needs libdep, 3 MiB: too large
    # for a push, so the push tells every node to fetch it at once (3 nodes, fanout 2: two levels).
    hello = build_origin_app(case, dep_bytes=3 << 20)
    assert (case.src / "app/lib/libdep.so").stat().st_size > 3 << 20
    timing = case.root / "timing.json"
    done, _, stats = case.job(["--sim-nodes", "3", "--fanout", "2", f"--timing={timing}",
                               *case.staged_args(manifest=False)], hello)
    assert ok(done) == {rank: ["greetings, dep 7"] for rank in range(3)}
    rows = assert_nothing_passed(stats, 3)
    audits = [c for kind, c in rows if kind == "audit"]
    assert len(audits) == 3 and all(c["loader_redirect"] >= 2 for c in audits), rows
    fetched_ahead = timing_phases(timing)["daemon.stage_fetched_ahead_messages"]
    assert fetched_ahead["count"] == 3 and fetched_ahead["min"] >= 1, fetched_ahead


@needs_fuse
def test_a_daemon_that_never_answers_costs_a_process_one_timeout_not_one_per_lookup(case):
    # A socket that accepts connections but never replies stands for a hung canopyd.
    program = case.root / "hung.py"
    program.write_text(
        "import os, shutil, socket, subprocess, sys, tempfile, time\n"
        "root = sys.argv[1]\n"
        "# A short directory: the node temp dir under a deep checkout is too long for a socket path.\n"
        "short = tempfile.mkdtemp(prefix='canopy-hung-', dir='/tmp')\n"
        "path = os.path.join(short, 'hung.sock')\n"
        "server = socket.socket(socket.AF_UNIX)\n"
        "server.bind(path)\n"
        "server.listen(64)\n"
        "env = dict(os.environ, CANOPY_STAGE_SOCKET=path, CANOPY_STAGE_FETCH_TIMEOUT='1')\n"
        "code = ('import os, sys; r = sys.argv[1]; '\n"
        "        'print(sorted(os.listdir(r + \"/site/calc\")), [os.path.exists(r + \"/site/x%d\" % i) for i in range(8)])')\n"
        "started = time.monotonic()\n"
        "done = subprocess.run([sys.executable, '-c', code, root], env=env, capture_output=True, text=True,\n"
        "                      timeout=60)\n"
        "server.close()\n"
        "shutil.rmtree(short)\n"
        "print(done.stdout.strip(), done.returncode, time.monotonic() - started < 4)\n")
    staged, _, _ = case.job(["--sim-nodes", "1", *case.staged_args(manifest=False)], [PYTHON, program, case.mnt])
    names = sorted(os.listdir(case.src / "site" / "calc"))
    assert ok(staged) == {0: [f"{names} {[False] * 8} 0 True"]}
