#!/usr/bin/env bash
# Multi-rank tests of the domain decomposition under a real MPI (OpenMPI), CPU backend.
# Usage: crates/domain/ci-mpi.sh   (from anywhere; installs OpenMPI when mpirun is missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    apt-get update && apt-get install -y libopenmpi-dev openmpi-bin libclang-dev
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# (the simulated ranks (threads) and the unit tests run in `cargo test --release --workspace`)
# the test of the mpi feature, built with the features of `vortex --features mpi` (the binary of
# crates/method/ci-mpi.sh), so that the two share every compiled crate
bin=$(cargo test --release -p vortex -p vortex-domain --features vortex/mpi --test mpi_ranks --no-run --message-format=json 2>/dev/null \
      | sed -n 's/.*"executable":"\([^"]*mpi_ranks[^"]*\)".*/\1/p' | tail -1)
test -x "$bin" || { echo "mpi_ranks test binary not found" >&2; exit 1; }
for np in 1 2 3 4; do
    echo "== mpirun -np $np"
    RAYON_NUM_THREADS=1 timeout 600 mpirun --oversubscribe -np "$np" "$bin"
done
