# Tests of slowfs, the counting and slowing passthrough FUSE filesystem that stands in for Lustre in staging tests.
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD_DIR, wait_until

SLOWFS = BUILD_DIR / "tests" / "tools" / "slowfs" / "slowfs"
STATS = ".slowfs-stats"


def _missing_fuse():
    """Why slowfs cannot run here, or None. A built tree with libfuse3 but no slowfs binary is a failure."""
    if not shutil.which("pkg-config") or subprocess.run(["pkg-config", "--exists", "fuse3"]).returncode != 0:
        return "libfuse3-dev is not installed (apt-get install -y libfuse3-dev fuse3), so slowfs is not built"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist: this machine (container?) cannot mount FUSE filesystems"
    if not shutil.which("fusermount3"):
        return "fusermount3 is missing (apt-get install -y fuse3)"
    return None


pytestmark = pytest.mark.skipif(_missing_fuse() is not None, reason=str(_missing_fuse()))

PR_SET_PDEATHSIG = 1


def _end_with_parent():
    """In the child: SIGTERM when the test process dies. A suite's deadline kills pytest before its fixtures'
    teardown, and slowfs unmounts on SIGTERM, so no mount outlives the run."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Mount:
    """One slowfs process serving `source` at `point`."""

    def __init__(self, source: Path, point: Path, args=()):
        assert SLOWFS.exists(), f"{SLOWFS} is missing although libfuse3 is installed; build first (ninja -C {BUILD_DIR})"
        self.source = source
        self.point = point
        point.mkdir(exist_ok=True)
        self.process = subprocess.Popen([str(SLOWFS), str(source), str(point), "-f", *map(str, args)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_end_with_parent)
        if not wait_until(lambda: os.path.ismount(point) or self.process.poll() is not None, 10):
            self.close()   # it may still mount later, and nobody else holds this object to unmount it
            pytest.fail(f"slowfs did not mount {point} within 10 s")
        if self.process.poll() is not None:
            _, err = self.process.communicate()
            pytest.fail(f"slowfs exited with {self.process.returncode} before mounting: {err.decode()[:2000]}")

    def stats(self):
        return json.loads((self.point / STATS).read_text())

    def ops(self):
        return self.stats()["ops"]

    def reset(self):
        with open(self.point / STATS, "w"):
            pass

    def unmount(self, timeout=10):
        """Unmounts as a user would; returns slowfs's exit code."""
        subprocess.run(["fusermount3", "-u", str(self.point)], check=True, timeout=timeout)
        try:
            self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"slowfs still runs {timeout} s after its mount {self.point} was unmounted")
        return self.process.returncode

    def close(self):
        if os.path.ismount(self.point):
            subprocess.run(["fusermount3", "-u", "-z", str(self.point)], timeout=10)
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture
def source(tmp_path):
    """A small tree: files, a subdirectory, a relative and an absolute symlink, a hard link, an empty dir."""
    root = tmp_path / "source"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "top.txt").write_text("top level\n")
    (root / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (root / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 4096)   # 1 MiB
    (root / "pkg" / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "pkg" / "script.sh").chmod(0o750)
    os.symlink("sub/data.bin", root / "pkg" / "rel-link")
    os.symlink("/etc/hostname", root / "abs-link")
    os.link(root / "top.txt", root / "hard.txt")
    os.utime(root / "pkg" / "__init__.py", ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
    return root


@pytest.fixture
def mounts(tmp_path):
    started = []

    def mount(args=(), source=None, name="mnt"):
        m = Mount(source or tmp_path / "source", tmp_path / name, args)
        started.append(m)
        return m

    yield mount
    for m in started:
        m.close()


def test_stat_open_and_readdir_are_counted_by_type(source, mounts):
    m = mounts()
    m.reset()
    assert m.stats()["total"] == 0, "reset left counts behind"

    os.stat(m.point / "pkg" / "__init__.py")
    after_stat = m.ops()
    assert after_stat["lookup"] >= 2, after_stat     # pkg, __init__.py: every path walk reaches slowfs
    assert after_stat["open"] == 0 and after_stat["readdir"] == 0

    assert (m.point / "pkg" / "__init__.py").read_text() == "VALUE = 42\n"
    after_read = m.ops()
    assert after_read["open"] == after_stat["open"] + 1
    assert after_read["read"] >= 1

    os.listdir(m.point / "pkg")
    after_list = m.ops()
    assert after_list["opendir"] == after_read["opendir"] + 1
    assert after_list["readdir"] > after_read["readdir"]

    assert os.readlink(m.point / "pkg" / "rel-link") == "sub/data.bin"
    assert m.ops()["readlink"] == after_list["readlink"] + 1

    before = m.stats()
    assert not os.path.exists(m.point / "pkg" / "missing.py")
    after = m.stats()
    assert after["misses"] == before["misses"] + 1
    assert after["total"] == sum(n for op, n in after["ops"].items() if op != "forget")


def test_stats_file_is_not_counted_and_resets(source, mounts):
    m = mounts()
    os.stat(m.point / "top.txt")
    first = m.stats()
    for _ in range(5):
        assert m.stats() == first, "reading the counters changed them"
    assert first["total"] > 0
    m.reset()
    assert m.stats()["total"] == 0
    assert STATS not in os.listdir(m.point), "the counters file shows up in the directory listing"


def test_signals_write_and_reset_the_stats_file(source, mounts, tmp_path):
    stats_file = tmp_path / "stats.json"
    m = mounts(["--stats", stats_file])
    os.stat(m.point / "top.txt")
    m.process.send_signal(signal.SIGUSR1)
    assert wait_until(stats_file.exists, 5), "SIGUSR1 did not write the --stats file"
    assert json.loads(stats_file.read_text())["ops"]["lookup"] >= 1
    m.process.send_signal(signal.SIGUSR2)
    assert wait_until(lambda: m.stats()["total"] == 0, 5), "SIGUSR2 did not reset the counters"


def test_content_and_stat_data_match_the_source(source, mounts):
    m = mounts()
    for directory, dirs, files in os.walk(source):
        rel = Path(directory).relative_to(source)
        assert sorted(os.listdir(m.point / rel)) == sorted(dirs + files), f"listing of {rel}"
        for name in dirs + files:
            real, seen = Path(directory) / name, m.point / rel / name
            a, b = os.lstat(real), os.lstat(seen)
            for field in ("st_ino", "st_mode", "st_size", "st_mtime_ns", "st_nlink", "st_uid", "st_gid"):
                assert getattr(a, field) == getattr(b, field), f"{field} of {rel / name}"
            if real.is_symlink():
                assert os.readlink(seen) == os.readlink(real)
            elif real.is_file():
                assert seen.read_bytes() == real.read_bytes(), f"content of {rel / name}"
    assert os.stat(m.point).st_ino == os.stat(source).st_ino
    assert (m.point / "pkg" / "rel-link").read_bytes() == (source / "pkg" / "sub" / "data.bin").read_bytes()
    assert os.stat(m.point / "top.txt").st_ino == os.stat(m.point / "hard.txt").st_ino


def test_changes_in_the_source_show_through(source, mounts):
    m = mounts()
    target = m.point / "pkg" / "__init__.py"
    assert target.read_text() == "VALUE = 42\n"
    (source / "pkg" / "__init__.py").write_text("VALUE = 4242\n")   # a new size and mtime
    assert target.read_text() == "VALUE = 4242\n", "a cached old copy was served after the source changed"
    (source / "pkg" / "new.py").write_text("")
    assert (m.point / "pkg" / "new.py").exists()
    (source / "pkg" / "new.py").unlink()
    assert not (m.point / "pkg" / "new.py").exists()


def test_writes_pass_through_to_the_source(source, mounts):
    m = mounts()
    (m.point / "pkg" / "out").mkdir()
    (m.point / "pkg" / "out" / "w.txt").write_text("written\n")
    assert (source / "pkg" / "out" / "w.txt").read_text() == "written\n"
    os.rename(m.point / "pkg" / "out" / "w.txt", m.point / "pkg" / "out" / "moved.txt")
    assert (source / "pkg" / "out" / "moved.txt").read_text() == "written\n"
    assert (m.point / "pkg" / "out" / "moved.txt").read_text() == "written\n"
    os.chmod(m.point / "pkg" / "out" / "moved.txt", 0o600)
    os.utime(m.point / "pkg" / "out" / "moved.txt", ns=(1_000_000_000, 2_000_000_000))
    st = os.stat(source / "pkg" / "out" / "moved.txt")
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o600, 2_000_000_000)
    os.symlink("moved.txt", m.point / "pkg" / "out" / "ln")
    assert os.readlink(source / "pkg" / "out" / "ln") == "moved.txt"
    with open(m.point / "pkg" / "out" / "moved.txt", "r+") as f:
        f.truncate(3)
    assert (source / "pkg" / "out" / "moved.txt").read_text() == "wri"
    os.rename(m.point / "pkg" / "out", m.point / "pkg" / "out2")   # a directory whose files slowfs knows
    assert (m.point / "pkg" / "out2" / "moved.txt").read_text() == "wri"
    os.unlink(m.point / "pkg" / "out2" / "ln")
    os.unlink(m.point / "pkg" / "out2" / "moved.txt")
    os.rmdir(m.point / "pkg" / "out2")
    assert not (source / "pkg" / "out2").exists() and not (source / "pkg" / "out").exists()
    ops = m.ops()
    assert ops["mkdir"] == 1 and ops["create"] == 1 and ops["rename"] == 2 and ops["unlink"] == 2
    assert ops["rmdir"] == 1 and ops["write"] >= 1


def test_readers_of_one_file_share_a_descriptor(source, mounts):
    # Every process that maps a .so keeps it open; 64 ranks x 400 libraries must not exhaust slowfs's descriptors.
    m = mounts()
    path = m.point / "pkg" / "sub" / "data.bin"
    expected = (source / "pkg" / "sub" / "data.bin").read_bytes()
    handles = [open(path, "rb") for _ in range(200)]
    try:
        held = len(os.listdir(f"/proc/{m.process.pid}/fd"))
        assert held < 50, f"slowfs holds {held} descriptors for 200 opens of one file"
        for f in handles[::2]:
            f.close()
        for f in handles[1::2]:
            assert f.read() == expected
    finally:
        for f in handles:
            f.close()
    # The kernel sends release in the background after the last close.
    assert wait_until(lambda: m.ops()["release"] == 200, 5), m.ops()
    assert path.read_bytes() == expected   # reopened after the last reader closed


def _time_stats(point, count):
    started = time.monotonic()
    for _ in range(count):
        os.stat(point / "top.txt")
    return time.monotonic() - started


def test_delay_slows_metadata_but_not_data(source, mounts):
    fast = mounts(name="fast")
    slow = mounts(["--delay-ms", "20", "--no-data-cache"], name="slow")
    assert slow.stats()["delay_ms"] == 20

    slow.reset()
    slow_seconds = _time_stats(slow.point, 10)
    ops = slow.stats()["metadata"]
    assert ops >= 10
    assert slow_seconds >= ops * 0.020 * 0.9, f"{ops} metadata ops took only {slow_seconds:.3f} s at 20 ms each"
    fast_seconds = _time_stats(fast.point, 10)
    assert fast_seconds < slow_seconds / 2, (fast_seconds, slow_seconds)   # loose: the machine may be busy

    # Reading 1 MiB takes several read requests; none of them pays the delay.
    with open(slow.point / "pkg" / "sub" / "data.bin", "rb", buffering=0) as f:
        before = slow.ops()["read"]
        started = time.monotonic()
        data = f.read()
        read_seconds = time.monotonic() - started
    reads = slow.ops()["read"] - before
    assert len(data) == 1 << 20 and reads >= 2
    # Had every read paid the delay, they would have taken at least reads x 20 ms.
    assert read_seconds < reads * 0.020, f"{reads} reads took {read_seconds:.3f} s: data reads were delayed"


def test_kernel_caching_can_be_enabled(source, mounts):
    m = mounts(["--cache", "60"])
    os.stat(m.point / "pkg" / "__init__.py")
    first = m.stats()["total"]
    for _ in range(20):
        os.stat(m.point / "pkg" / "__init__.py")
    assert m.stats()["total"] == first, "with --cache 60, repeated stats still reached slowfs"


def test_unmount_is_clean_and_writes_final_stats(source, mounts, tmp_path):
    stats_file = tmp_path / "final.json"
    m = mounts(["--stats", stats_file])
    (m.point / "top.txt").read_text()
    assert m.unmount() == 0
    assert not os.path.ismount(m.point)
    assert not any(str(m.point) in line for line in Path("/proc/mounts").read_text().splitlines())
    final = json.loads(stats_file.read_text())
    assert final["ops"]["open"] == 1 and final["total"] >= 3   # lookup, open, read
    assert list((source / "pkg").iterdir()), "unmounting touched the source"


def test_sigterm_unmounts(source, mounts):
    m = mounts()
    m.process.send_signal(signal.SIGTERM)
    m.process.communicate(timeout=10)
    assert m.process.returncode == 0
    assert wait_until(lambda: not os.path.ismount(m.point), 5)


def test_a_missing_source_is_reported(tmp_path):
    assert SLOWFS.exists(), f"{SLOWFS} is missing; build first"
    (tmp_path / "mnt").mkdir()
    done = subprocess.run([str(SLOWFS), str(tmp_path / "nope"), str(tmp_path / "mnt"), "-f"],
                          capture_output=True, text=True, timeout=10)
    assert done.returncode != 0
    assert str(tmp_path / "nope") in done.stderr and "SOURCE_DIR" in done.stderr
    assert not os.path.ismount(tmp_path / "mnt")
