#pragma once
// Moving a tensor to another layout on the same mesh. One rule covers all-gather, all-to-all and
// local slicing: every processor receives each part of its new block from the processor that holds
// that part in the old layout *and* shares its coordinates on the mesh axes the old layout leaves
// unused. Where the old layout replicates and the new one splits, that processor is itself, and
// nothing moves.

#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/ops/detail/moved_blocks.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

template <class T>
Tensor<T> relayout_to(const Tensor<T>& tensor, const TensorLayout& target) {
  if (target == tensor.layout()) return tensor;
  return move_blocks(tensor, target, identity_reorientation(tensor.rank()), tags::relayout);
}

}  // namespace detail

/**
 * The same global tensor under another layout. Where the new layout splits a dim the old one
 * replicated, processors slice locally; where it replicates a dim the old one split, blocks are
 * gathered; a dim moving between mesh axes is an all-to-all.
 *
 * ```cpp
 * auto by_rows = relayout(t, "x:rows");    // was "y:rows"
 * ```
 */
template <class T>
Tensor<T> relayout(const Tensor<T>& tensor, const Layout& layout) {
  auto moved = detail::relayout_to(tensor, tensor.layout().with_layout(layout));
  if (moved.layout() == tensor.layout()) return moved;
  // The gradient goes back the way the data came.
  autodiff::record(moved, {tensor},
                   [source = tensor.layout()](const Tensor<T>& g, const std::vector<bool>&) {
                     return std::vector<Tensor<T>>{detail::relayout_to(g, source)};
                   });
  return moved;
}

/// The whole global array, on every processor, in the host's memory (tests and small data: it
/// needs the full memory).
template <class T>
xt::xarray<T> gather(const Tensor<T>& tensor) {
  const auto whole = detail::relayout_to(tensor, tensor.layout().with_layout(Layout{}));
  xt::xarray<T> out = xt::xarray<T>::from_shape(whole.array().shape());
  copy_to_host(whole.array().data(), whole.array().space(), std::int64_t(out.size()), out.data());
  return out;
}

}  // namespace meshtensor
