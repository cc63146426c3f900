#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang-14, AddressSanitizer + UndefinedBehaviorSanitizer) and runs each for SECONDS
# (default 20) from its seed corpus. Fails on a crash, a sanitizer report, a leak or an input taking over 1 s; the
# input is kept under $FUZZ_BUILD_DIR/fuzz-artifacts. FUZZ_BUILD_DIR (default build-fuzz) picks the build directory;
# FUZZ_ONLY=NAME runs one harness; FUZZ_CORPUS_OUT=DIR keeps what each run added, in DIR/NAME.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-20}
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}

if ! command -v clang++-14 >/dev/null; then
  echo "fuzz: clang++-14 is missing; install clang-14 (Debian's libclang-rt-14-dev comes with it)" >&2
  exit 1
fi
if [[ ! -f $build_dir/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 meson setup "$build_dir" -Dfuzz=true -Dtests=false \
    -Db_sanitize=address,undefined -Db_lundef=false >&2
fi
ninja -C "$build_dir" fuzz >&2

artifacts=$build_dir/fuzz-artifacts
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/canopy-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
ran=0
for harness in "$build_dir"/tests/fuzz/fuzz_*; do
  [[ -x $harness && ! -d $harness ]] || continue
  name=${harness##*/fuzz_}
  [[ -z ${FUZZ_ONLY:-} || $name == "$FUZZ_ONLY" ]] || continue
  seeds=tests/fuzz/corpus/$name
  if [[ ! -d $seeds ]]; then
    echo "fuzz: $name has no seed corpus in $seeds" >&2
    failed+=("$name")
    continue
  fi
  out=${FUZZ_CORPUS_OUT:+$FUZZ_CORPUS_OUT/$name}
  out=${out:-$work/$name}
  mkdir -p "$out"
  log=$work/$name.log
  status=0
  "$harness" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name-" "$out" "$seeds" >"$log" 2>&1 || status=$?
  ran=$((ran + 1))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [[ $status -ne 0 ]]; then
    echo "fuzz $name: FAILED after ${execs:-?} runs (exit $status); input in $artifacts, log follows"
    grep -E "ERROR|runtime error|ALARM|SUMMARY|Test unit written" "$log" | head -20
    failed+=("$name")
  else
    echo "fuzz $name: ${seconds} s, ${execs:-?} runs, corpus of ${corpus:-?} inputs, no crash"
  fi
done

echo "fuzz: $((ran - ${#failed[@]})) passed, ${#failed[@]} failed"
[[ ${#failed[@]} -eq 0 && $ran -gt 0 ]]
