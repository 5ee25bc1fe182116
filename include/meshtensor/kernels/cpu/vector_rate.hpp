#pragma once
// Whether this core multiply-adds 256-bit vectors as fast, in floats a second, as 512-bit ones.
// Some AVX-512 cores run a 512-bit operation as two 256-bit halves (AMD's Zen 4), so a kernel
// written in 256-bit vectors loses nothing there and may lay its data out better; others have
// twice the 512-bit throughput (Intel's server cores), where it would run at half the peak.

#include <algorithm>
#include <chrono>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace meshtensor::kernels {
namespace detail {

#if defined(__AVX512F__)
// Floats a second of a loop of independent multiply-adds on vectors V (the compiler keeps the
// 10 accumulators in registers: 10 chains hide the latency on every core with AVX-512).
template <class V, class Fma>
double fma_rate(V one, Fma fma) {
  V acc[10];
  for (V& a : acc) a = one;
  const V scale = one;
  constexpr long iterations = 20000;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 10
    for (V& a : acc) {
      a = fma(a, scale, one);
      asm volatile("" : "+v"(a));  // kept in its register, not folded away
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(iterations) * 10 * sizeof(V) / sizeof(float) / std::max(seconds, 1e-9);
}
#endif

}  // namespace detail

/// True where 256-bit multiply-adds reach at least 85% of the 512-bit rate (measured once on the
/// calling core, best of three short loops each, under a millisecond in all); false without
/// AVX-512.
inline bool half_width_fma_at_full_rate() {
#if defined(__AVX512F__)
  static const bool same = [] {
    double narrow = 0, wide = 0;
    for (int round = 0; round < 3; ++round) {
      narrow =
          std::max(narrow, detail::fma_rate(_mm256_set1_ps(1.0f), [](__m256 a, __m256 b, __m256 c) {
                     return _mm256_fmadd_ps(a, b, c);
                   }));
      wide =
          std::max(wide, detail::fma_rate(_mm512_set1_ps(1.0f), [](__m512 a, __m512 b, __m512 c) {
                     return _mm512_fmadd_ps(a, b, c);
                   }));
    }
    return narrow >= 0.85 * wide;
  }();
  return same;
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
