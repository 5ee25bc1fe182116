#pragma once
// A normalisation's two gradient sums per key (of g' and of g' (scale v + shift), g' being g where
// the ReLU kept the output) over a keys-innermost block whose keys divide 64, in AVX-512
// registers: four vectors of 16 lanes a group of 64 values, lane j on key j % keys. The portable
// loops (norm.hpp's lane_sums) pass each group's terms through arrays in memory and ran at about
// half the memory's speed, the work being two loads and a few operations per 16 values. (The
// moments' walks gained nothing so: they stay portable.)

#include <cstdint>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"

#if MESHTENSOR_AVX512_COMPILED  // and they run where avx512_loops_run()
#include <immintrin.h>

namespace meshtensor::kernels::cpu {
#define MESHTENSOR_REGISTER_SUMS 1  // the sums below exist in this program
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)

namespace register_sums_detail {

// The first n (<= 16) values at `from` as floats, the rest zero.
inline __m512 load(const float* from, __mmask16 n) { return _mm512_maskz_loadu_ps(n, from); }
inline __m512 load(const bfloat16* from, __mmask16 n) {
  return widened_bf16(_mm256_maskz_loadu_epi16(n, from));
}

}  // namespace register_sums_detail

/// Adds to sums[0][lane] and sums[1][lane] (64 lanes each; lane j of a group of 64 values on key
/// j % keys) the terms of values [first, end) of the block, first a multiple of the keys: g' and
/// g' (s v + h), g' = g where a x + b > 0 (x null: everywhere). a, b, s, h: 64 per-lane values.
template <class T>
void add_register_gradient_sums(const T* g, const T* v, const T* x, const float* a, const float* b,
                                const float* s, const float* h, std::int64_t first,
                                std::int64_t end, float (*sums)[64]) {
  using register_sums_detail::load;
  constexpr int vectors = 4;  // of 16 lanes: a group of 64 values
  __m512 sum_g[vectors], sum_gv[vectors], pa[vectors], pb[vectors], ps[vectors], ph[vectors];
  for (int q = 0; q < vectors; ++q) {
    sum_g[q] = _mm512_loadu_ps(sums[0] + 16 * q);
    sum_gv[q] = _mm512_loadu_ps(sums[1] + 16 * q);
    pa[q] = _mm512_loadu_ps(a + 16 * q);
    pb[q] = _mm512_loadu_ps(b + 16 * q);
    ps[q] = _mm512_loadu_ps(s + 16 * q);
    ph[q] = _mm512_loadu_ps(h + 16 * q);
  }
  // One vector of 16 values from `from` (the first n of them), its lane vector q.
  auto add = [&](std::int64_t from, int q, __mmask16 n) {
    const __m512 value = load(v + from, n);
    __m512 gm = load(g + from, n);
    if (x) {  // g where the ReLU kept the output: a x + b > 0 (a NaN keeps nothing)
      const __m512 input = x == v ? value : load(x + from, n);
      const __m512 y = _mm512_fmadd_ps(pa[q], input, pb[q]);
      gm = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), gm);
    }
    sum_g[q] = _mm512_add_ps(sum_g[q], gm);
    sum_gv[q] = _mm512_fmadd_ps(gm, _mm512_fmadd_ps(ps[q], value, ph[q]), sum_gv[q]);
  };
  std::int64_t at = first;
  for (; at + 64 <= end; at += 64)
    for (int q = 0; q < vectors; ++q) add(at + 16 * q, q, 0xffff);
  for (int q = 0; at + 16 * q < end; ++q) {  // the last part group
    const std::int64_t left = end - (at + 16 * q);
    add(at + 16 * q, q, left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1));
  }
  for (int q = 0; q < vectors; ++q) {
    _mm512_storeu_ps(sums[0] + 16 * q, sum_g[q]);
    _mm512_storeu_ps(sums[1] + 16 * q, sum_gv[q]);
  }
}
MESHTENSOR_FORM_END
}  // namespace meshtensor::kernels::cpu
#endif
