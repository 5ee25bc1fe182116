#pragma once
// exp and log of float without a library call or a branch, so that a loop over an array of them
// vectorizes (libm's expf and logf are calls, one value at a time). Cephes' reductions and
// polynomials: a relative error of about 2e-7 over the ranges below.

#include <algorithm>
#include <cstdint>
#include <cstring>

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

}  // namespace vector_math_detail

/// e^x, for x clamped to [-87, 88] (below, e^x is under 2^-125 and returned as such).
inline float exp_approx(float x) {
  using namespace vector_math_detail;
  x = std::min(std::max(x, -87.0f), 88.0f);
  // n = round(x / ln 2), by the float-rounding trick (|x / ln 2| < 2^22).
  constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23
  const float n = (x * 1.44269504088896341f + round_magic) - round_magic;
  const float r = x - n * ln2_high - n * ln2_low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
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
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z + e * ln2_low - 0.5f * z;
  return m + y + e * ln2_high;
}

}  // namespace meshtensor::kernels::cpu
