#pragma once
// Tensor<T>: a global named shape placed on a mesh, and this processor's block of it. A Tensor is a
// handle: copies share the block (as in PyTorch); clone() copies the data.

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/tensor_layout.hpp"

namespace meshtensor {

namespace detail {
inline std::vector<std::size_t> to_xshape(const std::vector<std::int64_t>& sizes) {
  return std::vector<std::size_t>(sizes.begin(), sizes.end());
}
}  // namespace detail

/**
 * A distributed tensor: its global Shape, its TensorLayout on the mesh, and the local block this
 * processor holds (a row-major xtensor array with one axis per dim, in shape order).
 *
 * ```cpp
 * auto t = generate<float>(mesh, "x:8, y:4", "x:rows", [](const Index& i) { return i["x"]; });
 * t.block().ranges[0];   // on rows=1 of rows:2 → [4,8)
 * t.local()(0, 0);       // 4.0f: the global element (4, 0)
 * ```
 */
template <class T>
class Tensor {
 public:
  using value_type = T;
  using array_type = xt::xarray<T>;

  Tensor() = default;

  /// Wraps a block this processor already holds; its shape must be this processor's block shape.
  Tensor(Mesh& mesh, TensorLayout layout, array_type local) : mesh_(&mesh) {
    if (layout.mesh_shape() != mesh.shape())
      throw LayoutError("tensor " + layout.to_string() + " is laid out on mesh " +
                        layout.mesh_shape().to_string() + " but this mesh is " +
                        mesh.shape().to_string());
    Block block = layout.block(mesh.coord());
    const auto expected = detail::to_xshape(block.sizes());
    if (!std::equal(expected.begin(), expected.end(), local.shape().begin(), local.shape().end()))
      throw ShapeError("local block of tensor " + layout.to_string() + " on processor " +
                       std::to_string(mesh.processor()) + " has the wrong shape; expected " +
                       shape_string(expected) + ", got " +
                       shape_string({local.shape().begin(), local.shape().end()}));
    state_ = std::make_shared<State>(State{std::move(layout), std::move(block), std::move(local)});
  }

  bool defined() const { return state_ != nullptr; }
  Mesh& mesh() const { return *mesh_; }
  const TensorLayout& layout() const { return state().layout; }
  const Shape& shape() const { return state().layout.shape(); }
  std::size_t rank() const { return shape().rank(); }
  /// The global index ranges of this processor's block.
  const Block& block() const { return state().block; }

  array_type& local() { return state().local; }
  const array_type& local() const { return state().local; }

  /// The value of a tensor without dims (a reduction's result); the same on every processor.
  T item() const {
    if (rank() != 0)
      throw ShapeError("item() needs a tensor without dims, but this tensor is " +
                       layout().to_string() + "; reduce it first");
    return *local().data();
  }

  /// A tensor with its own copy of the data.
  Tensor clone() const { return Tensor(mesh(), layout(), array_type(local())); }

  std::string to_string() const {
    return "Tensor " + layout().to_string() + " on mesh " + layout().mesh_shape().to_string();
  }
  friend std::ostream& operator<<(std::ostream& out, const Tensor& t) {
    return out << t.to_string();
  }

 private:
  struct State {
    TensorLayout layout;
    Block block;
    array_type local;
  };

  const State& state() const {
    if (!state_)
      throw Error("use of an empty meshtensor::Tensor (default-constructed, never assigned)");
    return *state_;
  }
  State& state() {
    if (!state_)
      throw Error("use of an empty meshtensor::Tensor (default-constructed, never assigned)");
    return *state_;
  }

  static std::string shape_string(const std::vector<std::size_t>& sizes) {
    std::string out = "(";
    for (std::size_t i = 0; i < sizes.size(); ++i)
      out += (i ? ", " : "") + std::to_string(sizes[i]);
    return out + ")";
  }

  Mesh* mesh_ = nullptr;
  std::shared_ptr<State> state_;
};

}  // namespace meshtensor
