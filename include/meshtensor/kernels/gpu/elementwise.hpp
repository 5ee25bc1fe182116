#pragma once
// meshtensor's own CUDA kernels for element-wise work on a processor that computes on a GPU,
// compiled at run time (device/runtime_compiler.hpp; cuDNN's kernels are in kernels/cudnn/). Each
// host function returns false, doing nothing, unless the calling thread computes on a GPU and every
// operand is in device or managed memory; the caller then runs its CPU loop. Results are bitwise
// those of the CPU loops (one IEEE operation per element).

#include <cstdint>
#include <type_traits>

#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/memory.hpp"
#include "meshtensor/device/runtime_compiler.hpp"

namespace meshtensor::kernels::gpu {

/// The element-wise kernels' source (grid-stride loops over n elements).
inline const cuda::KernelSource& elementwise_source() {
  static const cuda::KernelSource source{"meshtensor_elementwise.cu", R"(
extern "C" __global__ void accumulate_f32(float* into, const float* add, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    into[i] += add[i];
}
extern "C" __global__ void accumulate_f64(double* into, const double* add, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    into[i] += add[i];
}
)"};
  return source;
}

/// into[i] += add[i] for i < n, on the GPU; false when it cannot run there.
template <class T>
bool accumulate(T* into, const T* add, std::int64_t n) {
  constexpr bool is_f32 = std::is_same_v<T, float>, is_f64 = std::is_same_v<T, double>;
  if constexpr (!is_f32 && !is_f64) {
    return false;
  } else {
    if (!cuda::runs_here({into, add})) return false;
    const cudaStream_t stream = cuda::compute_stream();
    cuda::prefetch_to_gpu(into, std::size_t(n) * sizeof(T), stream);
    cuda::prefetch_to_gpu(add, std::size_t(n) * sizeof(T), stream);
    cuda::launch(cuda::kernel(elementwise_source(), is_f32 ? "accumulate_f32" : "accumulate_f64"),
                 n, stream, into, add, static_cast<long long>(n));
    cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the host reads next
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
