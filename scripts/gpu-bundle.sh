#!/usr/bin/env bash
# For a GPU machine that has CUDA, cuDNN and NCCL but not the Debian packages meshtensor builds
# with (no compiler, oneDNN, Boost or Open MPI, and no network to fetch them): packs the programs
# built here that run on the nccl transport, with the libraries they need that such a machine
# lacks, into one file. On the GPU machine, unpack it and run its check-gpu-bundle.sh, or its
# bench/gpu.sh (meshtensor beside PyTorch; bench_unet comes along where built, which it is only
# when named: cmake --build build --target bench_unet):
#   scripts/gpu-bundle.sh [bundle.tar.xz]          (here, after scripts/setup.sh --tests with CUDA)
#   mkdir b && tar -C b -xJf bundle.tar.xz && b/check-gpu-bundle.sh      (there)
#   b/bench/gpu.sh [results folder]                                       (there)
# CUDA, cuDNN and NCCL stay behind: they must match the GPU machine's driver, and are large.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-gpu-bundle.tar.xz}")
build=build
[ -x $build/tests/gpu/test_gpu_kernels ] || {
  echo "gpu-bundle: $build/tests/gpu/test_gpu_kernels is missing; build with the GPU backend" \
    "first: MESHTENSOR_CMAKE_ARGS=-DMESHTENSOR_REQUIRE_CUDA=ON scripts/setup.sh --tests" >&2
  exit 1
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/ompi"

programs=(tests/gpu/test_gpu_kernels tests/gpu/test_runtime_compile tests/gpu/test_kernels_on_host
  examples/unet3d/unet3d bench/bench_communication)
[ -x $build/bench/bench_unet ] && programs+=(bench/bench_unet)
# The tests that run under mpirun, for the nccl transport: a line each, the test, its program and
# the program's arguments (tests/CMakeLists.txt lists them).
mpi_tests=$build/tests/mpi-test-programs.txt
while read -r _ program _; do programs+=("tests/$program"); done < <(grep -v '^$' "$mpi_tests")
mapfile -t programs < <(printf '%s\n' "${programs[@]}" | awk '!seen[$0]++')
for p in "${programs[@]}"; do cp "$build/$p" "$stage/bin/"; done
# In the bundle every program sits in bin/.
awk 'NF { n = split($2, path, "/"); $2 = path[n]; print }' "$mpi_tests" >"$stage/mpi-tests.txt"
strip "$stage/bin/"*

# The libraries the programs load, less those every Linux with CUDA has (the C and C++ runtimes)
# and those that come with CUDA itself.
provided='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.|libpthread|librt\.|libgcc_s|libstdc\+\+|libz\.so|libcud|libnccl|libnvrtc|libcublas)'
for f in "$stage/bin/"*; do ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'; done | sort -u |
  while read -r name path; do
    [[ $name =~ $provided ]] || cp -L "$path" "$stage/lib/$name"
  done

# Open MPI's plugins, those that load with the libraries above (no InfiniBand, UCX or PMIx): a
# process started without mpirun (a singleton) needs only these.
plugins=$(dirname "$(ldd $build/examples/unet3d/unet3d | awk '$1 == "libmpi.so.40" {print $3}')")
plugins=$(realpath "$plugins")/openmpi/lib/openmpi3
[ -d "$plugins" ] || plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
carried='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.|libpthread|librt\.|libz\.so|libevent|libudev|libhwloc|libopen-pal|libopen-rte|libmpi\.so)'
for plugin in "$plugins"/mca_*.so; do
  missing=$(ldd "$plugin" | awk '{print $1}' | grep -Ev "$carried|^/lib64" || true)
  [ -z "$missing" ] && cp "$plugin" "$stage/ompi/"
done
for name in libevent_core-2.1.so.7 libevent_pthreads-2.1.so.7 libudev.so.1 libhwloc.so.15; do
  [ -e "$stage/lib/$name" ] || cp -L "$(ldconfig -p | awk -v n="$name" '$1 == n {print $NF; exit}')" \
    "$stage/lib/"
done

cp scripts/check-gpu-bundle.sh "$stage/"
# bench/gpu.sh and what it runs beside bench_unet, at their paths in the repo.
mkdir -p "$stage/bench" "$stage/scripts"
cp bench/gpu.sh bench/gpu_report.py bench/torch_bench.py "$stage/bench/"
cp scripts/to_pytorch.py "$stage/scripts/"
git describe --always --dirty >"$stage/commit.txt" 2>/dev/null || echo unknown >"$stage/commit.txt"
tar -C "$stage" -cf - . | xz -T0 -6 >"$out"
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1)): ${#programs[@]} programs," \
  "$(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/ompi" | wc -l) Open MPI plugins" \
  "$([ -e "$stage/bin/bench_unet" ] || echo "(no bench_unet: bench/gpu.sh will skip meshtensor)")"
