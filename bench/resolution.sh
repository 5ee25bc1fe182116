#!/usr/bin/env bash
# The seeds' resolution experiment (issue 23, point 4): the example's U-Net trained on the same
# phantom anatomy sampled at 32³, 64³ and 128³, the same number of steps at each, and scored
# against the 128³ truth. Builds bench_resolution into its own build-resolution/ (./build is left
# alone) and runs everything at the lowest CPU priority, since it shares the machine. Writes
# bench/results/resolution.jsonl and resolution.md, and the plot bench/resolution.svg.
#   bash bench/resolution.sh [steps (300)] [held-out volumes (24)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-resolution"
steps="${1:-300}"
volumes="${2:-24}"
start=$(date +%s)

nice -n 19 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
nice -n 19 cmake --build "$build" -j 1 --target bench_resolution

mkdir -p "$root/bench/results"
out="$root/bench/results/resolution.jsonl"
: > "$out"
for size in 32 64 128; do
  nice -n 19 "$build/bench/bench_resolution" --size "$size" --truth-size 128 --steps "$steps" \
    --volumes "$volumes" >> "$out"
done

/usr/bin/python3 "$root/bench/resolution_report.py" "$out" "$root/bench/results/resolution.md" \
  "$root/bench/resolution.svg" --wall-seconds $(($(date +%s) - start))
cat "$root/bench/results/resolution.md"
