#!/usr/bin/env bash
# `unet3d evaluate` beside MONAI's metrics on the same files: phantom label volumes of SIZE³ and
# predictions made from them (bench/evaluate_cases.py), scored by unet3d on 1 and 2 processors
# (the same numbers on both, and their time) and by MONAI 1.2's DiceMetric,
# HausdorffDistanceMetric and SurfaceDiceMetric (bench/evaluate_monai.py).
#   bash bench/evaluate.sh [SIZE] [CASES]        (default 128 and 3)
# MONAI comes from PyPI into build/monai-venv, on Debian's PyTorch (python3-torch): MONAI 1.2.0 is
# the last release whose import works with its PyTorch 1.13.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-128}
cases=${2:-3}
unet3d=build/examples/unet3d/unet3d
[ -x "$unet3d" ] || { echo "evaluate.sh: build first (bash scripts/setup.sh)" >&2; exit 1; }
venv=build/monai-venv
if ! "$venv/bin/python" -c "import monai" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --no-deps monai==1.2.0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
labels=()
for ((k = 0; k < cases; ++k)); do
  "$unet3d" generate --size "$size" --index "$k" --output "$work/v$k.npy" --labels "$work/l$k.npy" \
    --threads 1 >/dev/null
  labels+=("$work/l$k.npy")
done
/usr/bin/python3 bench/evaluate_cases.py "$work" "${labels[@]}"
lscpu | grep -E "^Model name" | sed 's/  */ /g'
for threads in 1 2; do
  start=$(date +%s.%N)
  "$unet3d" evaluate --predictions "$work/predictions" --labels "$work/labels" --quiet \
    --classes background,organ,tumour --tolerance 2 --threads "$threads" \
    --output "$work/evaluation_$threads" >/dev/null
  printf "unet3d evaluate, %s cases of %s³, %s processor(s): %.2f s\n" "$cases" "$size" "$threads" \
    "$(echo "$(date +%s.%N) - $start" | bc)"
done
cmp <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([c['metrics'] for c in r['cases']]))" "$work/evaluation_1.json") \
    <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([c['metrics'] for c in r['cases']]))" "$work/evaluation_2.json") &&
  echo "1 and 2 processors: identical scores"
"$venv/bin/python" bench/evaluate_monai.py "$work/evaluation_1.json"
