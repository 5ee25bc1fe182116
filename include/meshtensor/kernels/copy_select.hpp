#pragma once
// Where copies between strided boxes run — packing and unpacking halos and messages, slicing,
// broadcasting, reordering a block's dims for a kernel — and flat copies and fills. With the GPU
// backend (MESHTENSOR_WITH_CUDA), a processor that computes on a GPU copies there when both sides
// are in its memory; otherwise, and always without the backend, the reference loops copy on the
// CPU.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/reference/copy_box.hpp"
#include "meshtensor/kernels/reference/permute.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/memory.hpp"
#include "meshtensor/kernels/gpu/elementwise.hpp"
#endif

namespace meshtensor::kernels {

/// copy_box on the GPU when the processor computes there; false when it did not run (and the GPU
/// has finished its queued work, for the caller's CPU loop: kernels/host_access.hpp).
template <class T>
bool copy_box_on_gpu([[maybe_unused]] const Sizes& box, [[maybe_unused]] const T* from,
                     [[maybe_unused]] const Strides& from_strides, [[maybe_unused]] T* to,
                     [[maybe_unused]] const Strides& to_strides) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::copy_box(box, from, from_strides, to, to_strides));
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

// Flat copies and fills of a processor's memory. Where the processor computes on a GPU they run
// there: done by the host, they would move every page of a block in GPU memory to the host, and
// the next kernel would move it back.

/// to[i] = from[i] for i < n.
template <class T>
void copy_values(const T* from, std::int64_t n, T* to) {
  if (n > 0 && !copy_box_on_gpu(Sizes{n}, from, Strides{1}, to, Strides{1}))
    std::copy(from, from + n, to);
}

/// to[i] = value for i < n.
template <class T>
void fill_values(T* to, std::int64_t n, T value) {
  if (n <= 0) return;
#if defined(MESHTENSOR_WITH_CUDA)
  if (gpu::map(UnaryOp::constant, value, to, to, n)) return;
#endif
  wait_for_gpu();
  std::fill(to, to + n, value);
}

/// Whether `p` is in the memory of the GPU the processor computes on (none without the backend).
inline bool in_gpu_memory([[maybe_unused]] const void* p) {
#if defined(MESHTENSOR_WITH_CUDA)
  return cuda::computes_on_gpu() && cuda::device_accessible(p);
#else
  return false;
#endif
}

/// to[i] = from[i] for i < n where one side is the host's own memory (values the host computes
/// with: a normalisation's parameters, its statistics, a loss, generated data): through the GPU's
/// copy engine, in one transfer, when the other side is in the GPU's memory.
template <class T>
void transfer_values(const T* from, std::int64_t n, T* to) {
#if defined(MESHTENSOR_WITH_CUDA)
  if (n > 0 && (in_gpu_memory(from) || in_gpu_memory(to)))
    return cuda::copy_through_gpu(to, from, std::size_t(n) * sizeof(T));
#endif
  std::copy(from, from + n, to);
}

/// What the host reads of n values at `p`: `p` itself, or where `p` is in the GPU's memory a copy
/// in `staging`, carried over in one transfer (files written from a block, say).
template <class T>
const T* readable_on_host(const T* p, std::int64_t n, std::vector<T>& staging) {
  if (!in_gpu_memory(p)) return p;
  staging.resize(static_cast<std::size_t>(n));
  transfer_values(p, n, staging.data());
  return staging.data();
}

/// Where the host writes n values meant for `p` (generated data, a block read from a file): `p`
/// itself, or where `p` is in the GPU's memory `staging`, which written_on_host() then sends over
/// in one transfer.
template <class T>
T* writable_on_host(T* p, std::int64_t n, std::vector<T>& staging) {
  if (!in_gpu_memory(p)) return p;
  staging.resize(static_cast<std::size_t>(n));
  return staging.data();
}
template <class T>
void written_on_host(const std::vector<T>& staging, T* p) {
  transfer_values(staging.data(), static_cast<std::int64_t>(staging.size()), p);
}

/// An array of `a`'s shape filled with zeros, where the processor's memory is (on a GPU, zeroed
/// there: the host's writes would race with the GPU's queued work on recycled memory).
template <class T>
Array<T> zeros_like(const Array<T>& a) {
  Array<T> out = Array<T>::from_shape(a.shape());
  fill_values(out.data(), static_cast<std::int64_t>(out.size()), T(0));
  return out;
}

/// A copy of `a`: its shape and values.
template <class T>
Array<T> copy_of(const Array<T>& a) {
  Array<T> out = Array<T>::from_shape(a.shape());
  copy_values(a.data(), static_cast<std::int64_t>(a.size()), out.data());
  return out;
}

}  // namespace meshtensor::kernels
