// The bfloat16 weight gradient of wide layers (output channels in sixteens) in AVX512_BF16 dot
// products with the output channels in the lanes: each lane sums one weight over every position,
// two positions an instruction (rows/form/pair_words.hpp). The planar kernel puts positions in the
// lanes instead, 32 a vector: a 32^3 plane gives its tiles 32 rows of one vector each, a 16^3 plane
// half a vector, and the tiles' setup and lane sums outweigh their products.
// Here a tile runs over a whole band of rows and pairs, whatever the plane's width.
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {

namespace detail {

constexpr std::int64_t lane_outputs = 16;  // output channels a vector
constexpr int tile_inputs = 8;             // input channels a tile (times K2 taps: accumulators)

// The pairs of an output row, and the words of a box row (word x pairs box positions x - before
// and the next: output pair j reads word 2 j + k2 dilation through tap k2).
struct PairGeometry {
  std::int64_t pairs = 0, dilation = 1;
  RowFormat box;
};

inline PairGeometry pair_geometry(const ConvGeometry& g) {
  PairGeometry p;
  p.pairs = (g.out[2] + 1) / 2;
  p.dilation = g.kernel[2] > 1 ? g.taps[2].dilation : 1;
  p.box.before = -g.taps[2].origin;
  p.box.width = 2 * p.pairs - 1 + (g.kernel[2] - 1) * p.dilation;
  return p;
}

}  // namespace detail

/// Whether the kernel below takes `g`: ordinary taps with stride 1 along the rows and the planes'
/// second dim (not transposed there), 3 taps at most along the rows, output channels in sixteens,
/// input channels in eights, padding (not a cropped box) before the rows' first position.
inline bool fits_channel_lanes_weight(const ConvGeometry& g) {
  const Taps& t1 = g.taps[1];
  return detail::ordinary(g) && !t1.transposed && t1.stride == 1 && g.taps[2].origin <= 0 &&
         g.c_out % detail::lane_outputs == 0 && g.c_in % detail::tile_inputs == 0 &&
         g.kernel[2] <= 3 && g.kernel[0] * g.kernel[1] * g.kernel[2] > 1 &&
         g.batch * g.out[0] * g.out[1] * g.out[2] > 0;
}

#if MESHTENSOR_TARGET_AVX512_BF16
namespace detail {

// Sums of taps (k0, k1, *), input channels [ci, ci + 8) and output channels [co, co + 16) over
// `rows` rows of `pairs` output pairs each, added to `sums` (the tile's first weight; taps k2
// c_in c_out apart). `x` is the first row's words from input channel ci, `go` its output
// gradient's from channel co.
template <int K2>
void channel_lanes_tile(const std::uint32_t* x, std::int64_t x_row, const std::uint32_t* go,
                        std::int64_t go_row, std::int64_t rows, const PairGeometry& p,
                        std::int64_t c_in, std::int64_t c_out, float* sums) {
  __m512 acc[K2][tile_inputs];
  for (int k = 0; k < K2; ++k)
    for (int c = 0; c < tile_inputs; ++c) acc[k][c] = _mm512_setzero_ps();
  const std::int64_t tap = p.dilation * c_in;
  for (std::int64_t r = 0; r < rows; ++r, x += x_row, go += go_row)
    for (std::int64_t j = 0; j < p.pairs; ++j) {
      const __m512bh g = __m512bh(_mm512_loadu_si512(go + j * c_out));
      const std::uint32_t* words = x + 2 * j * c_in;
      for (int k = 0; k < K2; ++k)
#pragma GCC unroll 8
        for (int c = 0; c < tile_inputs; ++c)
          acc[k][c] =
              _mm512_dpbf16_ps(acc[k][c], g, __m512bh(_mm512_set1_epi32(int(words[k * tap + c]))));
    }
  for (int k = 0; k < K2; ++k)
    for (int c = 0; c < tile_inputs; ++c) {
      float* to = sums + (k * c_in + c) * c_out;
      _mm512_storeu_ps(to, _mm512_add_ps(_mm512_loadu_ps(to), acc[k][c]));
    }
}

// What a thread keeps: the input planes as pair words, a band of the output gradient's plane
// as pair words, and its sums (float, shaped as the weights).
struct ChannelLanesState {
  PlanarPlanesOf<std::uint32_t, TurnPairs> planes;
  Buffer<std::uint32_t> grad_words;
  Buffer<float> sums;
};

template <int K2>
void channel_lanes_planes(const ConvGeometry& g, const PairGeometry& p,
                          const ChannelParts<const bfloat16>& input, const bfloat16* grad_output,
                          std::int64_t a, std::int64_t b, std::int64_t band,
                          ChannelLanesState& state) {
  const std::int64_t out_row = g.out[2] * g.c_out, out_plane = g.out[1] * out_row;
  const std::int64_t go_row = p.pairs * g.c_out, x_row = g.c_in * p.box.width;
  const Taps& t1 = g.taps[1];
  for (std::int64_t lo = 0; lo < g.out[1]; lo += band) {
    const std::int64_t hi = std::min(g.out[1], lo + band);
    const PlaneRows rows = rows_read(g, lo, hi);
    for (std::int64_t q = a; q < b; ++q) {
      const auto planes = state.planes.read_by(input, q / g.out[0], q % g.out[0], rows);
      for (std::int64_t o1 = lo; o1 < hi; ++o1)
        pair_words(grad_output + q * out_plane + o1 * out_row, g.out[2], g.c_out, 0, 2, p.pairs,
                   state.grad_words.data() + (o1 - lo) * go_row, g.c_out);
      for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
        if (!planes[k0]) continue;
        for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
          // Output rows [first, last) whose tap k1 reads inside the box.
          const std::int64_t read0 = t1.origin + k1 * t1.dilation;
          const std::int64_t first = std::max(lo, -read0);
          const std::int64_t last = std::min(hi, g.in[1] - read0);
          if (first >= last) continue;
          const std::uint32_t* x = planes[k0] + (read0 + first) * x_row;
          const std::uint32_t* go = state.grad_words.data() + (first - lo) * go_row;
          float* sums = state.sums.data() + (k0 * g.kernel[1] + k1) * K2 * g.c_in * g.c_out;
          for (std::int64_t co = 0; co < g.c_out; co += lane_outputs)
            for (std::int64_t ci = 0; ci < g.c_in; ci += tile_inputs)
              channel_lanes_tile<K2>(x + ci, x_row, go + co, go_row, last - first, p, g.c_in,
                                     g.c_out, sums + ci * g.c_out + co);
        }
      }
    }
  }
}

}  // namespace detail

/// grad_weight += the weight gradient for bfloat16 operands, for shapes fits_channel_lanes_weight
/// takes; the input held as parts along its channels (parts given as affine maps mapped as they
/// are turned), the output planes in bands of `band` rows. Products exact, summed in float per
/// thread, the threads' sums added in a fixed order.
inline void channel_lanes_backward_weight(const ConvGeometry& g,
                                          const ChannelParts<const bfloat16>& input,
                                          const bfloat16* grad_output, double* grad_weight,
                                          std::int64_t band) {
  using namespace detail;
  const PairGeometry p = pair_geometry(g);
  const std::size_t size = static_cast<std::size_t>(conv_weight_size(g));
  auto states = on_plane_parts(
      g.batch * g.out[0],
      [&] {
        return ChannelLanesState{
            PlanarPlanesOf<std::uint32_t, TurnPairs>(g, p.box),
            Buffer<std::uint32_t>(static_cast<std::size_t>(band * p.pairs * g.c_out)),
            Buffer<float>(size, 0.0f)};
      },
      [&](ChannelLanesState& state, std::int64_t a, std::int64_t b) {
        if (g.kernel[2] == 1)
          return channel_lanes_planes<1>(g, p, input, grad_output, a, b, band, state);
        if (g.kernel[2] == 2)
          return channel_lanes_planes<2>(g, p, input, grad_output, a, b, band, state);
        channel_lanes_planes<3>(g, p, input, grad_output, a, b, band, state);
      });
  for (std::size_t i = 0; i < size; ++i) {
    double sum = 0;
    for (const ChannelLanesState& state : states) sum += state.sums[i];
    grad_weight[i] += sum;
  }
}
#endif

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
