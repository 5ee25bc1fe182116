#pragma once
// Where copies between strided boxes run — packing and unpacking halos and messages, slicing,
// broadcasting, reordering a block's dims for a kernel. With the GPU backend
// (MESHTENSOR_WITH_CUDA), a processor that computes on a GPU copies there when both sides are in
// its memory; otherwise, and always without the backend, the reference loops copy on the CPU.

#include <cstddef>
#include <vector>

#include "meshtensor/kernels/reference/copy_box.hpp"
#include "meshtensor/kernels/reference/permute.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/elementwise.hpp"
#endif

namespace meshtensor::kernels {

/// copy_box on the GPU when the processor computes there; false when it did not run.
template <class T>
bool copy_box_on_gpu([[maybe_unused]] const Sizes& box, [[maybe_unused]] const T* from,
                     [[maybe_unused]] const Strides& from_strides, [[maybe_unused]] T* to,
                     [[maybe_unused]] const Strides& to_strides) {
#if defined(MESHTENSOR_WITH_CUDA)
  return gpu::copy_box(box, from, from_strides, to, to_strides);
#else
  return false;
#endif
}

namespace copy_impl {
/// to[i * to_strides] = from[i * from_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* from, const Strides& from_strides, T* to,
              const Strides& to_strides) {
  if (!copy_box_on_gpu(box, from, from_strides, to, to_strides))
    kernels::copy_box(box, from, from_strides, to, to_strides);
}

/// to (row-major over sizes[order[0]], sizes[order[1]], ...) = from (row-major over `sizes`).
template <class T>
void permute(const T* from, const Sizes& sizes, const std::vector<std::size_t>& order, T* to) {
  const auto [new_sizes, gathered] = reordered(sizes, order);
  if (!copy_box_on_gpu(new_sizes, from, gathered, to, row_major_strides(new_sizes)))
    kernels::permute(from, sizes, order, to);
}
}  // namespace copy_impl

}  // namespace meshtensor::kernels
