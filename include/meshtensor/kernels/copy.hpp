#pragma once
// The copy family: copies between strided boxes — packing and unpacking halos and messages,
// slicing, broadcasting, reordering a block's dims for a kernel — flat copies and fills of a
// processor's memory, and conversions between float and bfloat16. On a GPU they run there: done
// by the host, they would move every page of a block in GPU memory to the host, and the next
// kernel would move it back. A plan counts no FLOPs
// for them (memory traffic only).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/copy.hpp"
#include "meshtensor/memory/array.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/elementwise.hpp"
#endif

namespace meshtensor::kernels {

/// to[i * to_strides] = from[i * from_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* from, const Strides& from_strides, T* to,
              const Strides& to_strides) {
  dispatch([&] { plan::count_copy(double(num_elements(box))); },
           MESHTENSOR_ON_GPU(gpu::copy_box(box, from, from_strides, to, to_strides)),
           [&](HostOperands& h) {
             cpu::copy_box(box, h.in(from, span_of(box, from_strides)), from_strides,
                           h.out(to, span_of(box, to_strides)), to_strides);
           });
}

#if defined(MESHTENSOR_WITH_CUDA)
// A GPU copies part by part (its threads write lines in any order anyway).
template <class T>
bool joined_on_gpu(std::int64_t rows, const std::vector<cpu::RowsPart<const T>>& parts, T* out,
                   std::int64_t width) {
  for (const auto& part : parts) {
    if (!gpu::copy_box(Sizes{rows, part.width}, part.data, Strides{part.width, 1}, out,
                       Strides{width, 1}))
      return false;
    out += part.width;
  }
  return true;
}
template <class T>
bool split_on_gpu(std::int64_t rows, const T* in, std::int64_t width,
                  const std::vector<cpu::RowsPart<T>>& parts) {
  for (const auto& part : parts) {
    if (part.data && !gpu::copy_box(Sizes{rows, part.width}, in, Strides{width, 1}, part.data,
                                    Strides{part.width, 1}))
      return false;
    in += part.width;
  }
  return true;
}
#endif

/// out's rows (width: the parts' widths' sum) = the parts' rows side by side (cpu::join_rows).
template <class T>
void join_rows(std::int64_t rows, const std::vector<cpu::RowsPart<const T>>& parts, T* out) {
  std::int64_t width = 0;
  for (const auto& part : parts) width += part.width;
  dispatch([&] { plan::count_copy(double(rows * width)); },
           MESHTENSOR_ON_GPU(joined_on_gpu(rows, parts, out, width)),
           [&](HostOperands& h) {
             std::vector<cpu::RowsPart<const T>> read = parts;
             for (auto& part : read) part.data = h.in(part.data, rows * part.width);
             cpu::join_rows(rows, read, h.out(out, rows * width));
           });
}

/// The parts' rows = their shares of in's rows, side by side (cpu::split_rows).
template <class T>
void split_rows(std::int64_t rows, const T* in, const std::vector<cpu::RowsPart<T>>& parts) {
  std::int64_t width = 0;
  for (const auto& part : parts) width += part.width;
  dispatch([&] { plan::count_copy(double(rows * width)); },
           MESHTENSOR_ON_GPU(split_on_gpu(rows, in, width, parts)),
           [&](HostOperands& h) {
             std::vector<cpu::RowsPart<T>> written = parts;
             for (auto& part : written) part.data = h.out(part.data, rows * part.width);
             cpu::split_rows(rows, h.in(in, rows * width), written);
           });
}

/// copy_box between two arrays in the host's memory (a global array the host holds, a staging
/// vector), whatever the processor computes on.
template <class T>
void copy_box_on_host(const Sizes& box, const T* from, const Strides& from_strides, T* to,
                      const Strides& to_strides) {
  cpu::copy_box(box, from, from_strides, to, to_strides);
}

#if defined(MESHTENSOR_WITH_CUDA)
template <class T>
bool compact_box_through_copy(const Sizes& box, T* array, std::int64_t offset,
                              const Strides& strides) {
  Buffer<T> copy(std::size_t(num_elements(box)));
  const Strides packed = row_major_strides(box);
  return gpu::copy_box(box, array + offset, strides, copy.data(), packed) &&
         gpu::copy_box(box, copy.data(), packed, array, packed);
}
#endif

/// to (row-major over sizes[order[0]], sizes[order[1]], ...) = from (row-major over `sizes`).
template <class T>
void permute(const T* from, const Sizes& sizes, const std::vector<std::size_t>& order, T* to) {
  const auto [new_sizes, gathered] = reordered(sizes, order);
  copy_box(new_sizes, from, gathered, to, row_major_strides(new_sizes));
}

/// Moves the box at `array + offset` (strides `strides`: an array over a larger box that holds
/// it) to the front of `array`, row-major: a sub-box taken out of an array without a second one.
/// A GPU goes through a copy (its threads cannot move elements in place in order).
template <class T>
void compact_box(const Sizes& box, T* array, std::int64_t offset, const Strides& strides) {
  dispatch([&] { plan::count_copy(double(num_elements(box))); },
           MESHTENSOR_ON_GPU(compact_box_through_copy(box, array, offset, strides)),
           [&](HostOperands& h) {
             const std::int64_t span = std::max(offset + span_of(box, strides), num_elements(box));
             cpu::compact_box(box, h.out(array, span), offset, strides);
           });
}

/// to[i] = from[i] for i < n.
template <class T>
void copy_values(const T* from, std::int64_t n, T* to) {
  if (n > 0) copy_box(Sizes{n}, from, Strides{1}, to, Strides{1});
}

/// to[i] = from[i] in another element type (float <-> bfloat16: cpu/convert.hpp's rounding), for
/// i < n.
template <class From, class To>
void convert_values(const From* from, std::int64_t n, To* to) {
  if (n <= 0) return;
  dispatch([&] { plan::count_copy(double(n)); }, MESHTENSOR_ON_GPU(gpu::convert(from, n, to)),
           [&](HostOperands& h) { cpu::convert(h.in(from, n), n, h.out(to, n)); });
}

/// to[i] = value for i < n.
template <class T>
void fill_values(T* to, std::int64_t n, T value) {
  if (n <= 0) return;
  dispatch([&] { plan::count_copy(double(n)); },
           MESHTENSOR_ON_GPU(gpu::map(UnaryOp::constant, value, to, to, n)),
           [&](HostOperands& h) {
             T* to_h = h.out(to, n);
             parallel_for_ranges(n, compute_threads(), [&](std::int64_t begin, std::int64_t end) {
               std::fill(to_h + begin, to_h + end, value);
             });
           });
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
