#!/usr/bin/env bash
# Per-level layouts at 16, 32 and 64 MPI ranks (oversubscribed on this machine): the U-Net, depth
# 4, 3 steps, on volumes whose deep levels are too small for the top level's split, trained with a
# schedule that switches to channels there; each run's losses against one processor's, and the
# plan's peak memory per processor beside the run's. The run reports what its pool held at the
# peak (blocks in use and those cached for reuse), the plan what was in use: bench/plan.sh sets
# like against like. oneDNN's formats by channel count, as the plan assumes.
#   bash bench/schedules.sh [build dir]       (writes bench/results/schedules.md)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
unet3d="$build/examples/unet3d/unet3d"
check="$build/tests/unet3d/unet3d_check"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$root/bench/results/schedules.md"
mkdir -p "$(dirname "$out")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MESHTENSOR_ONEDNN_FORMATS=by_channels
flags=(--size 64 --depth 4 --channels 4 --steps 3 --validation-volumes 0)
"$unet3d" train "${flags[@]}" --threads 1 --out "$work/one" > /dev/null
runs=("16|p:16|x:p | x:p | channels:p"
      "32|a:8; b:4|x:a; y:b | x:a; y:b | x:a; y:b | x:a; y:b | channels:a"
      "64|a:8; b:8|x:a; y:b | x:a; y:b | x:a; y:b | x:a; y:b | channels:b")
{
  echo "| ranks | mesh | layouts per level | loss difference vs 1 processor | pool held at peak, run MiB | plan peak in use MiB | step s | wall s |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$out"
for run in "${runs[@]}"; do
  IFS='|' read -r ranks mesh layouts <<< "$run"
  start=$(date +%s.%N)
  mpirun -np "$ranks" --oversubscribe "$unet3d" train "${flags[@]}" --mesh "$mesh" \
    --layouts "$layouts" --out "$work/$ranks" > "$work/$ranks.log" 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  difference=$("$check" losses 1e-4 "$work/one/metrics.jsonl" "$work/$ranks/metrics.jsonl" |
               sed 's/.*difference \([^ ]*\).*/\1/')
  real=$(grep -o '"peak_processor_memory_mib":[0-9.]*' "$work/$ranks.log" | cut -d: -f2)
  step=$(grep -o '"step_time_s":[0-9.]*' "$work/$ranks.log" | cut -d: -f2)
  plan=$("$unet3d" plan "${flags[@]}" --mesh "$mesh" --layouts "$layouts" | tail -1 |
         grep -o '"peak_memory_bytes":{[^}]*}' | grep -o '"max":[0-9.]*' | cut -d: -f2)
  printf "| %s | \`%s\` | \`%s\` | %s | %.1f | %.1f | %.3f | %.1f |\n" "$ranks" "$mesh" \
    "${layouts//|/\\|}" "$difference" "$real" "$(echo "$plan / 1048576" | bc -l)" "$step" "$wall" \
    | tee -a "$out"
done
