#!/usr/bin/env bash
# A training step alone and beside busy programs (one busy loop per core), with the compute
# threads waiting as meshtensor adapts them (adaptive, the default) and as OpenMP's defaults do
# (openmp), in alternated rounds. A fair share of the cores is 2x the step alone. Prints a
# Markdown table; the JSON lines go to bench/results/shared_cores.jsonl.
#
#   bash bench/shared_cores.sh                # 2 rounds
#   ROUNDS=3 bash bench/shared_cores.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
rounds="${ROUNDS:-2}"
out="$root/bench/results"
mkdir -p "$out"
raw="$out/shared_cores.jsonl"
: > "$raw"
for target in transformer unet3d; do
  [[ -x "$build/examples/$target/$target" ]] || cmake --build "$build" --target "$target" >/dev/null
done
cores=$(nproc)

# name, then the command; each prints a JSON summary line last.
transformer=("$build/examples/transformer/transformer" train --mesh "rows:1; cols:1"
  --layout "batch:rows; heads:cols; d_ff:cols" --model 256 --heads 8 --d-head 32 --d-ff 1024
  --layers 4 --batch 32 --digits 32 --steps 12 --log-every 12)
unet=("$build/examples/unet3d/unet3d" train --size 64 --steps 10 --validation-volumes 0)

busy=()
start_busy() { for _ in $(seq "$cores"); do (while :; do :; done) & busy+=($!); done; }
stop_busy() { ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null || true; busy=(); }
trap stop_busy EXIT

run() {  # program-name waiting load command...
  local name=$1 waiting=$2 load=$3
  shift 3
  MESHTENSOR_THREAD_WAITING=$waiting "$@" 2>/dev/null | tail -n 1 |
    python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps({
      "program": sys.argv[1], "waiting": sys.argv[2], "load": sys.argv[3],
      "step_s": r.get("median_step_s", r.get("step_time_s"))}))' "$name" "$waiting" "$load" >> "$raw"
}

for round in $(seq "$rounds"); do
  for load in alone busy; do
    [[ $load == busy ]] && start_busy
    for waiting in adaptive openmp; do
      run "transformer, 1 processor" "$waiting" "$load" "${transformer[@]}"
      run "unet3d 64³, 1 processor" "$waiting" "$load" "${unet[@]}" --mesh "p:1"
      run "unet3d 64³, $cores processors" "$waiting" "$load" "${unet[@]}"
    done
    stop_busy
  done
done

python3 - "$raw" "$cores" <<'PY'
import json, sys
steps = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    steps.setdefault((r["program"], r["waiting"], r["load"]), []).append(r["step_s"])
print(f"| program ({sys.argv[2]} cores) | waiting | step alone | beside {sys.argv[2]} busy loops | ratio |")
print("|---|---|---|---|---|")
for (program, waiting, load), alone in sorted(steps.items()):
    if load != "alone":
        continue
    busy = steps.get((program, waiting, "busy"), [])
    span = lambda v: "%.3f–%.3f s" % (min(v), max(v))
    ratio = "%.1f–%.1fx" % (min(busy) / max(alone), max(busy) / min(alone)) if busy else ""
    print(f"| {program} | {waiting} | {span(alone)} | {span(busy) if busy else ''} | {ratio} |")
PY
