#pragma once
// Relabelling dims without moving data: rename one dim, split one dim into two (row-major: the
// first new dim varies slowest), merge two neighbouring dims into one. A dim that is split over
// the mesh is first gathered along its axis (a relayout), since its blocks would not line up with
// the new dims.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// The same data under another shape whose blocks have the same row-major extent on this
// processor; the gradient is the same relabelling backwards.
template <class T>
Tensor<T> relabel(Tensor<T> t, const Shape& shape, const Layout& layout) {
  TensorLayout target(shape, t.mesh().shape(), layout);
  Array<T> data = t.release_local();  // moved when the caller gave its tensor away
  data.reshape(to_xshape(target.block(t.mesh().coord()).sizes()));
  Tensor<T> out(t.mesh(), target, std::move(data));
  // The gradient's block is handed back relabelled where nothing else holds it (it is copied
  // otherwise): every named convolution output renames its channels, so a copy here is a pass.
  autodiff::record(out, {t}, [source = t.layout()](Tensor<T> g, const std::vector<bool>&) {
    Array<T> back = g.release_local();
    back.reshape(to_xshape(source.block(g.mesh().coord()).sizes()));
    return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), source, std::move(back))};
  });
  return out;
}

// `t` with `dim` replicated (gathered along its mesh axis if split).
template <class T>
Tensor<T> unsplit(const Tensor<T>& t, const std::string& dim) {
  if (!t.layout().is_split(dim)) return t;
  std::vector<LayoutRule> rules;
  for (const auto& rule : t.layout().layout().rules())
    if (rule.dim != dim) rules.push_back(rule);
  return relayout(t, Layout(rules));
}

}  // namespace detail

/// `dim` renamed to `to`, keeping its size, position and split. Free for an rvalue (`y =
/// rename(std::move(y), ...)`): the block is handed over, not copied.
template <class T>
Tensor<T> rename(Tensor<T> t, const std::string& dim, const std::string& to) {
  const std::size_t d = detail::position_in("rename", t, dim);
  if (to != dim && t.shape().contains(to))
    throw ShapeError("rename of dim " + detail::quote(dim) + ": tensor " + t.layout().to_string() +
                     " already has a dim " + detail::quote(to) + "; every dim needs its own name");
  std::vector<Dim> dims = t.shape().dims();
  dims[d] = Dim(to, dims[d].size);
  std::vector<LayoutRule> rules;
  for (auto rule : t.layout().layout().rules()) {
    if (rule.dim == dim) rule.dim = to;
    rules.push_back(rule);
  }
  return detail::relabel(std::move(t), Shape(dims), Layout(rules));
}

/// A new dim of size 1 named `name`, at `position` (last by default): a channel dim for a volume,
/// a batch dim for a single volume. Free: the blocks keep their data and their splits.
template <class T>
Tensor<T> append_dim(const Tensor<T>& t, const std::string& name, std::size_t position = SIZE_MAX) {
  std::vector<Dim> dims = t.shape().dims();
  dims.insert(dims.begin() + std::min(position, dims.size()), Dim(name, 1));
  return detail::relabel(t, Shape(dims), t.layout().layout());
}

/// Dim `name` (of size 1) removed. Free, like append_dim.
template <class T>
Tensor<T> drop_dim(const Tensor<T>& t, const std::string& name) {
  const std::int64_t size = detail::size_in("drop_dim", t, name);
  if (size != 1)
    throw ShapeError("drop_dim: dim " + detail::quote(name) + " has size " + std::to_string(size) +
                     "; only a dim of size 1 can be dropped");
  std::vector<Dim> dims;
  for (const auto& d : t.shape())
    if (d.name != name) dims.push_back(d);
  return detail::relabel(t, Shape(dims), t.layout().layout());
}

/// `dim` split into `outer` and `inner` (outer.size * inner.size == dim's size), row-major.
template <class T>
Tensor<T> split_dim(const Tensor<T>& t, const std::string& dim, const Dim& outer,
                    const Dim& inner) {
  const auto& old = t.shape()[detail::position_in("split_dim", t, dim)];
  if (outer.size * inner.size != old.size)
    throw ShapeError("split_dim: " + old.name + "=" + std::to_string(old.size) +
                     " cannot split into " + outer.name + "=" + std::to_string(outer.size) + " x " +
                     inner.name + "=" + std::to_string(inner.size));
  auto whole = detail::unsplit(t, dim);
  std::vector<Dim> dims;
  for (const auto& d : whole.shape()) {
    if (d.name != dim) {
      dims.push_back(d);
      continue;
    }
    dims.push_back(outer);
    dims.push_back(inner);
  }
  const Layout layout = whole.layout().layout();
  return detail::relabel(std::move(whole), Shape(dims), layout);
}

/// The neighbouring dims `outer` and `inner` (in that order) merged into one dim `merged`.
template <class T>
Tensor<T> merge_dims(const Tensor<T>& t, const std::string& outer, const std::string& inner,
                     const std::string& merged) {
  const std::size_t a = detail::position_in("merge_dims", t, outer),
                    b = detail::position_in("merge_dims", t, inner);
  if (b != a + 1)
    throw ShapeError("merge_dims: " + detail::quote(outer) + " and " + detail::quote(inner) +
                     " must be neighbours, in that order, in " + t.shape().to_string());
  auto whole = detail::unsplit(detail::unsplit(t, outer), inner);
  std::vector<Dim> dims;
  for (std::size_t d = 0; d < whole.rank(); ++d) {
    if (d == b) continue;
    dims.push_back(d == a ? Dim(merged, whole.shape()[a].size * whole.shape()[b].size)
                          : whole.shape()[d]);
  }
  const Layout layout = whole.layout().layout();
  return detail::relabel(std::move(whole), Shape(dims), layout);
}

}  // namespace meshtensor
