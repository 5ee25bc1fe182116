#pragma once
// Reference pooling kernels on one block, with the spatial dims in the middle:
//   input [P][I0][I1][I2][C] (the read box), output [P][O0][O1][O2][C]
// Each output position reads kernel[0] x kernel[1] x kernel[2] positions through the same Taps as
// a convolution; channels (and any other dims) pass through.

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "meshtensor/kernels/common/pool_geometry.hpp"
#include "meshtensor/kernels/cpu/reference/conv.hpp"

namespace meshtensor::kernels::reference {

namespace detail {
template <class F>
void for_each_window(const PoolGeometry& g, F&& f) {
  ConvGeometry c;
  c.batch = g.batch;
  c.in = g.in;
  c.out = g.out;
  c.kernel = g.kernel;
  c.taps = g.taps;
  for_each_tap(c, std::forward<F>(f));
}
}  // namespace detail

/// Bytes of the workspace max pooling's forward fills for its backward: here the argmax (box
/// offset / channels) of every output element.
inline std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  return static_cast<std::size_t>(g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels) *
         sizeof(std::int64_t);
}

/// output = max over each window; the first maximum in window order wins ties (as in oneDNN).
/// `workspace` (max_pool_workspace_bytes, 8-byte aligned) is what the backward pass reads.
template <class T>
void max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  auto* argmax = static_cast<std::int64_t*>(workspace);
  const std::int64_t n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
  for (std::int64_t i = 0; i < n; ++i) {
    output[i] = -std::numeric_limits<T>::infinity();
    argmax[i] = -1;
  }
  detail::for_each_window(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t) {
    const T* x = input + in_at * g.channels;
    T* o = output + out_at * g.channels;
    std::int64_t* a = argmax + out_at * g.channels;
    for (std::int64_t c = 0; c < g.channels; ++c)
      if (x[c] > o[c] || a[c] < 0) {
        o[c] = x[c];
        a[c] = in_at;
      }
  });
}

/// grad_input (over the box) = grad_output routed to each window's maximum.
template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  const auto* argmax = static_cast<const std::int64_t*>(workspace);
  const std::int64_t in_size = g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
  for (std::int64_t i = 0; i < in_size; ++i) grad_input[i] = T(0);
  const std::int64_t positions = g.batch * g.out[0] * g.out[1] * g.out[2];
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t c = 0; c < g.channels; ++c) {
      const std::int64_t from = argmax[p * g.channels + c];
      if (from >= 0) grad_input[from * g.channels + c] += grad_output[p * g.channels + c];
    }
}

/// How many positions of each output's window lie inside the tensor (the divisor of average
/// pooling that ignores padding), or the full window size when padding counts.
inline std::int64_t window_count(const PoolGeometry& g, std::int64_t o0, std::int64_t o1,
                                 std::int64_t o2, bool count_padding) {
  if (count_padding) return g.kernel[0] * g.kernel[1] * g.kernel[2];
  const std::array<std::int64_t, 3> o{o0, o1, o2};
  std::int64_t count = 1;
  for (std::size_t d = 0; d < 3; ++d) {
    std::int64_t inside = 0;
    for (std::int64_t k = 0; k < g.kernel[d]; ++k) {
      const std::int64_t i = g.taps[d].reads(o[d], k);
      inside += i >= g.inside_begin[d] && i < g.inside_end[d];
    }
    count *= inside;
  }
  return count;
}

/// `sum` over `count` positions; zero for a window wholly in the padding (whose positions are not
/// counted), which has nothing to average: not 0 / 0, whose NaN differs between processors.
template <class T>
T mean_of(T sum, std::int64_t count) {
  return count == 0 ? T(0) : T(sum / T(count));
}

/// output = mean over each window (padding counted or not).
template <class T>
void avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  const std::int64_t n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
  for (std::int64_t i = 0; i < n; ++i) output[i] = T(0);
  detail::for_each_window(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t) {
    const T* x = input + in_at * g.channels;
    T* o = output + out_at * g.channels;
    for (std::int64_t c = 0; c < g.channels; ++c) o[c] += x[c];
  });
  std::int64_t at = 0;
  for (std::int64_t p = 0; p < g.batch; ++p)
    for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (std::int64_t o2 = 0; o2 < g.out[2]; ++o2, ++at) {
          const std::int64_t divisor = window_count(g, o0, o1, o2, count_padding);
          for (std::int64_t c = 0; c < g.channels; ++c)
            output[at * g.channels + c] = mean_of(output[at * g.channels + c], divisor);
        }
}

/// grad_input (over the box) = grad_output spread evenly over each window.
template <class T>
void avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  const std::int64_t in_size = g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
  for (std::int64_t i = 0; i < in_size; ++i) grad_input[i] = T(0);
  std::int64_t current = -1;
  T scale = 0;
  detail::for_each_window(g, [&](std::int64_t in_at, std::int64_t out_at, std::int64_t) {
    if (out_at != current) {
      current = out_at;
      std::int64_t rest = out_at;
      const std::int64_t o2 = rest % g.out[2];
      rest /= g.out[2];
      const std::int64_t o1 = rest % g.out[1];
      rest /= g.out[1];
      const std::int64_t o0 = rest % g.out[0];
      scale = mean_of(T(1), window_count(g, o0, o1, o2, count_padding));
    }
    const T* go = grad_output + out_at * g.channels;
    T* gi = grad_input + in_at * g.channels;
    for (std::int64_t c = 0; c < g.channels; ++c) gi[c] += go[c] * scale;
  });
}

}  // namespace meshtensor::kernels::reference
