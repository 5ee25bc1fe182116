#!/usr/bin/env bash
# The plan's predicted step time (unet3d plan --predict: the plan's counts priced by this
# machine's calibrated kernel throughput and the shared-memory network) beside the measured step
# (bench_unet, median of 3 steps after a warm-up) of the U-Net at 128^3, C=8, depth 3, batch norm,
# x split over P = 1, 2, 4, 8 processors, on threads and on MPI. Target: within 15%.
#   bash bench/predict.sh [build dir] [size]    (writes bench/results/predict.md)
# The calibration is cached (MESHTENSOR_CACHE_DIR, default ~/.cache/meshtensor); set
# RECALIBRATE=1 to measure the kernels again first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
size="${2:-128}"
unet3d="$build/examples/unet3d/unet3d"
bench="$build/bench/bench_unet"
cmake --build "$build" -j "$(nproc)" --target bench_unet unet3d >/dev/null
out="$root/bench/results/predict.md"
mkdir -p "$(dirname "$out")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores="$(nproc)"
field() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
calibrate=()
if [[ -n "${RECALIBRATE:-}" ]]; then calibrate=(--calibrate); fi
{
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores."
  echo
  echo "| P | threads/P | predicted step (s) | compute / communication (s) | threads: measured (s) | ratio | mpi: measured (s) | ratio |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$out"
for p in 1 2 4 8; do
  per=$(( cores / p > 0 ? cores / p : 1 ))
  plan=$("$unet3d" plan --size "$size" --mesh "p:$p" --predict "${calibrate[@]}" | tail -1)
  calibrate=()
  predicted=$(field predicted_step_s <<< "$plan")
  compute=$(field predicted_compute_s <<< "$plan")
  communication=$(field predicted_communication_s <<< "$plan")
  threads=$(MESHTENSOR_THREADS_PER_PROCESSOR=$per "$bench" --size "$size" --mesh "p:$p" --steps 3 |
            field step_s)
  mpi=$(MESHTENSOR_THREADS_PER_PROCESSOR=$per mpirun -np "$p" --oversubscribe --bind-to none \
          "$bench" --size "$size" --mesh "p:$p" --steps 3 | field step_s)
  printf "| %d | %d | %.3f | %.3f / %.3f | %.3f | %.2f | %.3f | %.2f |\n" "$p" "$per" "$predicted" \
    "$compute" "$communication" "$threads" "$(echo "$threads / $predicted" | bc -l)" "$mpi" \
    "$(echo "$mpi / $predicted" | bc -l)" | tee -a "$out"
done
echo "wrote $out"
