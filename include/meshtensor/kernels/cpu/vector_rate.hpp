#pragma once
// Whether this core multiply-adds 256-bit vectors as fast, in floats a second, as 512-bit ones.
// Some AVX-512 cores run a 512-bit operation as two 256-bit halves (AMD's Zen 4), so a kernel
// written in 256-bit vectors loses nothing there and may lay its data out better; others have
// twice the 512-bit throughput (Intel's server cores), where it would run at half the peak.
// And whether AVX512_BF16's dot product (two products a lane) gives more products a second than
// float multiply-adds: twice as many on AMD's Zen 4 and 5, half as many on Intel's Sapphire and
// Emerald Rapids (whose fast bfloat16 is AMX).

#include <algorithm>
#include <chrono>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace meshtensor::kernels {
namespace detail {

#if defined(__AVX512F__)
// Operations a second of acc = op(acc, x) into 12 independent accumulators (enough to hide the
// latency on every core with AVX-512), best of three loops of 100000 rounds (about a millisecond).
// An earlier loop that fed each result back as a multiplicand, a compiler barrier after every
// operation, measured an Emerald Rapids core's 512-bit multiply-adds at half their rate.
template <class V, class Op>
double operation_rate(V x, Op op) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    V acc[12];
    for (V& a : acc) a = x;
    constexpr long iterations = 100000;
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
      for (V& a : acc) a = op(a, x);
      asm volatile("" : "+v"(x));  // not folded away
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (V& a : acc) asm volatile("" : : "v"(a));
    best = std::max(best, double(iterations) * 12 / std::max(seconds, 1e-9));
  }
  return best;
}

// Floats a second of 512-bit multiply-adds on the calling core, measured once.
inline double wide_fma_rate() {
  static const double rate = 16 * operation_rate(_mm512_set1_ps(1e-9f), [](__m512 a, __m512 x) {
                               return _mm512_fmadd_ps(x, x, a);
                             });
  return rate;
}
#endif

}  // namespace detail

/// True where 256-bit multiply-adds reach at least 85% of the 512-bit rate in floats a second
/// (measured once on the calling core, a few milliseconds); false without AVX-512.
inline bool half_width_fma_at_full_rate() {
#if defined(__AVX512F__)
  static const bool same = [] {
    const double narrow = 8 * detail::operation_rate(_mm256_set1_ps(1e-9f), [](__m256 a, __m256 x) {
                            return _mm256_fmadd_ps(x, x, a);
                          });
    return narrow >= 0.85 * detail::wide_fma_rate();
  }();
  return same;
#else
  return false;
#endif
}

/// True where AVX512_BF16's dot products give at least 1.2x the products a second of float
/// multiply-adds (measured once, as above); false without AVX512_BF16.
inline bool bf16_dot_products_pay() {
#if defined(__AVX512BF16__)
  static const bool pay = [] {
    // A dot product's lane takes two products.
    const double dot = 32 * detail::operation_rate(_mm512_set1_ps(1e-9f), [](__m512 a, __m512 x) {
                         return _mm512_dpbf16_ps(a, __m512bh(x), __m512bh(x));
                       });
    return dot >= 1.2 * detail::wide_fma_rate();
  }();
  return pay;
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
