#!/usr/bin/env bash
# Every benchmark, side by side with PyTorch in the same run: writes bench/results/results.json
# and bench/results/results.md. Run from anywhere:
#
#   bash bench/run.sh            # the full set (about 30-40 minutes on 2 cores)
#   QUICK=1 bash bench/run.sh    # small shapes only, to check the pipeline
#
# The whole-scan comparison runs MONAI (PyPI, same environment) beside unet3d predict.
# PyTorch comes twice: Debian's python3-torch (1.13, /usr/bin/python3) and the current release
# from PyPI, installed into a virtual environment under build-bench/ on first use (several GB: the
# PyPI wheel brings CUDA libraries along; the CPU kernels are what is measured). Without network
# the PyPI column is left out and the report says so.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-bench"
out="$root/bench/results"
mkdir -p "$out"
raw="$out/raw.jsonl"
: > "$raw"
cores="$(nproc)"

bash "$root/scripts/setup.sh" --tests --packages-only >/dev/null
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$cores" --target bench_conv bench_einsum bench_unet unet3d >/dev/null

pythons=(/usr/bin/python3)
venv="$build/torch-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import torch, monai, nibabel" 2>/dev/null; then
  echo "installing the current PyTorch, MONAI and nibabel from PyPI into $venv ..."
  (python3 -m venv "$venv" && "$venv/bin/pip" install -q torch monai nibabel) ||
    echo '{"bench":"note","text":"PyPI PyTorch could not be installed; its column is missing"}' >> "$raw"
fi
if "$venv/bin/python" -c "import torch" 2>/dev/null; then pythons+=("$venv/bin/python"); fi

if [[ -n "${QUICK:-}" ]]; then
  channels=8,16; sizes=32; unet_sizes=(32); scaling_size=32; seconds=0.5
  products=256x256x256
else
  channels=8,16,32,64; sizes=32,64,128; unet_sizes=(64 128); scaling_size=128; seconds=2
  products=512x2048x2048,2048x2048x2048,1024x1024x1024,64x512x2048
fi

echo "convolution throughput ..."
"$build/bench/bench_conv" --channels "$channels" --sizes "$sizes" --threads "$cores" \
  --seconds "$seconds" --precision both >> "$raw"
for py in "${pythons[@]}"; do
  "$py" "$root/bench/torch_bench.py" conv --channels "$channels" --sizes "$sizes" \
    --threads "$cores" --seconds "$seconds" >> "$raw"
done

echo "einsum as a dense layer ..."
"$build/bench/bench_einsum" --shapes "$products" --threads "$cores" --seconds "$seconds" \
  --precision both >> "$raw"
for py in "${pythons[@]}"; do
  "$py" "$root/bench/torch_bench.py" matmul --shapes "$products" --threads "$cores" \
    --seconds "$seconds" >> "$raw"
done

echo "U-Net training step, one processor ..."
for size in "${unet_sizes[@]}"; do
  for variant in "--recompute 0" "--recompute 1" "--precision bf16"; do
    # shellcheck disable=SC2086  # the variant is two words: a flag and its value
    MESHTENSOR_THREADS_PER_PROCESSOR="$cores" "$build/bench/bench_unet" --size "$size" --steps 3 \
      $variant >> "$raw"
  done
  for py in "${pythons[@]}"; do
    for precision in fp32 bf16; do
      "$py" "$root/bench/torch_bench.py" unet --size "$size" --threads "$cores" --steps 3 \
        --precision "$precision" >> "$raw"
    done
  done
  # bf16 / fp32 again with the two models' steps alternated in one process: a shared host's
  # phases (its speed moves by a fifth over minutes) then move both alike, where the runs above
  # sit minutes apart. The report gives the median of the steps' ratios; 30 steps below 128^3,
  # whose 0.1 s steps moved the median of 10 by ±0.03 between runs.
  pair_steps=$((size >= 128 ? 10 : 30))
  MESHTENSOR_THREADS_PER_PROCESSOR="$cores" "$build/bench/bench_unet" --size "$size" \
    --steps "$pair_steps" --precision pair >> "$raw"
done

# unet_step <transport> <processors> <bench_unet flags...>: one run on threads or under mpirun,
# each processor with its share of the cores (MESHTENSOR_HALO_OVERLAP passed on as set).
unet_step() {
  local transport=$1 p=$2
  shift 2
  local per=$(( cores / p > 0 ? cores / p : 1 ))
  if [ "$transport" = threads ]; then
    MESHTENSOR_THREADS_PER_PROCESSOR=$per "$build/bench/bench_unet" --size "$scaling_size" \
      --steps 3 "$@" >> "$raw"
  else
    MESHTENSOR_THREADS_PER_PROCESSOR=$per mpirun -np "$p" --oversubscribe --bind-to none \
      -x MESHTENSOR_HALO_OVERLAP "$build/bench/bench_unet" --size "$scaling_size" --steps 3 \
      "$@" >> "$raw"
  fi
}

echo "spatial scaling at ${scaling_size}^3 ..."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MESHTENSOR_HALO_OVERLAP=on
for p in 1 2 4 8; do
  for transport in threads mpi; do
    unet_step $transport $p --mesh "p:$p"
    if [ "$p" -gt 1 ]; then  # the same without overlap: the halo time the overlap hides
      MESHTENSOR_HALO_OVERLAP=off unet_step $transport $p --mesh "p:$p"
    fi
  done
done

echo "exposed halo at P = 8: deep halos, and a split along all three dims ..."
for transport in threads mpi; do
  unet_step $transport 8 --mesh p:8 --deep-halos on
  for overlap in on off; do
    MESHTENSOR_HALO_OVERLAP=$overlap unet_step $transport 8 --mesh "a:2;b:2;c:2" \
      --layouts "x:a; y:b; z:c"
  done
done

/usr/bin/python3 "$root/bench/report.py" "$raw" "$out/results.json" "$out/results.md"

if "$venv/bin/python" -c "import monai" 2>/dev/null; then
  echo "whole-scan prediction beside MONAI's sliding windows ..."
  /usr/bin/python3 "$root/bench/scan_bench.py" run --unet3d "$build/examples/unet3d/unet3d" \
    --venv-python "$venv/bin/python" --out "$out/scans" ${QUICK:+--quick} >/dev/null
  cat "$out/scans/scans.md" >> "$out/results.md"
else
  echo "MONAI is not installed: the whole-scan comparison is left out" >> "$out/results.md"
fi
echo "wrote $out/results.md and $out/results.json (whole scans: $out/scans/scans.json)"
