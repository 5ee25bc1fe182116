#pragma once
// The weight gradient of a 3x3x3 convolution from one input channel to 8 (the U-Net's first
// layer), read from the output gradient as it lies, channels last (no transposition of it, which
// costs the planar kernel of rows/conv.hpp a pass over memory). It runs input row by input row:
// the 9 output rows that read an input row through taps (k0, k1) share its values, so each value
// is broadcast once for 9 gradient vectors, not once per tap. An AVX-512 vector holds two
// positions' 8 channels; the input it meets holds those positions' inputs, 8 lanes each:
//   w[tap][co] += sum over o of x[o + tap] * grad_out[o][co]
// 27 accumulators (one a tap) sum an input plane in float, then go into double.

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/cpu/rows/planar_planes.hpp"
#include "meshtensor/kernels/cpu/rows/simd.hpp"

namespace meshtensor::kernels::rows {
namespace detail {

constexpr int one_channel_taps = 27;  // one accumulator a tap: 27 of the 32 registers

#if defined(__AVX512F__)
constexpr bool one_channel_kernel = true;

// Inputs x[0] in lanes 0-7 and x[1] in lanes 8-15, as two positions' 8 channels line up.
__attribute__((always_inline)) inline V position_pair(const float* x) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(x)),
                            _mm256_broadcast_ss(x + 1), 1);
}

// The products of one input row with the gradients of output positions o and o + 1 in the 9
// output rows that read it (`grad`, tap row k0 * 3 + k1 each); x[o + k2] is what output o reads
// through tap k2. `mask`: both positions, or the first alone at the end of an odd row.
__attribute__((always_inline)) inline void accumulate_pair(V (&acc)[27], const float* x,
                                                           const std::array<const float*, 9>& grad,
                                                           std::int64_t o, __mmask16 mask) {
  const V inputs[3] = {position_pair(x + o), position_pair(x + o + 1), position_pair(x + o + 2)};
#pragma GCC unroll 9
  for (int row = 0; row < 9; ++row) {
    V gv = _mm512_maskz_loadu_ps(mask, grad[row] + o * 8);
    Simd::keep_in_register(gv);  // loaded once for its 3 taps
#pragma GCC unroll 3
    for (int k2 = 0; k2 < 3; ++k2) acc[row * 3 + k2] = Simd::fma(gv, inputs[k2], acc[row * 3 + k2]);
  }
}

// What a thread keeps: an input row with the zeros around it that the taps along it read, a
// gradient row of zeros for the output rows outside the block, and its sums.
struct OneChannelState {
  Buffer<float> row;
  Buffer<float> zeros;
  std::vector<double> sums;  // [tap][c_out]
};

// The output index that reads box index i through tap k along dim d, or -1 where none does.
inline std::int64_t read_by_output(const ConvGeometry& g, int d, std::int64_t i, std::int64_t k) {
  const Taps& t = g.taps[d];
  const std::int64_t from_origin = i - t.origin - k * t.dilation;
  if (from_origin < 0 || from_origin % t.stride != 0) return -1;
  const std::int64_t o = from_origin / t.stride;
  return o < g.out[d] ? o : -1;
}

// The output gradient rows that read box row (p, i0, i1) through taps (k0, k1), zeros where
// no output does.
inline std::array<const float*, 9> gradient_rows(const ConvGeometry& g, const float* grad_output,
                                                 std::int64_t p, std::int64_t i0, std::int64_t i1,
                                                 const float* zeros) {
  std::array<const float*, 9> rows{};
  for (int k0 = 0; k0 < 3; ++k0)
    for (int k1 = 0; k1 < 3; ++k1) {
      const std::int64_t o0 = read_by_output(g, 0, i0, k0), o1 = read_by_output(g, 1, i1, k1);
      rows[k0 * 3 + k1] = o0 < 0 || o1 < 0
                              ? zeros
                              : grad_output + ((p * g.out[0] + o0) * g.out[1] + o1) * g.out[2] * 8;
    }
  return rows;
}

// The box's input plane q (batch q / in0, index q % in0): its products, added to `sums`.
inline void one_channel_plane(const ConvGeometry& g, const float* input, const float* grad_output,
                              std::int64_t q, OneChannelState& state) {
  const std::int64_t n = g.out[2], before = std::max<std::int64_t>(0, -g.taps[2].origin);
  // row[o + k2] = box position o + origin + k2 (zero outside the box).
  float* row = state.row.data();
  const std::int64_t from = std::max<std::int64_t>(0, g.taps[2].origin);
  const std::int64_t count = std::min(g.in[2] - from, n + 3 - before);
  // V, not __m512 (which may alias floats): the accumulators stay in registers.
  V acc[one_channel_taps];
#pragma GCC unroll 27
  for (int tap = 0; tap < one_channel_taps; ++tap) acc[tap] = Simd::zero();
  for (std::int64_t i1 = 0; i1 < g.in[1]; ++i1) {
    const auto grad =
        gradient_rows(g, grad_output, q / g.in[0], q % g.in[0], i1, state.zeros.data());
    std::memcpy(row + before, input + (q * g.in[1] + i1) * g.in[2] + from, count * sizeof(float));
    std::int64_t o = 0;
    // The first tap row's output row comes fresh from memory; the next one is the row after it.
    const char* next = reinterpret_cast<const char*>(grad[0] + n * 8);
    for (; o + 2 <= n; o += 2) {
      _mm_prefetch(next + o * 32, _MM_HINT_T0);
      accumulate_pair(acc, row, grad, o, 0xffff);
    }
    if (o < n) accumulate_pair(acc, row, grad, o, 0x00ff);
  }
  // Unrolled, as every loop over the accumulators: indexed at run time they would live in memory.
#pragma GCC unroll 27
  for (int tap = 0; tap < one_channel_taps; ++tap) {
    alignas(64) float lanes[16];
    Simd::store(lanes, acc[tap]);
    for (int c = 0; c < 8; ++c) state.sums[tap * 8 + c] += double(lanes[c]) + double(lanes[c + 8]);
  }
}
#else
constexpr bool one_channel_kernel = false;
#endif

}  // namespace detail

/// Whether conv_backward_weight_one_channel runs `g`: AVX-512, 1 -> 8 channels, 3x3x3 taps that
/// the row kernels take (rows/conv.hpp's `takes`), undilated along the rows.
inline bool fits_one_channel_weight(const ConvGeometry& g) {
  return detail::one_channel_kernel && g.c_in == 1 && g.c_out == 8 &&
         g.kernel == std::array<std::int64_t, 3>{3, 3, 3} && g.taps[2].dilation == 1;
}

/// grad_weight += the gradient of the forward pass's output with respect to the weight, for
/// shapes fits_one_channel_weight(g) takes (and rows::takes(g)).
inline void conv_backward_weight_one_channel(const ConvGeometry& g, const float* input,
                                             const float* grad_output, double* grad_weight) {
#if defined(__AVX512F__)
  using namespace detail;
  const auto row_floats = static_cast<std::size_t>(g.out[2] + 3 + L);
  const auto gradient_floats = static_cast<std::size_t>(g.out[2] * 8 + L);
  auto states = on_plane_parts(
      g.batch * g.in[0],
      [&] {
        return OneChannelState{Buffer<float>(row_floats, 0.0f),
                               Buffer<float>(gradient_floats, 0.0f),
                               std::vector<double>(one_channel_taps * 8, 0.0)};
      },
      [&](OneChannelState& state, std::int64_t a, std::int64_t b) {
        for (std::int64_t q = a; q < b; ++q) one_channel_plane(g, input, grad_output, q, state);
      });
  for (const OneChannelState& state : states)  // in a fixed order: the same bits on every run
    for (std::size_t i = 0; i < state.sums.size(); ++i) grad_weight[i] += state.sums[i];
#else
  (void)g, (void)input, (void)grad_output, (void)grad_weight;
#endif
}

}  // namespace meshtensor::kernels::rows
