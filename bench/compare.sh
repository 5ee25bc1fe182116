#!/usr/bin/env bash
# Before and after a change, side by side on this machine: builds the benchmark programs of two
# revisions and runs them in turns (A B A B ...), so that the machine's drift hits both alike, then
# prints per measure the median of each and their ratio. For restructurings that must not cost
# speed or memory: U-Net step time and per-processor memory, convolution GFLOP/s.
#
#   bash bench/compare.sh BEFORE [AFTER]      # revisions; AFTER defaults to the working tree
#   ROUNDS=5 SIZE=64 bash bench/compare.sh 2a87e35
#
# Each revision builds under build-compare/<name> (a git worktree for revisions); results go to
# bench/results/compare.jsonl and compare.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="${1:?usage: bench/compare.sh BEFORE [AFTER]}"
after="${2:-working-tree}"
rounds="${ROUNDS:-3}"
size="${SIZE:-64}"
cores="$(nproc)"
out="$root/bench/results"
mkdir -p "$out" "$root/build-compare"
raw="$out/compare.jsonl"
: > "$raw"

# The packages (and, to compare the working tree, its build of the benchmarks); revisions build
# apart, in their worktrees.
if [[ "$before" == "working-tree" || "$after" == "working-tree" ]]; then
  bash "$root/scripts/setup.sh" --tests bench_conv bench_unet >/dev/null
fi

# The source tree of a revision: the working tree itself, or a worktree checked out at it.
source_of() {
  local rev="$1"
  if [[ "$rev" == "working-tree" ]]; then echo "$root"; return; fi
  local dir="$root/build-compare/src-$(git -C "$root" rev-parse --short "$rev")"
  if [[ ! -d "$dir" ]]; then
    git -C "$root" worktree add --detach -f "$dir" "$rev" >/dev/null 2>&1
  fi
  echo "$dir"
}

build_of() {
  local rev="$1" src build
  src="$(source_of "$rev")"
  build="$root/build-compare/build-${rev//\//_}"
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMESHTENSOR_TESTS=OFF \
    -DMESHTENSOR_EXAMPLES=ON -DMESHTENSOR_BENCH=ON >/dev/null
  cmake --build "$build" -j "$cores" --target bench_conv bench_unet >/dev/null
  echo "$build"
}

echo "building $before and $after ..."
build_a="$(build_of "$before")"
build_b="$(build_of "$after")"

# One round of every measure for one revision, each line tagged with it.
measure() {
  local name="$1" build="$2"
  {
    "$build/bench/bench_conv" --channels 8,32 --sizes "$size" --threads "$cores" --seconds 2
    MESHTENSOR_THREADS_PER_PROCESSOR="$cores" "$build/bench/bench_unet" --size "$size" --steps 3
    MESHTENSOR_THREADS_PER_PROCESSOR=$((cores / 2 > 0 ? cores / 2 : 1)) \
      "$build/bench/bench_unet" --size "$size" --mesh p:2 --steps 3
  } | sed "s/^{/{\"revision\":\"$name\",/" >> "$raw"
}

for ((round = 1; round <= rounds; ++round)); do
  echo "round $round of $rounds ..."
  measure before "$build_a"
  measure after "$build_b"
done

/usr/bin/python3 - "$raw" "$out/compare.md" "$before" "$after" <<'EOF'
import json, statistics, sys, platform
raw, md, before, after = sys.argv[1:]
rows = [json.loads(l) for l in open(raw) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
peak = next((r["gflops"] for r in rows if r["bench"] == "fma_peak"), None)
measures = {}
for r in rows:
    if r["bench"] == "conv" and r.get("impl") == "meshtensor":
        key = f"conv {r['channels']} ch {r['size']}^3 GFLOP/s"
        measures.setdefault(key, {}).setdefault(r["revision"], []).append(r["gflops"])
    if r["bench"] == "unet_step":
        where = f"U-Net {r['size']}^3 on {r['processors']} ({r['transport']})"
        for field, label in (("step_s", "step s"), ("pool_peak_mib", "pool peak MiB"),
                             ("rss_peak_mib", "peak RSS MiB")):
            measures.setdefault(f"{where} {label}", {}).setdefault(r["revision"], []).append(r[field])
lines = [f"# Before ({before}) and after ({after}), side by side",
         "", f"CPU: {cpu}; FMA peak {peak} GFLOP/s on all cores; medians of the rounds.", "",
         "| measure | before | after | after / before |", "|---|---|---|---|"]
for key, by in measures.items():
    a, b = statistics.median(by.get("before", [float("nan")])), statistics.median(by.get("after", [float("nan")]))
    lines.append(f"| {key} | {a:.4g} | {b:.4g} | {b / a:.3f} |")
open(md, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
