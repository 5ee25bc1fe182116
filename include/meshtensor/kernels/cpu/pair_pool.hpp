#pragma once
// Max pooling of 2 x 2 x 2 windows at stride 2 (the U-Net's down-sampling) on channels-last
// blocks, forward and backward, float or bfloat16. oneDNN's pooling vectorises along channels,
// half-empty vectors at the U-Net's 8, several times slower. Here each window's rows of channels
// are read whole, and
// backward writes every input position once (the windows do not overlap), with no zeroing pass
// first. The workspace holds each output's window index (0-7, window order: dim 0 slowest), and
// ties go to the first maximum in window order, as in the reference kernels and oneDNN.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/pool_geometry.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"

#if MESHTENSOR_AVX512_COMPILED
#include <immintrin.h>
#endif

namespace meshtensor::kernels::cpu {

/// Whether `g` is a 2 x 2 x 2, stride-2 window over a box of exactly the outputs' windows.
inline bool pair_pool_fits(const PoolGeometry& g) {
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (g.kernel[d] != 2 || t.stride != 2 || t.transposed || t.dilation != 1 || t.origin != 0 ||
        g.in[d] != 2 * g.out[d])
      return false;
  }
  return g.batch > 0 && g.channels > 0 && g.out[0] * g.out[1] * g.out[2] > 0;
}

inline std::size_t pair_pool_workspace_bytes(const PoolGeometry& g) {
  return static_cast<std::size_t>(g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels);
}

namespace pair_pool_detail {

// f(q) for the outputs' planes q along dim 0 (batch entries stacked), in contiguous parts on the
// processor's compute threads.
template <class F>
void for_each_plane(std::int64_t planes, F&& f) {
  const int parts = static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(compute_threads(), planes)));
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1) if (parts > 1)
#endif
  for (int p = 0; p < parts; ++p)
    for (std::int64_t q = planes * p / parts; q < planes * (p + 1) / parts; ++q) f(q);
}

// f(std::integral_constant<int, C>) with C = c where c is one of the U-Net's 8, 16, 32, else 0:
// forward's row loop over so few channels as one vector's worth would otherwise run only its
// scalar remainder. (Backward's, so fixed, gave wrong bfloat16 results at 8 channels under
// GCC 12 at -O3, right ones at -O1: it stays generic.)
template <class F>
void with_fixed_channels(std::int64_t c, F&& f) {
  if (c == 8) return f(std::integral_constant<int, 8>{});
  if (c == 16) return f(std::integral_constant<int, 16>{});
  if (c == 32) return f(std::integral_constant<int, 32>{});
  f(std::integral_constant<int, 0>{});
}

// The values compared (as float) and the bits moved: a bfloat16 is selected as its 16 bits, so
// the loops below vectorise and a chosen value is the input itself.
template <class T>
using Bits = std::conditional_t<std::is_same_v<T, bfloat16>, std::uint16_t, float>;

template <class T>
Bits<T> bits_of(T v) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return v.bits;
  else
    return v;
}

template <class T>
T from_bits(Bits<T> bits) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return bfloat16::from_bits(bits);
  else
    return bits;
}

// One output row: r0 .. r3 are the window's four input rows (k0, k1 in window order), each of
// 2 * n positions of c channels. Restrict-qualified, each a parameter: GCC checks at most ten
// overlaps at run time before it vectorises a loop, fewer than these pointers would need.
// C > 0: the channels, fixed at compile time (with_fixed_channels).
template <class T, int C = 0>
void forward_row(const T* __restrict r0, const T* __restrict r1, const T* __restrict r2,
                 const T* __restrict r3, T* __restrict out, std::uint8_t* __restrict at,
                 std::int64_t n, std::int64_t channels) {
  const std::int64_t c = C > 0 ? C : channels;
  for (std::int64_t o = 0; o < n; ++o)
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const std::int64_t x = 2 * o * c + ch;
      Bits<T> best = bits_of(r0[x]);
      float best_value = float(r0[x]);
      std::uint32_t k_best = 0;
      // Masks and std::max rather than branches, so that GCC vectorises. std::max(a, b) keeps a
      // unless b is larger (a NaN never is): the first maximum keeps ties, as `larger` does.
      const auto take = [&](T input, std::uint32_t k) {
        const Bits<T> v = bits_of(input);
        const float value = float(input);
        const std::uint32_t larger = 0u - std::uint32_t(value > best_value);
        k_best ^= (k_best ^ k) & larger;
        if constexpr (std::is_same_v<T, bfloat16>) best = Bits<T>(best ^ ((best ^ v) & larger));
        best_value = std::max(best_value, value);
      };
      take(r0[x + c], 1), take(r1[x], 2), take(r1[x + c], 3);
      take(r2[x], 4), take(r2[x + c], 5), take(r3[x], 6), take(r3[x + c], 7);
      if constexpr (std::is_same_v<T, bfloat16>)
        out[o * c + ch] = from_bits<T>(best);
      else
        out[o * c + ch] = best_value;
      at[o * c + ch] = std::uint8_t(k_best);
    }
}

// One input row, window row `k01` (k0 * 2 + k1): each position gets its window's output gradient
// where the window's maximum was, else zero. C > 0: the channels, fixed at compile time.
template <class T, int C = 0>
void backward_row(const T* __restrict grad_output, const std::uint8_t* __restrict at, int k01,
                  T* __restrict row, std::int64_t n, std::int64_t channels) {
  const std::int64_t c = C > 0 ? C : channels;
  for (std::int64_t o = 0; o < n; ++o)
    for (int k2 = 0; k2 < 2; ++k2)
      for (std::int64_t ch = 0; ch < c; ++ch) {
        const std::int64_t y = o * c + ch;
        row[(2 * o + k2) * c + ch] =
            from_bits<T>(at[y] == 2 * k01 + k2 ? bits_of(grad_output[y]) : Bits<T>(0));
      }
}

#if MESHTENSOR_AVX512_COMPILED  // and they run where avx512_loops_run()
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)
// Rows of channels in eights, 8 channels a vector, written out with intrinsics: faster than GCC's
// vectorised loops above, whose bfloat16 backward loop miscompiled with its channels fixed.

// The element types these rows take (a double block runs the loops above).
template <class T>
constexpr bool eights = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

// 8 channels' values as floats (a bfloat16's bits are the upper half of a float's), and back.
inline __m256 load_eight(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_eight(const bfloat16* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
inline void store_eight(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store_eight(bfloat16* p, __m256 v) {  // exact: v was loaded from bfloat16
  const __m256i bits = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtepi32_epi16(bits));
}

// 8 channels' output gradient where `hit` says, zero elsewhere.
inline void store_selected(float* to, const float* from, __mmask8 hit) {
  _mm256_storeu_ps(to, _mm256_maskz_mov_ps(hit, _mm256_loadu_ps(from)));
}
inline void store_selected(bfloat16* to, const bfloat16* from, __mmask8 hit) {
  const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_maskz_mov_epi16(hit, g));
}

// forward_row's results, the same comparisons 8 channels at a time (ordered: a NaN is never
// larger, and a NaN first stays).
template <class T>
void forward_row_eights(const T* r0, const T* r1, const T* r2, const T* r3, T* out,
                        std::uint8_t* at, std::int64_t n, std::int64_t c) {
  for (std::int64_t o = 0; o < n; ++o)
    for (std::int64_t ch = 0; ch < c; ch += 8) {
      const std::int64_t x = 2 * o * c + ch;
      const T* window[8] = {r0 + x, r0 + x + c, r1 + x, r1 + x + c,
                            r2 + x, r2 + x + c, r3 + x, r3 + x + c};
      __m256 best = load_eight(window[0]);
      __m256i k_best = _mm256_setzero_si256();
      for (int k = 1; k < 8; ++k) {
        const __m256 value = load_eight(window[k]);
        const __mmask8 larger = _mm256_cmp_ps_mask(value, best, _CMP_GT_OQ);
        best = _mm256_mask_mov_ps(best, larger, value);
        k_best = _mm256_mask_mov_epi32(k_best, larger, _mm256_set1_epi32(k));
      }
      store_eight(out + o * c + ch, best);
      // (the zero-masking form: GCC 12 warns of the plain one's undefined operand)
      _mm_storel_epi64(reinterpret_cast<__m128i*>(at + o * c + ch),
                       _mm256_maskz_cvtepi32_epi8(0xff, k_best));
    }
}

// backward_row's results, 8 channels at a time.
template <class T>
void backward_row_eights(const T* grad_output, const std::uint8_t* at, int k01, T* row,
                         std::int64_t n, std::int64_t c) {
  for (std::int64_t o = 0; o < n; ++o)
    for (std::int64_t ch = 0; ch < c; ch += 8) {
      const std::int64_t y = o * c + ch;
      const __m128i index = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at + y));
      for (int k2 = 0; k2 < 2; ++k2) {
        const __mmask8 hit =
            __mmask8(_mm_cmpeq_epi8_mask(index, _mm_set1_epi8(char(2 * k01 + k2))));
        store_selected(row + (2 * o + k2) * c + ch, grad_output + y, hit);
      }
    }
}
MESHTENSOR_FORM_END
#endif

}  // namespace pair_pool_detail

/// output = the maximum of each window; workspace = its index in the window.
template <class T>
void pair_max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  const std::int64_t c = g.channels, in1 = g.in[1], in2 = g.in[2];
  const std::int64_t out1 = g.out[1], out2 = g.out[2];
  auto* index = static_cast<std::uint8_t*>(workspace);
  pair_pool_detail::for_each_plane(g.batch * g.out[0], [&](std::int64_t q) {
    const T* plane = input + 2 * q * in1 * in2 * c;  // input plane 2 q (batch entries stacked)
    for (std::int64_t o1 = 0; o1 < out1; ++o1) {
      const auto row = [&](int k0, int k1) { return plane + (k0 * in1 + 2 * o1 + k1) * in2 * c; };
      const std::int64_t first = (q * out1 + o1) * out2 * c;
#if MESHTENSOR_AVX512_COMPILED
      if constexpr (pair_pool_detail::eights<T>)
        if (c % 8 == 0 && avx512_loops_run()) {
          pair_pool_detail::forward_row_eights(row(0, 0), row(0, 1), row(1, 0), row(1, 1),
                                               output + first, index + first, out2, c);
          continue;
        }
#endif
      pair_pool_detail::with_fixed_channels(c, [&](auto fixed) {
        pair_pool_detail::forward_row<T, decltype(fixed)::value>(
            row(0, 0), row(0, 1), row(1, 0), row(1, 1), output + first, index + first, out2, c);
      });
    }
  });
}

/// grad_input (the box) = grad_output at each window's maximum, zero elsewhere.
template <class T>
void pair_max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                            T* grad_input) {
  const std::int64_t c = g.channels, in1 = g.in[1], in2 = g.in[2];
  const std::int64_t out1 = g.out[1], out2 = g.out[2];
  const auto* index = static_cast<const std::uint8_t*>(workspace);
  pair_pool_detail::for_each_plane(g.batch * g.out[0], [&](std::int64_t q) {
    T* plane = grad_input + 2 * q * in1 * in2 * c;
    for (std::int64_t o1 = 0; o1 < out1; ++o1) {
      const std::int64_t first = (q * out1 + o1) * out2 * c;
      const auto rows = [&](auto fixed) {
        for (int k0 = 0; k0 < 2; ++k0)
          for (int k1 = 0; k1 < 2; ++k1)
            pair_pool_detail::backward_row<T, decltype(fixed)::value>(
                grad_output + first, index + first, k0 * 2 + k1,
                plane + (k0 * in1 + 2 * o1 + k1) * in2 * c, out2, c);
      };
#if MESHTENSOR_AVX512_COMPILED
      if constexpr (pair_pool_detail::eights<T>)
        if (c % 8 == 0 && avx512_loops_run()) {
          for (int k01 = 0; k01 < 4; ++k01)
            pair_pool_detail::backward_row_eights(
                grad_output + first, index + first, k01,
                plane + ((k01 / 2) * in1 + 2 * o1 + k01 % 2) * in2 * c, out2, c);
          continue;
        }
#endif
      // Elsewhere float rows with the channels fixed (faster than generic);
      // bfloat16's generic (with_fixed_channels).
      if constexpr (std::is_same_v<T, float>)
        pair_pool_detail::with_fixed_channels(c, rows);
      else
        rows(std::integral_constant<int, 0>{});
    }
  });
}

}  // namespace meshtensor::kernels::cpu
