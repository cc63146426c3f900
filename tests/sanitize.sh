#!/usr/bin/env bash
# Builds canopy with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -Db_sanitize=address,undefined) and runs
# its tests there; a sanitizer report fails the test it happens in. Without arguments: the unit tests (the
# integration tests' status under the sanitizers is in docs/reliability.md). Arguments go to meson test instead,
# e.g. tests/sanitize.sh --suite integration. ASAN_BUILD_DIR picks the build directory (default build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ASAN_BUILD_DIR:-build-asan}
if [[ ! -f $build_dir/build.ninja ]]; then
  meson setup "$build_dir" -Db_sanitize=address,undefined -Db_lundef=false >&2
fi
ninja -C "$build_dir" -j2 >&2

# Every canopy and canopyd the tests start reads these from the environment too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
if [[ $# -eq 0 ]]; then
  set -- --suite unit
fi
meson test -C "$build_dir" --print-errorlogs --no-rebuild "$@"
