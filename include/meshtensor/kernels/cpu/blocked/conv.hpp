#pragma once
// Register-blocked convolution kernels, same contract as kernels/cpu/reference/conv.hpp. Portable
// C++ that the compiler vectorises: a block of OB output positions along the last spatial dim times
// CB output channels stays in registers while the taps and input channels stream past; a tap that
// reads outside the box reads a row of zeros, so the inner loops have no branches. The gradient of
// the input is the same kernel run backwards (grad_output as input, the weight's channel dims
// swapped, the taps inverted); the gradient of the weight accumulates a small product per row of
// outputs in float and adds it to the double total. Channel counts the blocks do not divide fall
// back to the reference kernels.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/cpu/reference/conv.hpp"

namespace meshtensor::kernels::blocked {

namespace detail {

template <class T, int CB, int OB>
void forward_blocks(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  const std::int64_t ci_n = g.c_in, co_n = g.c_out;
  const std::vector<T> zeros(static_cast<std::size_t>(ci_n), T(0));
  for (std::int64_t p = 0; p < g.batch; ++p)
    for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (std::int64_t z0 = 0; z0 < g.out[2]; z0 += OB) {
          const int nb = int(std::min<std::int64_t>(OB, g.out[2] - z0));
          for (std::int64_t c0 = 0; c0 < co_n; c0 += CB) {
            T acc[OB][CB] = {};
            for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
              const std::int64_t i0 = g.taps[0].reads(o0, k0);
              if (i0 < 0 || i0 >= g.in[0]) continue;
              for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
                const std::int64_t i1 = g.taps[1].reads(o1, k1);
                if (i1 < 0 || i1 >= g.in[1]) continue;
                const T* row = input + ((p * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * ci_n;
                for (std::int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                  const T* x[OB];
                  for (int b = 0; b < OB; ++b) {
                    const std::int64_t i2 = b < nb ? g.taps[2].reads(z0 + b, k2) : -1;
                    x[b] = i2 >= 0 && i2 < g.in[2] ? row + i2 * ci_n : zeros.data();
                  }
                  const T* w =
                      weight + ((k0 * g.kernel[1] + k1) * g.kernel[2] + k2) * ci_n * co_n + c0;
                  for (std::int64_t ci = 0; ci < ci_n; ++ci) {
                    T wv[CB];
                    for (int c = 0; c < CB; ++c) wv[c] = w[ci * co_n + c];
                    for (int b = 0; b < OB; ++b) {
                      const T v = x[b][ci];
                      for (int c = 0; c < CB; ++c) acc[b][c] += v * wv[c];
                    }
                  }
                }
              }
            }
            T* o = output + (((p * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + z0) * co_n + c0;
            for (int b = 0; b < nb; ++b)
              for (int c = 0; c < CB; ++c) o[b * co_n + c] = acc[b][c];
          }
        }
}

// The taps of the reverse problem: which output position reads input position i through tap k.
inline Taps inverted(const Taps& t) {
  Taps r = t;
  r.transposed = !t.transposed;
  r.origin = -t.origin;
  return r;
}

template <class T, int IB, int CB>
void weight_blocks(const ConvGeometry& g, const T* input, const T* grad_output,
                   double* grad_weight) {
  const std::int64_t ci_n = g.c_in, co_n = g.c_out;
  const std::int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  std::vector<T> row_sum(static_cast<std::size_t>(taps * ci_n * co_n));
  for (std::int64_t p = 0; p < g.batch; ++p)
    for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        std::fill(row_sum.begin(), row_sum.end(), T(0));
        const T* go_row = grad_output + ((p * g.out[0] + o0) * g.out[1] + o1) * g.out[2] * co_n;
        for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
          const std::int64_t i0 = g.taps[0].reads(o0, k0);
          if (i0 < 0 || i0 >= g.in[0]) continue;
          for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
            const std::int64_t i1 = g.taps[1].reads(o1, k1);
            if (i1 < 0 || i1 >= g.in[1]) continue;
            const T* x_row = input + ((p * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * ci_n;
            for (std::int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
              T* sum = row_sum.data() + ((k0 * g.kernel[1] + k1) * g.kernel[2] + k2) * ci_n * co_n;
              for (std::int64_t a0 = 0; a0 < ci_n; a0 += IB)
                for (std::int64_t c0 = 0; c0 < co_n; c0 += CB) {
                  T acc[IB][CB] = {};
                  for (std::int64_t z = 0; z < g.out[2]; ++z) {
                    const std::int64_t i2 = g.taps[2].reads(z, k2);
                    if (i2 < 0 || i2 >= g.in[2]) continue;
                    const T* x = x_row + i2 * ci_n + a0;
                    const T* go = go_row + z * co_n + c0;
                    for (int a = 0; a < IB; ++a)
                      for (int c = 0; c < CB; ++c) acc[a][c] += x[a] * go[c];
                  }
                  for (int a = 0; a < IB; ++a)
                    for (int c = 0; c < CB; ++c) sum[(a0 + a) * co_n + c0 + c] += acc[a][c];
                }
            }
          }
        }
        for (std::size_t i = 0; i < row_sum.size(); ++i) grad_weight[i] += row_sum[i];
      }
}

}  // namespace detail

/// output = the convolution of input with weight (as kernels::conv_forward).
template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if (g.c_out % 16 == 0) return detail::forward_blocks<T, 16, 6>(g, input, weight, output);
  if (g.c_out % 8 == 0) return detail::forward_blocks<T, 8, 14>(g, input, weight, output);
  reference::conv_forward(g, input, weight, output);
}

/// grad_input (over the box) = the gradient of conv_forward's output with respect to its input.
template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  ConvGeometry r = g;
  r.in = g.out;
  r.out = g.in;
  r.c_in = g.c_out;
  r.c_out = g.c_in;
  for (int d = 0; d < 3; ++d) r.taps[d] = detail::inverted(g.taps[d]);
  // The weight with its channel dims swapped: [k][c_out][c_in].
  const std::int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  std::vector<T> swapped(static_cast<std::size_t>(taps * g.c_in * g.c_out));
  for (std::int64_t k = 0; k < taps; ++k)
    for (std::int64_t ci = 0; ci < g.c_in; ++ci)
      for (std::int64_t co = 0; co < g.c_out; ++co)
        swapped[(k * g.c_out + co) * g.c_in + ci] = weight[(k * g.c_in + ci) * g.c_out + co];
  blocked::conv_forward(r, grad_output, swapped.data(), grad_input);
}

/// grad_weight += the gradient of conv_forward's output with respect to the weight (double).
template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if (g.c_out % 16 == 0 && g.c_in % 2 == 0)
    return detail::weight_blocks<T, 2, 16>(g, input, grad_output, grad_weight);
  if (g.c_out % 8 == 0 && g.c_in % 4 == 0)
    return detail::weight_blocks<T, 4, 8>(g, input, grad_output, grad_weight);
  if (g.c_out % 8 == 0) return detail::weight_blocks<T, 1, 8>(g, input, grad_output, grad_weight);
  reference::conv_backward_weight(g, input, grad_output, grad_weight);
}

}  // namespace meshtensor::kernels::blocked
