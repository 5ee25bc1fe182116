#!/usr/bin/env bash
# fp32 against bf16, meshtensor against PyTorch, side by side: the U-Net training step of each in
# turn (meshtensor fp32, bf16, PyTorch fp32, bf16 under autocast), ROUNDS times, so that a shared
# machine's drift hits all four alike; then per measure the median and the ratios issue 26's
# point 3 sets targets on, each ratio also per round.
#
#   bash bench/precision.sh                  # 128^3, 3 rounds, all cores
#   ROUNDS=5 SIZE=64 bash bench/precision.sh
#
# Needs a configured build/ (scripts/setup.sh --tests; bench_unet is built here) and PyTorch in
# build/torch-venv (made here from PyPI if missing). Results: bench/results/precision.jsonl.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${ROUNDS:-3}"
size="${SIZE:-128}"
steps="${STEPS:-3}"
cores="$(nproc)"
out="$root/bench/results"
mkdir -p "$out"
raw="$out/precision.jsonl"
: > "$raw"
cmake --build "$root/build" -j "$cores" --target bench_unet >/dev/null
venv="$root/build/torch-venv"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch numpy
fi

for ((round = 1; round <= rounds; ++round)); do
  echo "round $round of $rounds ..."
  for precision in fp32 bf16; do
    MESHTENSOR_THREADS_PER_PROCESSOR="$cores" "$root/build/bench/bench_unet" --size "$size" \
      --steps "$steps" --precision "$precision" |
      sed "s/^{/{\"round\":$round,\"impl\":\"meshtensor\",/" >> "$raw"
  done
  for precision in fp32 bf16; do
    "$venv/bin/python" "$root/bench/torch_bench.py" unet --size "$size" --threads "$cores" \
      --steps "$steps" --precision "$precision" |
      sed "s/^{/{\"round\":$round,/; s/\"impl\": \"pytorch[^\"]*\"/\"impl\": \"pytorch\"/" >> "$raw"
  done
done

/usr/bin/python3 - "$raw" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
steps, memory, parts = {}, {}, {}
key = None
for r in rows:
    if r["bench"] == "unet_step":
        key = (r["impl"], r["precision"])
        steps.setdefault(key, {})[r["round"]] = r["step_s"]
        field = "pool_peak_mib" if r["impl"] == "meshtensor" else "step_memory_mib"
        memory.setdefault(key, {})[r["round"]] = r[field]
    elif r["bench"] == "unet_step_breakdown":  # follows its step line
        for family, seconds in r["kernel_s"].items():
            parts.setdefault(key, {}).setdefault(family, []).append(seconds)
med = lambda d: statistics.median(d.values())
print(f"CPU: {cpu}; {len({r['round'] for r in rows})} rounds; medians (per-round ratios)")
print("| | step (s) | memory (MiB) |\n|---|---|---|")
for key in steps:
    print(f"| {key[0]} {key[1]} | {med(steps[key]):.3f} | {med(memory[key]):.1f} |")
for key, families in parts.items():
    print(f"{key[0]} {key[1]} kernels (s): " +
          ", ".join(f"{f} {statistics.median(v):.3f}" for f, v in families.items() if max(v) > 0))
def ratio(table, a, b):
    per = [table[a][k] / table[b][k] for k in sorted(table[a]) if k in table[b]]
    return f"{statistics.median(per):.3f} ({', '.join(f'{x:.2f}' for x in per)})"
mf, mb, tf, tb = ("meshtensor", "fp32"), ("meshtensor", "bf16"), ("pytorch", "fp32"), ("pytorch", "bf16")
if all(k in steps for k in (mf, mb, tf, tb)):
    print(f"meshtensor bf16 / fp32: step {ratio(steps, mb, mf)}, memory {ratio(memory, mb, mf)}")
    print(f"meshtensor bf16 / PyTorch bf16: step {ratio(steps, mb, tb)}, memory {ratio(memory, mb, tb)}")
    print(f"meshtensor fp32 / PyTorch fp32: step {ratio(steps, mf, tf)}, memory {ratio(memory, mf, tf)}")
EOF
