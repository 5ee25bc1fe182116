// GELU and its derivative eight floats at a time, in one instruction set's form
// (cpu/for_each_form.hpp includes this once per set; cpu/activation.hpp chooses among the forms).
// No include guard. libm's erfcf and expf are calls, one value at a time; these are not. erfc is
// Numerical Recipes' erfcc (a Chebyshev fit of erfc(z) e^(z^2) in t = 1 / (1 + z / 2), fractional
// error 1.2e-7), e^x cpu/vector_math.hpp's: in float, within 4e-6 of erfc where it is above 1e-37.

namespace meshtensor::kernels::cpu::activation::MESHTENSOR_TARGET {

// e^(a + b), b a correction below a's rounding (a clamped to [-87, 88]).
inline __m256 exp_of_sum(__m256 a, __m256 b) {
  using namespace vector_math_detail;
  a = _mm256_min_ps(_mm256_max_ps(a, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ln2_high), a);
  r = _mm256_add_ps(_mm256_fnmadd_ps(n, _mm256_set1_ps(ln2_low), r), b);
  __m256 p = _mm256_set1_ps(exp_polynomial[0]);
  for (std::size_t k = 1; k < std::size(exp_polynomial); ++k)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_polynomial[k]));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i scale =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(scale));
}

// erfc x; 0 from x = 10 on (erfc below 2e-45), as libm's where it underflows.
inline __m256 erfc(__m256 x) {
  static constexpr float fit[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f,
                                  0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                                  1.00002368f, -1.26551223f};
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 z = _mm256_min_ps(magnitude, _mm256_set1_ps(10.0f));  // NaN: 10 (x keeps it)
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
  __m256 p = _mm256_set1_ps(fit[0]);
  for (std::size_t k = 1; k < std::size(fit); ++k)
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(fit[k]));
  // e^(p - z^2), z^2 in two parts: its rounding alone would add 2e-6 to the error at z = 6.
  const __m256 square = _mm256_mul_ps(z, z);
  const __m256 square_error = _mm256_fmsub_ps(z, z, square);
  const __m256 underflows = _mm256_cmp_ps(magnitude, _mm256_set1_ps(10.0f), _CMP_GE_OQ);
  const __m256 positive = _mm256_andnot_ps(
      underflows, _mm256_mul_ps(t, exp_of_sum(_mm256_sub_ps(p, square),
                                              _mm256_sub_ps(_mm256_setzero_ps(), square_error))));
  const __m256 negative_x = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(positive, _mm256_sub_ps(_mm256_set1_ps(2.0f), positive), negative_x);
}

// x erfc(-x / sqrt 2) / 2, as kernels/common/elementwise_formulas.hpp's gelu.
inline __m256 gelu(__m256 x) {
  const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(-0.70710678118654752440f));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), erfc(u));
}

// erfc(-x / sqrt 2) / 2 + x e^(-x^2 / 2) / sqrt(2 pi), as gelu_derivative.
inline __m256 gelu_derivative(__m256 x) {
  const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(-0.70710678118654752440f));
  const __m256 density =
      exp_of_sum(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x)), _mm256_setzero_ps());
  return _mm256_fmadd_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.39894228040143267794f)), density,
                         _mm256_mul_ps(_mm256_set1_ps(0.5f), erfc(u)));
}

// out[i] = gelu(x[i]), or with `gradient` g[i] gelu'(x[i]), for i < n; the last partial vector
// through a copy.
template <bool gradient>
bool apply(const float* g, const float* x, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y =
        gradient ? gelu_derivative(_mm256_loadu_ps(x + i)) : gelu(_mm256_loadu_ps(x + i));
    _mm256_storeu_ps(out + i, gradient ? _mm256_mul_ps(_mm256_loadu_ps(g + i), y) : y);
  }
  if (i == n) return true;
  alignas(32) float tail_x[8] = {}, tail_g[8] = {}, tail_out[8];
  std::copy(x + i, x + n, tail_x);
  if (gradient) std::copy(g + i, g + n, tail_g);
  const __m256 y =
      gradient ? gelu_derivative(_mm256_load_ps(tail_x)) : gelu(_mm256_load_ps(tail_x));
  _mm256_store_ps(tail_out, gradient ? _mm256_mul_ps(_mm256_load_ps(tail_g), y) : y);
  std::copy(tail_out, tail_out + (n - i), out + i);
  return true;
}

inline bool gelu(const float* x, float* out, std::int64_t n) {
  return apply<false>(nullptr, x, out, n);
}
inline bool gelu_times_derivative(const float* g, const float* x, float* out, std::int64_t n) {
  return apply<true>(g, x, out, n);
}

}  // namespace meshtensor::kernels::cpu::activation::MESHTENSOR_TARGET
