#pragma once
// Batch norm (and its activation), non-overlapping max pooling, then a convolution: the encoder's
// step from one U-Net level to the next. As in batch_norm_conv (ops/norm_conv.hpp), the
// convolution's halo leaves before the norm's statistics are agreed, so that no neighbour waits
// for the all-gather to let it go: here as the raw rows under the pooled rows it reads (stride
// times as many), which each receiver normalises and pools as their owner does its block.
// Normalisation with a positive or negative scale, ReLU and the maximum are applied to the same
// values in the same order, so the results are those of the three ops.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/detail/nested_blocks.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/pool.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// The pooling's stride along each dim of x (1 where it does not pool), where the windows tile the
// dims without padding; empty where they do not (another pooling: the ops run one by one, and
// max_pool names what is wrong with a window it cannot take).
template <class T>
std::vector<std::int64_t> tiling_strides(const Tensor<T>& x, Window pool) {
  if (!pool.has_kernel()) return {};
  pool.stride_defaults_to_kernel();  // as max_pool reads it
  std::vector<std::int64_t> strides(x.shape().rank(), 1);
  for (std::size_t i = 0; i < pool.spatial().size(); ++i) {
    if (!x.shape().contains(pool.spatial()[i])) return {};
    const std::size_t d = x.shape().position(pool.spatial()[i]);
    const std::int64_t n = x.shape()[d].size;
    const WindowDim w = pool.resolve("max_pool", i, n, pool.kernel_sizes()[i]);
    if (w.kernel != w.stride || w.dilation != 1 || w.pad_before != 0 || w.pad_after != 0 ||
        n % w.stride != 0)
      return {};
    strides[d] = w.stride;
  }
  return strides;
}

// What each block of the pooled x (x with its dims divided by `strides`) reads of it for the
// convolution by `weight` over `window`.
template <class T, class W>
HaloNeeds pooled_conv_needs(const Tensor<T>& x, const std::vector<std::int64_t>& strides,
                            const Tensor<W>& weight, const Window& window,
                            const std::string& channels) {
  std::vector<Dim> dims;
  for (std::size_t d = 0; d < x.shape().rank(); ++d)
    dims.push_back(x.shape()[d].resized(x.shape()[d].size / strides[d]));
  const Shape pooled(dims);
  const ConvDims conv = conv_dims("conv", pooled, weight.shape(), window, channels, false);
  const TensorLayout layout(pooled, x.layout().mesh_shape(), x.layout().layout());
  return window_needs(layout, Shape(conv.output_dims), window.spatial(), conv.windows,
                      /*transposed=*/false);
}

// The raw rows under the pooled rows each block's convolution reads.
inline HaloNeeds raw_needs(const HaloNeeds& pooled, const std::vector<std::int64_t>& strides) {
  HaloNeeds raw = pooled;
  for (std::size_t d = 0; d < raw.size(); ++d)
    for (Range& r : raw[d]) r = Range{r.begin * strides[d], r.end * strides[d]};
  return raw;
}

// A received raw piece, normalised (by `applied`) and max-pooled by the pooling kernels, where
// its blocks are (a GPU's or the host's): the pooled piece.
template <class T>
std::pair<Block, Buffer<T>> pooled_piece(const Block& box, Buffer<T>& raw,
                                         const std::vector<std::int64_t>& strides,
                                         const NormApplied<T>& applied) {
  applied(box, raw);
  Block pooled = box;
  for (std::size_t d = 0; d < strides.size(); ++d)
    pooled.ranges[d] = Range{box.ranges[d].begin / strides[d], box.ranges[d].end / strides[d]};
  Buffer<T> out(std::size_t(pooled.num_elements()));
  if (raw.space() == MemorySpace::none) return {pooled, std::move(out)};  // a plan's piece
  const kernels::PoolGeometry g = *kernels::tiling_pool_geometry(box.sizes(), strides);
  Buffer<std::uint8_t> workspace(kernels::max_pool_workspace_bytes<T>(g));
  kernels::max_pool_forward(g, raw.data(), out.data(), workspace.data());
  return {std::move(pooled), std::move(out)};
}

}  // namespace detail

/**
 * {batch_norm(x, ...), conv(max_pool(batch_norm(x, ...), pool), weight, window, channels)} in
 * training mode: the normalised x (a U-Net level's skip) and the convolution of its pooling, the
 * convolution's halo sent as raw x before the statistics' all-gather. Where the pooling does not
 * tile the split dims block by block, where the pooled dims and those between them are more than
 * three, where no spatial dim is split, where halo_overlap() is off and where the pooled tensor is
 * not laid out as the convolution reads it, the three ops run one after the other.
 */
template <class T, class W>
std::pair<Tensor<T>, Tensor<T>> batch_norm_pool_conv(
    const Tensor<T>& x, const Tensor<W>& gamma, const Tensor<W>& beta, const Window& pool,
    const Tensor<W>& weight, const Window& window, const std::string& channels = "channels",
    double epsilon = 1e-5, std::common_type_t<Moments<W>>* moments = nullptr,
    Activation activation = Activation::none) {
  const std::vector<std::string> reduced = detail::batch_norm_reduced(x.shape(), channels);
  const auto strides = detail::tiling_strides(x, pool);
  // Every processor must take the same road, so the choice rests on layouts and shapes alone.
  if (strides.empty() || pool.padding_mode() != PadMode::zeros ||
      window.padding_mode() != PadMode::zeros ||
      !kernels::tiling_pool_geometry(x.shape().sizes(), strides) ||
      !detail::affine_per_key(x, reduced, gamma, beta) || !halo_overlap() ||
      !detail::blocks_nest(x.layout(), strides)) {
    Tensor<T> y = batch_norm(x, gamma, beta, channels, epsilon, moments, activation);
    Tensor<T> out = conv(max_pool(y, pool), weight, window, channels);
    return {std::move(y), std::move(out)};
  }
  Mesh& mesh = x.mesh();
  const HaloExchange raw(
      x.layout(), mesh.coord(),
      detail::raw_needs(detail::pooled_conv_needs(x, strides, weight, window, channels), strides));
  auto pending = raw.begin(mesh, HaloForm::pieces, x.array());
  detail::NormApplied<T> applied;
  Tensor<T> y =
      detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation, &applied);
  const Tensor<T> pooled = max_pool(y, pool);
  auto setup = detail::conv_setup("conv", pooled, weight, window, channels, /*transposed=*/false);
  detail::EarlyHalo<T> early{
      [&] { pending.progress(); },
      [&] {
        HaloPieces<T> pieces;
        for (auto& [box, values] : raw.finish(mesh, std::move(pending)).pieces)
          pieces.push_back(detail::pooled_piece(box, values, strides, applied));
        return pieces;
      }};
  const bool aligned = pooled.layout() == pooled.layout().with_layout(setup.layout);
  if (!aligned || setup.call.plan.halo.exchanged().empty()) {
    // The convolution reads the pooled tensor moved to another layout, or no halo: the raw rows
    // arrive unused, on every processor alike.
    early.finish();
    return {std::move(y), detail::convolve(std::move(setup), pooled, weight, channels)};
  }
  Tensor<T> out = detail::convolve(std::move(setup), pooled, weight, channels, &early);
  return {std::move(y), std::move(out)};
}

}  // namespace meshtensor
