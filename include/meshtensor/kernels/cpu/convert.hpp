#pragma once
// Conversions between float and bfloat16 on the compute threads. Rounding is the hardware's
// (VCVTNEPS2BF16): to nearest, ties to even, NaN quietened, and denormal inputs taken as zero, in
// every path — AVX512_BF16's instruction, its AVX-512F emulation and the scalar loop — so a
// tensor rounds alike on every CPU. Widening is exact.

#include <cstdint>
#include <cstring>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace meshtensor::kernels::cpu {

/// VCVTNEPS2BF16 on one value (bfloat16's own rounding: a denormal rounds as zero of its sign).
inline bfloat16 to_bf16_flushed(float value) { return bfloat16(value); }

#if defined(__AVX512F__)
/// 16 floats rounded to bfloat16 bit patterns as VCVTNEPS2BF16 rounds them (that instruction where
/// the CPU has it, else its AVX-512F emulation).
inline __m256i narrowed_bf16(__m512 values) {
#if defined(__AVX512BF16__)
  const __m256bh rounded = _mm512_cvtneps_pbh(values);
  __m256i bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  return bits;
#else
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), sign = _mm512_set1_epi32(int(0x80000000));
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x00400000);
  __m512i u = _mm512_castps_si512(values);
  const __mmask16 denormal = _mm512_testn_epi32_mask(u, exponent);
  u = _mm512_mask_and_epi32(u, denormal, u, sign);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_epi32(u, magnitude), exponent);
  // The zero-masking forms throughout: GCC 12 warns of the plain ones' undefined operand.
  const __m512i lsb = _mm512_and_epi32(_mm512_maskz_srli_epi32(0xffff, u, 16), one);
  __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(bias, lsb));
  rounded = _mm512_mask_or_epi32(rounded, nan, u, quiet);
  return _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, rounded, 16));
#endif
}
#endif

#if defined(__AVX2__)
/// 8 floats rounded to bfloat16 bit patterns as VCVTNEPS2BF16 rounds them (AVX2).
inline __m128i narrowed_bf16(__m256 values) {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000), sign = _mm256_set1_epi32(int(0x80000000));
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x00400000);
  __m256i u = _mm256_castps_si256(values);
  const __m256i denormal =
      _mm256_cmpeq_epi32(_mm256_and_si256(u, exponent), _mm256_setzero_si256());
  u = _mm256_blendv_epi8(u, _mm256_and_si256(u, sign), denormal);
  // Magnitudes are below 2^31: the signed comparison orders them.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), exponent);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
  __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
  rounded = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

/// 8 bfloat16 bit patterns widened to floats (exact; AVX2).
inline __m256 widened_bf16(__m128i bits) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
#endif

inline void to_bf16_run(const float* from, bfloat16* to, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                        narrowed_bf16(_mm512_loadu_ps(from + i)));
#endif
  for (; i < n; ++i) to[i] = to_bf16_flushed(from[i]);
}

#if defined(__AVX512F__)
/// 16 bfloat16 bit patterns widened to floats (exact).
inline __m512 widened_bf16(__m256i bits) {
  // The zero-masking forms: GCC 12 warns of the plain ones' undefined source operand.
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, bits);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}
#endif

inline void to_float_run(const bfloat16* from, float* to, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(to + i,
                     widened_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i))));
#endif
  for (; i < n; ++i) to[i] = float(from[i]);
}

/// to[i] = from[i] converted, for i < n, on the compute threads.
template <class From, class To>
void convert(const From* from, std::int64_t n, To* to) {
  parallel_for_each_run<2>(
      Sizes{n}, {Strides{1}, Strides{1}}, compute_threads(),
      [&](const std::array<std::int64_t, 2>& at, std::int64_t count,
          const std::array<std::int64_t, 2>&) {
        if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>)
          to_bf16_run(from + at[0], to + at[1], count);
        else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>)
          to_float_run(from + at[0], to + at[1], count);
        else
          for (std::int64_t i = 0; i < count; ++i)
            to[at[1] + i] = To(compute_t<From>(from[at[0] + i]));
      });
}

}  // namespace meshtensor::kernels::cpu
