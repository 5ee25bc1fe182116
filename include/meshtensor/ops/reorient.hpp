#pragma once
// Moving a tensor's elements by a signed permutation of its axes: flips, transposes and 90°
// rotations. Every processor receives each part of its new block from the processor that holds it
// (ops/detail/moved_blocks.hpp, as a relayout does); on a split dim a flip or a rotation moves data
// between processors, on any mesh, and the result equals one processor's.

#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/detail/moved_blocks.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// `tensor` as `shape` under its own layout, its axes read as `how` says.
template <class T>
Tensor<T> reorient_to(const Tensor<T>& tensor, const Shape& shape, const Reorientation& how) {
  return move_blocks(tensor, TensorLayout(shape, tensor.mesh().shape(), tensor.layout().layout()),
                     how, tags::reorient);
}

// The reoriented tensor, whose gradient goes back by the inverse reorientation.
template <class T>
Tensor<T> reorient(const Tensor<T>& tensor, const Shape& shape, const Reorientation& how) {
  auto out = reorient_to(tensor, shape, how);
  autodiff::record(out, {tensor},
                   [source = tensor.shape(), back = how.inverse()](const Tensor<T>& g,
                                                                   const std::vector<bool>&) {
                     return std::vector<Tensor<T>>{reorient_to(g, source, back)};
                   });
  return out;
}

}  // namespace detail

/**
 * `t` in reverse order along `dim`: element i of the dim becomes element n - 1 - i. The layout
 * stays; on a split dim each processor's block comes from its mirror processor.
 *
 * ```cpp
 * auto mirrored = flip(volume, "x");   // left-right, also where "x:rows" splits it
 * ```
 */
template <class T>
Tensor<T> flip(const Tensor<T>& t, const std::string& dim) {
  auto how = detail::identity_reorientation(t.shape().rank());
  how.reversed[detail::position_in("flip", t, dim)] = true;
  return detail::reorient(t, t.shape(), how);
}

/// `t` with its dims in `order` (the same names, each once), each keeping its split.
template <class T>
Tensor<T> transpose(const Tensor<T>& t, const DimNames& order) {
  const Shape& shape = t.shape();
  if (order.size() != shape.rank())
    throw ShapeError("transpose to " + detail::quote_list(order.names()) +
                     ": the tensor's dims are " + detail::quote_list(shape.names()) +
                     "; name each of them once");
  auto how = detail::identity_reorientation(shape.rank());
  std::vector<Dim> dims;
  std::vector<bool> named(shape.rank(), false);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::size_t from = shape.position(order.names()[i]);
    if (named[from])
      throw ShapeError("transpose to " + detail::quote_list(order.names()) + " names dim " +
                       detail::quote(order.names()[i]) + " twice");
    named[from] = true;
    how.from[i] = from;
    dims.push_back(shape[from]);
  }
  return detail::reorient(t, Shape(dims), how);
}

/**
 * `t` turned by `quarter_turns` × 90° in the plane of dims `from` and `to`, from `from` towards
 * `to` (numpy's rot90 with axes (from, to)). The dims keep their names and places; where their
 * sizes differ, an odd number of turns swaps them.
 *
 * ```cpp
 * auto turned = rotate90(volume, "x", "y");   // an axial slice turned a quarter
 * ```
 */
template <class T>
Tensor<T> rotate90(const Tensor<T>& t, const std::string& from, const std::string& to,
                   int quarter_turns = 1) {
  const Shape& shape = t.shape();
  const std::size_t a = detail::position_in("rotate90", t, from),
                    b = detail::position_in("rotate90", t, to);
  if (a == b)
    throw ShapeError("rotate90 in the plane of \"" + from + "\" and \"" + to +
                     "\": a plane needs two different dims");
  const int turns = ((quarter_turns % 4) + 4) % 4;
  auto how = detail::identity_reorientation(shape.rank());
  std::vector<Dim> dims = shape.dims();
  if (turns % 2 == 1) {
    how.from[a] = b;
    how.from[b] = a;
    dims[a] = Dim(from, shape[b].size);
    dims[b] = Dim(to, shape[a].size);
  }
  // numpy: one turn is flip(swap(m), first); three, flip(swap(m), second); two, both flipped.
  how.reversed[a] = turns == 1 || turns == 2;
  how.reversed[b] = turns == 3 || turns == 2;
  if (turns == 0) return t;
  return detail::reorient(t, Shape(dims), how);
}

}  // namespace meshtensor
