#pragma once
// The optimisers' updates on a processor that computes on a GPU: one thread per parameter element,
// running the CPU loop's own formula (kernels/common/optimizer_formulas.hpp). Each host function
// returns false, doing nothing, unless the thread computes on a GPU and every operand is in device
// or managed memory.

#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/common/optimizer_formulas.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The kernels, after the formulas.
inline const char* optimizer_kernels_text() {
  static const char* const text{R"(
template <class T>
__device__ void sgd(SgdStep h, T* parameter, T* velocity, const T* gradient, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    sgd_update(h, parameter[i], velocity[i], gradient[i]);
}
template <class T>
__device__ void adam(AdamStep h, T* parameter, T* first, T* second, const T* gradient,
                     long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    adam_update(h, parameter[i], first[i], second[i], gradient[i]);
}
extern "C" __global__ void sgd_f32(SgdStep h, float* p, float* v, const float* g, long long n) {
  sgd(h, p, v, g, n);
}
extern "C" __global__ void sgd_f64(SgdStep h, double* p, double* v, const double* g,
                                   long long n) {
  sgd(h, p, v, g, n);
}
extern "C" __global__ void adam_f32(AdamStep h, float* p, float* m, float* v, const float* g,
                                    long long n) {
  adam(h, p, m, v, g, n);
}
extern "C" __global__ void adam_f64(AdamStep h, double* p, double* m, double* v, const double* g,
                                    long long n) {
  adam(h, p, m, v, g, n);
}
)"};
  return text;
}

/// The GPU source: the shared formulas, then the kernels.
inline const cuda::KernelSource& optimizer_source() {
  static const cuda::KernelSource source{
      "meshtensor_optimizer.cu",
      with_shared_code(shared::optimizer_formulas_text(), optimizer_kernels_text())};
  return source;
}

/// sgd_update of n elements on the GPU; false when it cannot run there.
template <class T>
bool sgd(const shared::SgdStep& h, T* parameter, T* velocity, const T* gradient, std::int64_t n) {
  if constexpr (!std::is_floating_point_v<T>) {  // parameters stay float or double
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(optimizer_source(), instance<T>("sgd_f32", "sgd_f64", ""), n,
               {operand(parameter, n), operand(velocity, n), operand(gradient, n)}, h, parameter,
               velocity, gradient, static_cast<long long>(n));
    return true;
  }
}

/// adam_update of n elements on the GPU; false when it cannot run there.
template <class T>
bool adam(const shared::AdamStep& h, T* parameter, T* first, T* second, const T* gradient,
          std::int64_t n) {
  if constexpr (!std::is_floating_point_v<T>) {  // parameters stay float or double
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(optimizer_source(), instance<T>("adam_f32", "adam_f64", ""), n,
               {operand(parameter, n), operand(first, n), operand(second, n), operand(gradient, n)},
               h, parameter, first, second, gradient, static_cast<long long>(n));
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
