# libcanopy (canopy/canopy.h and the Python package) under canopy, under another PMIx launcher and alone.
import json
import os
import re
import shutil
import subprocess

from pathlib import Path

import pytest

from conftest import BUILD_DIR, REPO, timing_phases

LIBRARY = Path(os.environ.get("CANOPY_LIBRARY", BUILD_DIR / "lib" / "api" / "libcanopy.so"))
INCLUDE = REPO / "lib" / "include"
GENERATED_INCLUDE = BUILD_DIR / "lib" / "include"   # canopy/version.h, made from meson's project version
PYTHON_PACKAGE = REPO / "lib" / "python"
EXAMPLES = REPO / "docs" / "examples"
PYTHON = "/usr/bin/python3"

# Variables that would make a process think a launcher started it.
LAUNCHER_PREFIXES = ("CANOPY_", "PMIX_", "PMI_", "OMPI_", "SLURM_", "PALS_")

# A C program that checks every call of the API and prints what it found; "api_check rank R: OK" at the end.
API_CHECK_C = r"""
#include <canopy/canopy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1, failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { ++failures; fprintf(stderr, "api_check rank %d: FAIL line %d: ", \
    rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, " [%s]\n", canopy_last_error()); } } while (0)

int main(void)
{
    int status = canopy_init();
    CHECK(status == CANOPY_OK, "canopy_init: %d", status);
    rank = canopy_rank();
    int size = canopy_size();
    printf("info rank=%d size=%d local_rank=%d local_size=%d node_rank=%d num_nodes=%d node=%s mode=%s\n", rank,
           size, canopy_local_rank(), canopy_local_size(), canopy_node_rank(), canopy_num_nodes(),
           canopy_node_name(), canopy_mode_name(canopy_mode()));
    CHECK(canopy_mark("api_check.start") == CANOPY_OK, "canopy_mark");

    /* put / commit / fence / get: every rank's value from every rank */
    char key[32] = "value", mine[64];
    snprintf(mine, sizeof mine, "from rank %d", rank);
    CHECK(canopy_put(key, mine, strlen(mine)) == CANOPY_OK, "canopy_put");
    CHECK(canopy_commit() == CANOPY_OK, "canopy_commit");
    CHECK(canopy_fence() == CANOPY_OK, "canopy_fence");
    for (int r = 0; r < size; ++r) {
        void* value = NULL; size_t len = 0; char want[64];
        snprintf(want, sizeof want, "from rank %d", r);
        status = canopy_get(r, key, &value, &len);
        CHECK(status == CANOPY_OK && len == strlen(want) && memcmp(value, want, len) == 0,
              "canopy_get(%d): status %d len %zu", r, status, len);
        canopy_free(value);
    }
    void* none = NULL; size_t none_len = 0;
    status = canopy_get((rank + 1) % size, "never_put", &none, &none_len);
    CHECK(status == CANOPY_ERR_NOT_FOUND && strstr(canopy_last_error(), "never_put"),
          "canopy_get of a key never put: %d", status);
    status = canopy_get(size, key, &none, &none_len);
    CHECK(status == CANOPY_ERR_INVALID && strstr(canopy_last_error(), "outside the job"),
          "canopy_get of rank %d: %d", size, status);

    /* allgather with a different length per rank, three times (rounds must not mix, nor may a round read an
       earlier round's values under a reused key) */
    for (int round = 0; round < 3; ++round) {
        char data[64];
        memset(data, 'a' + round, sizeof data);
        size_t* lens = calloc((size_t)size, sizeof(size_t));
        void* all = NULL;
        status = canopy_allgather(data, (size_t)(rank % 7) + (size_t)round, &all, lens);
        CHECK(status == CANOPY_OK, "canopy_allgather round %d: %d", round, status);
        size_t offset = 0;
        for (int r = 0; status == CANOPY_OK && r < size; ++r) {
            CHECK(lens[r] == (size_t)(r % 7) + (size_t)round, "allgather round %d: rank %d gave %zu bytes", round,
                  r, lens[r]);
            for (size_t i = 0; i < lens[r]; ++i)
                CHECK(((char*)all)[offset + i] == 'a' + round, "allgather round %d: byte %zu of rank %d", round,
                      i, r);
            offset += lens[r];
        }
        canopy_free(all);
        free(lens);
    }
    CHECK(canopy_barrier() == CANOPY_OK, "canopy_barrier");

    /* argument checks name what is wrong */
    status = canopy_mark("no spaces allowed");
    CHECK(status == CANOPY_ERR_INVALID && strstr(canopy_last_error(), "no spaces allowed"), "bad mark: %d", status);
    status = canopy_put("pmix.hname", "x", 1);
    CHECK(status == CANOPY_ERR_INVALID && strstr(canopy_last_error(), "reserved"), "reserved key: %d", status);

    /* the job store: every rank counts itself, then all read the total */
    long long count = 0;
    int64_t added = 0;
    status = canopy_store_add("api_check.count", 1, &added);
    if (status == CANOPY_ERR_NOT_AVAILABLE) {
        printf("store not available: %s\n", canopy_last_error());
    } else {
        CHECK(status == CANOPY_OK && added >= 1 && added <= size, "canopy_store_add: %d (%lld)", status,
              (long long)added);
        CHECK(canopy_barrier() == CANOPY_OK, "canopy_barrier after add");
        void* value = NULL; size_t len = 0;
        status = canopy_store_get("api_check.count", 0, &value, &len);
        CHECK(status == CANOPY_OK, "canopy_store_get of the count: %d", status);
        if (status == CANOPY_OK) {
            char text[32] = {0};
            memcpy(text, value, len < 31 ? len : 31);
            count = atoll(text);
            canopy_free(value);
        }
        printf("store count=%lld\n", count);
        status = canopy_store_get("api_check.absent", 0, &value, &len);
        CHECK(status == CANOPY_ERR_NOT_FOUND, "store get without wait of a missing key: %d", status);
        status = canopy_store_get("api_check.absent", 200, &value, &len);
        CHECK(status == CANOPY_ERR_TIMEOUT, "store get with a 200 ms wait of a missing key: %d", status);
    }
    CHECK(canopy_mark_duration("api_check.work", 1000000) == CANOPY_OK, "canopy_mark_duration");
    CHECK(canopy_finalize() == CANOPY_OK, "canopy_finalize");
    if (failures == 0)
        printf("api_check rank %d: OK\n", rank);
    return failures ? 1 : 0;
}
"""


def clean_env(base):
    """`base` without anything a launcher sets, so a process started with it is a singleton."""
    return {k: v for k, v in base.items() if not k.startswith(LAUNCHER_PREFIXES)}


def python_env():
    return {"PYTHONPATH": str(PYTHON_PACKAGE), "CANOPY_LIBRARY": str(LIBRARY), "PYTHONDONTWRITEBYTECODE": "1"}


def compile_c(source: Path, output: Path, std="c11", extra=()):
    """Builds a program as an application would: the public header and libcanopy.so, nothing else."""
    assert LIBRARY.exists(), f"{LIBRARY} is missing; build first (ninja -C {BUILD_DIR})"
    command = ["gcc", f"-std={std}", "-Wall", "-Wextra", "-Werror", *extra, "-I", str(INCLUDE), "-I",
               str(GENERATED_INCLUDE), str(source), "-o", str(output), "-L", str(LIBRARY.parent), "-lcanopy",
               f"-Wl,-rpath,{LIBRARY.parent}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{command}\n{result.stderr}"
    return output


@pytest.fixture(scope="module")
def api_check(tmp_path_factory):
    directory = tmp_path_factory.mktemp("api_check")
    source = directory / "api_check.c"
    source.write_text(API_CHECK_C)
    return compile_c(source, directory / "api_check")


def parse_info(output):
    """{rank: {field: value}} from the programs' `info k=v ...` lines."""
    found = {}
    for line in output.splitlines():
        match = re.search(r"info (.*)$", line)
        if match:
            fields = dict(part.split("=", 1) for part in match.group(1).split())
            found[int(fields["rank"])] = fields
    return found


def expected_info(nodes, ppn):
    return {rank: {"rank": str(rank), "size": str(nodes * ppn), "local_rank": str(rank % ppn),
                   "local_size": str(ppn), "node_rank": str(rank // ppn), "num_nodes": str(nodes),
                   "node": f"sim{rank // ppn:04d}", "mode": "canopy"}
            for rank in range(nodes * ppn)}


def test_c_api_under_canopy_on_4_nodes_of_2(run_canopy, api_check):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", "-l", api_check], timeout=60)
    assert result.returncode == 0, result.describe()
    assert parse_info(result.stdout) == expected_info(4, 2), result.describe()
    ok = sorted(int(m) for m in re.findall(r"api_check rank (\d+): OK", result.stdout))
    assert ok == list(range(8)), result.describe()
    # Under canopy the store is there: every rank counted itself before the barrier.
    counts = re.findall(r"store count=(\d+)", result.stdout)
    assert counts == ["8"] * 8, result.describe()


def test_c_api_as_a_singleton(sandbox, api_check):
    result = subprocess.run([str(api_check)], capture_output=True, text=True, timeout=30,
                            env=clean_env(sandbox.env), cwd=sandbox.root)
    assert result.returncode == 0, result.stdout + result.stderr
    info = parse_info(result.stdout)
    assert info == {0: {"rank": "0", "size": "1", "local_rank": "0", "local_size": "1", "node_rank": "0",
                        "num_nodes": "1", "node": os.uname().nodename, "mode": "singleton"}}, result.stdout
    assert "api_check rank 0: OK" in result.stdout, result.stdout + result.stderr
    assert "store count=1" in result.stdout, result.stdout   # a singleton keeps its store in the process


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI's mpirun is not installed")
def test_c_api_under_another_pmix_launcher_works_without_the_canopy_extras(sandbox, api_check):
    # Open MPI's mpirun is a PMIx server: rank information comes from its variables, exchange from its PMIx
    # server; the store does not exist. (tests/integration/test_launchers.py: the other launchers.)
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3", str(api_check)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=clean_env(sandbox.env),
                            cwd=sandbox.root)
    assert result.returncode == 0, result.stdout + result.stderr
    info = parse_info(result.stdout)
    assert sorted(info) == [0, 1, 2], result.stdout
    for rank, fields in info.items():
        assert fields["size"] == "3" and fields["mode"] == "open-mpi", fields
        assert fields["local_size"] == "3" and fields["num_nodes"] == "1", fields
    assert sorted(int(m) for m in re.findall(r"api_check rank (\d+): OK", result.stdout)) == [0, 1, 2]
    unavailable = re.findall(r"store not available: (.*)", result.stdout)
    assert len(unavailable) == 3, result.stdout
    assert "not available outside canopy" in unavailable[0], unavailable[0]


def test_hello_example_builds_and_runs_under_canopy(run_canopy, tmp_path):
    hello = compile_c(EXAMPLES / "hello.c", tmp_path / "hello")
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", hello], timeout=60)
    assert result.returncode == 0, result.describe()
    for rank in range(4):
        assert f"[{rank}] hello from rank {rank} of 4 (local {rank % 2} of 2) on node {rank // 2} of 2, " \
               f"sim{rank // 2:04d}" in result.stdout, result.describe()
    assert "[0]   rank 3 says rank3@sim0001" in result.stdout, result.describe()
    assert "[0]   the store counted 4 ranks" in result.stdout, result.describe()


# The Python package, checked from inside each rank; prints one JSON line per rank.
PYTHON_CHECK = r"""
import json, os, sys
import canopy
checks = {}
checks["mode"] = canopy.mode()
info = [canopy.rank(), canopy.size(), canopy.local_rank(), canopy.local_size(), canopy.node_rank(),
        canopy.num_nodes(), canopy.node_name()]
with canopy.phase("py_setup"):
    canopy.put("name", f"r{info[0]}@{info[6]}")
    canopy.commit()
    canopy.fence()
checks["names"] = [canopy.get(r, "name").decode() for r in range(info[1])]
checks["allgather"] = [b.decode() for b in canopy.allgather(str(info[0]) * (info[0] + 1))]
canopy.barrier()
try:
    canopy.mark("bad name")
    checks["bad_mark"] = "accepted"
except canopy.CanopyError as error:
    checks["bad_mark"] = [error.status, "bad name" in str(error)]
try:
    canopy.get(0, "never_put")
    checks["missing"] = "found"
except canopy.KeyNotFoundError as error:
    checks["missing"] = error.status
canopy.mark("py_done")
if canopy.store_available():
    checks["added"] = canopy.store_add("py.count", 2)
    canopy.barrier()
    checks["count"] = int(canopy.store_get("py.count", timeout=5))
    try:
        canopy.store_get("py.absent", timeout=0.2)
        checks["absent"] = "found"
    except canopy.CanopyTimeoutError:
        checks["absent"] = "timeout"
print("pycheck " + json.dumps({"info": info, "checks": checks}), flush=True)
canopy.finalize()
"""


def python_results(output):
    return [json.loads(line.split("pycheck ", 1)[1]) for line in output.splitlines() if "pycheck " in line]


def test_python_api_under_canopy(run_canopy, tmp_path):
    script = tmp_path / "pycheck.py"
    script.write_text(PYTHON_CHECK)
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", PYTHON, script], timeout=90, env=python_env())
    assert result.returncode == 0, result.describe()
    found = sorted(python_results(result.stdout), key=lambda entry: entry["info"][0])
    assert [entry["info"] for entry in found] == [[r, 4, r % 2, 2, r // 2, 2, f"sim{r // 2:04d}"] for r in range(4)]
    for entry in found:
        checks = entry["checks"]
        assert checks["mode"] == "canopy"
        assert checks["names"] == [f"r{r}@sim{r // 2:04d}" for r in range(4)]
        assert checks["allgather"] == [str(r) * (r + 1) for r in range(4)]
        assert checks["bad_mark"] == [4, True]
        assert checks["missing"] == 1
        assert checks["count"] == 8 and checks["absent"] == "timeout", checks


def test_python_api_as_a_singleton(sandbox, tmp_path):
    script = tmp_path / "pycheck.py"
    script.write_text(PYTHON_CHECK)
    result = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, timeout=60,
                            env={**clean_env(sandbox.env), **python_env()}, cwd=sandbox.root)
    assert result.returncode == 0, result.stdout + result.stderr
    (entry,) = python_results(result.stdout)
    assert entry["info"] == [0, 1, 0, 1, 0, 1, os.uname().nodename]
    checks = entry["checks"]
    assert checks["mode"] == "singleton"
    assert checks["names"] == [f"r0@{os.uname().nodename}"] and checks["allgather"] == ["0"]
    assert checks["bad_mark"] == [4, True] and checks["missing"] == 1
    assert checks["added"] == 2 and checks["count"] == 2 and checks["absent"] == "timeout", checks


def test_python_status_codes_and_modes_are_the_c_headers(sandbox):
    header = (INCLUDE / "canopy" / "canopy.h").read_text()
    defined = {name: int(value) for name, value in re.findall(r"#define CANOPY_((?:ERR_\w+)|OK) (\d+)", header)}
    modes = {int(value): name.lower().replace("_", "-")
             for name, value in re.findall(r"#define CANOPY_MODE_(\w+) (\d+)", header)}
    assert len(defined) >= 9 and len(modes) == 9 and modes[5] == "open-mpi", (defined, modes)
    probe = ("import canopy, json; print(json.dumps([{n: getattr(canopy, n) for n in %r}, canopy._MODES]))"
             % sorted(defined))
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=30,
                            env={**clean_env(sandbox.env), **python_env()})
    assert result.returncode == 0, result.stderr
    codes, python_modes = json.loads(result.stdout)
    assert codes == defined
    assert {int(code): name for code, name in python_modes.items()} == modes


def test_python_package_explains_a_missing_library(sandbox):
    # A named library that is missing is an error, even where another copy could be found (meson test puts the
    # build dir in LD_LIBRARY_PATH; an installed canopy is in the loader's cache).
    env = {**clean_env(sandbox.env), **python_env(), "CANOPY_LIBRARY": str(sandbox.root / "nowhere.so")}
    result = subprocess.run([PYTHON, "-c", "import canopy"], capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot load libcanopy.so" in last and "nowhere.so (missing)" in last and "CANOPY_LIBRARY" in last, last


def test_timing_json_contains_the_apps_marks_in_order(run_canopy, sandbox):
    path = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", f"--timing={path}", PYTHON, EXAMPLES / "marks.py"],
                        timeout=90, env=python_env())
    assert result.returncode == 0, result.describe()
    phases = timing_phases(path)
    order = ["app.python_started", "app.imports", "app.setup", "app.first_step"]
    for name in order + ["app.imports.duration", "app.setup.duration"]:
        assert name in phases, f"{name} missing from {sorted(phases)}"
        assert phases[name]["count"] == 4, phases[name]
        assert re.fullmatch(r"rank [0-3] on sim000[01]", phases[name]["max_who"]), phases[name]
    # Every rank stamps them in this order, so their earliest and latest times are in this order too.
    for earlier, later in zip(order, order[1:]):
        assert phases[earlier]["min"] <= phases[later]["min"], (earlier, later)
        assert phases[earlier]["max"] <= phases[later]["max"], (earlier, later)
    # Marks fall inside the ranks' lives.
    assert phases["rank.spawned"]["min"] <= phases["app.python_started"]["min"]
    assert phases["app.first_step"]["max"] <= phases["rank.exited"]["max"]
    # setup sleeps 0.2 s per local rank: the duration carries it (the slowest is usually local rank 1).
    setup = phases["app.setup.duration"]
    assert 0.19 <= setup["max"] < 10, setup


def test_ddp_training_through_canopy_rendezvous_converges_with_equal_gradients(run_canopy, sandbox):
    path = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", f"--timing={path}", PYTHON, EXAMPLES / "ddp_train.py",
                         "--steps", "8"], timeout=110, env=python_env())
    assert result.returncode == 0, result.describe()
    (summary,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert summary["world"] == 4
    losses = summary["losses"]
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0], losses
    assert summary["max_grad_diff"] == 0.0 and summary["max_param_diff"] == 0.0, summary
    phases = timing_phases(path)
    for name in ("app.imports", "app.init_process_group", "app.model_built", "app.first_step", "app.trained"):
        assert phases.get(name, {}).get("count") == 4, f"{name}: {phases.get(name)}"


# Many threads of one rank share its one daemon connection: each must get its own answers, in any order,
# while another thread of the same rank blocks in a get at the root.
THREADS_C = r"""
#include <canopy/canopy.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
enum { THREADS = 8, ADDS = 200 };
static int failures = 0;
static void* adder(void* arg)
{
    long id = (long)arg; char key[64]; snprintf(key, sizeof key, "threads.r%d.t%ld", canopy_rank(), id);
    for (int i = 1; i <= ADDS; ++i) {
        int64_t value = 0;
        if (canopy_store_add(key, 1, &value) != CANOPY_OK || value != i) { __sync_fetch_and_add(&failures, 1); break; }
        if (canopy_store_add("threads.total", 1, NULL) != CANOPY_OK) { __sync_fetch_and_add(&failures, 1); break; }
    }
    return NULL;
}
static void* late_getter(void* arg)
{
    (void)arg; void* value = NULL; size_t len = 0; char key[64];
    snprintf(key, sizeof key, "threads.late.%d", canopy_rank());
    int status = canopy_store_get(key, 20000, &value, &len);
    if (status != CANOPY_OK || len != 4 || memcmp(value, "done", 4) != 0) __sync_fetch_and_add(&failures, 1);
    canopy_free(value);
    return NULL;
}
int main(void)
{
    canopy_init();
    pthread_t getter, adders[THREADS];
    pthread_create(&getter, NULL, late_getter, NULL);   /* blocks at the root while the adders run */
    for (long t = 0; t < THREADS; ++t) pthread_create(&adders[t], NULL, adder, (void*)t);
    for (int t = 0; t < THREADS; ++t) pthread_join(adders[t], NULL);
    char key[64]; snprintf(key, sizeof key, "threads.late.%d", canopy_rank());
    canopy_store_set(key, "done", 4);
    pthread_join(getter, NULL);
    canopy_barrier();
    void* value = NULL; size_t len = 0;
    canopy_store_get("threads.total", 0, &value, &len);
    printf("threads rank %d: failures %d total %.*s\n", canopy_rank(), failures, (int)len, (char*)value);
    canopy_free(value);
    return canopy_finalize() || failures;
}
"""


def test_store_calls_from_many_threads_of_each_rank_get_their_own_answers(run_canopy, tmp_path):
    source = tmp_path / "threads.c"
    source.write_text(THREADS_C)
    program = compile_c(source, tmp_path / "threads", std="gnu11", extra=["-pthread"])
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", program], timeout=90)
    assert result.returncode == 0, result.describe()
    # 4 ranks x 8 threads x 200 adds on the shared counter, each thread's own counter counting 1..200 in order.
    lines = sorted(re.findall(r"threads rank (\d+): failures (\d+) total (\d+)", result.stdout))
    assert lines == [(str(rank), "0", "6400") for rank in range(4)], result.describe()


MERGED_READS = r"""
import os, time
import canopy
rank = canopy.rank()
if rank == 0:
    time.sleep(0.5)   # every other rank is already waiting for the key, most of them merged on their node
    canopy.store_set("late", b"value-from-rank-0")
    canopy.store_set("later", b"second")
value = canopy.store_get("late", timeout=20)
second = canopy.store_get("later", timeout=20)
os.write(1, f"rank {rank} got {value.decode()} {second.decode()}\n".encode())
"""


def test_many_ranks_blocking_on_one_key_all_get_it(run_canopy, tmp_path):
    # Four ranks per node wait for the same key at once; the daemon sends one request up for them, and every
    # one of them must still get its own answer.
    script = tmp_path / "merged.py"
    script.write_text(MERGED_READS)
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", "3", "--ppn", "4", f"--timing={timing}", PYTHON, script], timeout=60,
                        env=python_env())
    assert result.returncode == 0, result.describe()
    lines = sorted(result.stdout.splitlines())
    assert lines == sorted(f"rank {r} got value-from-rank-0 second" for r in range(12)), result.describe()
    # Unmerged, a node without rank 0 would handle 16 store frames (4 ranks x 2 gets, each a request and a
    # reply), and rank 0's node 20 (its 2 sets too); the four waits for "late" share one request.
    messages = timing_phases(timing)["daemon.tree_messages"]
    assert messages["min"] <= 10 and messages["max"] < 20, messages


CACHED_READS = r"""
import os
import canopy
rank = canopy.rank()
if rank == 0:
    canopy.store_set("shared", b"v1")
first = {canopy.store_get("shared", timeout=30) for _ in range(50)}   # other ranks may wait for the set
canopy.barrier()
if rank == 0:
    canopy.store_set("shared", b"v2")   # returns once every node that cached v1 has dropped it
canopy.barrier()
second = {canopy.store_get("shared", timeout=30) for _ in range(50)}
added = [canopy.store_add("counter", 1) for _ in range(10)]
canopy.barrier()
total = canopy.store_get("counter", timeout=30).decode()
show = lambda values: ",".join(sorted(v.decode() for v in values))
os.write(1, f"rank {rank} first {show(first)} second {show(second)} total {total} "
            f"added {' '.join(map(str, added))}\n".encode())
canopy.finalize()
"""


def test_store_reads_of_a_known_key_are_answered_by_the_nodes_daemon(run_canopy, tmp_path):
    # 8 ranks on 4 nodes each read one key 50 times: the root serves one read per node, the daemons the rest.
    # Then rank 0 overwrites it: after a barrier every rank reads the new value (the write returned only once
    # every caching daemon dropped the old one), and add() still counts exactly at the root.
    script = tmp_path / "cached.py"
    script.write_text(CACHED_READS)
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", f"--timing={timing}", PYTHON, script], timeout=90,
                        env=python_env())
    assert result.returncode == 0, result.describe()
    lines = re.findall(r"rank (\d+) first (\S+) second (\S+) total (\d+) added ([\d ]+)", result.stdout)
    assert sorted(int(line[0]) for line in lines) == list(range(8)), result.describe()
    added = []
    for rank, first, second, total, values in lines:
        assert (first, second, total) == ("v1", "v2", "80"), (rank, first, second, total)
        added += [int(v) for v in values.split()]
    assert sorted(added) == list(range(1, 81))   # every add got its own count

    phases = timing_phases(timing)
    reads, writes = phases["root.store_read_messages"], phases["root.store_write_messages"]
    # Per node: one read of v1, one of v2 after the invalidation, one of the counter.
    assert reads["count"] == 4 and reads["max"] <= 3 and reads["sum"] == 12, reads
    assert writes["sum"] == 82, writes   # 80 adds and 2 sets
    assert phases["root.store_invalidate_messages"]["sum"] == 4   # the second set, to each node caching v1
    local = phases["daemon.store_local_messages"]
    requests = 8 * (50 + 50 + 10 + 1) + 2
    assert local["count"] == 4 and local["sum"] + reads["sum"] + writes["sum"] == requests, local


WRITE_AFTER_A_READER_LEFT = r"""
import os, time
import canopy
rank = canopy.rank()
if rank == 0:
    canopy.store_set("k", b"old")
    canopy.store_wait(["read"], timeout=30)
    time.sleep(1.5)   # rank 1 has exited by now, and its node's daemon (which cached "k") has left the tree
    canopy.store_set("k", b"new")
    os.write(1, b"rank 0 set new\n")
else:
    os.write(1, f"rank {rank} read {canopy.store_get('k', timeout=30).decode()}\n".encode())
    canopy.store_set("read", b"yes")
"""


def test_a_write_of_a_key_cached_by_a_node_that_left_still_returns(run_canopy, tmp_path):
    script = tmp_path / "left.py"
    script.write_text(WRITE_AFTER_A_READER_LEFT)
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "1", f"--timing={timing}", PYTHON, script], timeout=30,
                        env=python_env())
    assert result.returncode == 0, result.describe()
    assert sorted(result.stdout.splitlines()) == ["rank 0 set new", "rank 1 read old"], result.describe()
    phases = timing_phases(timing)
    assert phases["root.store_invalidate_messages"]["sum"] == 1   # sent to the node that left, answered by its parent
