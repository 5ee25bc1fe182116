#pragma once
// The CPU's copy between strided boxes, on the compute threads in runs: a contiguous run is a
// plain loop, a repeated value (a broadcast) a fill.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

namespace copy_detail {

// Copies one short contiguous row: a call to memmove per 16 bytes (a concatenation of 8 bfloat16
// channels, last) costs more than the copy, so the usual widths are one vector move each.
template <class T>
void copy_short_row(const T* from, T* to, std::int64_t n) {
  switch (std::size_t(n) * sizeof(T)) {
    case 16:
      return void(std::memcpy(to, from, 16));
    case 32:
      return void(std::memcpy(to, from, 32));
    case 64:
      return void(std::memcpy(to, from, 64));
    case 128:
      return void(std::memcpy(to, from, 128));
    default:
      std::copy(from, from + n, to);
  }
}

// f(r) for rows r < rows of `width` elements, a contiguous share of the rows per compute thread
// (one thread where they are few).
template <class F>
void parallel_for_rows(std::int64_t rows, std::int64_t width, F&& f) {
  for_each_range(
      rows, compute_threads(),
      [&](int, std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) f(r);
      },
      width);
}

}  // namespace copy_detail

/// to[i * to_strides] = from[i * from_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* from, const Strides& from_strides, T* to,
              const Strides& to_strides) {
  static_assert(std::is_trivially_copyable_v<T>);
  const std::int64_t width = box.empty() ? 0 : box.back();
  const bool short_rows =
      box.size() >= 2 && from_strides.back() == 1 && to_strides.back() == 1 &&
      width * std::int64_t(sizeof(T)) <= 128 &&
      (from_strides[box.size() - 2] != width || to_strides[box.size() - 2] != width);
  if (short_rows) {  // runs of rows, each row copied inline
    const Sizes rows(box.begin(), box.end() - 1);
    const Strides from_rows(from_strides.begin(), from_strides.end() - 1),
        to_rows(to_strides.begin(), to_strides.end() - 1);
    return parallel_for_each_run<2>(rows, {from_rows, to_rows}, compute_threads(),
                                    [&](const std::array<std::int64_t, 2>& at, std::int64_t n,
                                        const std::array<std::int64_t, 2>& step) {
                                      for (std::int64_t i = 0; i < n; ++i)
                                        copy_detail::copy_short_row(from + at[0] + i * step[0],
                                                                    to + at[1] + i * step[1],
                                                                    width);
                                    });
  }
  parallel_for_each_run<2>(box, {from_strides, to_strides}, compute_threads(),
                           [&](const std::array<std::int64_t, 2>& at, std::int64_t n,
                               const std::array<std::int64_t, 2>& step) {
                             const T* src = from + at[0];
                             T* dst = to + at[1];
                             if (step[0] == 1 && step[1] == 1)
                               std::copy(src, src + n, dst);
                             else if (step[0] == 0 && step[1] == 1)
                               std::fill(dst, dst + n, *src);
                             else
                               for (std::int64_t i = 0; i < n; ++i)
                                 dst[i * step[1]] = src[i * step[0]];
                           });
}

/// Rows of several arrays side by side: row r of `out` (width the parts' widths' sum) is row r of
/// each part in turn, every row of the output written once, whole (copy_box per part would read
/// and write each output line once per part where the output outgrows the cache: a U-Net's
/// concatenation of 8 + 8 channels).
template <class T>
struct RowsPart {
  T* data;  // rows x width, row-major
  std::int64_t width;
};

template <class T>
void join_rows(std::int64_t rows, const std::vector<RowsPart<const T>>& parts, T* out) {
  std::int64_t out_width = 0;
  for (const auto& part : parts) out_width += part.width;
  if (rows < 2 * compute_threads()) {  // a few long rows: each part's copy on all threads
    for (const auto& part : parts) {
      copy_box(Sizes{rows, part.width}, part.data, Strides{part.width, 1}, out,
               Strides{out_width, 1});
      out += part.width;
    }
    return;
  }
  copy_detail::parallel_for_rows(rows, out_width, [&](std::int64_t r) {
    T* to = out + r * out_width;
    for (const auto& part : parts) {
      copy_detail::copy_short_row(part.data + r * part.width, to, part.width);
      to += part.width;
    }
  });
}

/// The inverse: row r of each part is its share of row r of `in`, in turn (a part whose data is
/// null is skipped).
template <class T>
void split_rows(std::int64_t rows, const T* in, const std::vector<RowsPart<T>>& parts) {
  std::int64_t in_width = 0;
  for (const auto& part : parts) in_width += part.width;
  if (rows < 2 * compute_threads()) {
    for (const auto& part : parts) {
      if (part.data)
        copy_box(Sizes{rows, part.width}, in, Strides{in_width, 1}, part.data,
                 Strides{part.width, 1});
      in += part.width;
    }
    return;
  }
  copy_detail::parallel_for_rows(rows, in_width, [&](std::int64_t r) {
    const T* from = in + r * in_width;
    for (const auto& part : parts) {
      if (part.data) copy_detail::copy_short_row(from, part.data + r * part.width, part.width);
      from += part.width;
    }
  });
}

/// Moves the box at `array + offset` (strides `strides`, each at least the box's row-major
/// stride) to the front of `array`, row-major. One thread, in order: each element lands at or
/// before where it was read, and every element still to be read lies beyond both.
template <class T>
void compact_box(const Sizes& box, T* array, std::int64_t offset, const Strides& strides) {
  parallel_for_each_run<2>(box, {strides, row_major_strides(box)}, 1,
                           [&](const std::array<std::int64_t, 2>& at, std::int64_t n,
                               const std::array<std::int64_t, 2>& step) {
                             const T* from = array + offset + at[0];
                             T* to = array + at[1];
                             if (from == to && step[0] == step[1]) return;
                             if (step[0] == 1 && step[1] == 1)
                               std::memmove(to, from, std::size_t(n) * sizeof(T));
                             else
                               for (std::int64_t i = 0; i < n; ++i)
                                 to[i * step[1]] = from[i * step[0]];
                           });
}

}  // namespace meshtensor::kernels::cpu
