#pragma once
// Convolution geometries for the kernel tests (CPU and GPU kernels against the reference loops):
// strides, dilations, 'same' padding whole and at a split block's edge, transposed convolutions
// (the U-Net's up-sampling among them), channel counts blocks divide and ones they do not; with
// inputs, and the reference results on them.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include <meshtensor/core/bfloat16.hpp>
#include <meshtensor/kernels/cpu/reference/conv.hpp>

namespace meshtensor::testing {

using kernels::ConvGeometry;
using kernels::Taps;

struct Case {
  std::array<std::int64_t, 3> out, kernel, stride, dilation;
  std::int64_t batch, c_in, c_out;
  bool transposed;
  bool exact_multiple = false;  // transposed: in = out / stride, origin 0 (the U-Net's up-sampling)
  // Convolutions: zero padding of `pad` positions before each dim's box, and after it unless
  // `pad_before_only` (a split block's slab at the tensor's start).
  std::int64_t pad = 0;
  bool pad_before_only = false;
};

// A geometry whose box covers exactly what the outputs read, less the padding.
inline ConvGeometry geometry(const Case& c) {
  ConvGeometry g;
  g.batch = c.batch;
  g.c_in = c.c_in;
  g.c_out = c.c_out;
  g.out = c.out;
  g.kernel = c.kernel;
  for (int d = 0; d < 3; ++d) {
    const std::int64_t span = (c.kernel[d] - 1) * c.dilation[d] + 1;
    g.taps[d] = Taps{c.transposed, 0, c.stride[d], c.dilation[d]};
    if (!c.transposed) {
      g.taps[d].origin = -c.pad;
      g.in[d] = (c.out[d] - 1) * c.stride[d] + span - c.pad * (c.pad_before_only ? 1 : 2);
    } else if (c.exact_multiple) {
      g.in[d] = c.out[d] / c.stride[d];
    } else {  // outputs o read (o + origin - k*dilation) / stride; origin keeps every read >= 0
      g.taps[d].origin = span - 1;
      g.in[d] = (c.out[d] - 1 + span - 1) / c.stride[d] + 1;
    }
  }
  return g;
}

/// max |a - b| over max |a|.
inline double relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 1e-30, gap = 0;
  for (std::size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::abs(a[i]));
  for (std::size_t i = 0; i < a.size(); ++i) gap = std::max(gap, std::abs(a[i] - b[i]));
  return gap / scale;
}

template <class T>
inline std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline std::vector<Case> conv_cases() {
  return {
      {{6, 5, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, 8, 8, false},
      {{4, 3, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 16, 16, false},
      {{3, 4, 5}, {3, 2, 3}, {2, 1, 2}, {1, 2, 1}, 2, 4, 16, false},
      {{5, 5, 13}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, 32, 8, false},
      {{4, 4, 4}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, 1, 1, 8, false},
      {{3, 3, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 3, 5, false},  // falls back to reference
      // 'same' padding, as the U-Net's convolutions, whole and as a split block's first rows
      {{6, 7, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 16, false, false, 1},
      {{4, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 16, 8, false, false, 1, true},
      {{5, 6, 7}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, 1, 8, 8, false, false, 2},
      {{1, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 8, false, false, 1},
      {{8, 6, 10}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, 1, 16, 8, true},
      {{8, 6, 10}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, 1, 16, 8, true, true},  // the U-Net's
      {{16, 16, 16}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, 1, 64, 32, true, true},
      {{7, 5, 9}, {3, 3, 3}, {2, 1, 3}, {1, 2, 1}, 2, 8, 16, true},
      {{6, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 3, true},
  };
}

/// One case's operands (made from sines, so every run sees the same values) and the reference
/// kernels' results on them.
struct ConvCheck {
  ConvGeometry g;
  std::size_t in_n = 0, out_n = 0, w_n = 0;
  std::vector<float> x, w, dy;
  std::vector<float> y_ref, dx_ref;
  std::vector<double> dw_ref;

  // With `bf16_values`, the operands are values a bfloat16 holds (the references exact for them).
  explicit ConvCheck(const Case& c, bool bf16_values = false) : g(geometry(c)) {
    in_n = g.batch * g.in[0] * g.in[1] * g.in[2] * g.c_in;
    out_n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.c_out;
    w_n = g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out;
    x.resize(in_n);
    w.resize(w_n);
    dy.resize(out_n);
    for (std::size_t i = 0; i < in_n; ++i) x[i] = float(std::sin(0.7 * i + 0.3));
    for (std::size_t i = 0; i < w_n; ++i) w[i] = float(std::cos(1.3 * i));
    for (std::size_t i = 0; i < out_n; ++i) dy[i] = float(std::sin(2.1 * i + 1));
    if (bf16_values)
      for (auto* v : {&x, &w, &dy})
        for (float& value : *v) value = float(bfloat16(value));
    y_ref.resize(out_n);
    dx_ref.resize(in_n);
    dw_ref.assign(w_n, 0.0);
    kernels::reference::conv_forward(g, x.data(), w.data(), y_ref.data());
    kernels::reference::conv_backward_input(g, dy.data(), w.data(), dx_ref.data());
    kernels::reference::conv_backward_weight(g, x.data(), dy.data(), dw_ref.data());
  }
};

}  // namespace meshtensor::testing
