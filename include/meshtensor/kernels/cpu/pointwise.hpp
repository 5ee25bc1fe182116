#pragma once
// One-tap (1x1x1) convolutions with few channels on bfloat16 blocks: the U-Net's head, 8 -> 3.
// Each pass sweeps the positions once, a chunk at a time through float buffers (the converters'
// vector paths), so it runs at about the speed of memory. oneDNN's bf16 kernels and the float
// kernels on widened slabs took several times float's time on the head: widening whole slabs
// costs more than the multiply-adds. Sums in float, the weight gradient's added into double per
// part of the positions, the parts in a fixed order.

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/common/input_gradient_as_forward.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

namespace pointwise_detail {
constexpr std::int64_t most_channels = 16;                         // per side
constexpr std::int64_t chunk = 512;                                // positions a float buffer holds
using Weights = std::array<float, most_channels * most_channels>;  // [m][n], in float

inline std::int64_t positions(const ConvGeometry& g) {
  return g.batch * g.out[0] * g.out[1] * g.out[2];
}

// f(part, begin, end) over parts of the positions, on the compute threads the work pays for;
// returns the number of parts.
template <class F>
int for_position_parts(const ConvGeometry& g, F&& f) {
  return for_each_range(positions(g), compute_threads(), f, g.c_in + g.c_out);
}

// out[p][n] = sum over m of in[p][m] * a[m][n], for `count` positions (M, N: the channel counts
// where the compiler should know them, 0 where `m_n` and `n_n` give them).
template <int M, int N>
void apply(const float* in, const float* a, float* out, std::int64_t count, std::int64_t m_n,
           std::int64_t n_n) {
  const std::int64_t m_count = M ? M : m_n, n_count = N ? N : n_n;
  for (std::int64_t p = 0; p < count; ++p)
    for (std::int64_t n = 0; n < n_count; ++n) {
      float sum = 0;
      for (std::int64_t m = 0; m < m_count; ++m) sum += in[p * m_count + m] * a[m * n_count + n];
      out[p * n_count + n] = sum;
    }
}

// sums[m][n] += sum over p of x[p][m] * y[p][n], for `count` positions: each channel's values
// gathered into a row first (`rows`: chunk * (M + N) floats), so that the sums run along rows.
template <int M, int N>
void outer(const float* x, const float* y, float* sums, std::int64_t count, std::int64_t m_n,
           std::int64_t n_n, float* rows) {
  const std::int64_t m_count = M ? M : m_n, n_count = N ? N : n_n;
  float* const x_rows = rows;
  float* const y_rows = rows + m_count * chunk;
  for (std::int64_t m = 0; m < m_count; ++m)
    for (std::int64_t p = 0; p < count; ++p) x_rows[m * chunk + p] = x[p * m_count + m];
  for (std::int64_t n = 0; n < n_count; ++n)
    for (std::int64_t p = 0; p < count; ++p) y_rows[n * chunk + p] = y[p * n_count + n];
  constexpr int lanes = 16;  // partial sums a vector (the compiler keeps a float sum in order)
  for (std::int64_t m = 0; m < m_count; ++m)
    for (std::int64_t n = 0; n < n_count; ++n) {
      const float* a = x_rows + m * chunk;
      const float* b = y_rows + n * chunk;
      std::array<float, lanes> lane{};
      std::int64_t p = 0;
      for (; p + lanes <= count; p += lanes)
        for (int l = 0; l < lanes; ++l) lane[l] += a[p + l] * b[p + l];
      float sum = 0;
      for (; p < count; ++p) sum += a[p] * b[p];
      for (int l = 0; l < lanes; ++l) sum += lane[l];
      sums[m * n_count + n] += sum;
    }
}

// The head's shapes (8 -> 3 and back) with their counts known, others as they come.
template <class F>
void with_counts(std::int64_t m_n, std::int64_t n_n, F&& f) {
  if (m_n == 8 && n_n == 3)
    return f(std::integral_constant<int, 8>{}, std::integral_constant<int, 3>{});
  if (m_n == 3 && n_n == 8)
    return f(std::integral_constant<int, 3>{}, std::integral_constant<int, 8>{});
  f(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
}

// out[p][n] = sum over m of in[p][m] * a[m][n] over every position of `g`, a chunk at a time
// through float buffers.
inline void apply_all(const ConvGeometry& g, const bfloat16* in, std::int64_t m_n, const float* a,
                      std::int64_t n_n, bfloat16* out) {
  with_counts(m_n, n_n, [&](auto m, auto n) {
    for_position_parts(g, [&](int, std::int64_t begin, std::int64_t end) {
      std::array<float, chunk * most_channels> in_f, out_f;
      for (std::int64_t c = begin; c < end; c += chunk) {
        const std::int64_t count = std::min(chunk, end - c);
        to_float_run(in + c * m_n, in_f.data(), count * m_n);
        apply<decltype(m)::value, decltype(n)::value>(in_f.data(), a, out_f.data(), count, m_n,
                                                      n_n);
        to_bf16_run(out_f.data(), out + c * n_n, count * n_n);
      }
    });
  });
}
}  // namespace pointwise_detail

/// Whether `g` is a one-tap convolution these kernels run: every output reads the input position
/// at its own index (stride 1, no padding, input and output the same size), at most 16 channels a
/// side.
inline bool pointwise_takes(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (g.kernel[d] != 1 || t.transposed || t.stride != 1 || t.origin != 0 || g.in[d] != g.out[d])
      return false;
  }
  return g.c_in <= pointwise_detail::most_channels && g.c_out <= pointwise_detail::most_channels;
}

/// out[p][co] = sum over ci of in[p][ci] * w[ci][co].
inline void pointwise_forward(const ConvGeometry& g, const bfloat16* input, const bfloat16* weight,
                              bfloat16* output) {
  pointwise_detail::Weights w{};
  to_float_run(weight, w.data(), g.c_in * g.c_out);
  pointwise_detail::apply_all(g, input, g.c_in, w.data(), g.c_out, output);
}

/// grad_in[p][ci] = sum over co of grad_out[p][co] * w[ci][co].
inline void pointwise_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                     const bfloat16* weight, bfloat16* grad_input) {
  // The forward pass of the reversed convolution: one tap's weights flipped are [co][ci].
  pointwise_detail::Weights w{}, flipped{};
  to_float_run(weight, w.data(), g.c_in * g.c_out);
  flip_weights(g, w.data(), flipped.data());
  pointwise_detail::apply_all(g, grad_output, g.c_out, flipped.data(), g.c_in, grad_input);
}

/// grad_w[ci][co] += sum over p of in[p][ci] * grad_out[p][co]: float sums over chunks of
/// positions, added into double per part, the parts' sums added in order.
inline void pointwise_backward_weight(const ConvGeometry& g, const bfloat16* input,
                                      const bfloat16* grad_output, double* grad_weight) {
  using namespace pointwise_detail;
  const std::int64_t ci_n = g.c_in, co_n = g.c_out, size = ci_n * co_n;
  std::vector<double> parts(static_cast<std::size_t>(compute_threads() * size), 0.0);
  int used = 0;
  with_counts(ci_n, co_n, [&](auto m, auto n) {
    used = for_position_parts(g, [&](int part, std::int64_t begin, std::int64_t end) {
      std::array<float, chunk * most_channels> x_f, y_f;
      std::vector<float> rows(static_cast<std::size_t>(chunk * (ci_n + co_n)));
      for (std::int64_t c = begin; c < end; c += chunk) {
        const std::int64_t count = std::min(chunk, end - c);
        to_float_run(input + c * ci_n, x_f.data(), count * ci_n);
        to_float_run(grad_output + c * co_n, y_f.data(), count * co_n);
        Weights sums{};
        outer<decltype(m)::value, decltype(n)::value>(x_f.data(), y_f.data(), sums.data(), count,
                                                      ci_n, co_n, rows.data());
        for (std::int64_t i = 0; i < size; ++i) parts[part * size + i] += sums[i];
      }
    });
  });
  for (int part = 0; part < used; ++part)
    for (std::int64_t i = 0; i < size; ++i) grad_weight[i] += parts[part * size + i];
}

}  // namespace meshtensor::kernels::cpu
