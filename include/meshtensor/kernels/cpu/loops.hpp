#pragma once
// The CPU's loops over strided boxes (the geometry is kernels/common/strided.hpp), under every CPU
// kernel: visit each index of a box in row-major order while keeping
// one linear offset per operand, each operand with its own strides (0 where it is broadcast).

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "meshtensor/kernels/common/strided.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace meshtensor::kernels {

/**
 * Calls `f(offsets)` for every index i of `sizes` (row-major), where
 * offsets[k] = sum_d i[d] * strides[k][d]. Nothing is visited if a size is 0; a rank-0 box is
 * visited once with all offsets 0.
 */
template <std::size_t N, class F>
void for_each_offset(const Sizes& sizes, const std::array<Strides, N>& strides, F&& f) {
  const int rank = static_cast<int>(sizes.size());
  for (auto s : sizes)
    if (s == 0) return;
  std::array<std::int64_t, N> base{};
  if (rank == 0) {
    f(base);
    return;
  }
  std::vector<std::int64_t> index(rank, 0);
  const std::int64_t inner = sizes[rank - 1];
  std::array<std::int64_t, N> inner_stride{};
  for (std::size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  while (true) {
    auto offsets = base;
    for (std::int64_t i = 0; i < inner; ++i) {
      f(offsets);
      for (std::size_t k = 0; k < N; ++k) offsets[k] += inner_stride[k];
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      for (std::size_t k = 0; k < N; ++k) base[k] += strides[k][d];
      if (++index[d] < sizes[d]) break;
      for (std::size_t k = 0; k < N; ++k) base[k] -= strides[k][d] * sizes[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/// The threads a loop pays for: at most `threads`, one per index of the dim it splits (`extent`),
/// and one per `grain` elements of the whole loop's `work` (below that, starting threads costs
/// more than they save).
inline int threads_paid_for(std::int64_t extent, std::int64_t work, int threads) {
  constexpr std::int64_t grain = 1 << 15;
  return static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>({threads, extent, work / grain})));
}

/**
 * Splits the box along its first dim of more than one index into at most `threads` parts and calls
 * `part(p, sizes_p, base_p)` for each part p, in parallel on OpenMP threads when the program has
 * them and the box is big enough to pay for them; `base_p[k]` is operand k's offset of the part's
 * first index. `index_elements`: the elements each index of the box stands for (a row of a
 * normalisation's channels, a chunk), which the threads are paid for by. Returns the number of
 * parts (1 when it ran on the calling thread alone).
 */
template <std::size_t N, class Part>
int for_each_part(const Sizes& sizes, const std::array<Strides, N>& strides, int threads,
                  Part&& part, std::int64_t index_elements = 1) {
  std::size_t d = 0;
  while (d < sizes.size() && sizes[d] == 1) ++d;
  const int parts = d == sizes.size()
                        ? 1
                        : threads_paid_for(sizes[d], num_elements(sizes) * index_elements, threads);
  auto run_part = [&](int p) {
    Sizes sub = sizes;
    const std::int64_t begin = sizes[d] * p / parts, end = sizes[d] * (p + 1) / parts;
    sub[d] = end - begin;
    std::array<std::int64_t, N> base{};
    for (std::size_t k = 0; k < N; ++k) base[k] = begin * strides[k][d];
    part(p, sub, base);
  };
  if (parts == 1) {
    std::array<std::int64_t, N> base{};
    part(0, sizes, base);
    return 1;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int p = 0; p < parts; ++p) run_part(p);
#else
  for (int p = 0; p < parts; ++p) run_part(p);
#endif
  return parts;
}

/// for_each_offset on up to `threads` threads; `f` must be safe to call for different indices at
/// once (each call writes only its own outputs).
template <std::size_t N, class F>
void parallel_for_each_offset(const Sizes& sizes, const std::array<Strides, N>& strides,
                              int threads, F&& f, std::int64_t index_elements = 1) {
  for_each_part<N>(
      sizes, strides, threads,
      [&](int, const Sizes& sub, const std::array<std::int64_t, N>& base) {
        for_each_offset<N>(sub, strides, [&](std::array<std::int64_t, N> o) {
          for (std::size_t k = 0; k < N; ++k) o[k] += base[k];
          f(o);
        });
      },
      index_elements);
}

/**
 * Calls `run(offsets, n, steps)` for runs of consecutive indices of the box, on up to `threads`
 * threads: a run covers n indices from `offsets` along which operand k advances by steps[k]. Dims
 * that every operand walks as one are merged first, so on contiguous operands a run is as long as
 * the box (or a thread's share of it) and `run` can be a plain loop the compiler vectorises.
 */
template <std::size_t N, class Run>
void parallel_for_each_run(const Sizes& sizes, const std::array<Strides, N>& strides, int threads,
                           Run&& run) {
  for (auto size : sizes)
    if (size == 0) return;
  Sizes merged;
  std::array<Strides, N> merged_strides;
  std::tie(merged, merged_strides) = merge_dims<N>(sizes, strides);
  if (merged.empty()) {
    merged.push_back(1);
    for (auto& s : merged_strides) s.push_back(0);
  }
  const int rank = static_cast<int>(merged.size());
  const std::int64_t total = num_elements(merged), inner = merged.back();
  std::array<std::int64_t, N> steps{};
  for (std::size_t k = 0; k < N; ++k) steps[k] = merged_strides[k].back();
  // The indices [begin, end) in row-major order, as runs that stop at the end of each row.
  auto walk = [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> index(rank);
    std::array<std::int64_t, N> at{};
    std::int64_t rest = begin;
    for (int d = rank - 1; d >= 0; --d) {
      index[d] = rest % merged[d];
      rest /= merged[d];
      for (std::size_t k = 0; k < N; ++k) at[k] += index[d] * merged_strides[k][d];
    }
    while (begin < end) {
      const std::int64_t n = std::min(inner - index[rank - 1], end - begin);
      run(at, n, steps);
      begin += n;
      index[rank - 1] += n;
      for (std::size_t k = 0; k < N; ++k) at[k] += n * steps[k];
      for (int d = rank - 1; d > 0 && index[d] == merged[d]; --d) {
        for (std::size_t k = 0; k < N; ++k)
          at[k] += merged_strides[k][d - 1] - merged[d] * merged_strides[k][d];
        index[d] = 0;
        ++index[d - 1];
      }
    }
  };
  const int parts = threads_paid_for(total, total, threads);
  if (parts == 1) return walk(0, total);
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int p = 0; p < parts; ++p) walk(total * p / parts, total * (p + 1) / parts);
#else
  for (int p = 0; p < parts; ++p) walk(total * p / parts, total * (p + 1) / parts);
#endif
}

/// f(p, begin, end) for the contiguous parts p of [0, n), a part per thread the n elements pay
/// for, each element costing `element_work` times a copied one (a normalisation's row of
/// channels: their count; an optimiser's update: a dozen operations); returns the number of
/// parts (1, with f(0, 0, n) on the calling thread, where they pay for one).
template <class F>
int for_each_range(std::int64_t n, int threads, F&& f, std::int64_t element_work = 1) {
  const int parts = threads_paid_for(n, n * element_work, threads);
  if (parts == 1) {
    f(0, std::int64_t{0}, n);
    return 1;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1)
#endif
  for (int p = 0; p < parts; ++p) f(p, n * p / parts, n * (p + 1) / parts);
  return parts;
}

/// f(begin, end) over the parts of for_each_range.
template <class F>
void parallel_for_ranges(std::int64_t n, int threads, F&& f, std::int64_t element_work = 1) {
  for_each_range(
      n, threads, [&](int, std::int64_t begin, std::int64_t end) { f(begin, end); }, element_work);
}

/// f(i) for i in [0, n) on up to `threads` threads (f as for parallel_for_each_offset), each i
/// standing for `index_elements` elements of work.
template <class F>
void parallel_for(std::int64_t n, int threads, F&& f, std::int64_t index_elements = 1) {
  parallel_for_each_offset<1>(
      {n}, {Strides{1}}, threads, [&](const std::array<std::int64_t, 1>& i) { f(i[0]); },
      index_elements);
}

}  // namespace meshtensor::kernels
