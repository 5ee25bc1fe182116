#pragma once
// Where the element-wise ops run. With the GPU backend (MESHTENSOR_WITH_CUDA), a processor that
// computes on a GPU runs a built-in op (a Unary or Binary functor,
// kernels/elementwise_formulas.hpp) there; each function below returns false when it did not run,
// and the op then runs its CPU loop: always without the GPU backend, and for functions the user
// wrote. On a GPU processor it returns false only once the GPU has finished its queued work, which
// the CPU loop may touch (kernels/host_access.hpp).

#include <array>
#include <cstdint>

#include "meshtensor/kernels/elementwise_formulas.hpp"
#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/elementwise.hpp"
#endif

namespace meshtensor::kernels {

/// out[i] = f(x[i]) for i < n on the GPU, when f is a built-in op and the GPU can run it.
template <class T, class F>
bool map_on_gpu([[maybe_unused]] const F& f, [[maybe_unused]] const T* x, [[maybe_unused]] T* out,
                [[maybe_unused]] std::int64_t n) {
  bool ran = false;
#if defined(MESHTENSOR_WITH_CUDA)
  if constexpr (has_code<F>) ran = gpu::map<T>(F::code, f.s, x, out, n);
#endif
  return ran_or_waited(ran);
}

/// out[i] = g[i] * df(x[i]) for i < n on the GPU, as map_on_gpu.
template <class T, class D>
bool times_derivative_on_gpu([[maybe_unused]] const D& df, [[maybe_unused]] const T* g,
                             [[maybe_unused]] const T* x, [[maybe_unused]] T* out,
                             [[maybe_unused]] std::int64_t n) {
  bool ran = false;
#if defined(MESHTENSOR_WITH_CUDA)
  if constexpr (has_code<D>) ran = gpu::times_derivative<T>(D::code, df.s, g, x, out, n);
#endif
  return ran_or_waited(ran);
}

/// f of a and b at each index of `sizes` into out (strides: a's, b's, out's) on the GPU, when f is
/// a built-in op and the GPU can run it.
template <class T, class F>
bool zip_on_gpu([[maybe_unused]] const F& f, [[maybe_unused]] const Sizes& sizes,
                [[maybe_unused]] const std::array<Strides, 3>& strides, [[maybe_unused]] const T* a,
                [[maybe_unused]] const T* b, [[maybe_unused]] T* out) {
  bool ran = false;
#if defined(MESHTENSOR_WITH_CUDA)
  if constexpr (has_code<F>) ran = gpu::zip<T>(F::code, sizes, strides, a, b, out);
#endif
  return ran_or_waited(ran);
}

}  // namespace meshtensor::kernels
