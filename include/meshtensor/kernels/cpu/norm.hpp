#pragma once
// The CPU's passes of the normalisations over a block whose elements each belong to one
// statistic, its key (kernels/norm.hpp says the layout). A block whose keys are its innermost
// values (batch norm on channels-last blocks) runs as lanes (kernels/cpu/key_lanes.hpp),
// vectorised across rows; any other as offsets. Sums are taken per compute thread and added in
// thread order; statistics in one pass over memory per chunk (Chan et al.).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/norm_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/key_lanes.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#include "meshtensor/kernels/cpu/norm_register_sums.hpp"

namespace meshtensor::kernels::cpu {
namespace norm_detail {

using shared::affine_floor;
using shared::affine_input_gradient;
using shared::combine_moments;
using Partial = shared::PartialMoments;

// A block and its keys: each element's offset and its key's index, in memory order.
struct KeyedBlock {
  Sizes sizes;
  std::array<Strides, 2> visit;
  std::size_t keys = 0;

  KeyedBlock(const Sizes& s, const Strides& key_strides, std::size_t k)
      : sizes(s), visit{row_major_strides(s), key_strides}, keys(k) {}

  // Whether an element's key is its offset modulo `keys`: the kept dims are the block's innermost
  // (batch norm on channels-last blocks), so the block is rows of `keys` contiguous values and the
  // loops below run over it as lanes (KeyLanes), vectorised across rows.
  bool keys_innermost() const {
    if (keys == 0) return false;
    std::int64_t expect = 1;
    bool in_keys = true;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] == 1) continue;
      if (in_keys && visit[1][d] == expect && expect < std::int64_t(keys)) {
        expect *= sizes[d];
        continue;
      }
      in_keys = false;
      if (visit[1][d] != 0) return false;
    }
    return expect == std::int64_t(keys);
  }
  std::int64_t rows() const { return num_elements(sizes) / std::int64_t(keys); }

  // The length of each key's values where they are one contiguous run, key after key (layer norm
  // over the innermost dims), and there are keys enough to share among `threads`; else 0.
  std::int64_t key_run(int threads) const {
    if (keys < 2 * std::size_t(threads)) return 0;
    std::int64_t run = 1, expect = 1;
    bool in_run = true;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] == 1) continue;
      if (in_run && visit[1][d] == 0) {
        run *= sizes[d];
        continue;
      }
      in_run = false;
      if (visit[1][d] != expect) return 0;
      expect *= sizes[d];
    }
    return expect == std::int64_t(keys) ? run : 0;
  }
};

// f(key, offset of its first value) for each key of a block of key runs (key_run), on the
// compute threads.
template <class F>
void for_each_key_run(const KeyedBlock& st, std::int64_t run, F&& f) {
  parallel_for_ranges(
      std::int64_t(st.keys), compute_threads(),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t k = begin; k < end; ++k) f(k, k * run);
      },
      run);
}

// Sums of W terms per statistic over a block: term(offset, key) for every element, added into
// the key's W sums; the block split over the processor's compute threads, each with its own sums.
template <std::size_t W, class Term>
std::vector<double> sum_per_key(const Sizes& sizes, const std::array<Strides, 2>& visit,
                                std::size_t keys, Term&& term) {
  const int threads = compute_threads();
  std::vector<std::vector<double>> parts(threads, std::vector<double>(keys * W, 0.0));
  const int used = for_each_part<2>(
      sizes, visit, threads, [&](int p, const Sizes& sub, const std::array<std::int64_t, 2>& base) {
        double* acc = parts[p].data();
        for_each_offset<2>(sub, visit, [&](const std::array<std::int64_t, 2>& o) {
          const std::int64_t at = base[0] + o[0], key = base[1] + o[1];
          const std::array<double, W> t = term(at, key);
          for (std::size_t j = 0; j < W; ++j) acc[key * W + j] += t[j];
        });
      });
  for (int p = 1; p < used; ++p)
    for (std::size_t i = 0; i < keys * W; ++i) parts[0][i] += parts[p][i];
  return std::move(parts[0]);
}

// f(p, first_row, end_row) over the rows of a keys-innermost block, on the compute threads (paid
// for by its elements, not its rows: a 32^3 block of 16 channels is 2^15 rows).
template <class F>
int for_row_ranges(const KeyedBlock& st, F&& f) {
  return for_each_range(st.rows(), compute_threads(), f, std::int64_t(st.keys));
}

// `keys` per-key values from the processor's memory (the host's, on the CPU).
inline std::vector<double> per_key(const double* values, std::int64_t keys) {
  return std::vector<double>(values, values + keys);
}

// Per-key values as the loops below index them: by lane on a keys-innermost block (KeyLanes), by
// key otherwise.
template <class T, class U>
std::vector<T> indexed(const KeyedBlock& st, const std::vector<U>& per_key) {
  if (st.keys_innermost()) return KeyLanes(std::int64_t(st.keys)).per_lane<T>(per_key);
  return std::vector<T>(per_key.begin(), per_key.end());
}

// acc[w * width + j] += term(at + j, j)[w] for the n lanes of one group: one vector per sum.
template <std::size_t W, class N, class T, class Term>
void add_terms(std::int64_t at, N n, std::int64_t width, T* acc, const Term& term) {
  // Two named streams, not a loop over w (a run-time stride the vectoriser gives up on); no `omp
  // simd` (it would keep each lane's array of terms in memory).
  static_assert(W == 2, "the normalisations' gradients sum two terms");
  // The terms go to arrays of this frame first, which alias nothing: stored straight to acc, a
  // term reading four to six arrays of the same type needs more run-time overlap checks than GCC
  // makes (ten), and the loop stays scalar wherever the caller is not inlined into acc's owner.
  constexpr std::int64_t block = KeyLanes::wide;
  alignas(64) T first[block], second[block];
  for (std::int64_t j0 = 0; j0 < n; j0 += block) {
    const std::int64_t lanes = std::min<std::int64_t>(block, n - j0);
    for (std::int64_t j = 0; j < lanes; ++j) {
      const std::array<T, 2> t = term(at + j0 + j, j0 + j);
      first[j] = t[0];
      second[j] = t[1];
    }
    T* sum = acc + j0;
    T* sum_second = acc + width + j0;
    for (std::int64_t j = 0; j < lanes; ++j) {
      sum[j] += first[j];
      sum_second[j] += second[j];
    }
  }
}

// The W sums per key of the first `used` threads' parts (parts[p][w * keys + k]), added in thread
// order and interleaved per key (out[k * W + w]), as sum_per_key returns them.
template <std::size_t W>
std::vector<double> interleaved(std::vector<std::vector<double>>& parts, int used,
                                std::size_t keys) {
  for (int p = 1; p < used; ++p)
    for (std::size_t i = 0; i < W * keys; ++i) parts[0][i] += parts[p][i];
  std::vector<double> out(keys * W);
  for (std::size_t k = 0; k < keys; ++k)
    for (std::size_t w = 0; w < W; ++w) out[k * W + w] = parts[0][w * keys + k];
  return out;
}

// Per key, the W sums of term(value offset, index) over a keys-innermost block, the index as
// indexed() gives: per chunk in T across the lanes, then per key in double.
template <class T, std::size_t W, class Term>
std::vector<double> lane_sums(const KeyedBlock& st, Term&& term) {
  const KeyLanes lanes(std::int64_t(st.keys));
  const std::size_t keys = st.keys, width = std::size_t(lanes.width());
  std::vector<std::vector<double>> parts(compute_threads(), std::vector<double>(W * keys, 0.0));
  const int used = for_row_ranges(st, [&](int p, std::int64_t begin, std::int64_t end) {
    std::vector<T> sums(W * width);
    T* acc = sums.data();
    for (std::int64_t c0 = begin; c0 < end; c0 += lanes.chunk_rows()) {
      std::fill(acc, acc + W * width, T(0));
      lanes.for_groups(c0, std::min(end, c0 + lanes.chunk_rows()),
                       [&](std::int64_t at, auto n) { add_terms<W>(at, n, width, acc, term); });
      for (std::size_t w = 0; w < W; ++w)
        lanes.add_to_keys(acc + w * width, parts[p].data() + w * keys);
    }
  });
  return interleaved<W>(parts, used, keys);
}

// Per key, the W sums of term(value offset, key) over a block of key runs, each key's in double
// on one thread.
template <class T, std::size_t W, class Term>
std::vector<double> run_sums(const KeyedBlock& st, std::int64_t run, Term&& term) {
  std::vector<double> out(st.keys * W);
  for_each_key_run(st, run, [&](std::int64_t key, std::int64_t first) {
    double acc[W] = {};
#ifdef _OPENMP
#pragma omp simd reduction(+ : acc[:W])
#endif
    for (std::int64_t i = 0; i < run; ++i) {
      const std::array<T, W> t = term(first + i, key);
      for (std::size_t w = 0; w < W; ++w) acc[w] += double(t[w]);
    }
    std::copy(acc, acc + W, out.begin() + key * std::int64_t(W));
  });
  return out;
}

// Per key, the W sums of term(value offset, index) over the block, the index as indexed() gives.
template <class T, std::size_t W, class Term>
std::vector<double> sum_keys(const KeyedBlock& st, Term&& term) {
  if (st.keys_innermost()) return lane_sums<T, W>(st, term);
  if (const std::int64_t run = st.key_run(compute_threads())) return run_sums<T, W>(st, run, term);
  return sum_per_key<W>(st.sizes, st.visit, st.keys, [&](std::int64_t at, std::int64_t key) {
    const std::array<T, W> t = term(at, key);
    std::array<double, W> wide;
    for (std::size_t w = 0; w < W; ++w) wide[w] = double(t[w]);
    return wide;
  });
}

// f(value offset, index) for every element, the index as indexed() gives, on the compute threads;
// f touches that element alone (the lanes of a group run as one vector).
template <class F>
void for_each_value(const KeyedBlock& st, F&& f) {
  if (st.keys_innermost()) {
    const KeyLanes lanes(std::int64_t(st.keys));
    for_row_ranges(st, [&](int, std::int64_t begin, std::int64_t end) {
      lanes.for_groups(begin, end, [&](std::int64_t at, auto n) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < n; ++j) f(at + j, j);
      });
    });
    return;
  }
  if (const std::int64_t run = st.key_run(compute_threads())) {
    for_each_key_run(st, run, [&](std::int64_t key, std::int64_t first) {
#ifdef _OPENMP
#pragma omp simd
#endif
      for (std::int64_t i = 0; i < run; ++i) f(first + i, key);
    });
    return;
  }
  parallel_for_each_offset<2>(st.sizes, st.visit, compute_threads(),
                              [&](const std::array<std::int64_t, 2>& at) { f(at[0], at[1]); });
}

// Count, mean and sum of squared deviations per key of a keys-innermost block, in one pass over
// memory: each chunk (in cache) is walked twice, for its mean and for the deviations from it, and
// the chunks are combined in double (Chan et al.).
template <class T>
std::vector<Partial> lane_moments(const KeyedBlock& st, const T* in) {
  using C = compute_t<T>;  // the lanes' sums: float for bfloat16 data
  const KeyLanes lanes(std::int64_t(st.keys));
  const std::size_t keys = st.keys, width = std::size_t(lanes.width());
  std::vector<std::vector<Partial>> parts(compute_threads(), std::vector<Partial>(keys));
  const int used = for_row_ranges(st, [&](int p, std::int64_t begin, std::int64_t end) {
    // Per lane, what the values are taken from: the chunk's first row for the sum, then its mean
    // for the squared deviations.
    std::vector<C> lane_sum(width), centre(width), lane_m2(width);
    std::vector<double> sum(keys), mean(keys), m2(keys);
    for (std::int64_t c0 = begin; c0 < end; c0 += lanes.chunk_rows()) {
      const std::int64_t c1 = std::min(end, c0 + lanes.chunk_rows());
      const double n = double(c1 - c0);
      // The sums are of x minus the chunk's first row: values of the data's spread, not of its
      // magnitude (around 1e4, float sums of x itself would lose the chunk mean's last digits,
      // and Chan's combination the variance with them).
      const T* first = in + c0 * std::int64_t(keys);
      for (std::size_t j = 0; j < width; ++j) centre[j] = first[j % keys];
      std::fill(lane_sum.begin(), lane_sum.end(), C(0));
      C* acc = lane_sum.data();
      const C* shift = centre.data();  // (the same buffer, the mean, further down)
      lanes.for_groups(c0, c1, [&](std::int64_t at, auto w) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < w; ++j) acc[j] += C(in[at + j]) - shift[j];
      });
      std::fill(sum.begin(), sum.end(), 0.0);
      lanes.add_to_keys(acc, sum.data());
      for (std::size_t k = 0; k < keys; ++k) mean[k] = double(first[k]) + sum[k] / n;
      for (std::size_t j = 0; j < width; ++j) centre[j] = static_cast<C>(mean[j % keys]);
      std::fill(lane_m2.begin(), lane_m2.end(), C(0));
      C* dev2 = lane_m2.data();
      lanes.for_groups(c0, c1, [&](std::int64_t at, auto w) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < w; ++j) {
          const C d = C(in[at + j]) - shift[j];
          dev2[j] += d * d;
        }
      });
      std::fill(m2.begin(), m2.end(), 0.0);
      lanes.add_to_keys(dev2, m2.data());
      for (std::size_t k = 0; k < keys; ++k) {
        // The deviations were taken from the mean rounded to C: sum (x - m~)^2 exceeds
        // sum (x - m)^2 by n (m - m~)^2.
        const double off = mean[k] - double(static_cast<C>(mean[k]));
        parts[p][k] =
            combine_moments(parts[p][k], {n, mean[k], std::max(0.0, m2[k] - n * off * off)});
      }
    }
  });
  for (int p = 1; p < used; ++p)
    for (std::size_t k = 0; k < keys; ++k) parts[0][k] = combine_moments(parts[0][k], parts[p][k]);
  return std::move(parts[0]);
}

// Count, mean and sum of squared deviations per key of a block of key runs: each run (in cache)
// walked twice, for its mean and for the deviations from it.
template <class T>
std::vector<Partial> run_moments(const KeyedBlock& st, std::int64_t run, const T* in) {
  std::vector<Partial> partial(st.keys);
  for_each_key_run(st, run, [&](std::int64_t key, std::int64_t first) {
    const T* x = in + first;
    double sum = 0, m2 = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : sum)
#endif
    for (std::int64_t i = 0; i < run; ++i) sum += double(x[i]);
    const double mean = sum / double(run);
#ifdef _OPENMP
#pragma omp simd reduction(+ : m2)
#endif
    for (std::int64_t i = 0; i < run; ++i) {
      const double deviation = double(x[i]) - mean;
      m2 += deviation * deviation;
    }
    partial[std::size_t(key)] = {double(run), mean, m2};
  });
  return partial;
}

// Count, mean and sum of squared deviations per key in two passes (a block whose keys are neither
// innermost nor runs).
template <class T>
std::vector<Partial> two_pass_moments(const KeyedBlock& st, const T* in) {
  std::vector<Partial> partial(st.keys);
  const double local_count = st.keys ? double(num_elements(st.sizes)) / double(st.keys) : 0.0;
  const auto sums = sum_per_key<1>(st.sizes, st.visit, st.keys, [&](std::int64_t at, std::int64_t) {
    return std::array<double, 1>{double(in[at])};
  });
  for (std::size_t k = 0; k < st.keys; ++k) {
    partial[k].count = local_count;
    partial[k].mean = local_count > 0 ? sums[k] / local_count : 0.0;
  }
  const auto squares =
      sum_per_key<1>(st.sizes, st.visit, st.keys, [&](std::int64_t at, std::int64_t key) {
        const double dev = in[at] - partial[key].mean;
        return std::array<double, 1>{dev * dev};
      });
  for (std::size_t k = 0; k < st.keys; ++k) partial[k].m2 = squares[k];
  return partial;
}

}  // namespace norm_detail

/// The count, mean and sum of squared deviations of each of `keys` keys' elements, 3 per key into
/// `moments`.
template <class T>
void norm_moments(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                  double* moments) {
  const norm_detail::KeyedBlock st(sizes, key_strides, std::size_t(keys));
  std::vector<shared::PartialMoments> partial;
  if (st.keys_innermost())
    partial = norm_detail::lane_moments(st, x);
  else if (const std::int64_t run = st.key_run(compute_threads()))
    partial = norm_detail::run_moments(st, run, x);
  else
    partial = norm_detail::two_pass_moments(st, x);
  for (std::int64_t k = 0; k < keys; ++k) {
    moments[3 * k] = partial[std::size_t(k)].count;
    moments[3 * k + 1] = partial[std::size_t(k)].mean;
    moments[3 * k + 2] = partial[std::size_t(k)].m2;
  }
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element; scale and shift are
/// `keys` long.
template <class T>
void norm_affine(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                 const double* scale, const double* shift, T floor, T* out) {
  using namespace norm_detail;
  using C = compute_t<T>;  // per-key coefficients and arithmetic: float for bfloat16 data
  const KeyedBlock st(sizes, key_strides, std::size_t(keys));
  const auto a = indexed<C>(st, per_key(scale, keys)), b = indexed<C>(st, per_key(shift, keys));
  const C low = C(floor);
  for_each_value(st, [&](std::int64_t at, std::int64_t i) {
    out[at] = T(affine_floor(a[i], C(x[at]), b[i], low));
  });
}

namespace norm_detail {
// g masked by the ReLU `mask` (kernels/common/norm_formulas.hpp), as a function of (offset,
// index): raw pointers copied into the CPU loops' lambdas, and the mask computed whether it
// applies or not (from v and zeros where there is no ReLU): loops the compiler vectorises.
template <class T>
struct Masked {
  using C = compute_t<T>;
  std::vector<C> a, b;
  const T *g, *x;
  C floor;
  bool relu;
  Masked(const KeyedBlock& st, const T* g_, const T* v, const ReluMask<T>& mask)
      : g(g_),
        x(mask.x ? mask.x : v),
        floor(mask.x ? C(0) : -std::numeric_limits<C>::infinity()),
        relu(mask.x != nullptr) {
    const std::vector<double> zeros(st.keys, 0.0);
    a = indexed<C>(st, relu ? per_key(mask.scale, std::int64_t(st.keys)) : zeros);
    b = indexed<C>(st, relu ? per_key(mask.shift, std::int64_t(st.keys)) : zeros);
  }
  // (The floor a variable, as the forward pass's: a constant 0 lets the compiler fold the mask
  // into a branch, and the loop no longer vectorises.)
  auto at() const {
    return [g = g, x = x, pa = a.data(), pb = b.data(), floor = floor, relu = relu](
               std::int64_t at, std::int64_t i) {
      const C value = C(g[at]);
      const bool keep = (affine_floor(pa[i], C(x[at]), pb[i], floor) > C(0)) | !relu;
      return keep ? value : C(0);
    };
  }
};

#ifdef MESHTENSOR_REGISTER_SUMS
// norm_gradient_sums on a keys-innermost block whose keys divide 64, in AVX-512 registers (a
// chunk's sums per lane in float, the chunks' per key in double, as lane_sums takes them).
template <class T>
std::vector<double> register_gradient_sums(const KeyedBlock& st, const T* g, const T* v,
                                           const ReluMask<T>& mask,
                                           const std::vector<double>& scale,
                                           const std::vector<double>& shift) {
  const KeyLanes lanes(std::int64_t(st.keys));
  const std::int64_t keys = lanes.keys();
  const std::vector<double> zeros(st.keys, 0.0);
  const auto a = indexed<float>(st, mask.x ? per_key(mask.scale, keys) : zeros);
  const auto b = indexed<float>(st, mask.x ? per_key(mask.shift, keys) : zeros);
  const auto s = indexed<float>(st, scale), h = indexed<float>(st, shift);
  std::vector<std::vector<double>> parts(compute_threads(), std::vector<double>(2 * st.keys, 0.0));
  const int used = for_row_ranges(st, [&](int p, std::int64_t begin, std::int64_t end) {
    alignas(64) float sums[2][KeyLanes::wide];
    for (std::int64_t c0 = begin; c0 < end; c0 += lanes.chunk_rows()) {
      const std::int64_t c1 = std::min(end, c0 + lanes.chunk_rows());
      std::fill(&sums[0][0], &sums[0][0] + 2 * KeyLanes::wide, 0.0f);
      add_register_gradient_sums(g, v, mask.x, a.data(), b.data(), s.data(), h.data(), c0 * keys,
                                 c1 * keys, sums);
      for (int w = 0; w < 2; ++w) lanes.add_to_keys(sums[w], parts[p].data() + w * keys);
    }
  });
  return interleaved<2>(parts, used, st.keys);
}
#endif

}  // namespace norm_detail

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`;
/// interleaved, two per key.
template <class T>
std::vector<double> norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, const T* g,
                                       const T* v, const std::vector<double>& scale,
                                       const std::vector<double>& shift, const ReluMask<T>& mask) {
  using namespace norm_detail;
  const KeyedBlock st(sizes, key_strides, scale.size());
#ifdef MESHTENSOR_REGISTER_SUMS  // AVX-512: float or bfloat16 values, keys dividing 64
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>)
    if (st.keys_innermost() && KeyLanes::wide % std::int64_t(st.keys) == 0 && avx512_loops_run())
      return register_gradient_sums(st, g, v, mask, scale, shift);
#endif
  using C = compute_t<T>;
  const Masked<T> mask_of(st, g, v, mask);
  const auto masked = mask_of.at();
  const auto s = indexed<C>(st, scale), h = indexed<C>(st, shift);
  const C *ps = s.data(), *ph = h.data();
  return sum_keys<C, 2>(st, [=](std::int64_t at, std::int64_t i) {
    const C gm = masked(at, i);
    return std::array<C, 2>{gm, gm * (ps[i] * C(v[at]) + ph[i])};
  });
}

/// The same, into `sums` (2 per key), with scale and shift `keys` long.
template <class T>
void norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                        const T* g, const T* v, const double* scale, const double* shift,
                        const ReluMask<T>& mask, double* sums) {
  const std::vector<double> out =
      norm_gradient_sums(sizes, key_strides, g, v, norm_detail::per_key(scale, keys),
                         norm_detail::per_key(shift, keys), mask);
  std::copy(out.begin(), out.end(), sums);
}

/// dx = affine_input_gradient(p[key], g', q[key], v, r[key]), g' being g masked by `mask`; p, q
/// and r are `keys` long.
template <class T>
void norm_input_gradient(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                         const T* g, const T* v, const ReluMask<T>& mask, const double* p,
                         const double* q, const double* r, T* dx) {
  using namespace norm_detail;
  const KeyedBlock st(sizes, key_strides, std::size_t(keys));
  using C = compute_t<T>;
  const Masked<T> mask_of(st, g, v, mask);
  const auto masked = mask_of.at();
  const auto pk = indexed<C>(st, per_key(p, keys)), qk = indexed<C>(st, per_key(q, keys)),
             rk = indexed<C>(st, per_key(r, keys));
  const C *pp = pk.data(), *pq = qk.data(), *pr = rk.data();
  for_each_value(st, [=](std::int64_t at, std::int64_t i) {
    dx[at] = T(affine_input_gradient(pp[i], masked(at, i), pq[i], C(v[at]), pr[i]));
  });
}

}  // namespace meshtensor::kernels::cpu
