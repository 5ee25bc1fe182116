#pragma once
// The optimisers' updates on a processor that computes on a GPU: one thread per parameter element,
// running the CPU loop's own formula (kernels/common/optimizer_formulas.hpp), unless the step's
// guard says to skip it. Each host function returns false, doing nothing, unless the thread
// computes on a GPU.

#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/common/optimizer_formulas.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The kernels, after the formulas.
inline const char* optimizer_kernels_text() {
  static const char* const text{R"(
// A step is skipped where `guard` (a scalar; null: none) is not finite: the loss or a gradient
// went bad, found without the host reading them first.
template <class T>
__device__ bool guarded(const T* guard) {
  return guard && !(guard[0] - guard[0] == T(0));
}
// The step's values come from GPU memory (`h`), where a graph's launches find them.
template <class T>
__device__ void sgd(const SgdStep* h, T* parameter, T* velocity, const T* gradient, long long n,
                    const T* guard) {
  if (guarded(guard)) return;
  const SgdStep step = *h;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    sgd_update(step, parameter[i], velocity[i], gradient[i]);
}
template <class T>
__device__ void adam(const AdamStep* h, T* parameter, T* first, T* second, const T* gradient,
                     long long n, const T* guard) {
  if (guarded(guard)) return;
  const AdamStep step = *h;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    adam_update(step, parameter[i], first[i], second[i], gradient[i]);
}
// One thread counts the step, after the last step's updates and before this one's (stream order).
template <class T>
__device__ void adam_advance_one(AdamStep* h, const T* guard) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && !guarded(guard)) adam_advance(*h);
}
extern "C" __global__ void sgd_f32(const SgdStep* h, float* p, float* v, const float* g,
                                   long long n, const float* guard) {
  sgd(h, p, v, g, n, guard);
}
extern "C" __global__ void sgd_f64(const SgdStep* h, double* p, double* v, const double* g,
                                   long long n, const double* guard) {
  sgd(h, p, v, g, n, guard);
}
extern "C" __global__ void adam_f32(const AdamStep* h, float* p, float* m, float* v,
                                    const float* g, long long n, const float* guard) {
  adam(h, p, m, v, g, n, guard);
}
extern "C" __global__ void adam_f64(const AdamStep* h, double* p, double* m, double* v,
                                    const double* g, long long n, const double* guard) {
  adam(h, p, m, v, g, n, guard);
}
extern "C" __global__ void adam_advance_f32(AdamStep* h, const float* guard) {
  adam_advance_one(h, guard);
}
extern "C" __global__ void adam_advance_f64(AdamStep* h, const double* guard) {
  adam_advance_one(h, guard);
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
bool sgd(const shared::SgdStep* h, T* parameter, T* velocity, const T* gradient, std::int64_t n,
         const T* guard) {
  if constexpr (!std::is_floating_point_v<T>) {  // parameters stay float or double
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(optimizer_source(), instance<T>("sgd_f32", "sgd_f64", ""), n, h, parameter, velocity,
               gradient, static_cast<long long>(n), guard);
    return true;
  }
}

/// adam_update of n elements on the GPU; false when it cannot run there.
template <class T>
bool adam(const shared::AdamStep* h, T* parameter, T* first, T* second, const T* gradient,
          std::int64_t n, const T* guard) {
  if constexpr (!std::is_floating_point_v<T>) {  // parameters stay float or double
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(optimizer_source(), instance<T>("adam_f32", "adam_f64", ""), n, h, parameter, first,
               second, gradient, static_cast<long long>(n), guard);
    return true;
  }
}

/// adam_advance on the GPU (one thread); false when it cannot run there.
template <class T>
bool adam_advance(shared::AdamStep* h, const T* guard) {
  if constexpr (!std::is_floating_point_v<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(optimizer_source(), instance<T>("adam_advance_f32", "adam_advance_f64", ""), 1, h,
               guard);
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
