#!/bin/sh
# Builds the PMIx host driver and the test programs, then runs every case with a deadline and checks its result.
# usage: tests/pmix/run_tests.sh [OUTDIR]          build with g++ into OUTDIR (default /tmp/canopy-pmix-tests)
#        tests/pmix/run_tests.sh --prebuilt DIR   use the programs meson built in DIR (the test suite does this)
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2

if [ "${1:-}" = "--prebuilt" ]; then
    OUT=${2:?--prebuilt needs the directory meson built the programs in}
else
    OUT=${1:-/tmp/canopy-pmix-tests}
    mkdir -p "$OUT"
    echo "building into $OUT"
    g++ -std=c++20 -O1 -g -Wall -Wextra -include utility -Ilib -Idaemon \
        -DSPDLOG_HEADER_ONLY -DSPDLOG_FMT_EXTERNAL -DFMT_HEADER_ONLY $(pkg-config --cflags pmix) \
        -DCANOPY_PMIX_VERSION="\"$(pkg-config --modversion pmix)\"" \
        daemon/pmix/client_env.cpp daemon/pmix/job_info.cpp daemon/pmix/module_log.cpp \
        daemon/pmix/pending_requests.cpp daemon/pmix/pmix_answers.cpp daemon/pmix/pmix_host.cpp \
        daemon/pmix/published_values.cpp daemon/pmix/rank_tracker.cpp daemon/pmix/request_router.cpp \
        daemon/pmix/server_lifecycle.cpp daemon/pmix/upcalls.cpp lib/hosts/rank_blocks.cpp lib/util/log.cpp \
        tests/pmix/host_driver.cpp \
        $(pkg-config --libs pmix) -pthread -o "$OUT/host_driver" || exit 2
    g++ -std=c++20 -O1 -Wall -Wextra -Ilib -Idaemon -DFMT_HEADER_ONLY $(pkg-config --cflags pmix) \
        daemon/pmix/job_info.cpp lib/hosts/rank_blocks.cpp tests/pmix/test_job_info.cpp $(pkg-config --libs pmix) \
        -lgtest -lgtest_main -pthread -o "$OUT/test_job_info" || exit 2
    for c in client_keyval client_abort client_lost; do
        gcc -O1 -Wall $(pkg-config --cflags pmix) tests/pmix/$c.c $(pkg-config --libs pmix) -o "$OUT/$c" || exit 2
    done
    for m in mpi_hello mpi_ring mpi_allreduce mpi_allpairs; do
        mpicc.openmpi -O1 -Wall tests/pmix/$m.c -o "$OUT/$m" || exit 2
    done
fi

passed=0
failed=0
# run NAME EXPECTED_EXIT "GREP -E PATTERN" MIN_OCCURRENCES -- COMMAND...
run() {
    name=$1 want=$2 pattern=$3 count=$4
    shift 5
    log="$OUT/$name.log"
    timeout 120 "$@" >"$log" 2>&1
    rc=$?
    got=$(grep -E -o -- "$pattern" "$log" | wc -l)   # occurrences: ranks' lines may share a line in the log
    if [ "$rc" = "$want" ] && [ "$got" -ge "$count" ]; then
        passed=$((passed + 1))
        echo "PASS $name (exit $rc, $got matches of '$pattern')"
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc (want $want), $got of $count matches of '$pattern'; log $log:"
        sed 's/^/    /' "$log" | tail -25
    fi
}

D="$OUT/host_driver"
PY=/usr/bin/python3
ALLREDUCE='import os
from mpi4py import MPI
c = MPI.COMM_WORLD
s = c.allreduce(c.rank + 1, op=MPI.SUM)
ok = s == c.size * (c.size + 1) // 2
word = "OK" if ok else "WRONG"
os.write(1, f"mpi4py rank {c.rank} of {c.size}: allreduce {s} {word}\n".encode())  # one write: ranks share stdout
raise SystemExit(0 if ok else 1)'

run unit_job_info 0 '^\[  PASSED  \]' 1 -- "$OUT/test_job_info"

# (a) PMIx clients: job info, every value type, direct modex, subset and back-to-back fences, publish/lookup
run keyval_1x4 0 'client_keyval rank [0-3]: OK' 4 -- "$D" -n 4 --timeout 60 -- "$OUT/client_keyval" node0 4
run keyval_2x2 0 'client_keyval rank [0-3]: OK' 4 -- "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/client_keyval" node0,node1 2,2
run keyval_2x2_direct_modex_used 0 'node0: all ranks done; fences=[0-9]+ direct_modex=[1-9]' 1 -- \
    "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/client_keyval" node0,node1 2,2

# (b) PMIx_Abort reaches PmixDaemonCalls::abort with message and status; lost ranks never hang a fence
run abort_1x4 42 'ABORT from rank 1, status 42: rank 1 on node0 called PMIx_Abort with status 42: client_abort: rank 1 gives up on purpose' 1 -- \
    "$D" -n 4 --timeout 60 -- "$OUT/client_abort" 1 42
run abort_2x2_remote_node 7 'node1: ABORT from rank 3, status 7: rank 3 on node1 called PMIx_Abort with status 7: client_abort: rank 3 gives up on purpose' 1 -- \
    "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/client_abort" 3 7
run lost_exit0 1 'ABORT from rank 2, status 1: rank 2 on node0 exited without calling PMIx_Finalize \(exit code 0\)' 1 -- \
    "$D" -n 4 --timeout 60 -- "$OUT/client_lost" 2 exit
run lost_sigkill 137 'exited without calling PMIx_Finalize \(killed by signal 9\)' 1 -- \
    "$D" -n 4 --timeout 60 -- "$OUT/client_lost" 2 kill
run lost_before_init 1 'rank 2 on node0 exited without connecting to PMIx while other ranks use it' 1 -- \
    "$D" -n 4 --timeout 60 -- "$OUT/client_lost" 2 early

# (c) Open MPI 4.1 joins the job (right MPI_COMM_WORLD size), with and without the host's Open MPI setting
run ompi_hello_1x4 0 'mpi_hello: rank [0-3] of 4 ' 4 -- "$D" -n 4 --timeout 60 -- "$OUT/mpi_hello" 4
run ompi_singleton_without_schizo_setting 1 'mpi_hello: rank 0 of 1 ' 4 -- \
    "$D" -n 4 --timeout 60 -- env -u OMPI_MCA_schizo "$OUT/mpi_hello" 4
run ompi_ring_1x4 0 'mpi_ring: 4 ranks, 3 laps, token 18 OK' 1 -- "$D" -n 4 --timeout 60 -- "$OUT/mpi_ring" 4
run ompi_allreduce_1x4 0 'mpi_allreduce: 4 ranks, sum 10 max 4 vector OK' 1 -- "$D" -n 4 --timeout 60 -- "$OUT/mpi_allreduce" 4
run ompi_allpairs_1x4 0 'mpi_allpairs: 4 ranks, 6 pairs OK' 1 -- "$D" -n 4 --timeout 60 -- "$OUT/mpi_allpairs" 4
run ompi_hello_2x2 0 'mpi_hello: rank [0-3] of 4 ' 4 -- "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/mpi_hello" 4
run ompi_ring_2x2 0 'mpi_ring: 4 ranks, 3 laps, token 18 OK' 1 -- "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/mpi_ring" 4
run ompi_allreduce_2x2 0 'mpi_allreduce: 4 ranks, sum 10 max 4 vector OK' 1 -- \
    "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/mpi_allreduce" 4
run ompi_allpairs_2x2 0 'mpi_allpairs: 4 ranks, 6 pairs OK' 1 -- "$D" --nodes 2 -n 2 --timeout 60 -- "$OUT/mpi_allpairs" 4
# The rank environment names no scheduler (torch, ezpz-style scripts must not think they run under Slurm etc.)
run no_scheduler_variables 0 '^clean$' 1 -- "$D" -n 1 --timeout 30 -- \
    sh -c 'if env | grep -E "^(SLURM|FLUX|LSB|LSF|JSM|PBS|COBALT|ALPS|PALS)_"; then exit 1; else echo clean; fi'

# (d) mpi4py with Debian's python
run mpi4py_allreduce_1x4 0 'mpi4py rank [0-3] of 4: allreduce 10 OK' 4 -- "$D" -n 4 --timeout 90 -- $PY -c "$ALLREDUCE"
run mpi4py_allreduce_2x2 0 'mpi4py rank [0-3] of 4: allreduce 10 OK' 4 -- \
    "$D" --nodes 2 -n 2 --timeout 90 -- $PY -c "$ALLREDUCE"
run mpi4py_helloworld 0 'Hello, World! I am process [0-3] of 4' 4 -- "$D" -n 4 --timeout 90 -- $PY -m mpi4py.bench helloworld
run mpi4py_ringtest 0 'time for 1 loops' 1 -- "$D" -n 4 --timeout 90 -- $PY -m mpi4py.bench ringtest

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
