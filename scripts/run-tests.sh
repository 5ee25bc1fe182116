#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (threads, MPI under mpirun, packaging).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --parallel "$(nproc 2>/dev/null || echo 2)"
