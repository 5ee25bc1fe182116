#pragma once
// The CPU's element-wise loops, on the compute threads: a function of each element, of two
// operands' elements with the same index (either one broadcast), a gradient times a derivative,
// and a sum added in place.

#include <array>
#include <cstdint>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

template <class T, class F>
void map(const F& f, const T* x, T* out, std::int64_t n) {
  parallel_for(n, compute_threads(), [&](std::int64_t i) { out[i] = static_cast<T>(f(x[i])); });
}

template <class T, class D>
void times_derivative(const D& df, const T* g, const T* x, T* out, std::int64_t n) {
  parallel_for(n, compute_threads(),
               [&](std::int64_t i) { out[i] = g[i] * static_cast<T>(df(x[i])); });
}

template <class T>
void add_into(T* into, const T* add, std::int64_t n) {
  parallel_for(n, compute_threads(), [into, add](std::int64_t i) { into[i] += add[i]; });
}

// One run of zip: n indices along which a, b and out advance by step[0], step[1], step[2]. Plain
// loops in the common cases (both walk along, or one repeats a value), which the compiler
// vectorises.
template <class T, class F>
void zip_run(const F& f, const T* x, const T* y, T* out, std::int64_t n,
             const std::array<std::int64_t, 3>& step) {
  if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(f(x[i], y[i]));
  } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {
    const T y0 = *y;
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(f(x[i], y0));
  } else if (step[0] == 0 && step[1] == 1 && step[2] == 1) {
    const T x0 = *x;
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(f(x0, y[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      out[i * step[2]] = static_cast<T>(f(x[i * step[0]], y[i * step[1]]));
  }
}

/// f of a and b at each index of `sizes` into out (strides: a's, b's, out's).
template <class T, class F>
void zip(const F& f, const Sizes& sizes, const std::array<Strides, 3>& strides, const T* a,
         const T* b, T* out) {
  parallel_for_each_run<3>(sizes, strides, compute_threads(),
                           [&](const std::array<std::int64_t, 3>& at, std::int64_t n,
                               const std::array<std::int64_t, 3>& step) {
                             zip_run(f, a + at[0], b + at[1], out + at[2], n, step);
                           });
}

}  // namespace meshtensor::kernels::cpu
