#!/usr/bin/env bash
# Builds canopy and runs a small job on 8 simulated nodes, printing its output and where startup time went.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(tests/build.sh)

cat <<INFO

== canopy demo: 16 ranks on 8 simulated nodes (each node is a canopyd bound to its own 127.1.0.x address)
\$ $build_dir/launcher/canopy --sim-nodes 8 --ppn 2 --fanout 2 -l --timing sh -c 'echo "rank \$RANK of \$WORLD_SIZE on \$CANOPY_NODE"'

INFO
"$build_dir/launcher/canopy" --sim-nodes 8 --ppn 2 --fanout 2 -l --timing \
  sh -c 'echo "rank $RANK of $WORLD_SIZE on $CANOPY_NODE"'

cat <<INFO

== an MPI job: each canopyd is the PMIx server for its ranks, so mpi4py (Open MPI) runs without mpirun
\$ $build_dir/launcher/canopy --sim-nodes 4 --ppn 2 /usr/bin/python3 -m mpi4py.bench helloworld

INFO
"$build_dir/launcher/canopy" --sim-nodes 4 --ppn 2 /usr/bin/python3 -m mpi4py.bench helloworld

if [[ -x $build_dir/tests/pmi/mpich_hello ]]; then
  cat <<INFO

== an MPICH job: each canopyd also serves simple PMI on every rank's PMI_FD, so MPICH programs find their world
\$ $build_dir/launcher/canopy --sim-nodes 2 --ppn 2 $build_dir/tests/pmi/mpich_hello 4

INFO
  "$build_dir/launcher/canopy" --sim-nodes 2 --ppn 2 "$build_dir/tests/pmi/mpich_hello" 4
fi
