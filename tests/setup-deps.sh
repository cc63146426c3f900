#!/usr/bin/env bash
# Installs everything canopy needs to build and test on a fresh Debian 12; safe to run again.
set -euo pipefail

packages=(
  # build; help2man makes the man page, bash-completion's pkg-config file says where completions go
  meson ninja-build pkgconf g++ help2man bash-completion
  # libraries
  libboost-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev libsodium-dev
  libopenmpi-dev libpmix-dev libmpich-dev
  # libfabric's headers (canopy loads the library itself at run time) and fi_info for looking around
  libfabric-dev libfabric-bin
  # hwloc: each node's topology for binding (canopy loads libhwloc15 at run time); lstopo for looking at one
  libhwloc-dev libhwloc15 hwloc-nox
  # unit tests, and the fuzzing harnesses (clang-14; libclang-rt-14-dev holds the libFuzzer they link)
  libgtest-dev libgmock-dev clang-14 libclang-rt-14-dev
  # integration tests: a real sshd on loopback, MPI stacks, process and socket inspection, pytest
  openssh-server openssh-client mpich openmpi-bin python3-mpi4py procps iproute2 python3 python3-pytest
  # the Python package installed by pip into a fresh venv
  python3-venv
  # file staging: a FUSE file system that counts operations, a real Python stack to import, syscall traces
  libfuse3-dev fuse3 python3-torch strace
  # the cluster in a box (tests/cluster): hosts in namespaces, each with sshd, munge and Slurm
  util-linux munge slurm-wlm nftables
  # the HTML timing report's browser test: headless chromium loads a report and takes a screenshot
  chromium
  # benchmarks
  hyperfine
)

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  echo "setup-deps: run as root or install sudo; needed: ${packages[*]}" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
