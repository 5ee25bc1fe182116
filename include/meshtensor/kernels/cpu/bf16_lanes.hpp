#pragma once
// Vectors of floats rounded to bfloat16 (as VCVTNEPS2BF16 rounds: to nearest, ties to even, NaN
// quietened, denormal inputs taken as zero) and widened back (exact). Each function is compiled
// for the instructions it names whatever the program's flags, so kernels compiled per instruction
// set (cpu/for_each_form.hpp) call the ones their set has.

#include "meshtensor/kernels/cpu/instruction_set.hpp"

#if MESHTENSOR_CPU_TARGETS
#include <immintrin.h>

#include <cstring>

namespace meshtensor::kernels::cpu {

/// 16 floats rounded by AVX512_BF16's instruction.
__attribute__((target("avx512f,avx512bf16"))) inline __m256i narrowed_bf16_by_instruction(
    __m512 values) {
  const __m256bh rounded = _mm512_cvtneps_pbh(values);
  __m256i bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  return bits;
}

/// 16 floats rounded in AVX-512F, as the instruction above rounds them.
__attribute__((target("avx512f"))) inline __m256i narrowed_bf16_emulated(__m512 values) {
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
}

/// 16 bfloat16 bit patterns widened to floats.
__attribute__((target("avx512f"))) inline __m512 widened_bf16(__m256i bits) {
  // The zero-masking forms: GCC 12 warns of the plain ones' undefined source operand.
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, bits);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}

/// 8 floats rounded in AVX2, as above.
__attribute__((target("avx2"))) inline __m128i narrowed_bf16(__m256 values) {
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

/// 8 bfloat16 bit patterns widened to floats (AVX2).
__attribute__((target("avx2"))) inline __m256 widened_bf16(__m128i bits) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

}  // namespace meshtensor::kernels::cpu
#endif
