#pragma once
// This processor's block of a tensor, its bytes checked first against the limit on one block
// (memory/block_limit.hpp) so that a tensor too big for the machine is named in the error: its
// global shape, element type and layout, and the processor.

#include <string>

#include "meshtensor/comm/dtype.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/byte_size.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/memory/block_limit.hpp"
#include "meshtensor/memory/processor_memory.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::detail {

/// Throws the ShapeError of checked_block_bytes(), naming the tensor, when the block `block` of a
/// tensor of T laid out as `layout` would not fit on this processor of `mesh`.
template <class T>
std::string tensor_on_processor(const Mesh& mesh, const TensorLayout& layout) {
  return "the tensor " + layout.shape().to_string() + " (" + to_string(dtype_of<T>()) +
         ", layout \"" + layout.layout().to_string() + "\") on processor " +
         std::to_string(mesh.processor()) + " of " + std::to_string(mesh.num_processors());
}

template <class T>
void check_block_fits(const Mesh& mesh, const TensorLayout& layout, const Block& block) {
  const BlockLimit& limit = current_memory().block_limit();
  (void)checked_block_bytes(
      static_cast<std::size_t>(block.num_elements()), sizeof(T),
      [&] { return tensor_on_processor<T>(mesh, layout); },
      memory_pool().source().space != MemorySpace::none ? &limit : nullptr);
}

/// The block `block` of a tensor laid out as `layout`, uninitialised, on this processor of `mesh`;
/// an OutOfMemoryError naming the tensor when the processor's memory has no room for it.
template <class T>
Array<T> new_block(const Mesh& mesh, const TensorLayout& layout, const Block& block) {
  check_block_fits<T>(mesh, layout, block);
  try {
    return Array<T>::from_shape(to_xshape(block.sizes()));
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(tensor_on_processor<T>(mesh, layout) + " needs a block of " +
                           format_bytes(double(block.num_elements()) * sizeof(T)) + ": " +
                           e.what() + "; split it over more processors, or use bfloat16");
  }
}

}  // namespace meshtensor::detail
