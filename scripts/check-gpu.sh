#!/usr/bin/env bash
# For a machine with NVIDIA GPUs: builds meshtensor with its GPU backend, runs the test suite on the
# nccl transport (one GPU per MPI rank), and shows the speed of NCCL next to MPI on the same ranks:
# communication throughput and a U-Net training step.
#   scripts/check-gpu.sh [ranks]      (default: the number of GPUs, at most 4)
# MPIRUN (default mpirun) and MPIRUN_FLAGS (e.g. --allow-run-as-root) set how ranks are started.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "check-gpu: nvidia-smi finds no GPU or no driver on this machine; nothing to check" >&2
  exit 1
fi
nvidia-smi -L
gpus=$(nvidia-smi -L | grep -c '^GPU')
ranks=${1:-$((gpus < 4 ? gpus : 4))}
if ((ranks > gpus)); then
  echo "check-gpu: $ranks ranks need $ranks GPUs; this machine has $gpus" >&2
  exit 1
fi
mpirun=${MPIRUN:-mpirun}
# shellcheck disable=SC2206  # a list of flags
flags=(${MPIRUN_FLAGS:-})

MESHTENSOR_CMAKE_ARGS="-DMESHTENSOR_REQUIRE_CUDA=ON ${MESHTENSOR_CMAKE_ARGS:-}" \
  scripts/setup.sh --tests
cd build

echo; echo "== GPU kernels, and the tests on the nccl transport (those needing more GPUs than $gpus"
echo "   report themselves skipped)"
ctest -L "gpu|nccl" -LE emulated --output-on-failure

echo; echo "== communication, $ranks ranks"
for transport in mpi nccl; do
  MESHTENSOR_TRANSPORT=$transport "$mpirun" "${flags[@]}" -np "$ranks" \
    bench/bench_communication --mesh "p:$ranks"
  echo
done

echo "== U-Net training step, 64^3 volume split over $ranks ranks (20 steps)"
for backend in mpi nccl; do
  summary=$("$mpirun" "${flags[@]}" -np "$ranks" examples/unet3d/unet3d train --backend "$backend" \
    --size 64 --steps 20 --out "unet3d-check-$backend" | tail -n 1)
  echo "$backend: $summary"
done
