#pragma once
// Reference convolution kernels on one block, channels last:
//   input  [P][I0][I1][I2][Ci]   the read box (halo and padding included)
//   weight [K0][K1][K2][Ci][Co]
//   output [P][O0][O1][O2][Co]   this processor's outputs
// Unused spatial dims have size 1. A `Taps` per spatial dim says which input position output o
// reads through tap k: a convolution reads first + o*stride + k*dilation; a transposed convolution
// reads i where i*stride = o + offset - k*dilation, when that divides. The same three loops serve
// both: forward, the gradient of the input (added into the box) and of the weight (added, double).
// Every output is computed from the same values in the same order whatever the split, so forward
// results do not depend on the layout at all.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/common/conv_geometry.hpp"

namespace meshtensor::kernels::reference {

/// The gradient of box rows [r0, r1) into `grad_rows` (those rows alone; `grad_output`: all output
/// rows) by `kernel` (a conv_backward_input) on the output rows that read them; zeros where none
/// does.
template <class T, class Kernel>
void input_gradient_rows(const ConvGeometry& g, std::int64_t r0, std::int64_t r1,
                         const T* grad_output, const T* weight, T* grad_rows, Kernel&& kernel) {
  const InputSlab slab = input_rows(g, r0, r1);
  if (slab.o0 < slab.o1)
    kernel(slab.geometry, grad_output + slab.o0 * output_row_size(g), weight, grad_rows);
  else
    std::fill(grad_rows, grad_rows + (r1 - r0) * input_row_size(g), T(0));
}

namespace detail {
// Calls f(input offset / c_in, output offset / c_out, weight offset / (c_in * c_out)) for every
// output position and every tap that reads inside the box.
template <class F>
void for_each_tap(const ConvGeometry& g, F&& f) {
  for (std::int64_t p = 0; p < g.batch; ++p)
    for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (std::int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const std::int64_t out_at = ((p * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2;
          for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
            const std::int64_t i0 = g.taps[0].reads(o0, k0);
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
              const std::int64_t i1 = g.taps[1].reads(o1, k1);
              if (i1 < 0 || i1 >= g.in[1]) continue;
              for (std::int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                const std::int64_t i2 = g.taps[2].reads(o2, k2);
                if (i2 < 0 || i2 >= g.in[2]) continue;
                const std::int64_t in_at = ((p * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2;
                const std::int64_t w_at = (k0 * g.kernel[1] + k1) * g.kernel[2] + k2;
                f(in_at, out_at, w_at);
              }
            }
          }
        }
}
}  // namespace detail

/// output = sum over taps and input channels of input * weight.
template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  const std::int64_t ci_n = g.c_in, co_n = g.c_out;
  std::vector<T> acc(co_n);
  std::int64_t current = -1;
  auto flush = [&] {
    if (current < 0) return;
    T* o = output + current * co_n;
    for (std::int64_t co = 0; co < co_n; ++co) o[co] = acc[co];
  };
  // Outputs with no tap inside the box (possible only for transposed convolutions) stay zero.
  const std::int64_t n_out = g.batch * g.out[0] * g.out[1] * g.out[2];
  for (std::int64_t i = 0; i < n_out * co_n; ++i) output[i] = T(0);
  detail::for_each_tap(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t w_at) {
    if (out_at != current) {
      flush();
      current = out_at;
      std::fill(acc.begin(), acc.end(), T(0));
    }
    const T* x = input + in_at * ci_n;
    const T* w = weight + w_at * ci_n * co_n;
    for (std::int64_t ci = 0; ci < ci_n; ++ci) {
      const T v = x[ci];
      const T* wr = w + ci * co_n;
      for (std::int64_t co = 0; co < co_n; ++co) acc[co] += v * wr[co];
    }
  });
  flush();
}

/// grad_input (over the box) = the gradient of conv_forward's output with respect to its input.
template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  const std::int64_t ci_n = g.c_in, co_n = g.c_out;
  std::fill(grad_input, grad_input + g.batch * g.in[0] * g.in[1] * g.in[2] * ci_n, T(0));
  detail::for_each_tap(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t w_at) {
    const T* go = grad_output + out_at * co_n;
    const T* w = weight + w_at * ci_n * co_n;
    T* gi = grad_input + in_at * ci_n;
    for (std::int64_t ci = 0; ci < ci_n; ++ci) {
      const T* wr = w + ci * co_n;
      T sum = 0;
      for (std::int64_t co = 0; co < co_n; ++co) sum += go[co] * wr[co];
      gi[ci] += sum;
    }
  });
}

/// grad_weight += the gradient of conv_forward's output with respect to the weight, accumulated
/// in double: it sums over every output position of the block.
template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  const std::int64_t ci_n = g.c_in, co_n = g.c_out;
  detail::for_each_tap(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t w_at) {
    const T* x = input + in_at * ci_n;
    const T* go = grad_output + out_at * co_n;
    double* gw = grad_weight + w_at * ci_n * co_n;
    for (std::int64_t ci = 0; ci < ci_n; ++ci) {
      const double v = x[ci];
      double* row = gw + ci * co_n;
      for (std::int64_t co = 0; co < co_n; ++co) row[co] += v * static_cast<double>(go[co]);
    }
  });
}

}  // namespace meshtensor::kernels::reference
