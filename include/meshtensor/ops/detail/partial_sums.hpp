#pragma once
// Completing partial sums: a contraction over a split dim (a convolution's input channels) leaves
// each processor a partial sum of the whole output. All-reduced, every processor gets all of it;
// reduce-scattered over a dim of the output that the mesh axis is free to split, each gets only
// its share, for half the bytes, and a consumer that wants the output split (the next layer of a
// channel-split level) finds it so.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/detail/windowed.hpp"

namespace meshtensor::detail {

/// The mesh axes that split any of `dims` in `layout`.
inline AxisSet axes_splitting(const TensorLayout& layout, const std::vector<std::string>& dims) {
  AxisSet set = 0;
  for (const auto& d : dims)
    if (layout.shape().contains(d))
      if (auto axis = layout.mesh_axis_of(d)) set |= AxisSet{1} << *axis;
  return set;
}

template <class T>
void complete_partial_sums(Mesh& mesh, AxisSet axes, Array<T>& data) {
  if (axes) all_reduce(mesh.group(axes), data, ReduceOp::sum);
}

/// `output` with `dim` split over the mesh axis that splits `summed` in `input`, where that axis
/// leaves partial sums and is free in the output: the layout to reduce-scatter into. None where
/// nothing is summed across processors or the output cannot take the axis.
inline std::optional<TensorLayout> scattered_layout(const TensorLayout& input,
                                                    const std::string& summed,
                                                    const TensorLayout& output,
                                                    const std::string& dim) {
  const auto axis = input.mesh_axis_of(summed);
  if (!axis || output.is_split(dim) || output.dim_on_axis(*axis)) return std::nullopt;
  auto rules = output.layout().rules();
  rules.push_back({dim, output.mesh_shape()[*axis].name});
  return output.with_layout(Layout(std::move(rules)));
}

/// Sums `partial` (the whole output, laid out as `target` but unsplit along `dim`) over the mesh
/// axis that splits `dim` in `target`; returns this processor's block of `target`.
template <class T>
Array<T> reduce_scatter_along(Mesh& mesh, const Array<T>& partial, const TensorLayout& target,
                              const std::string& dim) {
  const std::size_t axis = *target.mesh_axis_of(dim);
  const std::size_t position = target.shape().position(dim);
  // `dim` first, so that each processor's share is one contiguous run.
  std::vector<std::size_t> order{position};
  for (std::size_t d = 0; d < target.rank(); ++d)
    if (d != position) order.push_back(d);
  const KernelOrderView<T> first(partial, order);  // no copy where `dim` is first already
  const std::size_t rest = partial.size() / std::max<std::size_t>(1, partial.shape()[position]);
  std::vector<std::size_t> counts;
  MeshCoord coord = mesh.coord();
  for (int k = 0; k < target.mesh_shape()[axis].size; ++k) {
    coord[axis] = k;
    counts.push_back(std::size_t(target.block(coord).ranges[position].size()) * rest);
  }
  const Block mine = target.block(mesh.coord());
  std::vector<std::size_t> shape;
  for (auto d : order) shape.push_back(std::size_t(mine.ranges[d].size()));
  Array<T> share = Array<T>::from_shape(shape);
  mesh.group(AxisSet{1} << axis)
      .reduce_scatter(first.data(), share.data(), counts, dtype_of<T>(), ReduceOp::sum,
                      partial.space());
  return from_kernel_order(std::move(share), order);
}

}  // namespace meshtensor::detail
