#pragma once
// one_hot: class numbers or token ids (whole numbers in a floating tensor) as indicator vectors
// along a new named dim, which may be split like any other: each processor compares its ids with
// the indices of its part of the new dim.

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/tensor/create.hpp"

namespace meshtensor {
namespace detail {
// The indices 0 .. size - 1 along `dim`, laid out by `layout`, made once per processor: a step's
// one_hot compares with them without making them again (on a GPU, without a copy from the host).
template <class I>
struct IndicesMade {
  std::map<std::string, Tensor<I>> by_layout;
};
template <class I>
const Tensor<I>& indices_along(Mesh& mesh, const Dim& dim, const Layout& layout) {
  auto& made = mesh.context<IndicesMade<I>>().by_layout;
  const std::string key = TensorLayout(Shape{dim}, mesh.shape(), layout).to_string();
  auto found = made.find(key);
  if (found == made.end())
    found = made.emplace(key, generate<I>(mesh, Shape{dim}, layout,
                                          [&](const Index& i) { return I(double(i[dim.name])); }))
                .first;
  return found->second;
}

// The largest whole number below which every whole number is exact in T.
template <class T>
constexpr std::int64_t exact_whole_numbers() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return std::int64_t(1) << 8;
  else if constexpr (std::is_same_v<T, float>)
    return std::int64_t(1) << 24;
  else
    return std::int64_t(1) << 53;
}
}  // namespace detail

/**
 * [ids' dims..., dim]: 1 where the index along `dim` equals the id, else 0. `layout` may split
 * `dim` (the result's other dims keep ids' splits). An id outside [0, dim's size), or not a whole
 * number, gives a row of zeros, as TensorFlow's one_hot does: a loss then ignores its position.
 * The result has ids' element type unless T names another; no gradient flows to the ids.
 *
 * ```cpp
 * auto hot = one_hot(tokens, Dim("vocab", 512), "vocab:cols");   // [batch, seq, vocab]
 * ```
 */
template <class T = void, class I>
auto one_hot(const Tensor<I>& ids, const Dim& dim, const Layout& layout = {}) {
  static_assert(is_floating_v<I>, "one_hot: ids are whole numbers held in a floating tensor");
  using Out = std::conditional_t<std::is_void_v<T>, I, T>;
  if (ids.shape().contains(dim.name))
    throw ShapeError("one_hot: ids " + ids.shape().to_string() + " already have dim " +
                     detail::quote(dim.name) + "; name the new dim something else");
  if (dim.size > detail::exact_whole_numbers<I>())
    throw ShapeError("one_hot: dim " + detail::quote(dim.name) + " has " +
                     std::to_string(dim.size) + " entries but ids of this element type hold " +
                     "whole numbers exactly only below " +
                     std::to_string(detail::exact_whole_numbers<I>()) + "; give ids as float");
  return cast<Out>(equal(ids.detach(), detail::indices_along<I>(ids.mesh(), dim, layout)));
}

}  // namespace meshtensor
