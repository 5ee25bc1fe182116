#!/usr/bin/env bash
# Runs on a GPU machine from an unpacked scripts/gpu-bundle.sh bundle (it sits beside bin/, lib/
# and ompi/): the GPU kernel tests, every MPI test on the nccl transport with one rank (started
# without mpirun: the bundle carries no launcher, and NCCL needs a GPU per rank), a U-Net
# training step over nccl next to mpi on the same machine (fp32 and bf16), and a checkpoint
# written from the GPU that predict then loads. Prints a summary; exits non-zero when anything
# failed.
#   check-gpu-bundle.sh [log directory]      (default: ./gpu-check-logs)
# CUDA_LIBRARY_DIRS (colon-separated) names where CUDA, cuDNN and NCCL live when they are not in
# the toolkit's or PyTorch's usual places.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=$(realpath -m "${1:-gpu-check-logs}")
mkdir -p "$logs"

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "check-gpu-bundle: nvidia-smi finds no GPU or no driver on this machine" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)"

# The CUDA libraries the programs load, wherever this machine keeps them.
dirs=${CUDA_LIBRARY_DIRS:-}
for name in libcudart.so.13 libnvrtc.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9; do
  found=$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/lib/x86_64-linux-gnu /opt \
    -name "$name" 2>/dev/null | head -n 1)
  echo "$name: ${found:-not found}"
  [ -n "$found" ] && dirs="$dirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$here/lib$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A singleton Open MPI process, with the plugins the bundle carries and no daemon to start.
export OMPI_MCA_mca_base_component_path="$here/ompi" OMPI_MCA_ess_singleton_isolated=1
cd "$here/bin" || exit 1

failed=()
step() {  # step NAME COMMAND...: runs it, its output in $logs/NAME.log
  local name=$1 start rc
  shift
  start=$(date +%s%N)
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" $((($(date +%s%N) - start) / 1000000))
  ((rc == 0)) || failed+=("$name")
  return $rc
}

echo; echo "== GPU kernels"
step kernels_on_host timeout 60 ./test_kernels_on_host
step runtime_compile timeout 120 ./test_runtime_compile
step gpu_kernels timeout 300 ./test_gpu_kernels

echo; echo "== the MPI tests on the nccl transport, one rank"
while read -r -a line; do
  test=${line[0]} program=${line[1]} args=("${line[@]:2}")
  # test_tensor's relayout needs two processors at least, which one rank does not have (its file
  # tag, the last argument, and not that case).
  [ "$test" = test_tensor ] && args[-1]+='~relayout moves data to any layout*'
  MESHTENSOR_TRANSPORT=nccl step "$test" timeout 300 "./$program" "${args[@]}"
done <../mpi-tests.txt

echo; echo "== U-Net training, one processor: nccl (the GPU) and mpi (this machine's cores)"
for size in 64 128; do
  for backend in nccl mpi; do
    step "unet3d_${size}_$backend" timeout 300 ./unet3d train --backend "$backend" --size "$size" \
      --steps 10 --out "$logs/unet3d-$size-$backend" &&
      echo "  $(tail -n 1 "$logs/unet3d_${size}_$backend.log")"
  done
done

echo; echo "== U-Net training in bfloat16, one processor: nccl and mpi"
for size in 64 128; do
  for backend in nccl mpi; do
    step "unet3d_${size}_bf16_$backend" timeout 300 ./unet3d train --backend "$backend" \
      --size "$size" --steps 10 --precision bf16 --out "$logs/unet3d-$size-bf16-$backend" &&
      echo "  $(tail -n 1 "$logs/unet3d_${size}_bf16_$backend.log")"
  done
done

echo; echo "== a checkpoint written from the GPU's blocks, and predict from it on the GPU"
step checkpoint_nccl timeout 300 ./unet3d train --backend nccl --size 64 --steps 4 \
  --checkpoint-every 2 --checkpoint "$logs/ckpt" --validation-volumes 0 --out "$logs/unet3d-ckpt"
step generate timeout 120 ./unet3d generate --size 64 --output "$logs/volume.npy" --threads 1
step predict_nccl timeout 300 ./unet3d predict --backend nccl --checkpoint "$logs/ckpt" \
  --input "$logs/volume.npy" --output "$logs/predicted.npy"

echo
if ((${#failed[@]})); then
  echo "check-gpu-bundle: failed: ${failed[*]} (logs in $logs)"
  exit 1
fi
echo "check-gpu-bundle: everything passed (logs in $logs)"
