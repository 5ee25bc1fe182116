#pragma once
// Folds over an inner box for each index of an outer box: the kernel under einsum (a sum of
// products) and under the reductions (sum, max, min of one operand).

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <vector>

#include "meshtensor/kernels/common/fold_operand.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::reference {

/**
 * out[o] = fold of combine(acc, product of operands at (o, i)) over every inner index i, starting
 * from `init`, accumulated in Acc and stored as Out; `out` is row-major over `outer`. With an empty
 * inner box every output is `init` (the identity of the reduction).
 */
template <class Acc, class T, std::size_t N, class Out, class Combine>
void fold(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, N>& operands,
          Out* out, Acc init, Combine combine) {
  std::array<Strides, N> outer_strides, inner_strides;
  for (std::size_t k = 0; k < N; ++k) {
    outer_strides[k] = operands[k].outer_strides;
    inner_strides[k] = operands[k].inner_strides;
  }
  std::int64_t o = 0;
  const auto [inner_merged, inner_walk] = merge_dims<N>(inner, inner_strides);
  if (inner_merged.size() == 1) {
    // One run per output (a softmax's classes at each position): a plain loop, in the same order.
    const std::int64_t n = inner_merged[0];
    // (A lambda may not capture a structured binding in C++17: clang refuses.)
    const auto& walk = inner_walk;
    for_each_offset<N>(outer, outer_strides, [&](const std::array<std::int64_t, N>& base) {
      Acc acc = init;
      for (std::int64_t i = 0; i < n; ++i) {
        Acc product = static_cast<Acc>(operands[0].data[base[0] + i * walk[0][0]]);
        for (std::size_t k = 1; k < N; ++k)
          product *= static_cast<Acc>(operands[k].data[base[k] + i * walk[k][0]]);
        acc = combine(acc, product);
      }
      out[o++] = static_cast<Out>(acc);
    });
    return;
  }
  for_each_offset<N>(outer, outer_strides, [&](const std::array<std::int64_t, N>& base) {
    Acc acc = init;
    for_each_offset<N>(inner, inner_strides, [&](const std::array<std::int64_t, N>& offset) {
      Acc product = static_cast<Acc>(operands[0].data[base[0] + offset[0]]);
      for (std::size_t k = 1; k < N; ++k)
        product *= static_cast<Acc>(operands[k].data[base[k] + offset[k]]);
      acc = combine(acc, product);
    });
    out[o++] = static_cast<Out>(acc);
  });
}

/// fold() with the outputs shared out among up to `threads` threads.
template <class Acc, class T, std::size_t N, class Out, class Combine>
void parallel_fold(const Sizes& outer, const Sizes& inner,
                   const std::array<FoldOperand<T>, N>& operands, Out* out, Acc init,
                   Combine combine, int threads) {
  std::array<Strides, N + 1> strides;
  for (std::size_t k = 0; k < N; ++k) strides[k] = operands[k].outer_strides;
  strides[N] = row_major_strides(outer);
  // A part is a run of whole outer indices: its outputs are contiguous from its base.
  for_each_part<N + 1>(outer, strides, threads,
                       [&](int, const Sizes& sub, const std::array<std::int64_t, N + 1>& base) {
                         auto shifted = operands;
                         for (std::size_t k = 0; k < N; ++k) shifted[k].data += base[k];
                         fold<Acc, T, N>(sub, inner, shifted, out + base[N], init, combine);
                       });
}

namespace sum_detail {

// A loop of the sum: its size and the strides of the N operands and (last) the output.
template <std::size_t N>
struct Axis {
  std::int64_t size = 1;
  std::array<std::int64_t, N + 1> strides{};
};

// Every dim, outer then inner, in the first operand's memory order, with the dims that every
// operand and the output walk as one merged (a whole channels-last volume summed per channel: x,
// y, z become one), so that the innermost loop is long. Returns the innermost axis; `sizes` and
// `strides` get the loops around it.
template <class T, std::size_t N>
Axis<N> memory_order(const Sizes& outer, const Sizes& inner,
                     const std::array<FoldOperand<T>, N>& operands, Sizes& sizes,
                     std::array<Strides, N + 1>& strides) {
  const auto output_strides = row_major_strides(outer);
  std::vector<Axis<N>> axes;
  for (std::size_t d = 0; d < outer.size() + inner.size(); ++d) {
    const bool is_outer = d < outer.size();
    const std::size_t e = is_outer ? d : d - outer.size();
    Axis<N> axis{is_outer ? outer[e] : inner[e], {}};
    for (std::size_t k = 0; k < N; ++k)
      axis.strides[k] = is_outer ? operands[k].outer_strides[e] : operands[k].inner_strides[e];
    axis.strides[N] = is_outer ? output_strides[e] : 0;
    axes.push_back(axis);
  }
  std::stable_sort(axes.begin(), axes.end(),
                   [](const Axis<N>& a, const Axis<N>& b) { return a.strides[0] > b.strides[0]; });
  Sizes sorted_sizes;
  std::array<Strides, N + 1> sorted_strides;
  for (const auto& axis : axes) {
    sorted_sizes.push_back(axis.size);
    for (std::size_t k = 0; k <= N; ++k) sorted_strides[k].push_back(axis.strides[k]);
  }
  std::tie(sizes, strides) = merge_dims<N + 1>(sorted_sizes, sorted_strides);
  Axis<N> last;
  if (sizes.empty()) return last;
  last.size = sizes.back();
  sizes.pop_back();
  for (std::size_t k = 0; k <= N; ++k) {
    last.strides[k] = strides[k].back();
    strides[k].pop_back();
  }
  return last;
}

// One run along the innermost axis: into a register where the output stays put along it (a sum
// over that axis), else element by element.
template <class Acc, class T, std::size_t N>
inline void add_run(const std::array<FoldOperand<T>, N>& operands, const Axis<N>& last,
                    const std::array<std::int64_t, N + 1>& at, Acc* acc) {
  const std::int64_t n = last.size;
  Acc total = 0;
  if (N == 1 && last.strides[0] == 1 && last.strides[N] == 0) {
    const T* x = operands[0].data + at[0];
#ifdef _OPENMP
#pragma omp simd reduction(+ : total)
#endif
    for (std::int64_t i = 0; i < n; ++i) total += static_cast<Acc>(x[i]);
    acc[at[N]] += total;
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    Acc product = static_cast<Acc>(operands[0].data[at[0] + i * last.strides[0]]);
    for (std::size_t k = 1; k < N; ++k)
      product *= static_cast<Acc>(operands[k].data[at[k] + i * last.strides[k]]);
    if (last.strides[N] == 0)
      total += product;
    else
      acc[at[N] + i * last.strides[N]] += product;
  }
  if (last.strides[N] == 0) acc[at[N]] += total;
}

// `positions` runs of n contiguous values (a channels-last block's channels) summed into
// acc[0, n), in lanes holding a whole number of runs and of 16 values (two runs of 8; sixteen of
// 3 classes), so that the loop is a plain vector loop rather than one short run at a time.
template <int n, class Acc, class T>
void sum_runs(const T* x, std::int64_t positions, Acc* acc) {
  constexpr int lanes = n % 16 == 0 ? n : n * 16 / std::gcd(n, 16);
  static_assert(lanes % n == 0);
  Acc sums[lanes] = {};
  const std::int64_t total = positions * n;
  std::int64_t i = 0;
  for (; i + lanes <= total; i += lanes)
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int j = 0; j < lanes; ++j) sums[j] += static_cast<Acc>(x[i + j]);
  for (std::int64_t j = 0; i + j < total; ++j) sums[j] += static_cast<Acc>(x[i + j]);
  for (int j = 0; j < lanes; ++j) acc[j % n] += sums[j];
}

// sum_runs for a run length runs_summed_alike() accepts.
template <class Acc, class T>
void sum_runs_of(std::int64_t n, const T* x, std::int64_t positions, Acc* acc) {
  switch (n) {
    case 1:
      return sum_runs<1>(x, positions, acc);
    case 2:
      return sum_runs<2>(x, positions, acc);
    case 3:
      return sum_runs<3>(x, positions, acc);
    case 4:
      return sum_runs<4>(x, positions, acc);
    case 8:
      return sum_runs<8>(x, positions, acc);
    case 16:
      return sum_runs<16>(x, positions, acc);
    case 32:
      return sum_runs<32>(x, positions, acc);
    default:
      return sum_runs<64>(x, positions, acc);
  }
}

// Whether the loops are one contiguous block of runs summed per run position: the innermost axis
// walks the operand and the output alike, the one loop around it the next runs, output fixed;
// runs of 3 (a segmentation's classes) or a power of two up to 64 (what sum_runs_of takes).
template <std::size_t N>
bool runs_summed_alike(const Sizes& sizes, const std::array<Strides, N + 1>& strides,
                       const Axis<N>& last) {
  const std::int64_t n = last.size;
  return N == 1 && sizes.size() == 1 && last.strides[0] == 1 && last.strides[N] == 1 &&
         strides[0][0] == n && strides[N][0] == 0 && n <= 64 && (n == 3 || (n & (n - 1)) == 0);
}

}  // namespace sum_detail

/**
 * out[o] = sum over every inner index i of the product of the operands at (o, i), on up to
 * `threads` threads: what einsum and the sum reductions compute. A small output (a bias or scale
 * gradient: a few sums over a whole activation) is summed in the first operand's memory order,
 * each thread into its own copy of `out`, rather than one strided pass per output; a big output
 * is shared out among the threads.
 */
template <class Acc, class T, std::size_t N>
void parallel_sum(const Sizes& outer, const Sizes& inner,
                  const std::array<FoldOperand<T>, N>& operands, Acc* out, int threads) {
  const std::int64_t outputs = num_elements(outer);
  const std::int64_t terms = num_elements(inner);
  if (outputs > (1 << 14) || terms < 8)
    return parallel_fold<Acc, T, N>(
        outer, inner, operands, out, Acc(0), [](Acc a, Acc b) { return a + b; }, threads);
  Sizes sizes;
  std::array<Strides, N + 1> strides;
  const auto last = sum_detail::memory_order<T, N>(outer, inner, operands, sizes, strides);
  std::vector<std::vector<Acc>> sums(threads, std::vector<Acc>(outputs, Acc(0)));
  int used = 1;
  if (sum_detail::runs_summed_alike<N>(sizes, strides, last)) {
    used = for_each_part<N + 1>(
        sizes, strides, threads,
        [&](int p, const Sizes& sub, const std::array<std::int64_t, N + 1>& base) {
          sum_detail::sum_runs_of(last.size, operands[0].data + base[0], sub[0], sums[p].data());
        });
  } else if (sizes.empty()) {
    sum_detail::add_run<Acc, T, N>(operands, last, {}, sums[0].data());
  } else {
    used = for_each_part<N + 1>(
        sizes, strides, threads,
        [&](int p, const Sizes& sub, const std::array<std::int64_t, N + 1>& base) {
          Acc* acc = sums[p].data();
          for_each_offset<N + 1>(sub, strides, [&](std::array<std::int64_t, N + 1> o) {
            for (std::size_t k = 0; k <= N; ++k) o[k] += base[k];
            sum_detail::add_run<Acc, T, N>(operands, last, o, acc);
          });
        });
  }
  for (std::int64_t i = 0; i < outputs; ++i) {
    Acc total = sums[0][i];
    for (int p = 1; p < used; ++p) total += sums[p][i];
    out[i] = total;
  }
}

}  // namespace meshtensor::kernels::reference
