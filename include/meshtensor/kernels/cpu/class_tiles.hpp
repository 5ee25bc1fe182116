#pragma once
// The fused loss's tiles in AVX-512 registers, for blocks whose classes are the innermost dim and
// few (2 or 3, a segmentation's): 16 positions' scores are C vectors in memory, turned class-major
// by two permutes a class, and the softmax, the sums and the gradient never leave registers. The
// portable tiles (dice_cross_entropy.hpp) go through arrays the compiler keeps in memory, and their
// sums in double, at about 3x the operations.
//   class_tile_sums:     the sums of whole tiles from `first`, in float over a run of tiles, each
//                        run added into the per-lane doubles; returns where it stopped
//   class_tile_gradient: the gradient of whole tiles from `first`; returns where it stopped

#include <cstdint>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"
#include "meshtensor/kernels/cpu/vector_math.hpp"

#if MESHTENSOR_AVX512_COMPILED
#include <immintrin.h>
#endif

namespace meshtensor::kernels::cpu {

template <class U>
constexpr bool tile_stored = std::is_same_v<U, float> || std::is_same_v<U, bfloat16>;

/// Whether the class tiles take C classes, scores T and labels L in this program (they run where
/// avx512_loops_run() too).
template <int C, class T, class L>
constexpr bool class_tiles_fit() {
  return MESHTENSOR_AVX512_COMPILED && (C == 2 || C == 3) && tile_stored<T> && tile_stored<L>;
}

#if MESHTENSOR_AVX512_COMPILED
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)
namespace class_tiles_detail {

constexpr std::int64_t lanes = 16;

// Permute indices: class c of position j sits at j * C + c of the tile's C * 16 values.
template <int C>
struct Permutes {
  // Class-major: value c of lane j from registers a|b (first), then from c (second).
  alignas(64) int first[C][lanes], second[C][lanes];
  // Position-major: out register q's lane i from the classes 0|1 (first), then 2 (second).
  alignas(64) int out_first[C][lanes], out_second[C][lanes];
  constexpr Permutes() : first{}, second{}, out_first{}, out_second{} {
    for (int c = 0; c < C; ++c)
      for (int j = 0; j < lanes; ++j) {
        const int at = j * C + c;
        first[c][j] = at < 2 * lanes ? at : 0;
        second[c][j] = at < 2 * lanes ? j : lanes + at - 2 * lanes;
        const int s = c * lanes + j, cls = s % C, pos = s / C;
        out_first[c][j] = cls == 0 ? pos : cls == 1 ? lanes + pos : 0;
        out_second[c][j] = cls == 2 ? lanes + pos : j;
      }
  }
};
template <int C>
inline constexpr Permutes<C> permutes{};

inline __m512 load16(const float* from) { return _mm512_loadu_ps(from); }
inline __m512 load16(const bfloat16* from) {
  return widened_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from)));
}
inline void store16(float* to, __m512 v) { _mm512_storeu_ps(to, v); }
inline void store16(bfloat16* to, __m512 v) {
  alignas(64) float values[lanes];
  _mm512_store_ps(values, v);
  to_bf16_run(values, to, lanes);
}

// v[c] = the tile's class-c values, lane j of position j.
template <int C, class T>
void load_tile(const T* from, __m512 (&v)[C]) {
  const auto& at = permutes<C>;
  __m512 in[3];
  for (int q = 0; q < C; ++q) in[q] = load16(from + q * lanes);
  for (int c = 0; c < C; ++c) {
    const __m512 low = _mm512_permutex2var_ps(
        in[0], _mm512_load_si512(reinterpret_cast<const void*>(at.first[c])), in[1]);
    v[c] = C == 2 ? low
                  : _mm512_permutex2var_ps(
                        low, _mm512_load_si512(reinterpret_cast<const void*>(at.second[c])),
                        in[C - 1]);
  }
}

// The inverse of load_tile.
template <int C, class T>
void store_tile(const __m512 (&v)[C], T* to) {
  const auto& at = permutes<C>;
  for (int q = 0; q < C; ++q) {
    const __m512 low = _mm512_permutex2var_ps(
        v[0], _mm512_load_si512(reinterpret_cast<const void*>(at.out_first[q])), v[1]);
    store16(to + q * lanes,
            C == 2 ? low
                   : _mm512_permutex2var_ps(
                         low, _mm512_load_si512(reinterpret_cast<const void*>(at.out_second[q])),
                         v[C - 1]));
  }
}

// One tile's scores, labels and softmax, class-major.
template <int C>
struct Softmax {
  __m512 score[C], label[C], p[C], largest, total;

  template <class T, class L>
  Softmax(const T* scores, const L* labels) {
    load_tile<C>(scores, score);
    load_tile<C>(labels, label);
    largest = score[0];
    for (int c = 1; c < C; ++c) largest = _mm512_maskz_max_ps(0xffff, largest, score[c]);
    total = _mm512_setzero_ps();
    for (int c = 0; c < C; ++c) {
      p[c] = exp_approx(_mm512_sub_ps(score[c], largest));
      total = _mm512_add_ps(total, p[c]);
    }
    for (int c = 0; c < C; ++c) p[c] = _mm512_div_ps(p[c], total);
  }
};

// to[0..8) += the 8 floats `part` holds, widened.
inline void add_widened(__m256d part, double* to) {
  const __m512d wide = _mm512_maskz_cvtps_pd(0xff, _mm256_castpd_ps(part));
  _mm512_storeu_pd(to, _mm512_add_pd(_mm512_loadu_pd(to), wide));
}

// Tiles per run of float sums: each lane adds 32 terms in float before they go into double.
constexpr std::int64_t run_tiles = 32;

}  // namespace class_tiles_detail

/// Adds the sums (DiceCrossEntropySums' order, per lane: sums[k * 16 + j]) of the whole tiles of
/// positions from `first` before `last`, classes innermost; returns the first position left.
template <int C, class T, class L>
std::int64_t class_tile_sums(const T* scores, const L* labels, const float* weights,
                             std::int64_t first, std::int64_t last, double* sums) {
  using namespace class_tiles_detail;
  constexpr int n = 2 + 3 * C;  // log-likelihood, weight, then per class overlap, predicted, truth
  __m512 w[C];
  for (int c = 0; c < C; ++c) w[c] = _mm512_set1_ps(weights[c]);
  std::int64_t q = first;
  while (q + lanes <= last) {
    __m512 run[n];
    for (auto& r : run) r = _mm512_setzero_ps();
    for (std::int64_t t = 0; t < run_tiles && q + lanes <= last; ++t, q += lanes) {
      const Softmax<C> s(scores + q * C, labels + q * C);
      const __m512 log_total = log_approx(s.total);
      for (int c = 0; c < C; ++c) {
        const __m512 log_p = _mm512_sub_ps(_mm512_sub_ps(s.score[c], s.largest), log_total);
        const __m512 weighted = _mm512_mul_ps(w[c], s.label[c]);
        run[0] = _mm512_fmadd_ps(weighted, log_p, run[0]);
        run[1] = _mm512_add_ps(run[1], weighted);
        run[2 + c] = _mm512_fmadd_ps(s.p[c], s.label[c], run[2 + c]);
        run[2 + C + c] = _mm512_add_ps(run[2 + C + c], s.p[c]);
        run[2 + 2 * C + c] = _mm512_add_ps(run[2 + 2 * C + c], s.label[c]);
      }
    }
    for (int k = 0; k < n; ++k) {  // zero-masking forms: GCC 12 warns of the plain ones
      const __m512d v = _mm512_castps_pd(run[k]);
      add_widened(_mm512_maskz_extractf64x4_pd(0xf, v, 0), sums + k * lanes);
      add_widened(_mm512_maskz_extractf64x4_pd(0xf, v, 1), sums + k * lanes + 8);
    }
  }
  return q;
}

/// grad = scale * d loss / d scores (dice_cross_entropy_gradient's terms, in float) for the whole
/// tiles of positions from `first` before `last`; returns the first position left.
template <int C, class T, class L>
std::int64_t class_tile_gradient(const T* scores, const L* labels, const float* weights,
                                 const float* dice_label, const float* dice_constant,
                                 float inverse_weight, float scale, std::int64_t first,
                                 std::int64_t last, T* grad) {
  using namespace class_tiles_detail;
  std::int64_t q = first;
  for (; q + lanes <= last; q += lanes) {
    const Softmax<C> s(scores + q * C, labels + q * C);
    __m512 weight = _mm512_setzero_ps(), p_dot_h = _mm512_setzero_ps(), h[C];
    for (int c = 0; c < C; ++c) {
      weight = _mm512_fmadd_ps(_mm512_set1_ps(weights[c]), s.label[c], weight);
      h[c] = _mm512_fmadd_ps(_mm512_set1_ps(dice_label[c]), s.label[c],
                             _mm512_set1_ps(dice_constant[c]));
      p_dot_h = _mm512_fmadd_ps(s.p[c], h[c], p_dot_h);
    }
    __m512 g[C];
    for (int c = 0; c < C; ++c) {
      const __m512 cross_entropy = _mm512_mul_ps(
          _mm512_fmsub_ps(s.p[c], weight, _mm512_mul_ps(_mm512_set1_ps(weights[c]), s.label[c])),
          _mm512_set1_ps(inverse_weight));
      const __m512 dice = _mm512_mul_ps(s.p[c], _mm512_sub_ps(h[c], p_dot_h));
      g[c] = _mm512_mul_ps(_mm512_set1_ps(scale), _mm512_add_ps(cross_entropy, dice));
    }
    store_tile<C>(g, grad + q * C);
  }
  return q;
}
MESHTENSOR_FORM_END
#else
// Without AVX-512 no tile is taken here (class_tiles_fit is false): every one is the portable
// tiles', from `first`.
template <int C, class T, class L>
std::int64_t class_tile_sums(const T*, const L*, const float*, std::int64_t first, std::int64_t,
                             double*) {
  return first;
}
template <int C, class T, class L>
std::int64_t class_tile_gradient(const T*, const L*, const float*, const float*, const float*,
                                 float, float, std::int64_t first, std::int64_t, T*) {
  return first;
}
#endif

}  // namespace meshtensor::kernels::cpu
