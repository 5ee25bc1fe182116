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
#include "meshtensor/kernels/cpu/bf16_lanes.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::cpu {

/// VCVTNEPS2BF16 on one value (bfloat16's own rounding: a denormal rounds as zero of its sign).
inline bfloat16 to_bf16_flushed(float value) { return bfloat16(value); }

#if MESHTENSOR_AVX512_COMPILED
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)
// The first n / 16 * 16 values converted, 16 at a time; returns how many. Rounding by AVX512_BF16's
// instruction where the program's flags have it, else by its emulation.
inline std::int64_t to_bf16_vectors(const float* from, bfloat16* to, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 values = _mm512_loadu_ps(from + i);
#if defined(__AVX512BF16__)
    const __m256i bits = narrowed_bf16_by_instruction(values);
#else
    const __m256i bits = narrowed_bf16_emulated(values);
#endif
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i), bits);
  }
  return i;
}
inline std::int64_t to_float_vectors(const bfloat16* from, float* to, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(to + i,
                     widened_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i))));
  return i;
}
MESHTENSOR_FORM_END
#endif

inline void to_bf16_run(const float* from, bfloat16* to, std::int64_t n) {
  std::int64_t i = 0;
#if MESHTENSOR_AVX512_COMPILED
  if (avx512_loops_run()) i = to_bf16_vectors(from, to, n);
#endif
  for (; i < n; ++i) to[i] = to_bf16_flushed(from[i]);
}

inline void to_float_run(const bfloat16* from, float* to, std::int64_t n) {
  std::int64_t i = 0;
#if MESHTENSOR_AVX512_COMPILED
  if (avx512_loops_run()) i = to_float_vectors(from, to, n);
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
