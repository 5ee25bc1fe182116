// The forward pass of a 3x3x3 convolution from one input channel to 8 (the U-Net's first layer) in
// 256-bit vectors, accumulated channels last: a vector is one output position's 8 channels, a
// tap's 8 weights a vector, and each input, broadcast once, serves the 3 taps along the row that
// read it. The planar forward kernel (rows/conv.hpp) broadcasts a weight for every 2 or 3
// multiply-adds and transposes its outputs; here 8 positions take 8 accumulators and go out as
// they lie:
//   out[o][co] = sum over taps of w[tap][co] * x[o + tap]
// It runs where 256-bit vectors are the widest, and on AVX-512 cores that multiply-add 256 bits
// as fast as 512 (kernels/cpu/vector_rate.hpp); AVX-512 builds compile it either way, for the
// tests.
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {
namespace detail {

// Without __m256's may_alias, so that the accumulators stay in registers.
typedef float Y __attribute__((vector_size(32)));

// A tap row (k0, k1) of an output row: x[o + k2] is what output o reads through tap k2,
// w[k2 * 8 + co] the taps' weights.
struct OneChannelTap {
  const float* x;
  const float* w;
};

// One position's 8 channels at `to` (`stream`: around the cache, where aligned).
__attribute__((always_inline)) inline void store_eight(Y acc, float* to, bool stream) {
  if (stream && reinterpret_cast<std::uintptr_t>(to) % 32 == 0)
    _mm256_stream_ps(to, acc);
  else
    _mm256_storeu_ps(to, acc);
}
#if MESHTENSOR_TARGET_AVX512_BF16
constexpr bool one_channel_bf16_stores = true;
// The same rounded to bfloat16 (to nearest, ties to even, as bfloat16(float) rounds).
__attribute__((always_inline)) inline void store_eight(Y acc, bfloat16* to, bool stream) {
  const __m128bh narrow = _mm256_cvtneps_pbh(acc);
  __m128i bits;
  std::memcpy(&bits, &narrow, sizeof bits);
  auto* at = reinterpret_cast<__m128i*>(to);
  if (stream && reinterpret_cast<std::uintptr_t>(to) % 16 == 0)
    _mm_stream_si128(at, bits);
  else
    _mm_storeu_si128(at, bits);
}
#else
constexpr bool one_channel_bf16_stores = false;
#endif

// Outputs [o, o + B) of a row, channels last at `out` (`around_cache`: streamed where aligned).
template <int B, class Out>
__attribute__((always_inline)) inline void one_row_positions(const OneChannelTap* taps, int count,
                                                             std::int64_t o, Out* out,
                                                             bool around_cache) {
  Y acc[B];
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = Y{};
  for (int t = 0; t < count; ++t) {
    const Y w[3] = {_mm256_loadu_ps(taps[t].w), _mm256_loadu_ps(taps[t].w + 8),
                    _mm256_loadu_ps(taps[t].w + 16)};
    const float* x = taps[t].x + o;
    // Opaque, so that each input is read at a constant offset from it rather than at an offset
    // from o kept in a register of its own (more than there are).
    asm("" : "+r"(x));
#pragma GCC unroll 18
    for (int j = 0; j < B + 2; ++j) {
      const Y xv = _mm256_broadcast_ss(x + j);
#pragma GCC unroll 3
      for (int k2 = 0; k2 < 3; ++k2)
        if (j - k2 >= 0 && j - k2 < B) acc[j - k2] = _mm256_fmadd_ps(w[k2], xv, acc[j - k2]);
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) store_eight(acc[b], out + (o + b) * 8, around_cache);
}

// Output row o1 of output plane q (batch q / out0, index q % out0).
template <class Out>
void one_channel_row(const ConvGeometry& g, const RowGeometry& r,
                     const std::vector<const float*>& planes, const float* weight, Out* output,
                     std::int64_t q, std::int64_t o1, bool around_cache) {
  std::array<OneChannelTap, 9> taps;
  int count = 0;
  for (int k0 = 0; k0 < 3; ++k0)
    for (int k1 = 0; k1 < 3 && planes[k0]; ++k1) {
      const std::int64_t i1 = g.taps[1].reads(o1, k1);
      if (i1 >= 0 && i1 < g.in[1])
        taps[count++] = {planes[k0] + i1 * r.box.width + r.shift, weight + (k0 * 3 + k1) * 24};
    }
  Out* out = output + (q * g.out[1] + o1) * g.out[2] * 8;
  std::int64_t o = 0;
  for (; o + 8 <= g.out[2]; o += 8) one_row_positions<8>(taps.data(), count, o, out, around_cache);
  for (; o < g.out[2]; ++o) one_row_positions<1>(taps.data(), count, o, out, false);
}

}  // namespace detail

/// Whether conv_forward_one_channel runs `g`: 1 -> 8 channels, 3x3x3 taps that the row kernels
/// take (rows/conv.hpp's `takes`), undilated along the rows, on a CPU with AVX2 at least.
inline bool fits_one_channel_forward(const ConvGeometry& g) { return detail::first_layer_shape(g); }

namespace detail {
// The float kernel on input planes widened as they are turned, outputs stored as Out.
template <class In, class Out>
void one_channel_planes(const ConvGeometry& g, const In* input, const float* weight, Out* output,
                        bool around_cache) {
  const RowGeometry r = row_geometry(g);
  on_plane_parts(
      g.batch * g.out[0], [&] { return PlanarPlanes(g, r.box); },
      [&](PlanarPlanes& planes, std::int64_t a, std::int64_t b) {
        for (std::int64_t q = a; q < b; ++q) {
          const auto read = planes.read_by(input, q / g.out[0], q % g.out[0]);
          for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1)
            one_channel_row(g, r, read, weight, output, q, o1, around_cache);
        }
        if (around_cache) stream_fence();
      });
}
}  // namespace detail

/// output = the convolution of input with weight, for shapes fits_one_channel_forward(g) takes
/// (and rows::takes(g)); `around_cache`: written with streamed stores.
inline void conv_forward_one_channel(const ConvGeometry& g, const float* input, const float* weight,
                                     float* output, bool around_cache) {
  detail::one_channel_planes(g, input, weight, output, around_cache);
}

/// Whether the bfloat16 form below runs `g`: where the float one runs (rows/conv.hpp: on
/// AVX-512 cores that multiply-add 256 bits at full rate), with AVX512_BF16's rounding stores.
inline bool fits_one_channel_forward_bf16(const ConvGeometry& g) {
  return detail::one_channel_bf16_stores && fits_one_channel_forward(g) &&
         half_width_fma_at_full_rate();
}

/// The same for bfloat16 operands: the float kernel's sums on the widened values (exact), each
/// output rounded once; no float copy of the block (the widened-slab way took twice the float
/// pass's time at 128^3, 2 AMD cores).
inline void conv_forward_one_channel(const ConvGeometry& g, const bfloat16* input,
                                     const bfloat16* weight, bfloat16* output, bool around_cache) {
  if (!fits_one_channel_forward_bf16(g))
    throw std::invalid_argument("internal: the bfloat16 first-layer kernel needs AVX512_BF16");
#if MESHTENSOR_TARGET_AVX512_BF16
  float widened[27 * 8];
  for (int i = 0; i < 27 * 8; ++i) widened[i] = float(weight[i]);
  detail::one_channel_planes(g, input, widened, output, around_cache);
#else
  (void)input, (void)weight, (void)output, (void)around_cache;
#endif
}

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
