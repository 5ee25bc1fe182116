#pragma once
// The machine's floating-point peak as a plain loop of independent fused multiply-adds reaches it:
// the yardstick for "fraction of peak" in the convolution table.

#include <immintrin.h>

#include <chrono>
#include <thread>
#include <vector>

namespace bench {

namespace detail {
// Single-precision FMAs of one thread: 12 independent accumulators hide the FMA latency.
inline double fma_loop(long iterations) {
#if defined(__AVX512F__)
  using vec = __m512;
  constexpr int lanes = 16;
  auto fma = [](vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); };
  auto set = [](float v) { return _mm512_set1_ps(v); };
  auto add = [](vec a, vec b) { return _mm512_add_ps(a, b); };
  auto first = [](vec a) { return _mm512_cvtss_f32(a); };
#elif defined(__AVX2__) && defined(__FMA__)
  using vec = __m256;
  constexpr int lanes = 8;
  auto fma = [](vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); };
  auto set = [](float v) { return _mm256_set1_ps(v); };
  auto add = [](vec a, vec b) { return _mm256_add_ps(a, b); };
  auto first = [](vec a) { return _mm256_cvtss_f32(a); };
#else
  using vec = float;
  constexpr int lanes = 1;
  auto fma = [](vec a, vec b, vec c) { return a * b + c; };
  auto set = [](float v) { return v; };
  auto add = [](vec a, vec b) { return a + b; };
  auto first = [](vec a) { return a; };
#endif
  constexpr int accumulators = 12;
  vec acc[accumulators];
  for (int i = 0; i < accumulators; ++i) acc[i] = set(0.001f * i);
  const vec a = set(0.999999f), b = set(1e-7f);
  for (long it = 0; it < iterations; ++it)
    for (int i = 0; i < accumulators; ++i) acc[i] = fma(acc[i], a, b);
  vec sum = acc[0];
  for (int i = 1; i < accumulators; ++i) sum = add(sum, acc[i]);
  volatile float sink = first(sum);
  (void)sink;
  return 2.0 * lanes * accumulators * static_cast<double>(iterations);
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
