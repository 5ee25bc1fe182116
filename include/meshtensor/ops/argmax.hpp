#pragma once
// The index of the largest element along a named dim (the predicted class of each voxel). The dim
// is gathered first if it is split; the result keeps the other dims and their splits.

#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// For each index of the other dims, the position along `dim` of the maximum (the first on ties).
template <class Out = std::int32_t, class T>
Tensor<Out> argmax(const Tensor<T>& t, const std::string& dim) {
  detail::position_in("argmax", t, dim);
  const auto whole = detail::unsplit(t, dim);
  const Shape& shape = whole.shape();
  const std::size_t d = shape.position(dim);
  std::vector<Dim> kept;
  for (const auto& x : shape)
    if (x.name != dim) kept.push_back(x);
  const auto sizes = whole.block().sizes();
  std::int64_t outer = 1, inner = 1;
  for (std::size_t e = 0; e < d; ++e) outer *= sizes[e];
  for (std::size_t e = d + 1; e < sizes.size(); ++e) inner *= sizes[e];
  const std::int64_t n = sizes[d];
  TensorLayout layout(Shape(kept), whole.mesh().shape(), whole.layout().layout());
  Array<Out> out = detail::new_block<Out>(whole.mesh(), layout, layout.block(whole.mesh().coord()));
  kernels::argmax(whole.array().data(), outer, n, inner, out.data());
  return Tensor<Out>(whole.mesh(), std::move(layout), std::move(out));
}

}  // namespace meshtensor
