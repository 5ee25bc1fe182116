#pragma once
// The element-wise family: a function of each element (map), of two operands' elements with the
// same index, broadcasting (zip), a gradient times an op's derivative, and a sum added in place.
// A GPU runs the built-in ops (a Unary or Binary functor, kernels/common/elementwise_formulas.hpp);
// functions the user wrote run in the CPU loop, on a GPU processor on copies of the operands. A
// plan counts one operation per element.

#include <array>
#include <cstdint>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/elementwise.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/elementwise.hpp"
#endif

namespace meshtensor::kernels {

/// out[i] = f(x[i]) for i < n.
template <class T, class F>
void map(const F& f, const T* x, T* out, std::int64_t n) {
  dispatch([&] { plan::count(plan::Family::elementwise, double(n)); },
           MESHTENSOR_ON_GPU(gpu::map_builtin(f, x, out, n)),
           [&](HostOperands& h) { cpu::map(f, h.in(x, n), h.out(out, n), n); });
}

/// out[i] = g[i] * df(x[i]) for i < n: the gradient of a unary op.
template <class T, class D>
void times_derivative(const D& df, const T* g, const T* x, T* out, std::int64_t n) {
  dispatch([&] { plan::count(plan::Family::elementwise, 2.0 * double(n)); },
           MESHTENSOR_ON_GPU(gpu::times_derivative_builtin(df, g, x, out, n)),
           [&](HostOperands& h) {
             cpu::times_derivative(df, h.in(g, n), h.in(x, n), h.out(out, n), n);
           });
}

/// f of a and b at each index of `sizes` into out (strides: a's, b's, out's; 0 where broadcast).
template <class T, class F>
void zip(const F& f, const Sizes& sizes, const std::array<Strides, 3>& strides, const T* a,
         const T* b, T* out) {
  dispatch([&] { plan::count(plan::Family::elementwise, double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(gpu::zip_builtin(f, sizes, strides, a, b, out)),
           [&](HostOperands& h) {
             cpu::zip(f, sizes, strides, h.in(a, span_of(sizes, strides[0])),
                      h.in(b, span_of(sizes, strides[1])), h.out(out, span_of(sizes, strides[2])));
           });
}

/// into[i] += add[i] for i < n (gradients accumulating).
template <class T>
void add_into(T* into, const T* add, std::int64_t n) {
  dispatch([&] { plan::count(plan::Family::elementwise, double(n)); },
           MESHTENSOR_ON_GPU(gpu::accumulate(into, add, n)),
           [&](HostOperands& h) { cpu::add_into(h.out(into, n), h.in(add, n), n); });
}

}  // namespace meshtensor::kernels
