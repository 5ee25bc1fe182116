#pragma once
// The weight gradient of a 3x3x3 convolution from one input channel to 8 (the U-Net's first
// layer), read from the output gradient as it lies, channels last: no transposition of it, which
// at 128^3 costs the planar kernel (rows/conv.hpp) about 30% of its time, reading 64 MiB from
// memory. An AVX-512 vector holds two positions' 8 channels, permuted once per load to channel
// pairs; each tap's pair of inputs is broadcast against it, one accumulator per tap:
//   w[tap][co] += sum over o of x[o + tap] * grad_out[o][co]
// The sums run in float over an output plane, then go into double.

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

// Two positions' 8 channels [o][c] (`g`) as channel pairs [c][o], the way a 64-bit broadcast of
// two positions' inputs lines up.
inline V channel_pairs(__m512 g) {
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_maskz_permutexvar_ps(0xffff, order, g);  // unmasked: GCC 12 warns falsely
}

inline V input_pair(const float* x) {
  double pair;
  std::memcpy(&pair, x, sizeof pair);
  return _mm512_castpd_ps(_mm512_set1_pd(pair));
}

// Every tap's products for output positions o .. o + 2 * Pairs (the gradients `gv`, as channel
// pairs). Along a row the taps are consecutive: the pairs share inputs, each loaded once.
template <int Pairs>
__attribute__((always_inline)) inline void accumulate(V (&acc)[27],
                                                      const std::array<const float*, 9>& x,
                                                      std::int64_t o, const V (&gv)[Pairs]) {
#pragma GCC unroll 9
  for (int row = 0; row < 9; ++row)
#pragma GCC unroll 3
    for (int k2 = 0; k2 < 3; ++k2)
#pragma GCC unroll 2
      for (int pair = 0; pair < Pairs; ++pair)
        acc[row * 3 + k2] =
            Simd::fma(input_pair(x[row] + o + 2 * pair + k2), gv[pair], acc[row * 3 + k2]);
}

// What a thread keeps: its input planes, a row of zeros for taps that read padding, and its sums.
struct OneChannelState {
  PlanarPlanes planes;
  Buffer<float> zeros;
  std::vector<double> sums;  // [tap][c_out]
};

// The rows each tap (k0, k1) of output row o1 reads, the zero row where that is padding.
inline std::array<const float*, 9> tap_rows(const ConvGeometry& g, const RowGeometry& r,
                                            const std::vector<const float*>& planes,
                                            std::int64_t o1, const float* zeros) {
  std::array<const float*, 9> rows{};
  for (int k0 = 0; k0 < 3; ++k0)
    for (int k1 = 0; k1 < 3; ++k1) {
      const std::int64_t i1 = g.taps[1].reads(o1, k1);
      const bool inside = planes[k0] && i1 >= 0 && i1 < g.in[1];
      rows[k0 * 3 + k1] = inside ? planes[k0] + i1 * r.box.width + r.shift : zeros;
    }
  return rows;
}

// Output plane q's sums, added to `sums`.
inline void one_channel_plane(const ConvGeometry& g, const RowGeometry& r, const float* input,
                              const float* grad_output, std::int64_t q, OneChannelState& state) {
  const auto planes = state.planes.read_by(input, q / g.out[0], q % g.out[0]);
  // V, not __m512 (which may alias floats): the accumulators stay in registers.
  V acc[one_channel_taps];
#pragma GCC unroll 27
  for (int tap = 0; tap < one_channel_taps; ++tap) acc[tap] = Simd::zero();
  for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1) {
    const auto x = tap_rows(g, r, planes, o1, state.zeros.data());
    const float* grad = grad_output + (q * g.out[1] + o1) * g.out[2] * 8;
    std::int64_t o = 0;
    for (; o + 4 <= g.out[2]; o += 4) {
      const V gv[2] = {channel_pairs(_mm512_loadu_ps(grad + o * 8)),
                       channel_pairs(_mm512_loadu_ps(grad + o * 8 + 16))};
      accumulate<2>(acc, x, o, gv);
    }
    for (; o < g.out[2]; o += 2) {  // a last position alone: the other's gradient read as zeros
      const __mmask16 mask = o + 2 <= g.out[2] ? 0xffff : 0xff;
      const V gv[1] = {channel_pairs(_mm512_maskz_loadu_ps(mask, grad + o * 8))};
      accumulate<1>(acc, x, o, gv);
    }
  }
  // Unrolled, as every loop over the accumulators: indexed at run time they would live in memory.
#pragma GCC unroll 27
  for (int tap = 0; tap < one_channel_taps; ++tap) {
    alignas(64) float lanes[16];
    Simd::store(lanes, acc[tap]);
    for (int c = 0; c < 8; ++c)
      state.sums[tap * 8 + c] += double(lanes[2 * c]) + double(lanes[2 * c + 1]);
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
  const RowGeometry r = row_geometry(g);
  auto states = on_plane_parts(
      g.batch * g.out[0],
      [&] {
        return OneChannelState{PlanarPlanes(g, r.box),
                               Buffer<float>(static_cast<std::size_t>(r.box.width + L), 0.0f),
                               std::vector<double>(one_channel_taps * 8, 0.0)};
      },
      [&](OneChannelState& state, std::int64_t a, std::int64_t b) {
        for (std::int64_t q = a; q < b; ++q) one_channel_plane(g, r, input, grad_output, q, state);
      });
  for (const OneChannelState& state : states)  // in a fixed order: the same bits on every run
    for (std::size_t i = 0; i < state.sums.size(); ++i) grad_weight[i] += state.sums[i];
#else
  (void)g, (void)input, (void)grad_output, (void)grad_weight;
#endif
}

}  // namespace meshtensor::kernels::rows
