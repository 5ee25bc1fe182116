#pragma once
// The CPU's copy between strided boxes, on the compute threads in runs: a contiguous run is a
// plain loop, a repeated value (a broadcast) a fill.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

/// to[i * to_strides] = from[i * from_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* from, const Strides& from_strides, T* to,
              const Strides& to_strides) {
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
