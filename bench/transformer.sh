#!/usr/bin/env bash
# The transformer example's training step over 1, 2, 4 and 8 processors (threads transport), each
# with its plan's peak memory beside it, and PyTorch's step on the same model, in alternated
# rounds. Prints a Markdown table; the JSON lines go to bench/results/transformer.jsonl.
#
#   bash bench/transformer.sh                 # 2 rounds of 12 steps
#   ROUNDS=3 STEPS=20 bash bench/transformer.sh
#
# The layout is Mesh-TensorFlow's, batch:rows; heads:cols; d_ff:cols. PyTorch comes from the
# virtual environment bench/run.sh makes (build-bench/torch-venv), else Debian's python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
rounds="${ROUNDS:-2}"
steps="${STEPS:-12}"
out="$root/bench/results"
mkdir -p "$out"
raw="$out/transformer.jsonl"
: > "$raw"
program="$build/examples/transformer/transformer"
[[ -x "$program" ]] || cmake --build "$build" --target transformer >/dev/null
python="$root/build-bench/torch-venv/bin/python"
[[ -x "$python" ]] || python=/usr/bin/python3
model=(--model 256 --heads 8 --d-head 32 --d-ff 1024 --layers 4 --batch 32 --digits 32)
layout="batch:rows; heads:cols; d_ff:cols"
meshes=("rows:1; cols:1" "rows:1; cols:2" "rows:2; cols:2" "rows:2; cols:4")

for round in $(seq "$rounds"); do
  for mesh in "${meshes[@]}"; do
    "$program" train --mesh "$mesh" --layout "$layout" "${model[@]}" --steps "$steps" \
      --log-every "$steps" | tail -n 1 >> "$raw"
    if [[ "$round" == 1 ]]; then
      "$program" plan --mesh "$mesh" --layout "$layout" "${model[@]}" | tail -n 1 |
        "$python" -c 'import json, sys; p = json.load(sys.stdin); print(json.dumps({
            "bench": "transformer_plan", "mesh": p["mesh"],
            "plan_peak_mib": p["peak_held_bytes"]["max"] / 2**20}))' >> "$raw"
    fi
  done
  "$python" "$root/bench/torch_bench.py" transformer --steps "$steps" --threads "$(nproc)" \
    >> "$raw"
done

"$python" - "$raw" <<'PY'
import json, sys
rows, plans, torch = {}, {}, []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("bench") == "transformer_plan":
        plans[r["mesh"]] = r["plan_peak_mib"]
    elif r.get("bench") == "transformer":
        torch.append(r)
    else:
        rows.setdefault(r["mesh"], []).append(r)
print("| processors | mesh | peak memory per processor | plan's peak | step |")
print("|---|---|---|---|---|")
def span(values, form):
    low, high = form % min(values), form % max(values)
    return low if low == high else low + "–" + high
for mesh, runs in rows.items():
    plan = plans.get(mesh)
    print(f"| {runs[0]['processors']} | {mesh} | "
          f"{span([r['peak_processor_memory_mib'] for r in runs], '%.0f')} MiB | "
          f"{'%.1f MiB' % plan if plan is not None else '-'} | "
          f"{span([r['median_step_s'] for r in runs], '%.2f')} s |")
if torch:
    print(f"\n{torch[0]['impl']}: step {span([t['median_step_s'] for t in torch], '%.2f')} s, "
          f"peak RSS growth {span([t['peak_rss_over_start_mib'] for t in torch], '%.0f')} MiB")
PY
