# File staging end to end: canopy stage record, then jobs with --stage that read a slowfs mount only at the root.
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LEFTOVER_GRACE_SECONDS, parse_labelled, timing_phases, wait_until
from test_slowfs import Mount, _missing_fuse

PYTHON = "/usr/bin/python3"   # not a `python3` from PATH: a pyenv shim would run dozens of processes per rank
JOB_TIMEOUT = 60              # per canopy run; generous because the test machine may be loaded
NUMBERS = 1000
EXPECTED_TOTAL = sum(i * i for i in range(NUMBERS))
STALE = re.compile(r"^canopy: stage manifest .* is stale")

needs_fuse = pytest.mark.skipif(_missing_fuse() is not None, reason=str(_missing_fuse()))

# What every rank runs: imports a package (through a .pth path too), computes, reads a data file, and reports
# the node cache it was given so the test can check that the cache is gone after the job.
PROGRAM = r"""
import json, os, site, sys
root = sys.argv[1]
site.addsitedir(os.path.join(root, "site"))
import calc, pthmod
try:
    import optional_mod
    optional = optional_mod.VALUE
except ImportError:
    optional = "optional absent"
try:
    with open(os.path.join(root, "site", "note.txt")) as f:
        note = f.read().strip()
except FileNotFoundError:
    note = "no note"
rank = os.environ.get("RANK", "-")
print(rank, calc.total(%d), calc.table.WORDS, pthmod.GREETING, optional, note)
print(rank, calc.__file__, pthmod.__file__, sorted(os.listdir(os.path.dirname(calc.__file__))))
report = os.environ.get("STAGE_TEST_REPORT")
if report:
    cache = os.environ.get("CANOPY_STAGE_CACHE", "")
    with open(os.path.join(report, rank), "w") as f:
        json.dump({"cache": cache, "cache_existed": bool(cache) and os.path.isdir(cache)}, f)
""" % NUMBERS


def make_tree(src: Path):
    """A site directory with a package that reads a data file, a .pth file, an optional module and a note."""
    calc = src / "site" / "calc"
    calc.mkdir(parents=True)
    (calc / "__init__.py").write_text("from .core import total\nfrom . import table\n")
    (calc / "core.py").write_text("def total(n):\n    return sum(i * i for i in range(n))\n")
    (calc / "table.py").write_text(
        "import os\n"
        "with open(os.path.join(os.path.dirname(__file__), 'data.txt')) as f:\n"
        "    WORDS = f.read().split()\n")
    (calc / "data.txt").write_text("alpha beta gamma\n")
    (src / "site" / "optional_mod.py").write_text("VALUE = 'optional present'\n")
    (src / "site" / "note.txt").write_text("a note\n")
    (src / "site" / "extra.pth").write_text("../extra\n")   # relative: valid under any spelling of the prefix
    (src / "extra").mkdir()
    (src / "extra" / "pthmod.py").write_text("GREETING = 'hello from a .pth path'\n")
    (src / "out").mkdir()
    # As an installed package would be: with .pyc files, whose recorded source mtimes must still match.
    subprocess.run([PYTHON, "-m", "compileall", "-q", str(src / "site"), str(src / "extra")], check=True, timeout=30)


class StageCase:
    """One test's staging setup: a source tree served by slowfs at `mnt`, the rank program, and job helpers."""

    def __init__(self, sandbox, root: Path, slowfs_args=()):
        self.sandbox = sandbox
        self.src = root / "src"
        make_tree(self.src)
        self.mount = Mount(self.src, root / "mnt", slowfs_args)
        self.mnt = self.mount.point
        self.program = root / "prog.py"
        self.program.write_text(PROGRAM)
        self.manifest = root / "stage.manifest"
        self.root = root
        self.runs = 0

    def record(self, command, prefix=None):
        done = self.sandbox.run(["stage", "record", "--stage", prefix or self.mnt, "-o", self.manifest, "--",
                                 *command], timeout=JOB_TIMEOUT, env={"PYTHONDONTWRITEBYTECODE": "1"})
        assert done.returncode == 0, done.describe()
        assert self.manifest.exists(), done.describe()
        return done

    def job(self, args, command, env=None):
        """Runs a job; returns (Completed, reports dir, stats file) with fresh report and stats locations."""
        self.runs += 1
        reports = self.root / f"reports-{self.runs}"
        reports.mkdir()
        stats = self.root / f"interposer-stats-{self.runs}"
        job_env = {"PYTHONDONTWRITEBYTECODE": "1", "STAGE_TEST_REPORT": str(reports),
                   "CANOPY_STAGE_STATS": str(stats), **(env or {})}
        done = self.sandbox.run(["-l", *args, *command], timeout=JOB_TIMEOUT, env=job_env)
        return done, reports, stats

    def python(self, root=None):
        return [PYTHON, self.program, root or self.mnt]

    def staged_args(self, manifest=True, prefix=None):
        return ["--stage", prefix or self.mnt] + (["--stage-manifest", self.manifest] if manifest else [])

    def settled_ops(self):
        """slowfs's counters once they stop moving (the kernel sends release after the last close, later)."""
        previous = None
        for _ in range(40):
            current = self.mount.stats()
            if current == previous:
                return current
            previous = current
            time.sleep(0.1)
        return previous


@pytest.fixture
def case(sandbox, tmp_path):
    made = StageCase(sandbox, tmp_path)
    yield made
    made.mount.close()


def messages(done):
    """The launcher's own lines, without the periodic staging progress lines that slow staging may print."""
    return [line for line in done.canopy_lines() if not line.startswith("canopy: staging:")]


def ok(done):
    assert done.returncode == 0, done.describe()
    assert messages(done) == [], done.describe()
    return parse_labelled(done.stdout)


def read_stats(path):
    """Interposer counters, one dict per process and namespace: [("preload"|"audit", {name: n})]."""
    rows = []
    if not Path(path).exists():
        return rows
    for line in Path(path).read_text().splitlines():
        kind, *fields = line.split()
        rows.append((kind, {k: int(v) for k, _, v in (f.partition("=") for f in fields) if v.isdigit()}))
    return rows


def preload_rows(path):
    return [counters for kind, counters in read_stats(path) if kind == "preload"]


def assert_nothing_passed(stats, ranks):
    """Every rank ran with the interposer and none of its lookups under a prefix reached the real filesystem."""
    rows = read_stats(stats)
    assert len([1 for kind, _ in rows if kind == "preload"]) == ranks, rows
    for kind, counters in rows:
        assert counters["passed"] == 0, f"a {kind} lookup under the prefix reached the real filesystem: {counters}"
    return rows


def assert_caches_gone(reports, ranks):
    """Each rank saw its node cache under /dev/shm while it ran, and no cache is left after the job."""
    found = {p.name: json.loads(p.read_text()) for p in reports.iterdir()}
    assert len(found) == ranks, found
    caches = {r["cache"] for r in found.values()}
    for cache in caches:
        assert re.fullmatch(r"/dev/shm/canopy-[^/]+-sim\d+-[A-Za-z0-9]{6}", cache), found
    assert all(r["cache_existed"] for r in found.values()), found
    wait_until(lambda: not any(os.path.exists(c) for c in caches), LEFTOVER_GRACE_SECONDS)
    left = sorted(c for c in caches if os.path.exists(c))
    assert not left, f"node caches left after the job: {left}"


# ---------- the job, staged and not ----------

@needs_fuse
def test_staged_job_prints_what_the_unstaged_job_prints(case):
    case.record(case.python())
    case.mount.reset()
    plain, _, _ = case.job(["--sim-nodes", "2", "--ppn", "4"], case.python())
    unstaged_ops = case.settled_ops()["total"]
    case.mount.reset()
    staged, reports, stats = case.job(["--sim-nodes", "2", "--ppn", "4", *case.staged_args()], case.python())
    staged_ops = case.settled_ops()["total"]

    by_rank = ok(staged)
    assert by_rank == ok(plain)
    assert sorted(by_rank) == list(range(8))
    for rank, lines in by_rank.items():
        assert lines[0] == (f"{rank} {EXPECTED_TOTAL} ['alpha', 'beta', 'gamma'] hello from a .pth path "
                            f"optional present a note"), lines
        assert lines[1].startswith(f"{rank} {case.mnt}/site/calc/__init__.py {case.mnt}/extra/pthmod.py"), lines
    assert_caches_gone(reports, 8)
    assert_nothing_passed(stats, 8)
    assert staged_ops < unstaged_ops / 2, (staged_ops, unstaged_ops)


@needs_fuse
def test_slowfs_sees_the_same_operations_for_one_rank_and_for_eight(sandbox, tmp_path):
    # Without the data cache every read reaches slowfs, so the root's reads are counted every time too.
    case = StageCase(sandbox, tmp_path, ["--no-data-cache"])
    try:
        case.record(case.python())
        counts = {}
        for nodes, ppn in ((1, 1), (2, 4)):
            case.mount.reset()
            done, reports, stats = case.job(["--sim-nodes", nodes, "--ppn", ppn, *case.staged_args()], case.python())
            counts[(nodes, ppn)] = case.settled_ops()
            assert len(ok(done)) == nodes * ppn
            rows = assert_nothing_passed(stats, nodes * ppn)
            assert all(c["served_open"] > 0 for c in preload_rows(stats)), rows
            assert_caches_gone(reports, nodes * ppn)
        one, eight = counts[(1, 1)], counts[(2, 4)]
        assert one["total"] > 0, "the root read nothing through slowfs: was the manifest's content staged at all?"
        both = f"1 rank: {one['ops']}\n8 ranks: {eight['ops']}"
        # A getattr can be the kernel revalidating what it holds for a descriptor the root has open, not a new
        # question; under load one CI run saw one more per directory (42 against 35, 7 directories). A rank that
        # reached the mount would add lookups, which must match exactly.
        assert {op: n for op, n in eight["ops"].items() if op != "getattr"} == \
            {op: n for op, n in one["ops"].items() if op != "getattr"}, both
        assert abs(eight["ops"]["getattr"] - one["ops"]["getattr"]) <= one["ops"]["opendir"], both
    finally:
        case.mount.close()


@needs_fuse
def test_a_restarted_job_reads_nothing_more_from_the_shared_filesystem(case):
    # --max-restarts keeps every node's cache: the second attempt's imports are served there, so the shared
    # filesystem sees what it sees for a job without a restart.
    case.record(case.python())
    fails_once = ["sh", "-c", f'{PYTHON} "$@"; code=$?; if [ -z "$NO_FAILURE" ] && [ "$CANOPY_RESTART_COUNT" = 0 ] '
                  f'&& [ "$RANK" = 1 ]; then exit 5; fi; exit $code', "prog", case.program, case.mnt]
    args = ["--sim-nodes", "2", "--ppn", "2", "--max-restarts", "1", *case.staged_args()]
    ops = {}
    for kind, env in (("plain", {"NO_FAILURE": "1"}), ("restarted", {})):
        case.mount.reset()
        done, reports, _ = case.job(args, fails_once, env=env)
        ops[kind] = case.settled_ops()["ops"]
        assert done.returncode == 0, done.describe()
        restarts = [line for line in messages(done) if "restarting every rank" in line]
        assert len(restarts) == (kind == "restarted"), done.describe()
        for rank, lines in parse_labelled(done.stdout).items():
            assert lines[-2].startswith(f"{rank} {EXPECTED_TOTAL} "), lines   # the last attempt's imports worked
        assert_caches_gone(reports, 4)
    # A getattr may be the kernel revalidating what the root holds open (see the test above): the rest must match.
    assert {op: n for op, n in ops["restarted"].items() if op != "getattr"} == \
        {op: n for op, n in ops["plain"].items() if op != "getattr"}, ops


@needs_fuse
def test_a_staged_program_is_checked_from_the_index_not_on_the_shared_filesystem(case):
    # Each daemon checks that the ranks' program exists and may run before it starts them: unstaged, that is a
    # stat and an access(2) per node on the shared filesystem; staged, the index answers.
    wrapper = case.src / "bin" / "run-prog"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {PYTHON} \"$@\"\n")
    wrapper.chmod(0o755)
    command = [case.mnt / "bin" / "run-prog", case.program, case.mnt]
    case.record(command)
    runs = {}
    for kind, extra in (("unstaged", []), ("staged", case.staged_args())):
        case.mount.reset()
        done, _, _ = case.job(["--sim-nodes", "3", *extra], command)
        assert sorted(ok(done)) == [0, 1, 2], done.describe()
        runs[kind] = case.settled_ops()["ops"]
    assert runs["unstaged"]["access"] >= 3, runs["unstaged"]   # the check the staged job no longer makes
    assert runs["staged"]["access"] == 0, runs["staged"]


@needs_fuse
def test_a_first_job_reads_its_program_ahead_and_a_job_with_a_manifest_does_not_read_it_again(case):
    # Without a manifest the root reads the ranks' program as the job starts, so no daemon or rank has to ask
    # for it; with one, the index has it, and the root reads nothing twice.
    wrapper = case.src / "bin" / "run-prog"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {PYTHON} \"$@\"\n")
    wrapper.chmod(0o755)
    program = case.mnt / "bin" / "run-prog"
    command = [program, case.program, case.mnt]
    first, _, _ = case.job(["--sim-nodes", "2", "-vv", *case.staged_args(manifest=False)], command)
    assert sorted(ok(first)) == [0, 1], first.describe()
    reads = [line.split(" in ")[0] for line in first.stderr_lines() if "stage debug: read" in line]
    # Once, whole: a daemon's check would have asked for its metadata first. (A daemon that asked before a reader
    # took the read-ahead up makes it a read for a caller: "read content", not "read ahead content".)
    of_program = [line for line in reads if line.endswith(f" {program}")]
    assert len(of_program) == 1 and " content " in of_program[0], reads[:10]

    case.record(command)
    timing = case.root / "timing.json"
    staged, _, _ = case.job(["--sim-nodes", "2", f"--timing={timing}", *case.staged_args()], command)
    assert sorted(ok(staged)) == [0, 1], staged.describe()
    phases = timing_phases(timing)
    assert phases["root.stage_read_ahead_messages"]["sum"] == 0, phases
    assert phases["root.stage_read_messages"]["sum"] == 0, phases


@needs_fuse
def test_staging_without_a_manifest_fetches_on_demand_and_prints_the_same(case):
    # More in test_stage_on_demand.py: without a manifest the nodes fetch what the ranks look up.
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args(manifest=False)], case.python())
    assert ok(staged) == ok(plain)
    assert_caches_gone(reports, 2)
    rows = assert_nothing_passed(stats, 2)
    assert all(r["served_meta"] > 0 and r["served_open"] > 0 for r in preload_rows(stats)), rows


# ---------- correctness cases ----------

@needs_fuse
def test_a_stale_manifest_is_reported_once_and_the_job_sees_the_new_content(case):
    case.record(case.python())
    core = case.src / "site" / "calc" / "core.py"
    core.write_text("def total(n):\n    return -n  # changed after the recording\n")
    later = core.stat().st_mtime_ns + 5_000_000_000
    os.utime(core, ns=(later, later))

    staged, reports, _ = case.job(["--sim-nodes", "2", *case.staged_args()], case.python())
    assert staged.returncode == 0, staged.describe()
    lines = messages(staged)
    assert len(lines) == 1 and STALE.match(lines[0]) and str(case.manifest) in lines[0], staged.describe()
    by_rank = parse_labelled(staged.stdout)
    assert [lines[0].split()[1] for lines in by_rank.values()] == [str(-NUMBERS)] * 2, by_rank
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    assert by_rank == ok(plain)
    assert_caches_gone(reports, 2)


@needs_fuse
def test_a_node_slow_to_install_its_cache_is_not_taken_for_a_hung_one(case, tmp_path):
    # Writing the cache's skeleton took up to 18 s with 64 caches on one disk; on the daemon's loop it kept the
    # heartbeats from its parent, which then declared the node lost. Here each install takes 3 heartbeat timeouts.
    case.record(case.python())
    config = tmp_path / "quick-heartbeat.toml"
    config.write_text("[tree]\nheartbeat_timeout = 1\n")
    started = time.monotonic()
    staged, reports, _ = case.job(["--sim-nodes", "2", "--fanout", "1", "--config", str(config), *case.staged_args()],
                                  case.python(), env={"CANOPY_TEST_STAGE_INSTALL_DELAY": "3"})
    assert staged.returncode == 0, staged.describe()
    assert time.monotonic() - started >= 3, "the install delay did not apply; the test would prove nothing"
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    assert parse_labelled(staged.stdout) == ok(plain)
    assert_caches_gone(reports, 2)


@needs_fuse
def test_files_deleted_at_the_root_after_recording_are_missing_as_without_staging(case):
    case.record(case.python())
    (case.src / "site" / "optional_mod.py").unlink()
    (case.src / "site" / "note.txt").unlink()

    staged, reports, _ = case.job(["--sim-nodes", "2", *case.staged_args()], case.python())
    assert staged.returncode == 0, staged.describe()
    assert len(messages(staged)) == 1 and STALE.match(messages(staged)[0]), staged.describe()
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    by_rank = parse_labelled(staged.stdout)
    assert by_rank == ok(plain)
    assert all(lines[0].endswith("optional absent no note") for lines in by_rank.values()), by_rank
    assert_caches_gone(reports, 2)


@needs_fuse
def test_files_created_at_the_root_after_recording_are_seen(case):
    # The recording saw these names missing; the index must not keep answering ENOENT for them.
    (case.src / "site" / "optional_mod.py").unlink()
    (case.src / "site" / "note.txt").unlink()
    case.record(case.python())
    (case.src / "site" / "optional_mod.py").write_text("VALUE = 'optional present'\n")
    (case.src / "site" / "note.txt").write_text("a note\n")

    staged, reports, _ = case.job(["--sim-nodes", "2", *case.staged_args()], case.python())
    assert staged.returncode == 0, staged.describe()
    assert len(messages(staged)) == 1 and STALE.match(messages(staged)[0]), staged.describe()
    by_rank = parse_labelled(staged.stdout)
    assert all(lines[0].endswith("optional present a note") for lines in by_rank.values()), by_rank
    assert_caches_gone(reports, 2)


def build_origin_app(case, dep_bytes=0):
    """bin/hello under the mount: it finds libgreet through $ORIGIN/../lib, and libgreet finds libdep through
    its own $ORIGIN, which points into the node cache once libgreet is loaded from there. Skips without gcc.
    dep_bytes: libdep carries that much data besides (a large library)."""
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed (apt-get install -y gcc)")
    app = case.src / "app"
    (app / "bin").mkdir(parents=True)
    (app / "lib").mkdir()
    (app / "dep.c").write_text("int dep_value(void) { return 7; }\n" +
                               (f"const char dep_data[{dep_bytes}] = {{1}};\n" if dep_bytes else ""))
    (app / "greet.c").write_text('#include <stdio.h>\nint dep_value(void);\n'
                                 'void greet(void) { printf("greetings, dep %d\\n", dep_value()); }\n')
    (app / "hello.c").write_text("void greet(void);\nint main(void) { greet(); return 0; }\n")
    for args in (["-shared", "-fPIC", "-o", app / "lib/libdep.so", app / "dep.c"],
                 ["-shared", "-fPIC", "-o", app / "lib/libgreet.so", app / "greet.c", "-L", app / "lib", "-ldep",
                  "-Wl,-rpath,$ORIGIN"],
                 ["-o", app / "bin/hello", app / "hello.c", "-L", app / "lib", "-lgreet",
                  "-Wl,-rpath,$ORIGIN/../lib"]):
        subprocess.run(["gcc", *map(str, args)], check=True, timeout=60)
    return [case.mnt / "app" / "bin" / "hello"]


@needs_fuse
def test_a_library_found_through_origin_loads_from_the_cache(case):
    hello = build_origin_app(case)
    case.record(hello)

    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args()], hello)
    by_rank = ok(staged)
    assert by_rank == {0: ["greetings, dep 7"], 1: ["greetings, dep 7"]}
    plain, _, _ = case.job(["--sim-nodes", "2"], hello)
    assert ok(plain) == by_rank
    rows = assert_nothing_passed(stats, 2)
    audits = [c for kind, c in rows if kind == "audit"]
    # Both libraries were mapped from the node cache, not looked up on the shared filesystem.
    assert len(audits) == 2 and all(c["loader_redirect"] >= 2 for c in audits), rows


@needs_fuse
def test_a_pth_file_adds_its_directory_under_staging(case):
    program = case.root / "pth.py"
    program.write_text(
        "import os, site, sys\n"
        "root = sys.argv[1]\n"
        "site.addsitedir(os.path.join(root, 'site'))\n"
        "print([p for p in sys.path if p.startswith(root)])\n"
        "import pthmod\n"
        "print(pthmod.GREETING, pthmod.__file__)\n")
    command = [PYTHON, program, case.mnt]
    case.record(command)
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args()], command)
    by_rank = ok(staged)
    assert by_rank[0] == [str([f"{case.mnt}/site", f"{case.mnt}/extra"]),
                          f"hello from a .pth path {case.mnt}/extra/pthmod.py"], by_rank
    plain, _, _ = case.job(["--sim-nodes", "2"], command)
    assert ok(plain) == by_rank
    assert_nothing_passed(stats, 2)


@needs_fuse
def test_a_write_inside_a_prefix_lands_on_the_real_filesystem(case):
    program = case.root / "write.py"
    program.write_text(
        "import os, sys\n"
        "out = os.path.join(sys.argv[1], 'out')\n"
        "name = os.environ.get('RANK', 'recording') + '.txt'\n"
        "path = os.path.join(out, name)\n"
        "existed = os.path.exists(path)\n"
        "with open(path, 'w') as f:\n"
        "    f.write(f'written by {name}\\n')\n"
        "with open(path) as f:\n"
        "    back = f.read().strip()\n"
        "print(existed, back, os.path.exists(path), os.path.getsize(path), name in os.listdir(out))\n")
    command = [PYTHON, program, case.mnt]
    case.record(command)
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args()], command)
    by_rank = ok(staged)
    assert by_rank == {rank: [f"False written by {rank}.txt True {len(f'written by {rank}.txt') + 1} True"]
                       for rank in (0, 1)}
    for rank in (0, 1):   # on the shared filesystem itself, not in a node cache
        assert (case.src / "out" / f"{rank}.txt").read_text() == f"written by {rank}.txt\n"
    rows = preload_rows(stats)
    assert len(rows) == 2 and all(r["writes"] >= 1 for r in rows), rows


@needs_fuse
def test_a_symlinked_prefix_is_staged(case):
    link = case.root / "link"
    link.symlink_to(case.mnt)
    case.record(case.python(root=link), prefix=link)
    staged, reports, stats = case.job(["--sim-nodes", "2", *case.staged_args(prefix=link)], case.python(root=link))
    by_rank = ok(staged)
    assert by_rank[0][1].startswith(f"0 {link}/site/calc/__init__.py"), by_rank
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python(root=link))
    assert ok(plain) == by_rank
    assert_nothing_passed(stats, 2)
    assert all(r["served_open"] > 0 for r in preload_rows(stats))
    assert_caches_gone(reports, 2)


@needs_fuse
def test_the_stage_section_of_the_config_stages_into_its_cache_dir(case):
    case.record(case.python())
    cache_dir = case.root / "node-local"
    cache_dir.mkdir()
    config = case.root / "stage.toml"
    config.write_text(f'[stage]\nprefixes = ["{case.mnt}"]\nmanifest = "{case.manifest}"\n'
                      f'cache_dir = "{cache_dir}"\n')
    staged, reports, stats = case.job(["--config", config, "--sim-nodes", "2"], case.python())
    plain, _, _ = case.job(["--sim-nodes", "2"], case.python())
    assert ok(staged) == ok(plain)
    caches = {json.loads(p.read_text())["cache"] for p in reports.iterdir()}
    assert len(caches) == 2 and all(c.startswith(f"{cache_dir}/canopy-") for c in caches), caches
    assert_nothing_passed(stats, 2)
    assert wait_until(lambda: not list(cache_dir.iterdir()), LEFTOVER_GRACE_SECONDS), list(cache_dir.iterdir())


# ---------- the launcher's messages ----------

def test_quick_staging_prints_no_progress_lines(sandbox, run_canopy, tmp_path):
    # Progress lines are for staging that takes a while; once staging is done, none may follow.
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "f").write_text("x\n")
    done = run_canopy(["--sim-nodes", "1", "--stage", prefix, "sleep", "7"], timeout=JOB_TIMEOUT)
    assert done.returncode == 0, done.describe()
    assert done.canopy_lines() == [], done.describe()


def _bad_manifest(kind, tmp_path, sandbox):
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "f").write_text("some content\n")
    manifest = tmp_path / "stage.manifest"
    if kind == "unwritable":
        # A manifest that does not exist is learned at the end of the job, so where it would go must be usable.
        return prefix, tmp_path / "no-such-dir" / "stage.manifest"
    recorded = sandbox.run(["stage", "record", "--stage", prefix, "-o", manifest, "--", "/bin/cat", prefix / "f"],
                           timeout=JOB_TIMEOUT)
    assert recorded.returncode == 0, recorded.describe()
    blob = bytearray(manifest.read_bytes())
    if kind == "flipped":
        blob[len(blob) // 2] ^= 0xFF
    else:
        del blob[len(blob) // 2:]
    manifest.write_bytes(bytes(blob))
    return prefix, manifest


@pytest.mark.parametrize("kind", ["unwritable", "flipped", "truncated"])
def test_an_unusable_manifest_is_one_line_and_exit_2(sandbox, run_canopy, tmp_path, kind):
    prefix, manifest = _bad_manifest(kind, tmp_path, sandbox)
    cache_dir = tmp_path / "node-local"
    cache_dir.mkdir()
    config = tmp_path / "cache.toml"
    config.write_text(f'[stage]\ncache_dir = "{cache_dir}"\n')
    done = run_canopy(["--config", config, "--sim-nodes", "2", "--stage", prefix, "--stage-manifest", manifest,
                       "true"], timeout=JOB_TIMEOUT)
    assert done.returncode == 2, done.describe()
    lines = done.stderr_lines()
    assert len(lines) == 1 and lines[0].startswith("canopy: ") and str(manifest) in lines[0], done.describe()
    assert not list(cache_dir.iterdir()), "a node cache was left behind by a job that never ran"


def test_a_relative_stage_prefix_is_one_line_and_exit_2(run_canopy):
    done = run_canopy(["--sim-nodes", "1", "--stage", "relative/path", "true"])
    assert done.returncode == 2, done.describe()
    lines = done.stderr_lines()
    assert len(lines) == 1 and lines[0].startswith("canopy: ") and "relative/path" in lines[0], done.describe()
