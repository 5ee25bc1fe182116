#pragma once
// Making distributed tensors. Each processor fills only its own block, from a function of global
// coordinates, so no processor ever holds the whole volume; scatter() from a full array is for
// tests and small data.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/shape.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// A global index of a tensor, readable by dim name or by position. It refers to the caller's
/// coordinates and is valid only during the call it is passed to.
class Index {
 public:
  Index(const Shape& shape, const std::vector<std::int64_t>& coords)
      : shape_(&shape), coords_(&coords) {}

  std::int64_t operator[](std::string_view dim) const { return (*coords_)[shape_->position(dim)]; }
  std::int64_t operator[](std::size_t position) const { return coords_->at(position); }
  const std::vector<std::int64_t>& coords() const { return *coords_; }
  const Shape& shape() const { return *shape_; }

 private:
  const Shape* shape_;
  const std::vector<std::int64_t>* coords_;
};

/**
 * A tensor whose element at global index i is `fn(i)`; each processor evaluates fn on its block
 * only.
 *
 * ```cpp
 * auto ramp = generate<float>(mesh, "x:8, y:4", "x:rows",
 *                             [](const Index& i) { return float(10 * i["x"] + i["y"]); });
 * ```
 */
template <class T, class F>
Tensor<T> generate(Mesh& mesh, const Shape& shape, const Layout& layout, F&& fn) {
  TensorLayout tensor_layout(shape, mesh.shape(), layout);
  const Block block = tensor_layout.block(mesh.coord());
  Array<T> local = detail::new_block<T>(mesh, tensor_layout, block);
  // A plan's block has no values to compute: `fn` is not called.
  const std::int64_t n = local.space() == MemorySpace::none ? 0 : block.num_elements();
  std::vector<T> staging;  // the host computes the values: see writable_on_host
  T* out = writable_on_host(local, staging);
  const auto sizes = block.sizes();
  const auto& global = tensor_layout.shape();
  // Walk the block in row-major order, carrying the global coordinates along.
  std::vector<std::int64_t> coords = block.offsets();
  const Index index(global, coords);
  for (std::int64_t linear = 0; linear < n; ++linear) {
    out[linear] = static_cast<T>(fn(index));
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (++coords[d] < block.ranges[d].end) break;
      coords[d] = block.ranges[d].begin;
    }
  }
  written_on_host(staging, local);
  return Tensor<T>(mesh, std::move(tensor_layout), std::move(local));
}

template <class T>
Tensor<T> full(Mesh& mesh, const Shape& shape, const Layout& layout, T value) {
  TensorLayout tensor_layout(shape, mesh.shape(), layout);
  const Block block = tensor_layout.block(mesh.coord());
  Array<T> local = detail::new_block<T>(mesh, tensor_layout, block);
  kernels::fill_values(local.data(), std::int64_t(local.size()), value);
  return Tensor<T>(mesh, std::move(tensor_layout), std::move(local));
}

template <class T>
Tensor<T> zeros(Mesh& mesh, const Shape& shape, const Layout& layout = {}) {
  return full<T>(mesh, shape, layout, T(0));
}

/// Throws the error that making a tensor of T laid out as `layout` would throw where this
/// processor's block is over the limit on one block (MESHTENSOR_MAX_BLOCK_BYTES), naming the
/// tensor: for a caller that fills a block on the host (a data loader's worker) before the tensor
/// is made from it.
template <class T>
void check_block_fits(const Mesh& mesh, const TensorLayout& layout) {
  detail::check_block_fits<T>(mesh, layout, layout.block(mesh.coord()));
}

/// A tensor filled from a full global array that every processor holds (tests, small data):
/// each processor keeps its block. `global` is any row-major xtensor container.
template <class Container, class T = typename Container::value_type>
Tensor<T> scatter(Mesh& mesh, const Shape& shape, const Layout& layout, const Container& global) {
  const auto expected = detail::to_xshape(shape.sizes());
  if (!std::equal(expected.begin(), expected.end(), global.shape().begin(), global.shape().end())) {
    std::string got = "(";
    for (std::size_t i = 0; i < global.dimension(); ++i)
      got += (i ? ", " : "") + std::to_string(global.shape()[i]);
    throw ShapeError("scatter: the array has shape " + got + ")" + " but the tensor is " +
                     shape.to_string() + "; give an array with one axis per dim, in shape order");
  }
  TensorLayout tensor_layout(shape, mesh.shape(), layout);
  const Block block = tensor_layout.block(mesh.coord());
  // The host cuts its block out of the array, which then travels to the processor's memory.
  std::vector<T> mine(static_cast<std::size_t>(block.num_elements()));
  const auto global_strides = kernels::row_major_strides(shape.sizes());
  kernels::copy_box_on_host(block.sizes(),
                            global.data() + kernels::offset_of(block.offsets(), global_strides),
                            global_strides, mine.data(), kernels::row_major_strides(block.sizes()));
  return Tensor<T>(mesh, std::move(tensor_layout),
                   array_from_host(mine, detail::to_xshape(block.sizes())));
}

}  // namespace meshtensor
