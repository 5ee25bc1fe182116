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

#include "meshtensor/kernels/cpu/instruction_set.hpp"

#if MESHTENSOR_CPU_TARGETS
#include <immintrin.h>
#endif

namespace meshtensor::kernels {
namespace detail {

#if MESHTENSOR_CPU_TARGETS
// Compiled for AVX512_BF16 whatever the program's flags; run only where the CPU has what each uses.
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_BF16_INSTRUCTIONS)
// Operations a second of `chains(iterations)`, which runs twelve independent chains of one
// operation (enough to hide its latency on every core with AVX-512) that many rounds: best of
// three loops of 100000 rounds (about a millisecond).
template <class Chains>
double operation_rate(Chains chains) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    constexpr long iterations = 100000;
    const auto start = std::chrono::steady_clock::now();
    chains(iterations);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(iterations) * 12 / std::max(seconds, 1e-9));
  }
  return best;
}

// `op x, x, acc` on twelve accumulator registers named `reg`0 to 11, each x * x first, `n` rounds,
// in one asm loop. Loops written in C++ measured latency, not throughput: GCC -O3 folded twelve
// chains that started equal into one, or kept them in memory across each round.
#define MESHTENSOR_OP12(op, reg)                                                             \
  op " %[x], %[x], %%" reg "0\n\t" op " %[x], %[x], %%" reg "1\n\t" op " %[x], %[x], %%" reg \
     "2\n\t" op " %[x], %[x], %%" reg "3\n\t" op " %[x], %[x], %%" reg "4\n\t" op            \
     " %[x], %[x], %%" reg "5\n\t" op " %[x], %[x], %%" reg "6\n\t" op " %[x], %[x], %%" reg \
     "7\n\t" op " %[x], %[x], %%" reg "8\n\t" op " %[x], %[x], %%" reg "9\n\t" op            \
     " %[x], %[x], %%" reg "10\n\t" op " %[x], %[x], %%" reg "11\n\t"
#define MESHTENSOR_CHAINS(op, reg, n, x)                                                         \
  asm volatile(                                                                                  \
      MESHTENSOR_OP12("vmulps", reg) "1:\n\t" MESHTENSOR_OP12(op, reg) "dec %[n]\n\tjnz 1b"      \
      : [n] "+r"(n)                                                                              \
      : [x] "v"(x)                                                                               \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
        "xmm11", "cc")

// A vector whose lanes read as floats or as pairs of bfloat16 are all near 1e-3: no chain ever
// meets a subnormal or an infinity.
inline __m512 rate_operand() { return _mm512_castsi512_ps(_mm512_set1_epi32(0x3A833A83)); }

// Floats a second of 512-bit multiply-adds on the calling core, measured once.
inline double wide_fma_rate() {
  static const double rate = 16 * operation_rate([](long n) {
                               const __m512 x = rate_operand();
                               MESHTENSOR_CHAINS("vfmadd231ps", "zmm", n, x);
                             });
  return rate;
}

inline double half_width_fma_rate() {
  return 8 * operation_rate([](long n) {
           const __m256 x =
               _mm256_castsi256_ps(_mm256_set1_epi32(0x3A833A83));  // rate_operand()'s lanes
           MESHTENSOR_CHAINS("vfmadd231ps", "ymm", n, x);
         });
}

// A dot product's lane takes two products.
inline double bf16_dot_product_rate() {
  return 32 * operation_rate([](long n) {
           const __m512 x = rate_operand();
           MESHTENSOR_CHAINS("vdpbf16ps", "zmm", n, x);
         });
}

MESHTENSOR_FORM_END
#undef MESHTENSOR_CHAINS
#undef MESHTENSOR_OP12
#endif

}  // namespace detail

/// True where 256-bit multiply-adds reach at least 85% of the 512-bit rate in floats a second
/// (measured once on the calling core, a few milliseconds); false without AVX-512.
inline bool half_width_fma_at_full_rate() {
#if MESHTENSOR_CPU_TARGETS
  static const bool same = cpu::cpu_instruction_set() >= cpu::InstructionSet::avx512 &&
                           detail::half_width_fma_rate() >= 0.85 * detail::wide_fma_rate();
  return same;
#else
  return false;
#endif
}

/// True where AVX512_BF16's dot products give at least 1.2x the products a second of float
/// multiply-adds (measured once, as above); false without AVX512_BF16.
inline bool bf16_dot_products_pay() {
#if MESHTENSOR_CPU_TARGETS
  static const bool pay = cpu::cpu_instruction_set() >= cpu::InstructionSet::avx512_bf16 &&
                          detail::bf16_dot_product_rate() >= 1.2 * detail::wide_fma_rate();
  return pay;
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
