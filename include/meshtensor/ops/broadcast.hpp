#pragma once
// Moving between a tensor and one with more dims: broadcast_to repeats a tensor over dims it lacks
// (the gradient of a reduction), sum_to sums a gradient back onto an operand's dims (the gradient
// of a broadcasting op). Both end in the layout they are given.

#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/einsum.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// `t` summed over the dims `target` lacks, in `target`'s dim order and layout.
template <class T>
Tensor<T> sum_to(const Tensor<T>& t, const TensorLayout& target) {
  if (t.layout() == target) return t;
  return detail::relayout_to(einsum({t}, DimNames(target.shape())), target);
}

namespace detail {
/// sum_to for a gradient (no history) kept in another element type: a bfloat16 gradient summed in
/// double onto an fp32 parameter, rounded once into fp32.
template <class Out, class T>
Tensor<Out> sum_to_as(const Tensor<T>& t, const TensorLayout& target) {
  if constexpr (std::is_same_v<Out, T>) {
    return sum_to(t, target);
  } else {
    return relayout_to(einsum_values<Out>(std::vector<Tensor<T>>{t}, DimNames(target.shape())),
                       target);
  }
}
}  // namespace detail

/**
 * `t` repeated over the dims of `target` it lacks, laid out as `target`. Each processor fills its
 * block from its part of `t`; nothing moves unless `t` is split differently from `target`.
 */
template <class T>
Tensor<T> broadcast_to(const Tensor<T>& t, const TensorLayout& target) {
  for (const auto& dim : t.shape())
    if (!target.shape().contains(dim.name) || target.shape().dim(dim.name) != dim)
      throw ShapeError("broadcast_to: dim " + dim.name + "=" + std::to_string(dim.size) + " of " +
                       t.layout().to_string() + " is not in the target " + target.to_string());
  Mesh& mesh = t.mesh();
  const auto aligned = detail::relayout_to(t, t.layout().with_layout(target.layout()));
  const auto sizes = target.block(mesh.coord()).sizes();
  Array<T> out = detail::new_block<T>(mesh, target, target.block(mesh.coord()));
  const std::array<kernels::Strides, 2> strides{
      detail::strides_over(aligned.shape(), aligned.block().sizes(), target.shape().names()),
      kernels::row_major_strides(sizes)};
  const T* in = aligned.array().data();
  T* o = out.data();
  kernels::copy_box(sizes, in, strides[0], o, strides[1]);
  Tensor<T> result(mesh, target, std::move(out));
  autodiff::record(result, {t},
                   [source = t.layout()](const Tensor<T>& g, const std::vector<bool>&) {
                     return std::vector<Tensor<T>>{sum_to(g, source)};
                   });
  return result;
}

}  // namespace meshtensor
