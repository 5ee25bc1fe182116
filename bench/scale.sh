#!/usr/bin/env bash
# Scale: the U-Net at 256^3 (C=8, depth 4) measured on 8 and 64 MPI ranks of this machine (64
# oversubscribed), each beside its plan's peak memory and predicted step; and plans of what this
# machine cannot run: 512^3 on 64, 256 and 512 processors, and the seeds' configurations (256^3
# batch 32 on 64 processors, 512^3 on 256), with layouts chosen by --layout auto, priced on nodes
# like this one over InfiniBand HDR and on A100s (bench/presets/a100-kernels.txt, estimates).
#   bash bench/scale.sh [build dir]         (writes bench/results/scale.md)
#   PART=plans bash bench/scale.sh          (the plans only, a few minutes)
#   PART=runs bash bench/scale.sh           (the measured runs only, about 15 minutes on 2 cores)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
unet3d="$build/examples/unet3d/unet3d"
bench="$build/bench/bench_unet"
cmake --build "$build" -j "$(nproc)" --target bench_unet unet3d >/dev/null
a100="$root/bench/presets/a100-kernels.txt"
out="$root/bench/results/scale.md"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
field() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
mib() { echo "scale=1; $1 / 1048576" | bc; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores." > "$out"

# One line of a plan table: the auto choice on `mesh` within `budget`, priced with `pricing`.
planned() {
  local what="$1" mesh="$2" budget="$3"; shift 3
  local text
  if ! text=$("$unet3d" plan "$@" --mesh "$mesh" --layout auto --memory-per-processor "$budget" 2>&1); then
    printf "| %s | \`%s\` | %s | %s |  |  |  |\n" "$what" "$mesh" "$budget" \
      "$(grep -o 'no layout schedule fits.*' <<< "$text" | head -1)" | tee -a "$out"
    return
  fi
  local chosen peak step
  chosen=$(grep -o 'chosen *"[^"]*"' <<< "$text" | sed 's/chosen *//')
  peak=$(tail -1 <<< "$text" | grep -o '"peak_memory_bytes":{[^}]*}' | field max)
  step=$(tail -1 <<< "$text" | field predicted_step_s)
  printf "| %s | \`%s\` | %s | \`%s\` | %s | %.3f |\n" "$what" "$mesh" "$budget" "${chosen//|/\\|}" \
    "$(mib "$peak")" "$step" | tee -a "$out"
}

if [[ "${PART:-all}" != runs ]]; then
  {
    echo
    echo "### Plans (\`--layout auto\`): memory per processor and predicted step"
    echo
    echo "| model | mesh | budget | chosen layouts per level | peak MiB | step s |"
    echo "|---|---|---|---|---|---|"
  } >> "$out"
  here=(--network ib-hdr)
  gpu=(--network ib-hdr --kernels "$a100")
  big=(--size 512 --depth 4 --channels 8)
  for mesh in "a:4; b:4; c:4" "a:8; b:8; c:4" "a:8; b:8; c:8"; do
    planned "512³ C=8, nodes like this one" "$mesh" 24GiB "${big[@]}" "${here[@]}"
    planned "512³ C=8, A100s" "$mesh" 32GiB "${big[@]}" "${gpu[@]}"
  done
  for channels in 8 32; do
    planned "seeds: 256³ batch 32 C=$channels, A100s" "b:32; s:2" 32GiB --size 256 --batch 32 \
      --depth 4 --channels "$channels" "${gpu[@]}"
    planned "seeds: 512³ C=$channels, A100s" "a:8; b:8; c:4" 32GiB --size 512 --depth 4 \
      --channels "$channels" "${gpu[@]}"
  done
fi

# The bench's memory bound per processor: 1.15 x the one-processor plan's peak / P, plus the
# parameters and Adam state every processor holds (from the same plan).
one=$("$unet3d" plan --size 256 --depth 4 --channels 8 --mesh "p:1" --layout "x:p" | tail -1)
one_peak=$(grep -o '"peak_memory_bytes":{[^}]*}' <<< "$one" | field max)
replicated=$(( $(grep -o '"peak_parameters_bytes":{[^}]*}' <<< "$one" | field max) +
               $(grep -o '"peak_optimizer_bytes":{[^}]*}' <<< "$one" | field max) ))
bound_mib() { echo "scale=1; (1.15 * $one_peak / $1 + $replicated) / 1048576" | bc; }

# One measured run beside its plan: the model's step (bench_unet: median of 3 after a warm-up,
# without the example's data generation), the pool's peak in use per processor (beside the bound)
# and peak RSS.
measured() {
  local ranks="$1" mesh="$2" layouts="$3"
  local plan run pool bound
  plan=$("$unet3d" plan --size 256 --depth 4 --channels 8 --mesh "$mesh" --layouts "$layouts" \
           --predict | tail -1)
  run=$(mpirun -np "$ranks" --oversubscribe "$bench" --size 256 --depth 4 --channels 8 --steps 3 \
          --mesh "$mesh" --layouts "$layouts")
  pool=$(field pool_in_use_peak_mib <<< "$run")
  bound=$(bound_mib "$ranks")
  printf "| %s | \`%s\` | \`%s\` | %.2f | %.2f | %.1f | %.1f | %.1f | %s | %.0f |\n" "$ranks" \
    "$mesh" "${layouts//|/\\|}" "$(field step_s <<< "$run")" \
    "$(field predicted_step_s <<< "$plan")" "$pool" \
    "$(mib "$(grep -o '"peak_memory_bytes":{[^}]*}' <<< "$plan" | field max)")" "$bound" \
    "$(if (( $(echo "$pool <= $bound" | bc) )); then echo yes; else echo no; fi)" \
    "$(field rss_peak_mib <<< "$run")" | tee -a "$out"
}

if [[ "${PART:-all}" != plans ]]; then
  {
    echo
    echo "### 256³, C=8, depth 4 on MPI ranks of this machine"
    echo
    echo "| ranks | mesh | layouts per level | step s | predicted s | pool peak in use MiB | plan peak MiB | bound MiB | within | peak RSS MiB |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
  } >> "$out"
  measured 8 "p:8" "x:p"
  measured 64 "a:4; b:4; c:4" "x:a; y:b; z:c"
  measured 64 "a:4; b:4; c:4" "x:a; y:b; z:c | x:a; y:b; z:c | x:a; y:b; z:c | x:a; y:b; channels:c"
fi
echo "wrote $out"
