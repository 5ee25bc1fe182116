#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (threads, MPI under mpirun, packaging,
# the PyTorch cross-check).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
cd build
ctest --output-on-failure --parallel "$(nproc 2>/dev/null || echo 2)"
