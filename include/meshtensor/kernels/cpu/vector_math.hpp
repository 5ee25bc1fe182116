#pragma once
// exp and log of float without a library call or a branch, so that a loop over an array of them
// vectorizes (libm's expf and logf are calls, one value at a time). Cephes' reductions and
// polynomials: a relative error of about 2e-7 over the ranges below.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "meshtensor/kernels/cpu/instruction_set.hpp"

#if MESHTENSOR_AVX512_COMPILED
#include <immintrin.h>
#endif

namespace meshtensor::kernels::cpu {

namespace vector_math_detail {

inline float from_bits(std::int32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline std::int32_t to_bits(float x) {
  std::int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// ln 2 split in two, so that n ln 2 is subtracted exactly for |n| < 2^9.
constexpr float ln2_high = 0.693359375f, ln2_low = -2.12194440e-4f;

// The polynomials' coefficients, highest power first (Horner): of e^r for |r| <= ln 2 / 2, and of
// ln(1 + m) for m in [sqrt(1/2) - 1, sqrt(2) - 1).
constexpr float exp_polynomial[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                    4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr float log_polynomial[] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                                    -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                                    2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};

}  // namespace vector_math_detail

/// e^x, for x clamped to [-87, 88] (below, e^x is under 2^-125 and returned as such).
inline float exp_approx(float x) {
  using namespace vector_math_detail;
  x = std::min(std::max(x, -87.0f), 88.0f);
  // n = round(x / ln 2), by the float-rounding trick (|x / ln 2| < 2^22).
  constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23
  const float n = (x * 1.44269504088896341f + round_magic) - round_magic;
  const float r = x - n * ln2_high - n * ln2_low;
  float p = exp_polynomial[0];
  for (std::size_t k = 1; k < std::size(exp_polynomial); ++k) p = p * r + exp_polynomial[k];
  const float e_r = p * r * r + r + 1.0f;
  return e_r * from_bits((static_cast<std::int32_t>(n) + 127) << 23);
}

/// ln x, for normal x > 0.
inline float log_approx(float x) {
  using namespace vector_math_detail;
  // x = m 2^e with m in [sqrt(1/2), sqrt(2)), then ln x = ln m + e ln 2.
  const std::int32_t bits = to_bits(x);
  float e = static_cast<float>(((bits >> 23) & 0xff) - 126);
  float m = from_bits((bits & 0x807fffff) | 0x3f000000);  // in [1/2, 1)
  const bool small = m < 0.707106781186547524f;
  e -= small ? 1.0f : 0.0f;
  m = m + (small ? m : 0.0f) - 1.0f;
  const float z = m * m;
  float p = log_polynomial[0];
  for (std::size_t k = 1; k < std::size(log_polynomial); ++k) p = p * m + log_polynomial[k];
  float y = p * m * z + e * ln2_low - 0.5f * z;
  return m + y + e * ln2_high;
}

#if MESHTENSOR_AVX512_COMPILED
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)
/// exp_approx on 16 floats (the zero-masking forms of the intrinsics: GCC 12 warns of the plain
/// ones' undefined operand). A NaN stays NaN (the clamp's operands in the order that keeps it).
inline __m512 exp_approx(__m512 x) {
  using namespace vector_math_detail;
  x = _mm512_maskz_min_ps(0xffff, _mm512_set1_ps(88.0f),
                          _mm512_maskz_max_ps(0xffff, _mm512_set1_ps(-87.0f), x));
  const __m512 round_magic = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), round_magic), round_magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2_high), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2_low), r);
  __m512 p = _mm512_set1_ps(exp_polynomial[0]);
  for (std::size_t k = 1; k < std::size(exp_polynomial); ++k)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_polynomial[k]));
  const __m512 e_r =
      _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512i two_n = _mm512_maskz_slli_epi32(
      0xffff, _mm512_add_epi32(_mm512_maskz_cvttps_epi32(0xffff, n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(e_r, _mm512_castsi512_ps(two_n));
}

/// log_approx on 16 floats, each normal and > 0.
inline __m512 log_approx(__m512 x) {
  using namespace vector_math_detail;
  const __m512i bits = _mm512_castps_si512(x);
  __m512 e = _mm512_maskz_cvtepi32_ps(
      0xffff, _mm512_sub_epi32(_mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, bits, 23),
                                                _mm512_set1_epi32(0xff)),
                               _mm512_set1_epi32(126)));
  __m512 m = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_and_si512(bits, _mm512_set1_epi32(int(0x807fffff))), _mm512_set1_epi32(0x3f000000)));
  const __mmask16 small = _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
  e = _mm512_mask_sub_ps(e, small, e, _mm512_set1_ps(1.0f));
  m = _mm512_sub_ps(_mm512_mask_add_ps(m, small, m, m), _mm512_set1_ps(1.0f));
  const __m512 z = _mm512_mul_ps(m, m);
  __m512 p = _mm512_set1_ps(log_polynomial[0]);
  for (std::size_t k = 1; k < std::size(log_polynomial); ++k)
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(log_polynomial[k]));
  __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, m), z, _mm512_mul_ps(e, _mm512_set1_ps(ln2_low)));
  y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, y);
  return _mm512_fmadd_ps(e, _mm512_set1_ps(ln2_high), _mm512_add_ps(m, y));
}
MESHTENSOR_FORM_END
#endif

}  // namespace meshtensor::kernels::cpu
