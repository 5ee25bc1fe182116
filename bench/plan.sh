#!/usr/bin/env bash
# The plan against real runs (bench_plan) at 64^3 and 128^3, on 1, 2, 4 and 8 processors under
# threads and MPI, for the layout classes: x, x+y, 2x2x2, batch hybrid and an uneven split.
# Writes bench/results/plan.jsonl. Usage: bash bench/plan.sh [build dir] [sizes...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
if [[ $# -gt 0 ]]; then sizes=("$@"); else sizes=(64 128); fi
out="$root/bench/results/plan.jsonl"
cmake --build "$build" -j "$(nproc)" --target bench_plan >/dev/null
: > "$out"
cases=("p:1|x:p|1" "p:2|x:p|1" "a:2, b:2|x:a, y:b|1" "a:2, b:2, c:2|x:a, y:b, z:c|1"
       "d:2, s:2|batch:d, x:s|2" "p:3|x:p|1")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for size in "${sizes[@]}"; do
  for c in "${cases[@]}"; do
    IFS='|' read -r mesh layout batch <<< "$c"
    "$build/bench/bench_plan" --size "$size" --mesh "$mesh" --layout "$layout" --batch "$batch" \
      | tee -a "$out"
    ranks=$(( $(echo "$mesh" | tr ',' '\n' | sed 's/.*://' | paste -sd'*') ))
    mpirun -np "$ranks" --oversubscribe "$build/bench/bench_plan" --size "$size" --mesh "$mesh" \
      --layout "$layout" --batch "$batch" | tee -a "$out"
  done
done
