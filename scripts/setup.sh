#!/usr/bin/env bash
# Installs from Debian's packages whatever meshtensor needs and this machine lacks (nothing else),
# then configures and builds the given targets (all when none are named) into ./build.
#   scripts/setup.sh [--tests] [--packages-only | target...]
# --tests adds what the tests use beyond the build: PyTorch, NumPy and nibabel for the cross-checks.
# --packages-only installs and stops (bench/run.sh builds into a tree of its own).
# The GPU backend is built when CUDA, cuDNN and NCCL are found (under /usr/local/cuda or
# CUDAToolkit_ROOT); MESHTENSOR_CMAKE_ARGS passes further options to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make libxtensor-dev libfmt-dev catch2 libboost-mpi-dev libopenmpi-dev openmpi-bin
          libcli11-dev nlohmann-json3-dev libpng-dev libdnnl-dev ocl-icd-opencl-dev libnifti2-dev)
if [ "${1:-}" = "--tests" ]; then
  packages+=(python3 python3-numpy python3-scipy python3-torch python3-nibabel clang)  # clang: the fuzzers
  shift
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "meshtensor: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--packages-only" ] && exit 0

jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086  # MESHTENSOR_CMAKE_ARGS is a list of options
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${MESHTENSOR_CMAKE_ARGS:-} >/dev/null
if (($#)); then
  for target in "$@"; do cmake --build build --parallel "$jobs" --target "$target"; done
else
  cmake --build build --parallel "$jobs"
fi
