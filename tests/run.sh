#!/usr/bin/env bash
# Builds canopy and runs every test (unit and integration) through meson, then a short fuzzing run; ends with
# "N passed, M failed". Extra arguments go to meson test, e.g. tests/run.sh --suite unit (and leave the fuzzing out).
# BUILD_DIR picks the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(tests/build.sh)

status=0
meson test -C "$build_dir" --print-errorlogs "$@" || status=$?

# Count from meson's machine-readable log rather than its human summary.
read -r passed failed skipped < <(/usr/bin/python3 - "$build_dir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
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

# A full run (no arguments) also fuzzes every harness briefly (tests/fuzz/run.sh; docs/reliability.md): one more
# test, failed by a crash, a sanitizer report or a slow input. FUZZ_SECONDS=0 leaves it out.
fuzz_seconds=${FUZZ_SECONDS:-20}
if [[ $# -eq 0 && $fuzz_seconds -gt 0 ]]; then
  if tests/fuzz/run.sh "$fuzz_seconds"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
fi

if [[ $skipped -gt 0 ]]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
if [[ $status -ne 0 || $failed -ne 0 || $passed -eq 0 ]]; then
  exit 1
fi
