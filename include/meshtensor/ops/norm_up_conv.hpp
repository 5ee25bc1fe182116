#pragma once
// Batch norm (and its activation), up-sampling by a transposed convolution whose windows tile the
// output (kernel = stride: the U-Net's 2x2x2 by 2), its bias, the concatenation after a skip and
// a convolution: the decoder's step from one U-Net level to the next finer. As in
// batch_norm_conv (ops/norm_conv.hpp), the convolution's halo leaves before the norm's statistics
// are agreed: the skip's rows as they are, and for the up-sampled rows the raw coarse rows under
// them (one per `stride` fine rows), which each receiver normalises and up-samples as their owner
// does its block. The up-sampled rows are summed in the same order as the kernels sum, in fp32,
// so they equal the op's within rounding.

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/conv_concat.hpp"
#include "meshtensor/ops/detail/nested_blocks.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/resample.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// An up-sampling layer's parameters: a transposed convolution's weight and window, and the bias
/// added after it (undefined: none), over the output channels named as the input's.
template <class W>
struct UpSampling {
  const Tensor<W>& weight;
  const Tensor<W>& bias;
  const Window& window;
};

namespace detail {

// The transposed convolution's stride along each dim of z where its windows tile the output
// (kernel = stride, no dilation, no cropping): each output row then reads one input row through
// one tap. Empty where they do not.
inline std::vector<std::int64_t> up_sampling_strides(const Shape& z, const ConvDims& dims,
                                                     const std::vector<std::string>& spatial) {
  std::vector<std::int64_t> strides(z.rank(), 1);
  for (std::size_t i = 0; i < spatial.size(); ++i) {
    const WindowDim& w = dims.windows[i];
    if (w.kernel != w.stride || w.dilation != 1 || w.pad_before != 0 || w.pad_after != 0) return {};
    strides[z.position(spatial[i])] = w.stride;
  }
  return strides;
}

// The coarse rows under the fine rows each block reads (`fine`: the fine tensor's needs), every
// channel of the coarse tensor (`channels` at `channel_dim`, of `coarse_channels`).
inline HaloNeeds coarse_needs(HaloNeeds fine, const std::vector<std::int64_t>& strides,
                              std::size_t channel_dim, std::int64_t coarse_channels) {
  for (std::size_t d = 0; d < fine.size(); ++d)
    for (Range& r : fine[d])
      r = d == channel_dim ? Range{0, coarse_channels}
                           : Range{kernels::floor_div(r.begin, strides[d]),
                                   kernels::ceil_div(r.end, strides[d])};
  return fine;
}

// The same needs over another channel count (the skip's part of the concatenation).
inline HaloNeeds with_channels(HaloNeeds needs, std::size_t channel_dim, std::int64_t channels) {
  for (Range& r : needs[channel_dim]) r = Range{0, channels};
  return needs;
}

// What the up-sampled rows of a received piece are computed from: the transposed convolution's
// weight as the kernels read it (rounded to T; its own copy, since the op's goes with its call),
// its bias, the strides and the spatial dims' positions.
template <class T, class W>
struct UpSampledRows {
  Array<T> weights = empty_array<T>();  // in kernel order: taps, input channels, output channels
  const W* bias = nullptr;              // null: none
  std::vector<std::int64_t> strides;
  std::vector<std::size_t> spatial;  // positions, in window order
  std::size_t channel_dim = 0;
  std::int64_t c_in = 0, c_out = 0;

  // Writes the up-sampled channels of `box` (a piece of the concatenation, channels from
  // `offset` on) into `out` (row-major over `box`), from `coarse`, a normalised coarse piece
  // whose rows lie under it.
  void operator()(const Block& box, std::int64_t offset, const Block& coarse_box,
                  const Buffer<T>& coarse, T* out) const {
    kernels::up_sample_tiles(positions(box, offset, coarse_box), coarse.data(), weights.data(),
                             bias, out);
  }

 private:
  // Each fine position's coarse row, output and tap (taps in window order), row-major over the
  // box's dims but the channels; per dim and index, three lookups summed.
  kernels::TileUpSampling positions(const Block& box, std::int64_t offset,
                                    const Block& coarse_box) const {
    const auto sizes = box.sizes();
    const auto out_strides = kernels::row_major_strides(sizes);
    const auto in_strides = kernels::row_major_strides(coarse_box.sizes());
    std::vector<std::vector<std::int64_t>> from(sizes.size()), to(sizes.size()), tap(sizes.size());
    std::int64_t taps_after = 1;
    for (std::size_t i = spatial.size(); i-- > 0;) {
      const std::size_t d = spatial[i];
      for (std::int64_t a = 0; a < sizes[d]; ++a)
        tap[d].push_back((box.ranges[d].begin + a) % strides[d] * taps_after);
      taps_after *= strides[d];
    }
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (d == channel_dim) continue;
      if (tap[d].empty()) tap[d].assign(std::size_t(sizes[d]), 0);
      for (std::int64_t a = 0; a < sizes[d]; ++a) {
        const std::int64_t fine = box.ranges[d].begin + a;
        from[d].push_back((fine / strides[d] - coarse_box.ranges[d].begin) * in_strides[d]);
        to[d].push_back(a * out_strides[d]);
      }
    }
    kernels::TileUpSampling u;
    u.c_in = c_in;
    u.c_out = c_out;
    u.in_channel_stride = in_strides[channel_dim];
    u.out_channel_stride = out_strides[channel_dim];
    std::vector<std::int64_t> at(sizes.size(), 0);  // index within box; channels held at 0
    const std::int64_t positions = box.num_elements() / sizes[channel_dim];
    for (std::int64_t p = 0; p < positions; ++p) {
      std::int64_t in = 0, o = offset * out_strides[channel_dim], k = 0;
      for (std::size_t d = 0; d < sizes.size(); ++d) {
        if (d == channel_dim) continue;
        in += from[d][std::size_t(at[d])];
        o += to[d][std::size_t(at[d])];
        k += tap[d][std::size_t(at[d])];
      }
      u.input.push_back(in), u.output.push_back(o), u.tap.push_back(k);
      for (std::size_t d = sizes.size(); d-- > 0;) {
        if (d == channel_dim) continue;
        if (++at[d] < sizes[d]) break;
        at[d] = 0;
      }
    }
    return u;
  }
};

// How this processor up-samples received rows: with the transposed convolution's weight as `call`
// orders it (rounded to T) and the bias.
template <class T, class W>
UpSampledRows<T, W> up_sampled_rows(const ConvCall<T>& call, const UpSampling<W>& up,
                                    const Shape& z, const std::vector<std::int64_t>& strides,
                                    const std::string& channels) {
  UpSampledRows<T, W> rows;
  rows.strides = strides;
  for (const auto& name : up.window.spatial()) rows.spatial.push_back(z.position(name));
  rows.channel_dim = z.position(channels);
  rows.c_in = z.dim(channels).size;
  rows.c_out = call.geometry.c_out;
  rows.weights = weight_in_kernel_order<T>(up.weight.array(), call.w_order);
  if (up.bias.defined()) rows.bias = up.bias.array().data();
  return rows;
}

// The coarse piece whose rows lie under the fine `box` (every dim but the channels).
template <class T>
const std::pair<Block, Buffer<T>>& coarse_piece_under(const Block& box, const HaloPieces<T>& coarse,
                                                      const std::vector<std::int64_t>& strides,
                                                      std::size_t channel_dim) {
  for (const auto& piece : coarse) {
    bool under = true;
    for (std::size_t d = 0; d < box.ranges.size() && under; ++d)
      under =
          d == channel_dim || (piece.first.ranges[d].begin * strides[d] <= box.ranges[d].begin &&
                               box.ranges[d].end <= piece.first.ranges[d].end * strides[d]);
    if (under) return piece;
  }
  throw Error("internal: no coarse rows arrived under a halo piece of the up-sampled tensor");
}

// Whether the up-sampled z (of `up_dims`) has the skip's dims in the same order and sizes, but
// for the channels, and z the same mesh axes for them as the skip, the channels split by neither:
// then the up-sampled z is laid out as the skip and joins it block by block.
template <class T>
bool laid_out_alike(const Tensor<T>& z, const std::vector<Dim>& up_dims, const Tensor<T>& skip,
                    const std::string& channels) {
  const Shape& fine = skip.shape();
  if (up_dims.size() != fine.rank() || z.layout().mesh_shape() != skip.layout().mesh_shape())
    return false;
  for (std::size_t d = 0; d < fine.rank(); ++d)
    if (z.shape()[d].name != fine[d].name ||
        (fine[d].name != channels && up_dims[d].size != fine[d].size) ||
        z.layout().mesh_axis_of(d) != skip.layout().mesh_axis_of(d))
      return false;
  return !z.layout().is_split(channels) && !skip.layout().is_split(channels);
}

}  // namespace detail

/**
 * conv(concat({skip, conv_transpose(batch_norm(z, ...), up.weight, up.window, channels) (its
 * output channels named `channels`) + up.bias}, channels), weight, window, channels) in training
 * mode: a U-Net decoder level's entry, the convolution's halo sent as the skip's rows and the raw
 * coarse rows of z before the statistics' all-gather. Where the up-sampling's windows do not tile
 * its output (kernel = stride), where its blocks do not nest in the skip's (uneven splits), where
 * z and the skip are laid out differently or split along the channels, where no spatial dim is
 * split, where halo_overlap() is off and where the concatenation is not laid out as the
 * convolution reads it, the ops run one after the other.
 */
template <class T, class W>
Tensor<T> batch_norm_up_conv(const Tensor<T>& z, const Tensor<W>& gamma, const Tensor<W>& beta,
                             const UpSampling<W>& up, const Tensor<T>& skip,
                             const Tensor<W>& weight, const Window& window,
                             const std::string& channels = "channels", double epsilon = 1e-5,
                             std::common_type_t<Moments<W>>* moments = nullptr,
                             Activation activation = Activation::none) {
  const std::vector<std::string> reduced = detail::batch_norm_reduced(z.shape(), channels);
  if (up.window.padding_mode() != PadMode::zeros || window.padding_mode() != PadMode::zeros) {
    // Each convolution pads its input first: the ops one after the other.
    const std::string up_channels =
        detail::conv_dims("conv_transpose", z.shape(), up.weight.shape(), up.window, channels, true)
            .out_channels.name;
    Tensor<T> u =
        rename(conv_transpose(batch_norm(z, gamma, beta, channels, epsilon, moments, activation),
                              up.weight, up.window, channels),
               up_channels, channels);
    if (up.bias.defined()) u = std::move(u) + up.bias;
    return conv_concat({skip, u}, weight, window, channels);
  }
  auto up_setup = detail::conv_setup("conv_transpose", z, up.weight, up.window, channels,
                                     /*transposed=*/true);
  const auto strides = detail::up_sampling_strides(z.shape(), up_setup.dims, up.window.spatial());
  const std::int64_t c_skip = skip.shape().dim(channels).size;
  const std::int64_t c_up = up_setup.dims.out_channels.size;
  const std::string up_channels = up_setup.dims.out_channels.name;
  auto up_sampled = [&](const Tensor<T>& y) {
    Tensor<T> u = rename(detail::convolve(std::move(up_setup), y, up.weight, channels), up_channels,
                         channels);
    return up.bias.defined() ? std::move(u) + up.bias : u;
  };
  // Every processor must take the same road, so the choice rests on layouts and shapes alone.
  const bool fits =
      !strides.empty() && detail::affine_per_key(z, reduced, gamma, beta) && halo_overlap() &&
      detail::laid_out_alike(z, up_setup.dims.output_dims, skip, channels) &&
      detail::blocks_nest(skip.layout(), strides) &&
      (!up.bias.defined() ||
       (up.bias.shape() == Shape{Dim(channels, c_up)} && up.bias.block().num_elements() == c_up)) &&
      up_setup.call.geometry.c_out == c_up;
  if (!fits) {
    const Tensor<T> y = batch_norm(z, gamma, beta, channels, epsilon, moments, activation);
    return conv_concat({skip, up_sampled(y)}, weight, window, channels);
  }
  Mesh& mesh = z.mesh();
  const std::size_t channel_dim = z.shape().position(channels);
  std::vector<Dim> joined_dims;
  for (const Dim& dim : skip.shape())
    joined_dims.push_back(dim.name == channels ? dim.resized(c_skip + c_up) : dim);
  const TensorLayout joined(Shape(joined_dims), skip.layout().mesh_shape(), skip.layout().layout());
  const detail::ConvDims dims =
      detail::conv_dims("conv", joined.shape(), weight.shape(), window, channels, false);
  const HaloNeeds needs = window_needs(joined, Shape(dims.output_dims), window.spatial(),
                                       dims.windows, /*transposed=*/false);
  const HaloExchange skip_rows(skip.layout(), mesh.coord(),
                               detail::with_channels(needs, channel_dim, c_skip),
                               tags::halo_beside);
  const HaloExchange raw_rows(
      z.layout(), mesh.coord(),
      detail::coarse_needs(needs, strides, channel_dim, z.shape()[channel_dim].size));
  auto skip_pending = skip_rows.begin(mesh, HaloForm::pieces, skip.array());
  auto raw_pending = raw_rows.begin(mesh, HaloForm::pieces, z.array());

  const detail::UpSampledRows<T, W> rows =
      detail::up_sampled_rows(up_setup.call, up, z.shape(), strides, channels);
  detail::NormApplied<T> applied;
  const Tensor<T> y =
      detail::normalize_affine(z, reduced, gamma, beta, epsilon, moments, activation, &applied);
  auto setup = detail::conv_setup<T>("conv", mesh, joined, weight, window, channels,
                                     /*transposed=*/false);
  detail::EarlyHalo<T> early{
      [&] {
        skip_pending.progress();
        raw_pending.progress();
      },
      [&] {
        HaloPieces<T> coarse = raw_rows.finish(mesh, std::move(raw_pending)).pieces;
        for (auto& [box, values] : coarse) applied(box, values);
        HaloPieces<T> pieces;
        for (auto& [box, values] : skip_rows.finish(mesh, std::move(skip_pending)).pieces) {
          Block whole = box;
          whole.ranges[channel_dim] = Range{0, c_skip + c_up};
          Buffer<T> joined_values(std::size_t(whole.num_elements()));
          if (values.space() != MemorySpace::none) {  // else a plan's piece: no values
            copy_box_between(box, values.data(), box, joined_values.data(), whole);
            const auto& [coarse_box, coarse_values] =
                detail::coarse_piece_under(whole, coarse, strides, channel_dim);
            rows(whole, c_skip, coarse_box, coarse_values, joined_values.data());
          }
          pieces.emplace_back(std::move(whole), std::move(joined_values));
        }
        return pieces;
      }};
  const bool aligned = joined == joined.with_layout(setup.layout);
  if (!aligned || setup.call.plan.halo.exchanged().empty()) {
    // The convolution reads the concatenation moved to another layout, or no halo: the rows
    // arrive unused, on every processor alike (and with no halo the concatenation is read as
    // its parts).
    early.finish();
    return conv_concat({skip, up_sampled(y)}, weight, window, channels);
  }
  // (The concatenation is laid out as `joined`, which the halo plans above assume too.)
  const Tensor<T> input = concat({skip, up_sampled(y)}, channels);
  return detail::convolve(std::move(setup), input, weight, channels, &early);
}

}  // namespace meshtensor
