#pragma once
// The CPU's element-wise loops, on the compute threads: a function of each element, of two
// operands' elements with the same index (either one broadcast), a gradient times a derivative,
// and a sum added in place.

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/activation.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

// Whether F is the built-in op `op` on floats, which cpu/activation.hpp computes in vector form.
template <class T, class F, int op>
constexpr bool is_float_op = (std::is_same_v<T, float> && std::is_same_v<F, Unary<float, op>>);

template <class T, class F>
void map(const F& f, const T* x, T* out, std::int64_t n) {
  if constexpr (is_float_op<T, F, UnaryOp::gelu>)
    if (activation::gelu(x, out, n)) return;
  parallel_for(n, compute_threads(), [&](std::int64_t i) { out[i] = static_cast<T>(f(x[i])); });
}

template <class T, class D>
void times_derivative(const D& df, const T* g, const T* x, T* out, std::int64_t n) {
  if constexpr (is_float_op<T, D, UnaryOp::gelu_derivative>)
    if (activation::gelu_times_derivative(g, x, out, n)) return;
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

// f of a (contiguous, `rows` rows of n <= 64) and b (one row of n, the same for every row) into
// out (as a): a bias added to each position's channels. The row of b repeated to whole rows and
// whole vectors (16 rows: 3 classes make 48 values) makes one long loop of the block, not a short
// run per row.
template <class T, class F, bool b_repeats>
void zip_repeated_row(const F& f, const T* a, const T* b, T* out, std::int64_t rows,
                      std::int64_t n) {
  constexpr std::int64_t most = 64 * 16;
  const std::int64_t chunk = 64 % n == 0 ? 64 : 16 * n;  // values per pass of the inner loop
  T row[most];
  for (std::int64_t j = 0; j < chunk; ++j) row[j] = b[j % n];
  const std::int64_t total = rows * n, whole = total / chunk * chunk;
  parallel_for(
      whole / chunk, compute_threads(),
      [&](std::int64_t c) {
        const T* x = a + c * chunk;
        T* o = out + c * chunk;
        for (std::int64_t j = 0; j < chunk; ++j)
          o[j] = static_cast<T>(b_repeats ? f(x[j], row[j]) : f(row[j], x[j]));
      },
      chunk);
  for (std::int64_t i = whole; i < total; ++i)
    out[i] = static_cast<T>(b_repeats ? f(a[i], b[i % n]) : f(b[i % n], a[i]));
}

// f of a (contiguous, `rows` rows of n) and b (one value per row, repeated along it) into out (as
// a): a softmax's maximum or sum taken off each position's classes. Rows in a plain loop, not
// one short run at a time.
template <class T, class F, bool b_repeats>
void zip_repeated_column(const F& f, const T* a, const T* b, T* out, std::int64_t rows,
                         std::int64_t n) {
  constexpr std::int64_t chunk = 1024;  // rows per call
  parallel_for((rows + chunk - 1) / chunk, compute_threads(),
               [&](std::int64_t c) {
                 for (std::int64_t r = c * chunk; r < std::min(rows, (c + 1) * chunk); ++r) {
                   const T v = b[r];
                   const T* x = a + r * n;
                   T* o = out + r * n;
                   for (std::int64_t j = 0; j < n; ++j)
                     o[j] = static_cast<T>(b_repeats ? f(x[j], v) : f(v, x[j]));
                 }
               },
               chunk * n);
}

/// f of a and b at each index of `sizes` into out (strides: a's, b's, out's).
template <class T, class F>
void zip(const F& f, const Sizes& sizes, const std::array<Strides, 3>& strides, const T* a,
         const T* b, T* out) {
  // A block of short rows (out contiguous) with one operand walking it and the other repeating a
  // row (a bias) or a value per row (a softmax's maximum): loops over the block, not per row.
  const auto [merged, walk] = merge_dims<3>(sizes, strides);
  if (merged.size() == 2 && merged[1] <= 64 && walk[2] == Strides{merged[1], 1}) {
    const std::int64_t rows = merged[0], n = merged[1];
    const Strides row{0, 1}, column{1, 0};
    if (walk[0] == walk[2] && walk[1] == row)
      return zip_repeated_row<T, F, true>(f, a, b, out, rows, n);
    if (walk[1] == walk[2] && walk[0] == row)
      return zip_repeated_row<T, F, false>(f, b, a, out, rows, n);
    if (walk[0] == walk[2] && walk[1] == column)
      return zip_repeated_column<T, F, true>(f, a, b, out, rows, n);
    if (walk[1] == walk[2] && walk[0] == column)
      return zip_repeated_column<T, F, false>(f, b, a, out, rows, n);
  }
  parallel_for_each_run<3>(sizes, strides, compute_threads(),
                           [&](const std::array<std::int64_t, 3>& at, std::int64_t n,
                               const std::array<std::int64_t, 3>& step) {
                             zip_run(f, a + at[0], b + at[1], out + at[2], n, step);
                           });
}

}  // namespace meshtensor::kernels::cpu
