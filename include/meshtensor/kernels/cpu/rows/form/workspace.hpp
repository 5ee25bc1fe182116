// What the row kernels' passes take of the calling processor's memory for a call: their threads'
// states and their weights' copies, as the passes above allocate them, so that a plan holds the
// same blocks for the call (kernels/conv_candidates.hpp). Part of one instruction set's form of
// the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {

namespace detail {

// Bytes of each block a call holds at once.
using Blocks = std::vector<std::size_t>;

template <class T>
void add_blocks(Blocks& blocks, std::int64_t count, std::int64_t elements) {
  if (elements <= 0) return;
  for (std::int64_t i = 0; i < count; ++i)
    blocks.push_back(static_cast<std::size_t>(elements) * sizeof(T));
}

// forward_on_threads: a PlanarPlanes per part (and one_channel_planes alike).
inline void forward_states(Blocks& blocks, const ConvGeometry& g) {
  add_blocks<float>(blocks, plane_parts(g.batch * g.out[0]),
                    PlanarPlanes::elements(g, row_geometry(g).box));
}

// The bfloat16 forward pass (conv_forward of ChannelParts<const bfloat16>): the weights as pair
// words or widened, and forward_on_threads' states.
inline void bf16_forward_blocks(Blocks& blocks, const ConvGeometry& g,
                                const std::vector<std::int64_t>& input_parts) {
#if MESHTENSOR_TARGET_AVX512_BF16
  const bool pairs = std::all_of(input_parts.begin(), input_parts.end(),
                                 [](std::int64_t c) { return c % 2 == 0; });
  if (bf16_products() == Bf16Products::dot && pairs) {
    ConvGeometry paired = g;
    paired.c_in = g.c_in / 2;
    add_blocks<float>(blocks, 1, g.kernel[0] * g.kernel[1] * g.kernel[2] * paired.c_in * g.c_out);
    return forward_states(blocks, paired);
  }
#endif
  (void)input_parts;
  add_blocks<float>(blocks, 1, conv_weight_size(g));
  forward_states(blocks, g);
}

// planar_backward_weight<T>: a WeightState per part.
template <class T>
void planar_weight_blocks(Blocks& blocks, const ConvGeometry& g) {
  const RowGeometry r = row_geometry(g, vector_positions<T>);
  const int parts = plane_parts(g.batch * g.out[0]);
  add_blocks<T>(blocks, parts, PlanarPlanesOf<T>::elements(g, r.box));
  add_blocks<T>(blocks, parts, weight_grad_plane(g, r));
  add_blocks<float>(blocks, parts, conv_weight_size(g) * L);
}

inline void weight_blocks(Blocks& blocks, const ConvGeometry& g, const WorkspaceCall& call) {
  if (!call.bf16) {
    if (call.whole && fits_one_channel_weight(g)) {
      const int parts = plane_parts(g.batch * g.in[0]);
      add_blocks<float>(blocks, parts, one_channel_row_floats(g));
      add_blocks<float>(blocks, parts, one_channel_gradient_floats(g));
      return;
    }
    return planar_weight_blocks<float>(blocks, g);
  }
#if MESHTENSOR_TARGET_AVX512_BF16
  if (bf16_products() == Bf16Products::dot && runs_channel_lanes_weight(g)) {
    const PairGeometry p = pair_geometry(g);
    const int parts = plane_parts(g.batch * g.out[0]);
    add_blocks<std::uint32_t>(blocks, parts,
                              PlanarPlanesOf<std::uint32_t, TurnPairs>::elements(g, p.box));
    add_blocks<std::uint32_t>(blocks, parts, channel_lanes_band(g) * p.pairs * g.c_out);
    add_blocks<float>(blocks, parts, conv_weight_size(g));
    return;
  }
  if (bf16_products() == Bf16Products::dot) return planar_weight_blocks<bfloat16>(blocks, g);
#endif
  planar_weight_blocks<float>(blocks, g);
}

}  // namespace detail

/// The blocks (bytes each) that `call` of `g` holds at once from the calling processor's memory,
/// for a call the row kernels run (RowsConv::supports).
inline std::vector<std::size_t> workspace(const ConvGeometry& g, const WorkspaceCall& call) {
  using namespace detail;
  Blocks blocks;
  switch (call.pass) {
    case plan::ConvClass::forward:
      if (!call.bf16 || (call.whole && fits_one_channel_forward_bf16(g)))
        forward_states(blocks, g);
      else
        bf16_forward_blocks(blocks, g, call.input_parts);
      break;
    case plan::ConvClass::backward_input: {
      // The reversed weight, then the reversed convolution's forward pass on the output gradient.
      const std::int64_t weight = conv_weight_size(g);
      if (!call.bf16) {
        add_blocks<float>(blocks, 1, weight);
        forward_states(blocks, reversed(g));
      } else {
        add_blocks<bfloat16>(blocks, 1, weight);
        bf16_forward_blocks(blocks, reversed(g), {g.c_out});
      }
      break;
    }
    case plan::ConvClass::backward_weight:
      weight_blocks(blocks, g, call);
      break;
    case plan::ConvClass::passes:  // the count of passes, not one
      break;
  }
  return blocks;
}

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
