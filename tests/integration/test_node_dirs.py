# A node's dirs for a job (its temp dir, its stage cache): made fresh where another user cannot get in, and a node
# that cannot make them starts no rank (issue 38, items 2, 9 and 13).
import os
import select
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from conftest import wait_until, LEFTOVER_GRACE_SECONDS

# The other user on the node. He watches a dir every user can write to (as /dev/shm) for a canopy job's first dir,
# learns the job's id from its name, and makes the dirs the job's nodes would take, open to all, before they do.
# Into those he puts the staged prefix's dirs, and renames his own file over every file the job stages there.
SQUATTER = r'''
import ctypes, os, re, struct, sys

shared, staged_dir, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
IN_MOVED_TO, IN_CREATE = 0x80, 0x100
inotify = libc.inotify_init()
libc.inotify_add_watch(inotify, shared.encode(), IN_CREATE)
print("watching", flush=True)

def open_to_all(path):
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    os.chmod(path, 0o777)

planted, swapped = {}, set()
while True:
    events = os.read(inotify, 65536)
    at = 0
    while at < len(events):
        watch, mask, cookie, length = struct.unpack_from("iIII", events, at)
        name = events[at + 16:at + 16 + length].rstrip(b"\0").decode()
        at += 16 + length
        if watch in planted and name not in swapped and not name.startswith(".mine"):
            mine = os.path.join(planted[watch], ".mine")
            with open(mine, "w") as f:
                f.write("the stranger's words\n")
            os.rename(mine, os.path.join(planted[watch], name))
            swapped.add(name)
            print("swapped", name, flush=True)
            continue
        job = re.match(r"canopy-([0-9a-f]{8})-", name)
        if not job or planted:
            continue
        for node in nodes:
            top = os.path.join(shared, f"canopy-{job[1]}-{node}")
            for sub in ("", "/dirs", "/tmp", "/root"):
                open_to_all(top + sub)
            path = top + "/root"
            for part in staged_dir.strip("/").split("/"):
                path += "/" + part
                open_to_all(path)
            planted[libc.inotify_add_watch(inotify, path.encode(), IN_MOVED_TO | IN_CREATE)] = path
        print("squatted", job[1], flush=True)
'''

VICTIMS_WORDS = "the victim's own words"


@pytest.fixture
def shared_dir():
    """A dir every user may write to, sticky, as /dev/shm and /tmp are, but this test's alone."""
    path = Path(tempfile.mkdtemp(prefix="node-dirs-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_for_line(process, expected, timeout=20):
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline().decode().strip() if ready else ""
    assert line == expected, f"the stranger's watcher said {line!r}, not {expected!r}: " \
                             f"{process.stderr.read1().decode(errors='replace') if process.poll() is not None else ''}"


@pytest.mark.parametrize("temp_dirs", ["shared", "private"])
def test_a_stranger_who_makes_the_dirs_a_job_would_use_first_neither_ends_it_nor_gets_in(
        sandbox, stranger, shared_dir, temp_dirs):
    """Item 2: a stranger made canopy-JOB-NODE/{root,dirs,tmp} mode 0777 as the job started; the job failed (File
    exists), or its daemons staged into his dirs and its ranks read his file."""
    data = sandbox.root / "data"
    data.mkdir()
    (data / "note.txt").write_text(VICTIMS_WORDS + "\n")
    staged_dir = os.path.realpath(data)
    config = sandbox.root / "stage.toml"
    config.write_text(f'[stage]\ncache_dir = "{shared_dir}"\n')
    watcher = stranger.start(["/usr/bin/python3", "-c", SQUATTER, shared_dir, staged_dir, "sim0000", "sim0001"])
    wait_for_line(watcher, "watching")

    report = ('cat "$0/note.txt"; echo "temp $CANOPY_NODE_TMPDIR $(stat -c "%a %u" "$CANOPY_NODE_TMPDIR")"; '
              'echo "cache $CANOPY_STAGE_CACHE $(stat -c "%a %u" "$CANOPY_STAGE_CACHE")"')
    env = {"TMPDIR": str(shared_dir)} if temp_dirs == "shared" else None
    result = sandbox.run(["--config", config, "--sim-nodes", "2", "--stage", staged_dir,
                          "sh", "-c", report, staged_dir], env=env, timeout=60)
    watcher.kill()
    said, _ = watcher.communicate()
    job = result.stderr  # for the messages below
    assert "squatted" in said.decode(), f"the stranger never made the job's dirs: the test tested nothing\n{job}"

    assert result.returncode == 0, result.describe()
    lines = [line.split() for line in result.stdout.splitlines()]
    assert sorted(" ".join(line) for line in lines if line[0] not in ("temp", "cache")) == [VICTIMS_WORDS] * 2, \
        result.describe()
    reported = [line for line in lines if line[0] in ("temp", "cache") and len(line) == 4]
    dirs = {path: (kind, mode, int(uid)) for kind, path, mode, uid in reported}
    assert sorted(kind for kind, _, _ in dirs.values()) == ["cache", "cache", "temp", "temp"], result.describe()
    temp_base = shared_dir if temp_dirs == "shared" else sandbox.tmpdir
    for path, (kind, mode, uid) in dirs.items():
        assert (mode, uid) == ("700", os.getuid()), f"{path} is mode {mode}, uid {uid}\n{result.describe()}"
        assert path.startswith(f"{shared_dir if kind == 'cache' else temp_base}/canopy-"), path
    assert wait_until(lambda: not any(os.path.exists(path) for path in dirs), LEFTOVER_GRACE_SECONDS), \
        f"left behind: {[path for path in dirs if os.path.exists(path)]}"
    ours = [path.name for path in shared_dir.iterdir() if path.lstat().st_uid == os.getuid()]
    assert not ours, f"the job left {ours} in the shared dir"
    theirs = [path for path in shared_dir.iterdir() if path.lstat().st_uid == stranger.uid]
    assert len(theirs) == 2 and all(stat.S_IMODE(path.lstat().st_mode) == 0o777 for path in theirs), \
        "the stranger's own dirs are his: the job neither used nor removed them"


@pytest.mark.parametrize("base", ["read-only", "missing"])
def test_a_node_that_cannot_make_its_temp_dir_starts_no_rank(run_canopy, sandbox, base):
    """Item 9: with TMPDIR a read-only dir, the ranks ran (and printed), then the job failed with 255."""
    if base == "read-only":
        base = "/sys"   # not even root may make a dir there
        with pytest.raises(OSError):
            os.mkdir("/sys/canopy-probe")
    else:
        base = str(sandbox.root / "missing")
    ran = sandbox.root / "ran"
    ran.mkdir()
    result = run_canopy(["--sim-nodes", "2", "-n", "2", "sh", "-c", f'echo RAN; touch "{ran}/$RANK"'],
                        env={"TMPDIR": base}, timeout=30)
    assert result.returncode == 255, result.describe()
    assert "RAN" not in result.stdout and not list(ran.iterdir()), f"a rank ran\n{result.describe()}"
    lines = result.canopy_lines()
    assert len(lines) == 1 and base in lines[0] and "sim000" in lines[0] and "temp dir" in lines[0], \
        result.describe()


def test_a_tmpdir_that_is_a_file_is_called_that_and_named_for_where_it_came_from(run_canopy, sandbox):
    """Item 13: TMPDIR set to a file gave '... does not exist' and blamed [job] tmpdir."""
    a_file = sandbox.root / "a-file"
    a_file.write_text("not a dir\n")
    result = run_canopy(["--sim-nodes", "2", "true"], env={"TMPDIR": str(a_file)}, timeout=30)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and f"{a_file} (TMPDIR) is not a directory" in lines[0], result.describe()
    assert "does not exist" not in lines[0] and "[job] tmpdir" not in lines[0], lines[0]

    config = sandbox.root / "tmpdir.toml"
    config.write_text(f'[job]\ntmpdir = "{a_file}"\n')
    result = run_canopy(["--config", config, "--sim-nodes", "2", "true"], timeout=30)
    lines = result.canopy_lines()
    assert result.returncode == 255 and len(lines) == 1, result.describe()
    assert f"{a_file} ([job] tmpdir) is not a directory" in lines[0], lines[0]


@pytest.mark.parametrize("address", ["not-an-address", "192.0.2.1"])
def test_a_bind_address_that_cannot_be_used_is_a_config_error(run_canopy, sandbox, address):
    """Item 13: a bad [tree] bind_address exited 255, as a failed job does, not 2 as other config errors do."""
    config = sandbox.root / "bind.toml"
    config.write_text(f'[tree]\nbind_address = "{address}"\n')
    result = run_canopy(["--config", config, "--sim-nodes", "2", "sh", "-c", "echo RAN"], timeout=30)
    assert result.returncode == 2, result.describe()
    lines = result.stderr_lines()
    assert len(lines) == 1 and "bind_address" in lines[0] and address in lines[0], result.describe()
    assert "RAN" not in result.stdout, result.describe()
