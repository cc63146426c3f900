#!/usr/bin/env bash
# Builds canopy with AddressSanitizer + UndefinedBehaviorSanitizer (clang-14, which builds it in half gcc's time)
# and runs the unit tests and the integration tests that can run under the sanitizers; a sanitizer report fails
# the test it happens in. Arguments go to meson test instead, e.g. tests/sanitize.sh --suite integration.
# ASAN_BUILD_DIR picks the build directory (default build-asan). Meson's logs: meson-logs/asan-*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ASAN_BUILD_DIR:-build-asan}
# Unoptimized: clang's optimizer on Asio's coroutines, not the instrumentation, was most of this build's time, and
# -O0 halves it. The sanitizers check the same source, and see accesses that optimizing would have removed.
if [[ ! -f $build_dir/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 meson setup "$build_dir" --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false >&2
fi
ninja -C "$build_dir" -j2 >&2

# Every canopy and canopyd the tests start reads these from the environment too. alloc_dealloc_mismatch=0: canopyd
# carries its own static C++ runtime and the PMIx module uses the shared one, so what one allocates with the shared
# runtime's operator new (malloc underneath) the other frees with its own operator delete (free underneath).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:alloc_dealloc_mismatch=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
if [[ $# -gt 0 ]]; then
  exec meson test -C "$build_dir" --print-errorlogs --no-rebuild --logbase asan-custom "$@"
fi
# Left out: the tests that load canopy's libraries into programs built without the sanitizer (Python, an
# LD_PRELOAD into any rank), since ASan's runtime must be the first library of a process (docs/reliability.md).
integration=(cli launch exit teardown liveness security timing ssh pmix dynamic pmi)
status=0
meson test -C "$build_dir" --print-errorlogs --no-rebuild --logbase asan-unit --suite unit || status=1
meson test -C "$build_dir" --print-errorlogs --no-rebuild --logbase asan-integration \
  "${integration[@]/#/integration/}" || status=1
# The PMIx suite's driver links libpmix, which keeps allocations of its own at exit: those are suppressed, and
# only those (tests/lsan-libpmix.supp).
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan-libpmix.supp:print_suppressions=0} \
  meson test -C "$build_dir" --print-errorlogs --no-rebuild --logbase asan-pmix --suite pmix || status=1
exit $status
