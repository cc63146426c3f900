# canopy.torch.Store against torch's own HashStore: the same operations must give the same answers.
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD_DIR, REPO, timing_phases

LIBRARY = Path(os.environ.get("CANOPY_LIBRARY", BUILD_DIR / "lib" / "api" / "libcanopy.so"))
PYTHON = "/usr/bin/python3"
LAUNCHER_PREFIXES = ("CANOPY_", "PMIX_", "PMI_", "OMPI_", "SLURM_", "PALS_")

# Runs one sequence of Store operations and prints what each returned: {"trace": [[op, outcome, value], ...]}.
# argv[1] picks the store: "hash" (torch's HashStore, the reference) or "canopy" (canopy.torch.Store). Under
# canopy each rank uses its own key prefix, so ranks do not see each other's keys.
EXERCISE = r"""
import datetime, json, os, sys, time
import torch.distributed as dist

kind = sys.argv[1]
if kind == "hash":
    store, prefix = dist.HashStore(), "r0/"
else:
    import canopy, canopy.torch
    store, prefix = canopy.torch.Store(), f"r{canopy.rank()}/"
store.set_timeout(datetime.timedelta(seconds=30))
trace = []

def record(op, call):
    try:
        value = call()
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        trace.append([op, "ok", value])
    except Exception as error:   # HashStore raises RuntimeError or ValueError; only "it failed" is compared
        trace.append([op, "error", None])

k = lambda name: prefix + name
record("set a", lambda: store.set(k("a"), "1"))
record("get a", lambda: store.get(k("a")))
record("set binary", lambda: store.set(k("bin"), b"\x00\xff\x01 x"))
record("get binary", lambda: store.get(k("bin")))
record("overwrite a", lambda: store.set(k("a"), "2"))
record("get a again", lambda: store.get(k("a")))
record("set empty", lambda: store.set(k("empty"), b""))
record("get empty", lambda: store.get(k("empty")))
record("add c 5", lambda: store.add(k("c"), 5))
record("add c -2", lambda: store.add(k("c"), -2))
record("add c 0", lambda: store.add(k("c"), 0))
record("get c", lambda: store.get(k("c")))
record("add a 1", lambda: store.add(k("a"), 1))
record("get a after add", lambda: store.get(k("a")))
record("set text", lambda: store.set(k("text"), "abc"))
record("add text", lambda: store.add(k("text"), 1))
record("compare_set missing, empty expected", lambda: store.compare_set(k("cs"), "", "v"))
record("get cs", lambda: store.get(k("cs")))
record("compare_set matching", lambda: store.compare_set(k("cs"), "v", "w"))
record("compare_set not matching", lambda: store.compare_set(k("cs"), "nope", "z"))
record("get cs after", lambda: store.get(k("cs")))
record("compare_set missing, expected given", lambda: store.compare_set(k("cs2"), "x", "y"))
record("wait for existing", lambda: store.wait([k("a"), k("c")]))
started = time.monotonic()
record("wait for missing", lambda: store.wait([k("cs2")], datetime.timedelta(milliseconds=300)))
trace.append(["wait took at least its timeout", "ok", time.monotonic() - started >= 0.29])
record("delete a", lambda: store.delete_key(k("a")))
record("delete a again", lambda: store.delete_key(k("a")))
record("wait for deleted", lambda: store.wait([k("a")], datetime.timedelta(milliseconds=200)))
def count_keys():
    before = store.num_keys()
    store.set(k("counted"), "x")
    trace.append(["num_keys grows by one on set", "ok", store.num_keys() - before])
    store.delete_key(k("counted"))
    trace.append(["num_keys shrinks by one on delete", "ok", store.num_keys() - before])

if kind == "hash":
    count_keys()
else:
    # num_keys counts the whole job's keys: ranks take turns so no other rank adds one in between.
    canopy.barrier()
    for turn in range(canopy.size()):
        if turn == canopy.rank():
            count_keys()
        canopy.barrier()
store.set_timeout(datetime.timedelta(milliseconds=300))
started = time.monotonic()
record("get missing with 300 ms timeout", lambda: store.get(k("never")))
trace.append(["get took at least its timeout", "ok", time.monotonic() - started >= 0.29])

result = {"trace": trace}
if kind == "canopy":
    # HashStore has no check() in torch 1.13's Python API; HashStore::check is "every key exists".
    result["check"] = [store.check([k("c"), k("cs")]), store.check([k("c"), k("never")]), store.check([k("a")])]
print("STORE " + json.dumps(result), flush=True)
"""

# Ranks working on shared keys at once, through the root of the tree.
SHARED = r"""
import datetime, json, time
import canopy, canopy.torch
store = canopy.torch.Store(datetime.timedelta(seconds=30))
rank, size = canopy.rank(), canopy.size()
added = store.add("shared/count", 1)
store.wait(["shared/count"])
winner = store.compare_set("shared/leader", "", f"rank{rank}")
if rank == size - 1:
    time.sleep(0.5)
    store.set("shared/late", f"set by rank {rank}")
late = store.get("shared/late").decode()   # every other rank blocks here until the last rank sets it
store.add("shared/done", 1)
while int(store.get("shared/done")) < size:
    time.sleep(0.01)
print("SHARED " + json.dumps({"rank": rank, "added": added, "winner": winner.decode(), "late": late,
                              "count": int(store.get("shared/count"))}), flush=True)
"""


def clean_env(base):
    return {k: v for k, v in base.items() if not k.startswith(LAUNCHER_PREFIXES)}


def python_env():
    return {"PYTHONPATH": str(REPO / "lib" / "python"), "CANOPY_LIBRARY": str(LIBRARY), "PYTHONDONTWRITEBYTECODE": "1"}


def results(output, tag):
    return [json.loads(line.split(tag + " ", 1)[1]) for line in output.splitlines() if tag + " " in line]


@pytest.fixture
def scripts(tmp_path):
    exercise, shared = tmp_path / "exercise.py", tmp_path / "shared.py"
    exercise.write_text(EXERCISE)
    shared.write_text(SHARED)
    return exercise, shared


@pytest.fixture
def reference(sandbox, scripts):
    """The trace of torch's own HashStore."""
    result = subprocess.run([PYTHON, str(scripts[0]), "hash"], capture_output=True, text=True, timeout=60,
                            env=clean_env(sandbox.env))
    assert result.returncode == 0, result.stderr
    (found,) = results(result.stdout, "STORE")
    return found["trace"]


EXPECTED_CHECKS = [True, False, False]


def test_hash_store_reference_is_what_the_protocol_documents(reference):
    # The reference itself, spelled out, so a torch upgrade that changes it is noticed here.
    outcome = {op: (status, value) for op, status, value in reference}
    assert outcome["get binary"] == ("ok", "\x00\xff\x01 x")
    assert outcome["get c"] == ("ok", "3") and outcome["get a after add"] == ("ok", "3")
    assert outcome["add text"][0] == "error"
    assert outcome["compare_set missing, empty expected"] == ("ok", "v")
    assert outcome["compare_set not matching"] == ("ok", "w")
    assert outcome["compare_set missing, expected given"] == ("ok", "x")
    assert outcome["wait for missing"][0] == "error" and outcome["get missing with 300 ms timeout"][0] == "error"
    assert outcome["delete a"] == ("ok", True) and outcome["delete a again"] == ("ok", False)


def test_canopy_store_matches_hash_store_in_a_singleton(sandbox, scripts, reference):
    result = subprocess.run([PYTHON, str(scripts[0]), "canopy"], capture_output=True, text=True, timeout=60,
                            env={**clean_env(sandbox.env), **python_env()})
    assert result.returncode == 0, result.stderr
    (found,) = results(result.stdout, "STORE")
    assert found["trace"] == reference
    assert found["check"] == EXPECTED_CHECKS


def test_canopy_store_matches_hash_store_under_canopy(run_canopy, scripts, reference):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", PYTHON, scripts[0], "canopy"], timeout=90,
                        env=python_env())
    assert result.returncode == 0, result.describe()
    found = results(result.stdout, "STORE")
    assert len(found) == 4, result.describe()
    for entry in found:
        assert entry["trace"] == reference
        assert entry["check"] == EXPECTED_CHECKS


def test_ranks_share_one_store_across_nodes(run_canopy, scripts):
    result = run_canopy(["--sim-nodes", "3", "--ppn", "2", PYTHON, scripts[1]], timeout=90, env=python_env())
    assert result.returncode == 0, result.describe()
    found = sorted(results(result.stdout, "SHARED"), key=lambda entry: entry["rank"])
    assert [entry["rank"] for entry in found] == list(range(6)), result.describe()
    # add is atomic at the root: each rank got a different count, and the total is the rank count.
    assert sorted(entry["added"] for entry in found) == list(range(1, 7))
    assert {entry["count"] for entry in found} == {6}
    # compare_set elects one leader that every rank agrees on.
    winners = {entry["winner"] for entry in found}
    assert len(winners) == 1 and winners <= {f"rank{r}" for r in range(6)}, winners
    # A blocking get waited for a key set 0.5 s later on another node.
    assert {entry["late"] for entry in found} == {"set by rank 5"}


# A token passed round the ranks through one key: each rank polls it with get (answered by its daemon's cache
# once known) until it names the rank, then hands it on with set. A cache that served a value older than a
# returned set would make the ring stall here, and the test's deadline fail.
RING = r"""
import datetime, os, time
import canopy, canopy.torch
store = canopy.torch.Store()
store.set_timeout(datetime.timedelta(seconds=30))
rank, size = canopy.rank(), canopy.size()
if rank == 0:
    store.set("ring/turn", "0")
polls = 0
for lap in range(3):
    want = str(lap * size + rank)
    while store.get("ring/turn").decode() != want:
        polls += 1
        time.sleep(0.002)
    store.set("ring/turn", str(lap * size + rank + 1))
os.write(1, f"RING rank {rank} done after {polls} polls\n".encode())
"""


def test_a_token_ring_through_one_key_sees_every_set(run_canopy, tmp_path):
    script = tmp_path / "ring.py"
    script.write_text(RING)
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", "3", "--ppn", "2", f"--timing={timing}", PYTHON, script], timeout=90,
                        env=python_env())
    assert result.returncode == 0, result.describe()
    done = sorted(int(rank) for rank in re.findall(r"RING rank (\d+) done", result.stdout))
    assert done == list(range(6)), result.describe()
    # A node asks the root again only after an invalidation (and once at first): the other polls were answered by
    # its daemon.
    phases = timing_phases(timing)
    reads, invalidations = phases["root.store_read_messages"], phases["root.store_invalidate_messages"]
    assert reads["sum"] <= invalidations["sum"] + 3, (reads, invalidations)
    polls = sum(int(n) for n in re.findall(r"done after (\d+) polls", result.stdout))
    gets, sets = polls + 6 * 3, 1 + 6 * 3
    assert phases["root.store_write_messages"]["sum"] == sets
    assert phases["daemon.store_local_messages"]["sum"] + reads["sum"] == gets, (phases, polls)
