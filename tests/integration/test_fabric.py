# Staged files over libfabric (docs/fabric.md): Debian's libfabric with the shm and tcp;ofi_rxm providers, forced
# with --fabric, carries the index and every file down a chain of simulated nodes, byte for byte; a corrupted
# message, a node dying mid-broadcast and a provider that does not exist each end the job with a line naming them.
import hashlib
import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import BUILD_DIR, REPO, daemon_for_node, wait_until

PYTHON = "/usr/bin/python3"
PROVIDERS = ["shm", "tcp;ofi_rxm"]
# Each rank prints every staged file's name, size and SHA-256 as it reads them through its node's cache.
DIGESTS = r"""
import hashlib, os, sys
for name in sorted(os.listdir(sys.argv[1])):
    h = hashlib.sha256()
    with open(os.path.join(sys.argv[1], name), "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    print(os.environ["RANK"], name, os.path.getsize(os.path.join(sys.argv[1], name)), h.hexdigest(), flush=True)
"""


def write_pattern(path: Path, size: int):
    """A file whose every 4 KiB block differs (offsets written into it), so a misplaced chunk changes its hash."""
    block = 1 << 20
    with open(path, "wb") as f:
        seed = os.urandom(block)
        for offset in range(0, size, block):
            piece = offset.to_bytes(8, "little") + seed[8:]
            f.write(piece[:min(block, size - offset)])


def expected_digests(directory: Path):
    found = {}
    for path in sorted(directory.iterdir()):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        found[path.name] = (path.stat().st_size, h.hexdigest())
    return found


def staged_job(sandbox, data: Path, nodes: int, extra=(), **kw):
    """Records a manifest of reading every file in `data`, then returns the args of a staged job reading them
    again, with its node caches under the sandbox (so that what is left of them can be checked)."""
    manifest = sandbox.root / "files.manifest"
    script = sandbox.root / "digests.py"
    script.write_text(DIGESTS)
    if not manifest.exists():
        recorded = sandbox.run(["stage", "record", "--stage", data, "-o", manifest, "--", PYTHON, script, data],
                               timeout=120, env={"RANK": "0"})
        assert recorded.returncode == 0, recorded.describe()
    caches = sandbox.root / "caches"
    caches.mkdir(exist_ok=True)
    config = sandbox.root / "fabric.toml"
    config.write_text(f'[stage]\ncache_dir = "{caches}"\n')
    return ["--config", config, "--sim-nodes", str(nodes), "--fanout", "1", "--stage", data, "--stage-manifest",
            manifest, *extra, PYTHON, script, data], caches


def shm_regions():
    """libfabric's shm provider keeps a region per endpoint in /dev/shm, named PID:N:N after its address."""
    return {name for name in os.listdir("/dev/shm") if re.fullmatch(r"\d+:\d+:\d+", name)}


@pytest.fixture
def no_new_regions():
    before = shm_regions()
    yield
    # The daemons are gone by now (the sandbox checked); a killed one's guard removes its region.
    assert wait_until(lambda: shm_regions() <= before, timeout=5), \
        f"shared-memory regions left behind: {shm_regions() - before}"


def assert_nothing_left(sandbox, caches: Path):
    assert list(caches.iterdir()) == [], f"node caches left behind: {list(caches.iterdir())}"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_staged_files_arrive_byte_for_byte_over_the_provider(run_canopy, sandbox, provider, no_new_regions):
    data = sandbox.root / "data"
    data.mkdir()
    write_pattern(data / "weights.bin", (24 << 20) + 12345)   # many chunks, the last one short
    (data / "empty").write_bytes(b"")
    (data / "one-byte").write_bytes(b"x")
    write_pattern(data / "exactly-one-chunk", 1 << 20)
    args, caches = staged_job(sandbox, data, 3, ["--fabric", provider, "-vv"])
    result = run_canopy(args, timeout=120)
    assert result.returncode == 0, result.describe()
    # A chain: the launcher sends to sim0000, which relays to sim0001, which relays to sim0002.
    assert len(re.findall(rf"bulk data to sim000[0-2] goes over {re.escape(provider)}", result.stderr)) == 3, \
        result.describe()
    want = expected_digests(data)
    for rank in range(3):
        got = {name: (int(size), digest) for r, name, size, digest in
               re.findall(r"^(\d+) (\S+) (\d+) ([0-9a-f]{64})$", result.stdout, re.M) if int(r) == rank}
        assert got == want, f"rank {rank} read other bytes than were staged\n{result.describe()}"
    assert_nothing_left(sandbox, caches)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_file_over_1_gib_arrives_whole(run_canopy, sandbox, provider, no_new_regions):
    data = sandbox.root / "data"
    data.mkdir()
    write_pattern(data / "huge.bin", (1 << 30) + 4097)
    args, caches = staged_job(sandbox, data, 2, ["--fabric", provider])
    result = run_canopy(args, timeout=110)
    assert result.returncode == 0, result.describe()
    size, digest = expected_digests(data)["huge.bin"]
    assert sorted(re.findall(r"^(\d+) huge.bin (\d+) ([0-9a-f]{64})$", result.stdout, re.M)) == \
        [("0", str(size), digest), ("1", str(size), digest)], result.describe()
    assert_nothing_left(sandbox, caches)


def test_a_corrupted_message_is_dropped_and_ends_the_job_naming_the_link(run_canopy, sandbox, no_new_regions):
    data = sandbox.root / "data"
    data.mkdir()
    write_pattern(data / "weights.bin", 8 << 20)
    args, caches = staged_job(sandbox, data, 3, ["--fabric", "shm"])
    # The launcher changes one byte of its fourth message after tagging it.
    result = run_canopy(args, timeout=60, env={"CANOPY_FAULT_FABRIC_CORRUPT": "3"})
    assert result.returncode != 0, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert re.search(r"bulk data from the launcher to sim0000 over shm failed its check and was dropped: "
                     r"message 3 was changed on the way", lines[0]), result.describe()
    assert "weights.bin" not in result.stdout, "a rank ran on data that failed its check"
    assert_nothing_left(sandbox, caches)


def test_a_node_dying_mid_broadcast_ends_the_job_naming_it_and_leaves_nothing(sandbox, no_new_regions):
    data = sandbox.root / "data"
    data.mkdir()
    write_pattern(data / "weights.bin", 400 << 20)
    args, caches = staged_job(sandbox, data, 3, ["--fabric", "shm"])
    job = sandbox.start(args)
    # sim0001 is in the middle of the chain: kill its daemon once its cache has some of the file.
    def partly_written():
        return any(p.is_file() and 0 < p.stat().st_size for p in caches.glob("*sim0001*/**/*"))
    assert wait_until(partly_written, timeout=60), "sim0001's cache never started filling"
    victim = daemon_for_node("sim0001", sandbox.marker)
    assert victim, "no canopyd for sim0001"
    os.kill(victim, signal.SIGKILL)
    result = sandbox.finish(job, timeout=60)
    assert result.returncode != 0, result.describe()
    lines = result.canopy_lines()
    assert lines and "sim0001" in lines[0], result.describe()
    assert wait_until(lambda: not list(caches.iterdir()), timeout=10), \
        f"half-written caches left behind: {list(caches.rglob('*'))[:5]}"
    assert_nothing_left(sandbox, caches)


# Every rank contributes 100 KiB to an allgather and reads a 300 KiB store value that rank 0 set: the fence's
# result and the store's answer are large enough to go down the tree over the fabric.
LARGE_COLLECTIVES = r"""
import hashlib, os, canopy
me, size = canopy.rank(), canopy.size()
parts = canopy.allgather(bytes([me]) * (100 << 10))
assert [len(part) for part in parts] == [100 << 10] * size and all(part == bytes([r]) * (100 << 10) for r, part in enumerate(parts))
if me == 0:
    canopy.store_set("weights", os.urandom(300 << 10))
value = canopy.store_get("weights", timeout=60)
print(me, "allgather ok", len(value), hashlib.sha256(value).hexdigest(), flush=True)
"""


def large_collectives_job(sandbox, provider):
    script = sandbox.root / "large.py"
    script.write_text(LARGE_COLLECTIVES)
    env = {"PYTHONPATH": str(REPO / "lib" / "python"), "PYTHONDONTWRITEBYTECODE": "1",
           "CANOPY_LIBRARY": str(BUILD_DIR / "lib" / "api" / "libcanopy.so")}
    return ["--sim-nodes", "3", "--fanout", "1", "--fabric", provider, "-vv", PYTHON, script], env


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_large_fence_result_and_store_value_go_over_the_provider(run_canopy, sandbox, provider, no_new_regions):
    args, env = large_collectives_job(sandbox, provider)
    result = run_canopy(args, timeout=90, env=env)
    assert result.returncode == 0, result.describe()
    assert len(re.findall(rf"bulk data to sim000[0-2] goes over {re.escape(provider)}", result.stderr)) == 3, \
        result.describe()
    lines = re.findall(r"^(\d) allgather ok (\d+) ([0-9a-f]{64})$", result.stdout, re.M)
    assert sorted(rank for rank, _, _ in lines) == ["0", "1", "2"], result.describe()
    assert {(size, digest) for _, size, digest in lines} == {(str(300 << 10), lines[0][2])}, \
        "ranks read different store values"


def test_a_corrupted_fence_result_is_dropped_and_ends_the_job_naming_the_link(run_canopy, sandbox, no_new_regions):
    # Without staging, the launcher's first message over the fabric is the allgather's result on its way down.
    args, env = large_collectives_job(sandbox, "shm")
    result = run_canopy(args, timeout=60, env={**env, "CANOPY_FAULT_FABRIC_CORRUPT": "0"})
    assert result.returncode != 0, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1, result.describe()
    assert re.search(r"bulk data from the launcher to sim0000 over shm failed its check and was dropped: "
                     r"message 0 was changed on the way", lines[0]), result.describe()
    assert "allgather ok" not in result.stdout, "a rank went on with a result that failed its check"


def test_a_provider_that_does_not_exist_is_one_line_before_launch(run_canopy):
    result = run_canopy(["--fabric", "warp-drive", "--sim-nodes", "2", "true"], timeout=30)
    assert result.returncode == 2, result.describe()
    assert result.stderr_lines() == [result.stderr_lines()[0]] and \
        re.match(r"canopy: --fabric warp-drive: libfabric has no provider 'warp-drive' for canopy here "
                 r"\(it offers: .*shm.*\)$", result.stderr_lines()[0]), result.describe()


def test_auto_without_fabric_hardware_stays_on_tcp_and_says_so_once(run_canopy, sandbox):
    data = sandbox.root / "data"
    data.mkdir()
    write_pattern(data / "weights.bin", 3 << 20)
    args, caches = staged_job(sandbox, data, 2, ["--fabric", "auto", "-v"])
    result = run_canopy(args, timeout=60)
    assert result.returncode == 0, result.describe()
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has fabric hardware")
    notes = [line for line in result.stderr.splitlines() if "--fabric auto" in line]
    assert len(notes) == 1 and "bulk data goes over the tree's TCP links" in notes[0], result.describe()
    assert len(re.findall(r"^\d+ weights.bin ", result.stdout, re.M)) == 2, result.describe()
