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

// Values the host computes with or stores (a normalisation's parameters and statistics, a loss,
// generated data, files) cross between the host's memory and the processor's in one transfer:
// by the GPU's copy engine where the processor's memory is a GPU's, not by the host touching the
// GPU's pages; not at all for a plan's blocks, which have no values (the host sees zeros).

/// to[i] = from[i] for i < n: `from` in the processor's memory (in `space`), `to` the host's.
template <class T>
void copy_to_host(const T* from, MemorySpace space, std::int64_t n, T* to) {
  if (n <= 0) return;
  if (space == MemorySpace::none) return std::fill(to, to + n, T(0));
#if defined(MESHTENSOR_WITH_CUDA)
  if (space == MemorySpace::device) return cuda::copy_to_host(to, from, std::size_t(n) * sizeof(T));
#endif
  std::copy(from, from + n, to);
}

/// to[i] = from[i] for i < n: `from` in the host's memory, `to` the processor's (in `space`).
template <class T>
void copy_from_host(const T* from, std::int64_t n, T* to, MemorySpace space) {
  if (n <= 0 || space == MemorySpace::none) return;
#if defined(MESHTENSOR_WITH_CUDA)
  if (space == MemorySpace::device)
    return cuda::copy_from_host(to, from, std::size_t(n) * sizeof(T));
#endif
  std::copy(from, from + n, to);
}

/// The values of `a`, in the host's memory.
template <class T>
std::vector<T> to_host_vector(const Array<T>& a) {
  std::vector<T> values(a.size());
  copy_to_host(a.data(), a.space(), std::int64_t(a.size()), values.data());
  return values;
}

/// An array of `shape` in the processor's memory holding `values` (one per element).
template <class T>
Array<T> array_from_host(const std::vector<T>& values, typename Array<T>::shape_type shape) {
  Array<T> out = Array<T>::from_shape(std::move(shape));
  copy_from_host(values.data(), std::int64_t(out.size()), out.data(), out.space());
  return out;
}

/// What the host reads of `a`'s values: `a`'s memory itself where it is the host's, else a copy
/// in `staging`, carried over in one transfer (files written from a block, say).
template <class T>
const T* readable_on_host(const Array<T>& a, std::vector<T>& staging) {
  if (a.space() == MemorySpace::host) return a.data();
  staging.resize(a.size());
  copy_to_host(a.data(), a.space(), std::int64_t(a.size()), staging.data());
  return staging.data();
}

/// Where the host writes the values meant for `a` (generated data, a block read from a file):
/// `a`'s memory itself where it is the host's, else `staging`, which written_on_host() then sends
/// over in one transfer.
template <class T>
T* writable_on_host(Array<T>& a, std::vector<T>& staging) {
  if (a.space() == MemorySpace::host) return a.data();
  staging.resize(a.size());
  return staging.data();
}
template <class T>
void written_on_host(const std::vector<T>& staging, Array<T>& a) {
  if (a.space() != MemorySpace::host)
    copy_from_host(staging.data(), std::int64_t(a.size()), a.data(), a.space());
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
