#pragma once
// The machine's floating-point peak as a plain loop of independent fused multiply-adds reaches it:
// the yardstick for "fraction of peak" in the convolution table.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <chrono>
#include <thread>
#include <vector>

namespace bench {

namespace detail {
// Single-precision FMAs of one thread in the CPU's widest vectors, whatever flags built the
// program: 12 independent accumulators hide the FMA latency.
#define BENCH_FMA_LOOP(vec, lanes, set, fma, add, first)               \
  constexpr int accumulators = 12;                                     \
  vec acc[accumulators];                                               \
  for (int i = 0; i < accumulators; ++i) acc[i] = set(0.001f * i);     \
  const vec a = set(0.999999f), b = set(1e-7f);                        \
  for (long it = 0; it < iterations; ++it)                             \
    for (int i = 0; i < accumulators; ++i) acc[i] = fma(acc[i], a, b); \
  vec sum = acc[0];                                                    \
  for (int i = 1; i < accumulators; ++i) sum = add(sum, acc[i]);       \
  volatile float sink = first(sum);                                    \
  (void)sink;                                                          \
  return 2.0 * (lanes)*accumulators * static_cast<double>(iterations);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) inline double fma_loop_avx512(long iterations) {
  BENCH_FMA_LOOP(__m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_cvtss_f32)
}
__attribute__((target("avx2,fma"))) inline double fma_loop_avx2(long iterations) {
  BENCH_FMA_LOOP(__m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_cvtss_f32)
}
#endif
inline float scalar_set(float v) { return v; }
inline float scalar_fma(float a, float b, float c) { return a * b + c; }
inline float scalar_add(float a, float b) { return a + b; }
inline double fma_loop_scalar(long iterations) {
  BENCH_FMA_LOOP(float, 1, scalar_set, scalar_fma, scalar_add, scalar_set)
}
#undef BENCH_FMA_LOOP

inline double fma_loop(long iterations) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return fma_loop_avx512(iterations);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return fma_loop_avx2(iterations);
#endif
  return fma_loop_scalar(iterations);
}
}  // namespace detail

/// GFLOP/s of `threads` threads running independent FMAs at once (best of 3).
inline double fma_peak_gflops(int threads) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const long iterations = 100'000'000;
    std::vector<std::thread> workers;
    std::vector<double> flops(threads);
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([&, t] { flops[t] = detail::fma_loop(iterations); });
    for (auto& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds / 1e9);
  }
  return best;
}

}  // namespace bench
