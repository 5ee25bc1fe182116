// The weight gradient of a 3x3x3 convolution from one input channel to 8 (the U-Net's first
// layer), read from the output gradient as it lies, channels last (no transposition of it, which
// costs the planar kernel of rows/conv.hpp a pass over memory). It runs input row by input row:
// the 9 output rows that read an input row through taps (k0, k1) share its values, so each value
// is laid out once for several gradient vectors, not once per tap. A vector holds the 8 channels
// of one position (AVX2) or two (AVX-512); the input it meets holds those positions' inputs, 8
// lanes each:
//   w[tap][co] += sum over o of x[o + tap] * grad_out[o][co]
// One accumulator a tap: AVX-512 keeps all 27 in registers, AVX2 the 9 of one k0 at a time (a pass
// over the plane each). They sum an input plane in float, then go into double.
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {
namespace detail {

constexpr int one_channel_taps = 27;

// Output positions of 8 channels a vector, and what they meet.
struct GradientPositions {
#if MESHTENSOR_TARGET_AVX512
  static constexpr int count = 2;      // positions a vector
  static constexpr int pass_rows = 9;  // tap rows (k0, k1) a pass: 27 of the 32 registers
  // Inputs x[0] in lanes 0-7 and x[1] in lanes 8-15, as two positions' 8 channels line up.
  __attribute__((always_inline)) static V inputs(const float* x) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(x)),
                              _mm256_broadcast_ss(x + 1), 1);
  }
  // Both positions, or the first alone at the end of an odd row.
  __attribute__((always_inline)) static V load(const float* g, bool both) {
    return _mm512_maskz_loadu_ps(both ? 0xffff : 0x00ff, g);
  }
#else
  static constexpr int count = 1;
  static constexpr int pass_rows = 3;  // 9 accumulators of 16 registers
  __attribute__((always_inline)) static V inputs(const float* x) { return _mm256_broadcast_ss(x); }
  __attribute__((always_inline)) static V load(const float* g, bool) { return _mm256_loadu_ps(g); }
#endif
};
// The products of one input row with the gradients of output positions [o, o + count) in the
// pass's output rows that read it (`grad`, one per tap row); x[o + k2] is what output o reads
// through tap k2.
template <int Rows>
__attribute__((always_inline)) inline void accumulate_positions(V (&acc)[Rows * 3], const float* x,
                                                                const float* const* grad,
                                                                std::int64_t o, bool whole) {
  const V inputs[3] = {GradientPositions::inputs(x + o), GradientPositions::inputs(x + o + 1),
                       GradientPositions::inputs(x + o + 2)};
#pragma GCC unroll 9
  for (int row = 0; row < Rows; ++row) {
    V gv = GradientPositions::load(grad[row] + o * 8, whole);
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
  std::int64_t o = i - t.origin - k * t.dilation;
  if (o < 0) return -1;
  if (t.stride != 1) {  // a division per row and tap costs a third of a 64-position row's time
    if (o % t.stride != 0) return -1;
    o /= t.stride;
  }
  return o < g.out[d] ? o : -1;
}

// Per tap k0, the output gradient plane that reads the box's plane q through it, or null.
inline std::array<const float*, 3> gradient_planes(const ConvGeometry& g, const float* grad_output,
                                                   std::int64_t q) {
  const std::int64_t p = q / g.in[0], i0 = q % g.in[0];
  std::array<const float*, 3> planes{};
  for (int k0 = 0; k0 < 3; ++k0) {
    const std::int64_t o0 = read_by_output(g, 0, i0, k0);
    if (o0 >= 0) planes[k0] = grad_output + (p * g.out[0] + o0) * output_row_size(g);
  }
  return planes;
}

// The output gradient rows that read box row i1 of a plane through taps (k0, k1), zeros where no
// output does.
inline std::array<const float*, 9> gradient_rows(const ConvGeometry& g,
                                                 const std::array<const float*, 3>& planes,
                                                 std::int64_t i1, const float* zeros) {
  std::array<const float*, 9> rows{};
  for (int k1 = 0; k1 < 3; ++k1) {
    const std::int64_t o1 = read_by_output(g, 1, i1, k1);
    for (int k0 = 0; k0 < 3; ++k0)
      rows[k0 * 3 + k1] = planes[k0] && o1 >= 0 ? planes[k0] + o1 * g.out[2] * 8 : zeros;
  }
  return rows;
}

// Tap rows [first, first + Rows) of the box's input plane q (batch q / in0, index q % in0): their
// products, added to `sums`.
template <int Rows>
void one_channel_pass(const ConvGeometry& g, const float* input, const float* grad_output,
                      std::int64_t q, int first, OneChannelState& state) {
  const std::int64_t n = g.out[2], before = std::max<std::int64_t>(0, -g.taps[2].origin);
  // row[o + k2] = box position o + origin + k2 (zero outside the box).
  float* row = state.row.data();
  const std::int64_t from = std::max<std::int64_t>(0, g.taps[2].origin);
  const std::int64_t count = std::min(g.in[2] - from, n + 3 - before);
  // V, not __m512 (which may alias floats): the accumulators stay in registers.
  V acc[Rows * 3];
#pragma GCC unroll 27
  for (int tap = 0; tap < Rows * 3; ++tap) acc[tap] = Simd::zero();
  constexpr int P = GradientPositions::count;
  const auto planes = gradient_planes(g, grad_output, q);
  for (std::int64_t i1 = 0; i1 < g.in[1]; ++i1) {
    const auto rows = gradient_rows(g, planes, i1, state.zeros.data());
    const float* const* grad = rows.data() + first;
    std::memcpy(row + before, input + (q * g.in[1] + i1) * g.in[2] + from, count * sizeof(float));
    // The first tap row's output row comes fresh from memory (a 4 KiB stream at 128 positions,
    // which the hardware prefetcher starts cold); the next one is the row after it.
    const char* next = reinterpret_cast<const char*>(grad[0] + n * 8);
    std::int64_t o = 0;
    for (; o + P <= n; o += P) {
      _mm_prefetch(next + o * 32, _MM_HINT_T0);
      accumulate_positions<Rows>(acc, row, grad, o, true);
    }
    if (o < n) accumulate_positions<Rows>(acc, row, grad, o, false);
  }
  // Unrolled, as every loop over the accumulators: indexed at run time they would live in memory.
#pragma GCC unroll 27
  for (int tap = 0; tap < Rows * 3; ++tap) {
    alignas(64) float lanes[L];
    Simd::store(lanes, acc[tap]);
    for (int c = 0; c < 8; ++c) {
      double sum = 0;
      for (int p = 0; p < P; ++p) sum += lanes[p * 8 + c];
      state.sums[(first * 3 + tap) * 8 + c] += sum;
    }
  }
}

inline void one_channel_plane(const ConvGeometry& g, const float* input, const float* grad_output,
                              std::int64_t q, OneChannelState& state) {
  for (int first = 0; first < 9; first += GradientPositions::pass_rows)
    one_channel_pass<GradientPositions::pass_rows>(g, input, grad_output, q, first, state);
}

// A thread's input row and output gradient rows, in floats (OneChannelState's buffers).
inline std::int64_t one_channel_row_floats(const ConvGeometry& g) { return g.out[2] + 3 + L; }
inline std::int64_t one_channel_gradient_floats(const ConvGeometry& g) { return g.out[2] * 8 + L; }

}  // namespace detail

/// Whether conv_backward_weight_one_channel runs `g`: AVX-512 or AVX2, 1 -> 8 channels, 3x3x3 taps
/// that the row kernels take (rows/conv.hpp's `takes`), undilated along the rows.
inline bool fits_one_channel_weight(const ConvGeometry& g) { return detail::first_layer_shape(g); }

/// grad_weight += the gradient of the forward pass's output with respect to the weight, for
/// shapes fits_one_channel_weight(g) takes (and rows::takes(g)).
inline void conv_backward_weight_one_channel(const ConvGeometry& g, const float* input,
                                             const float* grad_output, double* grad_weight) {
  using namespace detail;
  const auto row_floats = static_cast<std::size_t>(one_channel_row_floats(g));
  const auto gradient_floats = static_cast<std::size_t>(one_channel_gradient_floats(g));
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
}

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
