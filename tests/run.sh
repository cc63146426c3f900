#!/usr/bin/env bash
# Builds canopy and runs every test (unit and integration) through meson; a full run (no arguments) then fuzzes
# every harness briefly and runs the tests again under the sanitizers. Ends with "N passed, M failed". Extra
# arguments go to meson test alone, e.g. tests/run.sh --suite unit. BUILD_DIR picks the build directory;
# FUZZ_SECONDS=0 or SANITIZE=0 leave out those steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(tests/build.sh)

status=0
meson test -C "$build_dir" --print-errorlogs "$@" || status=$?
logs=("$build_dir/meson-logs/testlog.json")

# The fuzzing run (tests/fuzz/run.sh; docs/reliability.md) counts as one more test, failed by a crash, a sanitizer
# report or a slow input.
fuzzed=0
fuzz_seconds=${FUZZ_SECONDS:-20}
if [[ $# -eq 0 && $fuzz_seconds -gt 0 ]]; then
  tests/fuzz/run.sh "$fuzz_seconds" && fuzzed=1 || fuzzed=-1
fi

# Under ASan + UBSan (tests/sanitize.sh): every test it runs counts like the others.
if [[ $# -eq 0 && ${SANITIZE:-1} != 0 ]]; then
  asan_logs=${ASAN_BUILD_DIR:-build-asan}/meson-logs
  rm -f "$asan_logs/asan-unit.json" "$asan_logs/asan-integration.json"
  tests/sanitize.sh || status=1
  logs+=("$asan_logs/asan-unit.json" "$asan_logs/asan-integration.json")
fi

# Count from meson's machine-readable logs rather than its human summary.
read -r passed failed skipped < <(/usr/bin/python3 - "${logs[@]}" <<'PY'
import json, sys
passed = failed = skipped = 0
for log in sys.argv[1:]:
    try:
        lines = open(log).read().splitlines()
    except OSError:
        failed += 1   # a step that should have written its log did not get that far
        continue
    for line in lines:
        if not line.strip():
            continue
        result = json.loads(line).get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
print(passed, failed, skipped)
PY
)
if [[ $fuzzed -eq 1 ]]; then
  passed=$((passed + 1))
elif [[ $fuzzed -eq -1 ]]; then
  failed=$((failed + 1))
fi

if [[ $skipped -gt 0 ]]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
if [[ $status -ne 0 || $failed -ne 0 || $passed -eq 0 ]]; then
  exit 1
fi
