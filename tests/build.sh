#!/usr/bin/env bash
# Configures (once) and builds canopy; prints the build directory. BUILD_DIR picks it (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [[ ! -f $build_dir/build.ninja ]]; then
  meson setup "$build_dir" >&2
fi
ninja -C "$build_dir" -j2 >&2
echo "$build_dir"
