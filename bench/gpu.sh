#!/usr/bin/env bash
# meshtensor's U-Net training step beside PyTorch's, eager and torch.compile, on one NVIDIA GPU,
# in 8 minutes at most: 64³ and 128³, 8 and 32 channels, fp32 and bf16 (8 rows, 3 sub-runs each;
# meshtensor's times its steps as they are and as one CUDA graph each).
# Writes results.md, results.json and logs.tar.gz into the output folder (3 files: the device
# tool brings back 8 at most) and prints the table.
#   bench/gpu.sh [output folder]             (default ./gpu-results) on the GPU machine, from the
#                                            repo or an unpacked scripts/gpu-bundle.sh bundle
#   bench/gpu.sh --dry-run [output folder]   anywhere: tiny sizes on the CPU, to check the pipeline
# PYTHON (default python3) runs torch_bench.py; BENCH_UNET names bench_unet where it is not in
# the bundle's bin/, build/bench/ or build-bench/bench/.
#
# Budget: the sub-runs of all rows go meshtensor first, then PyTorch eager, then torch.compile
# (the likeliest to run out, and the least needed). Each has a planned budget in seconds:
#               meshtensor  eager  compile   a row
#   64³ rows        16        10      23       49
#   128³ rows       26        12      27       65      4 × 49 + 4 × 65 = 456 s,
# guesses to be set from a first run's times (results.md lists each sub-run's). Each may take its
# plan plus whatever the earlier sub-runs left unused (its `timeout`), and none runs past 468 s
# (480 less the report and a last `timeout -k 5`): where the earlier ones overran, the last are
# skipped. Steps: meshtensor 6 timed at 64³, 3 at 128³ (bench_unet also runs a warm-up and as
# many breakdown steps); PyTorch 10 and 6 timed, after 2 warm-ups (the first compiles) and
# before 2 profiled.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)  # bench/ of the repo, or of the bundle
root=$(dirname "$here")
dry=0
if [ "${1:-}" = --dry-run ]; then dry=1 && shift; fi
out=$(realpath -m "${1:-gpu-results}")
python=${PYTHON:-python3}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

bench_unet=${BENCH_UNET:-}
for candidate in "$root/bin/bench_unet" "$root/build/bench/bench_unet" \
  "$root/build-bench/bench/bench_unet"; do
  [ -z "$bench_unet" ] && [ -x "$candidate" ] && bench_unet=$candidate
done

if ((dry)); then
  sizes=(16 32) channels=(2 4) device=cpu budget=3600 threads=2
  mt_env=(MESHTENSOR_TRANSPORT=threads MESHTENSOR_THREADS_PER_PROCESSOR=2)
  torch_flags=(--warmup 1 --profile-steps 1)
  gpu="none (dry run on $(lscpu | sed -n 's/^Model name: *//p'))"
else
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu.sh: no NVIDIA GPU or driver here (nvidia-smi -L fails); bench/gpu.sh --dry-run" \
      "checks the pipeline on the CPU" >&2
    exit 1
  fi
  sizes=(64 128) channels=(8 32) device=cuda budget=480 threads=$(nproc)
  mt_env=(MESHTENSOR_TRANSPORT=nccl)
  torch_flags=()
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)
fi
deadline=$((SECONDS + budget - 12))  # the report and the packing of the logs take the rest
mkdir -p "$out"

# In a bundle (bin/, lib/, ompi/ beside bench/) bench_unet loads the bundle's libraries and this
# machine's CUDA, cuDNN and NCCL, and starts as a singleton Open MPI process, as
# check-gpu-bundle.sh runs its programs. Only bench_unet gets this environment: PyTorch brings
# its own CUDA libraries, which the bundle's must not shadow.
if ((!dry)) && [ -d "$root/lib" ]; then
  dirs=$root/lib${CUDA_LIBRARY_DIRS:+:$CUDA_LIBRARY_DIRS}
  # The first of each library where check-gpu-bundle.sh looks, in its order.
  while read -r found; do dirs="$dirs:$(dirname "$found")"; done < <(find /usr/local/cuda/ \
    /usr/local/cuda/lib64/ /usr/lib/x86_64-linux-gnu /opt \( -name libcudart.so.13 \
    -o -name libnvrtc.so.13 -o -name libcublas.so.13 -o -name libnccl.so.2 \
    -o -name libcudnn.so.9 \) 2>/dev/null | awk -F/ '!seen[$NF]++')
  mt_env+=(LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    OMPI_MCA_mca_base_component_path="$root/ompi" OMPI_MCA_ess_singleton_isolated=1)
fi

plan() {  # plan IMPL SIZE: the sub-run's planned seconds (the table above)
  if ((dry)); then echo 120 && return; fi
  case $1-$(($2 >= 128)) in
    meshtensor-0) echo 16 ;; meshtensor-1) echo 26 ;;
    torch_eager-0) echo 10 ;; torch_eager-1) echo 12 ;;
    torch_compile-0) echo 23 ;; torch_compile-1) echo 27 ;;
  esac
}

steps() {  # steps IMPL SIZE: timed steps
  if ((dry)); then echo 2 && return; fi
  case $1-$(($2 >= 128)) in
    meshtensor-0) echo 6 ;; meshtensor-1) echo 3 ;; *-0) echo 10 ;; *-1) echo 6 ;;
  esac
}

command_of() {  # command_of IMPL SIZE C PRECISION: sets cmd, the sub-run's command line
  local common=(--size "$2" --channels "$3" --precision "$4" --steps "$(steps "$1" "$2")")
  case $1 in
    meshtensor) cmd=(env "${mt_env[@]}" "$bench_unet" "${common[@]}" --graphs both) ;;
    torch_eager) cmd=("$python" "$here/torch_bench.py" unet --device "$device" "${common[@]}"
      --threads "$threads" "${torch_flags[@]}") ;;
    torch_compile) command_of torch_eager "$2" "$3" "$4" && cmd+=(--compile) ;;
  esac
}

# run_one IMPL SIZE C PRECISION PLAN LIMIT: one sub-run under `timeout`, its output in
# $logs/IMPL-SIZE-C-PRECISION.out and .err, a line in status.tsv; a failure only gets recorded.
run_one() {
  local name="$1-$2-$3-$4" plan=$5 limit=$6 start=$SECONDS state=ran rc=0
  if [ "$1" = meshtensor ] && [ -z "$bench_unet" ]; then
    state=absent
  elif ((limit < 3)); then
    state=skipped
  else
    command_of "$1" "$2" "$3" "$4"
    timeout -k 5 "$limit" "${cmd[@]}" >"$logs/$name.out" 2>"$logs/$name.err"
    rc=$?
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$state" "$rc" \
    $((SECONDS - start)) "$limit" "$plan" >>"$logs/status.tsv"
  printf '%-28s %-7s rc=%-3s %3d s of %3d\n' "$name" "$state" "$rc" $((SECONDS - start)) "$limit"
}

echo "gpu.sh: $gpu; bench_unet: ${bench_unet:-none}; $($python --version 2>&1)"
runs=()
for impl in meshtensor torch_eager torch_compile; do
  for size in "${sizes[@]}"; do
    for c in "${channels[@]}"; do
      for precision in fp32 bf16; do runs+=("$impl $size $c $precision"); done
    done
  done
done
planned_end=$SECONDS  # when the sub-runs so far would end if each took its plan
for run in "${runs[@]}"; do
  read -r impl size c precision <<<"$run"
  p=$(plan "$impl" "$size")
  planned_end=$((planned_end + p))
  end=$((planned_end < deadline ? planned_end : deadline))
  run_one "$impl" "$size" "$c" "$precision" "$p" $((end - SECONDS))
done

commit=$(cat "$root/commit.txt" 2>/dev/null ||
  git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
flags=(--commit "$commit" --gpu "$gpu" --date "$(date -u +%FT%TZ)" --budget "$budget")
((dry)) && flags+=(--dry-run)
echo
"$python" "$here/gpu_report.py" "$logs" "$out" "${flags[@]}"
tar -C "$logs" -czf "$out/logs.tar.gz" .
echo "gpu.sh: $out/results.md, results.json and logs.tar.gz"
