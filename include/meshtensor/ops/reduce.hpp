#pragma once
// Reductions over named dims. Each processor reduces its block, then the processors that split a
// reduced dim combine their partial results with one all-reduce over those mesh axes. The result
// keeps the other dims and their splits.

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/kernels/common/accumulator.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/broadcast.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

template <class T>
Tensor<T> reduce(const Tensor<T>& t, const DimNames& reduced, ReduceOp op, const std::string& name,
                 bool mean = false) {
  require_dims(name, t, reduced);
  std::vector<std::string> kept_names, reduced_names;
  std::vector<Dim> kept_dims;
  kernels::Sizes kept_sizes, reduced_sizes;
  std::int64_t reduced_count = 1;
  AxisSet partial_axes = 0;
  const auto block_sizes = t.block().sizes();
  for (std::size_t d = 0; d < t.rank(); ++d) {
    const Dim& dim = t.shape()[d];
    if (reduced.contains(dim.name)) {
      reduced_names.push_back(dim.name);
      reduced_sizes.push_back(block_sizes[d]);
      reduced_count *= dim.size;
      if (auto axis = t.layout().mesh_axis_of(d)) partial_axes |= AxisSet{1} << *axis;
    } else {
      kept_names.push_back(dim.name);
      kept_dims.push_back(dim);
      kept_sizes.push_back(block_sizes[d]);
    }
  }
  kernels::FoldOperand<T> operand{t.array().data(),
                                  strides_over(t.shape(), block_sizes, kept_names),
                                  strides_over(t.shape(), block_sizes, reduced_names)};

  // Sums accumulate in double (int64 for integers) and are combined across processors in that
  // type, so the result does not depend on the split beyond the final rounding.
  auto finish = [&](auto& partial) {
    using Acc = typename std::decay_t<decltype(partial)>::value_type;
    if (partial_axes) all_reduce(t.mesh().group(partial_axes), partial, op);
    TensorLayout layout(Shape(kept_dims), t.mesh().shape(), t.layout().layout());
    Array<T> out = Array<T>::from_shape(to_xshape(kept_sizes));
    const auto count = static_cast<std::int64_t>(partial.size());
    bool copied = false;
    if constexpr (std::is_same_v<Acc, T>) {
      if (!mean) {  // max, min, and sums of doubles: as they are (where the processor computes)
        kernels::copy_box(kernels::Sizes{count}, partial.data(), kernels::Strides{1}, out.data(),
                          kernels::Strides{1});
        copied = true;
      }
    }
    if (!copied)
      kernels::narrow(partial.data(), out.data(), count, mean ? double(reduced_count) : 1.0);
    return Tensor<T>(t.mesh(), std::move(layout), std::move(out));
  };
  const auto n = static_cast<std::size_t>(kernels::num_elements(kept_sizes));
  if (op == ReduceOp::sum) {
    using Acc = kernels::accumulator_t<T>;
    Buffer<Acc> partial(n);
    kernels::sum<Acc, T, 1>(kept_sizes, reduced_sizes, {operand}, partial.data());
    return finish(partial);
  }
  // An empty block (a dim smaller than its mesh axis) contributes the identity of max or min.
  const bool is_max = op == ReduceOp::max;
  const T identity =
      std::numeric_limits<T>::has_infinity
          ? (is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
          : (is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
  Buffer<T> partial(n);
  kernels::extreme(kept_sizes, reduced_sizes, operand, partial.data(), is_max, identity);
  return finish(partial);
}

inline DimNames all_dims(const Shape& shape) { return DimNames(shape); }

// The differentiable reduction: sums spread the gradient evenly over what they summed; max and min
// give it to the elements that attained the result, shared equally among ties.
template <class T>
Tensor<T> reduce_recorded(const Tensor<T>& t, const DimNames& reduced, ReduceOp op,
                          const std::string& name, bool mean = false) {
  auto out = reduce(t, reduced, op, name, mean);
  if (op == ReduceOp::sum) {
    const T scale = mean ? T(out.shape().num_elements()) / T(t.shape().num_elements()) : T(1);
    autodiff::record(out, {t},
                     [layout = t.layout(), scale](const Tensor<T>& g, const std::vector<bool>&) {
                       if (scale == T(1)) return std::vector<Tensor<T>>{broadcast_to(g, layout)};
                       // Scaled before spreading: the small tensor, not the big one.
                       return std::vector<Tensor<T>>{broadcast_to(g * scale, layout)};
                     });
  } else {
    autodiff::record(
        out, {t}, [t, out = out.detach(), reduced](const Tensor<T>& g, const std::vector<bool>&) {
          auto attained = zip_values(t, broadcast_to(out, t.layout()),
                                     binary_op<BinaryOp::equal_mask, T>(), "mask");
          auto ties = reduce(attained, reduced, ReduceOp::sum, "ties");
          auto share = zip_values(g, ties, binary_op<BinaryOp::divide, T>(), "share");
          return std::vector<Tensor<T>>{
              detail::relayout_to(zip_values(attained, broadcast_to(share, t.layout()),
                                             binary_op<BinaryOp::multiply, T>(), "route"),
                                  t.layout())};
        });
  }
  return out;
}

}  // namespace detail

/**
 * Sum over the named dims (all dims when none are named); the result keeps the other dims.
 *
 * ```cpp
 * auto per_channel = reduce_sum(t, {"batch", "x", "y", "z"});   // [channels]
 * float total = reduce_sum(t).item();                           // same on every processor
 * ```
 */
template <class T>
Tensor<T> reduce_sum(const Tensor<T>& t, const DimNames& dims) {
  return detail::reduce_recorded(t, dims, ReduceOp::sum, "reduce_sum");
}
template <class T>
Tensor<T> reduce_sum(const Tensor<T>& t) {
  return reduce_sum(t, detail::all_dims(t.shape()));
}

/// Mean over the named dims: the sum divided by the product of their global sizes.
template <class T>
Tensor<T> reduce_mean(const Tensor<T>& t, const DimNames& dims) {
  return detail::reduce_recorded(t, dims, ReduceOp::sum, "reduce_mean", /*mean=*/true);
}
template <class T>
Tensor<T> reduce_mean(const Tensor<T>& t) {
  return reduce_mean(t, detail::all_dims(t.shape()));
}

template <class T>
Tensor<T> reduce_max(const Tensor<T>& t, const DimNames& dims) {
  return detail::reduce_recorded(t, dims, ReduceOp::max, "reduce_max");
}
template <class T>
Tensor<T> reduce_max(const Tensor<T>& t) {
  return reduce_max(t, detail::all_dims(t.shape()));
}

template <class T>
Tensor<T> reduce_min(const Tensor<T>& t, const DimNames& dims) {
  return detail::reduce_recorded(t, dims, ReduceOp::min, "reduce_min");
}
template <class T>
Tensor<T> reduce_min(const Tensor<T>& t) {
  return reduce_min(t, detail::all_dims(t.shape()));
}

}  // namespace meshtensor
