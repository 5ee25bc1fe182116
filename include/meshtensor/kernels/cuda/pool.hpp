#pragma once
// Max and average pooling on a processor that computes on a GPU: meshtensor's own CUDA kernels,
// compiled at run time (device/runtime_compiler.hpp), with the reference kernels' semantics to the
// bit (kernels/cpu/reference/pool.hpp): the same window order and tie rule, the same workspace (the
// box offset of each window's maximum), and gradients summed in the same order. Forward runs a
// thread per output element; backward a thread per box element, gathering from the outputs whose
// windows read it in increasing order, so nothing is added atomically. Each host function returns
// false, doing nothing, unless the thread computes on a GPU, the blocks are float or bfloat16 (read
// as float, each output rounded once), every operand is in GPU memory, and windows
// have at most 16 taps per dim.

#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/cpu/reference/pool.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The pooling kernels' text.
inline const char* pool_kernels_text() {
  static const char* const text{R"(
// The host's PoolGeometry, flattened (all 64-bit: the same layout on both sides).
struct Geometry {
  long long batch, channels;
  long long in[3], out[3], kernel[3];
  long long origin[3], stride[3], dilation[3], transposed[3];
  long long inside_begin[3], inside_end[3];
};

// The box index output o reads through tap k, or -1 (kernels/cpu/reference/conv.hpp, Taps::reads).
__device__ long long reads(const Geometry& g, int d, long long o, long long k) {
  if (!g.transposed[d]) return g.origin[d] + o * g.stride[d] + k * g.dilation[d];
  const long long t = g.origin[d] + o - k * g.dilation[d];
  return t % g.stride[d] == 0 ? t / g.stride[d] : -1;
}

__device__ long long window_count(const Geometry& g, const long long* o, int count_padding) {
  if (count_padding) return g.kernel[0] * g.kernel[1] * g.kernel[2];
  long long count = 1;
  for (int d = 0; d < 3; ++d) {
    long long inside = 0;
    for (long long k = 0; k < g.kernel[d]; ++k) {
      const long long i = reads(g, d, o[d], k);
      inside += i >= g.inside_begin[d] && i < g.inside_end[d];
    }
    count *= inside;
  }
  return count;
}

// Splits a flat index of [batch][e0][e1][e2][channels] into its parts.
__device__ void split(long long at, const Geometry& g, const long long* e, long long* p,
                      long long* x, long long* c) {
  *c = at % g.channels;
  at /= g.channels;
  x[2] = at % e[2];
  at /= e[2];
  x[1] = at % e[1];
  at /= e[1];
  x[0] = at % e[0];
  *p = at / e[0];
}

// The outputs along dim d whose windows read box index i, in increasing order; how many.
__device__ int readers(const Geometry& g, int d, long long i, long long* o) {
  int n = 0;
  for (long long j = 0; j < g.kernel[d]; ++j) {
    // A convolution's tap k reads origin + o*stride + k*dilation: larger k, smaller o, so taps
    // are walked from the last. A transposed one's output grows with k.
    const long long k = g.transposed[d] ? j : g.kernel[d] - 1 - j;
    long long candidate;
    if (!g.transposed[d]) {
      const long long t = i - g.origin[d] - k * g.dilation[d];
      if (t < 0 || t % g.stride[d] != 0) continue;
      candidate = t / g.stride[d];
    } else {
      candidate = i * g.stride[d] - g.origin[d] + k * g.dilation[d];
    }
    if (candidate >= 0 && candidate < g.out[d] && reads(g, d, candidate, k) == i) o[n++] = candidate;
  }
  return n;
}

// As the reference's: a window wholly in uncounted padding averages to zero, not to 0 / 0.
__device__ float mean_of(float sum, long long count) { return count == 0 ? 0.0f : sum / (float)count; }

#define FOR_EACH_ELEMENT(n) \
  for (long long at = blockIdx.x * (long long)blockDim.x + threadIdx.x; at < (n); \
       at += (long long)blockDim.x * gridDim.x)

// Calls f(box position) for each position the window of output o (batch p) reads inside the
// box, in the reference kernels' order (kernels/cpu/reference/conv.hpp, for_each_tap).
template <class F>
__device__ void for_each_read(const Geometry& g, long long p, const long long* o, F&& f) {
  for (long long k0 = 0; k0 < g.kernel[0]; ++k0) {
    const long long i0 = reads(g, 0, o[0], k0);
    if (i0 < 0 || i0 >= g.in[0]) continue;
    for (long long k1 = 0; k1 < g.kernel[1]; ++k1) {
      const long long i1 = reads(g, 1, o[1], k1);
      if (i1 < 0 || i1 >= g.in[1]) continue;
      for (long long k2 = 0; k2 < g.kernel[2]; ++k2) {
        const long long i2 = reads(g, 2, o[2], k2);
        if (i2 < 0 || i2 >= g.in[2]) continue;
        f(((p * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2);
      }
    }
  }
}

// Values of T read as float: a window's maximum, sum and gradients in float, written back as T
// (for bfloat16 each output rounded once, as the CPU's widened kernels round).
template <class T>
__device__ void max_pool_forward(const Geometry& g, const T* input, T* output, long long* argmax) {
  const long long n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
  FOR_EACH_ELEMENT(n) {
    long long p, o[3], c;
    split(at, g, g.out, &p, o, &c);
    float best = -__int_as_float(0x7f800000);
    long long won = -1;
    for_each_read(g, p, o, [&](long long in_at) {
      const float x = input[in_at * g.channels + c];
      if (x > best || won < 0) {
        best = x;
        won = in_at;
      }
    });
    output[at] = T(best);
    argmax[at] = won;
  }
}

template <class T>
__device__ void avg_pool_forward(const Geometry& g, const T* input, T* output, int count_padding) {
  const long long n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
  FOR_EACH_ELEMENT(n) {
    long long p, o[3], c;
    split(at, g, g.out, &p, o, &c);
    float sum = 0.0f;
    for_each_read(g, p, o, [&](long long in_at) { sum += (float)input[in_at * g.channels + c]; });
    output[at] = T(mean_of(sum, window_count(g, o, count_padding)));
  }
}

// Backward: box element (p, i, c) gathers from the outputs reading it, in increasing order.
template <class T>
__device__ void pool_backward(const Geometry& g, const T* grad_output, const long long* argmax,
                              T* grad_input, int count_padding) {
  const long long n = g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
  FOR_EACH_ELEMENT(n) {
    long long p, i[3], c;
    split(at, g, g.in, &p, i, &c);
    const long long in_at = at / g.channels;
    long long o0[16], o1[16], o2[16];
    const int n0 = readers(g, 0, i[0], o0), n1 = readers(g, 1, i[1], o1),
              n2 = readers(g, 2, i[2], o2);
    float sum = 0.0f;
    for (int a = 0; a < n0; ++a)
      for (int b = 0; b < n1; ++b)
        for (int d = 0; d < n2; ++d) {
          const long long out_at = ((p * g.out[0] + o0[a]) * g.out[1] + o1[b]) * g.out[2] + o2[d];
          const long long e = out_at * g.channels + c;
          if (argmax) {
            if (argmax[e] == in_at) sum += (float)grad_output[e];
          } else {
            const long long o[3] = {o0[a], o1[b], o2[d]};
            sum += (float)grad_output[e] * mean_of(1.0f, window_count(g, o, count_padding));
          }
        }
    grad_input[at] = T(sum);
  }
}

extern "C" __global__ void max_pool_forward_f32(Geometry g, const float* input, float* output,
                                                long long* argmax) {
  max_pool_forward(g, input, output, argmax);
}
extern "C" __global__ void avg_pool_forward_f32(Geometry g, const float* input, float* output,
                                                int count_padding) {
  avg_pool_forward(g, input, output, count_padding);
}
extern "C" __global__ void pool_backward_f32(Geometry g, const float* grad_output,
                                             const long long* argmax, float* grad_input,
                                             int count_padding) {
  pool_backward(g, grad_output, argmax, grad_input, count_padding);
}
extern "C" __global__ void max_pool_forward_bf16(Geometry g, const bfloat16* input,
                                                 bfloat16* output, long long* argmax) {
  max_pool_forward(g, input, output, argmax);
}
extern "C" __global__ void avg_pool_forward_bf16(Geometry g, const bfloat16* input,
                                                 bfloat16* output, int count_padding) {
  avg_pool_forward(g, input, output, count_padding);
}
extern "C" __global__ void pool_backward_bf16(Geometry g, const bfloat16* grad_output,
                                              const long long* argmax, bfloat16* grad_input,
                                              int count_padding) {
  pool_backward(g, grad_output, argmax, grad_input, count_padding);
}
)"};
  return text;
}

/// The GPU source.
inline const cuda::KernelSource& pool_source() {
  static const cuda::KernelSource source{"meshtensor_pool.cu",
                                         with_shared_code("", pool_kernels_text())};
  return source;
}

namespace detail {
// The kernels' Geometry (see the source).
struct FlatGeometry {
  long long batch, channels;
  long long in[3], out[3], kernel[3];
  long long origin[3], stride[3], dilation[3], transposed[3];
  long long inside_begin[3], inside_end[3];
};

inline FlatGeometry flatten(const PoolGeometry& g) {
  FlatGeometry f{};
  f.batch = g.batch;
  f.channels = g.channels;
  for (int d = 0; d < 3; ++d) {
    f.in[d] = g.in[d];
    f.out[d] = g.out[d];
    f.kernel[d] = g.kernel[d];
    f.origin[d] = g.taps[d].origin;
    f.stride[d] = g.taps[d].stride;
    f.dilation[d] = g.taps[d].dilation;
    f.transposed[d] = g.taps[d].transposed;
    f.inside_begin[d] = g.inside_begin[d];
    f.inside_end[d] = g.inside_end[d];
  }
  return f;
}

inline bool usable(const PoolGeometry& g) {
  for (int d = 0; d < 3; ++d)  // the backward kernel keeps at most 16 readers per dim
    if (g.kernel[d] > 16 || g.taps[d].stride < 1 || g.taps[d].dilation < 1) return false;
  return cuda::computes_on_gpu();
}

inline std::int64_t box_elements(const PoolGeometry& g) {
  return g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
}
inline std::int64_t output_elements(const PoolGeometry& g) {
  return g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
}
}  // namespace detail

/// Bytes of max pooling's workspace here: the reference kernels' (a box offset per output).
inline std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  return reference::max_pool_workspace_bytes(g);
}

/// output = max over each window, `workspace` = where each maximum is; false if it cannot run.
template <class T>
bool max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, bfloat16>) {
    return false;
  } else {
    if (!detail::usable(g)) return false;
    run_kernel(pool_source(), instance<T>("max_pool_forward_f32", "", "max_pool_forward_bf16"),
               detail::output_elements(g), detail::flatten(g), input, output,
               static_cast<long long*>(workspace));
    return true;
  }
}

/// output = mean over each window; false if it cannot run.
template <class T>
bool avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, bfloat16>) {
    return false;
  } else {
    if (!detail::usable(g)) return false;
    run_kernel(pool_source(), instance<T>("avg_pool_forward_f32", "", "avg_pool_forward_bf16"),
               detail::output_elements(g), detail::flatten(g), input, output, int(count_padding));
    return true;
  }
}

/// grad_input (the box) = grad_output routed to each window's maximum; false if it cannot run.
template <class T>
bool max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, bfloat16>) {
    return false;
  } else {
    if (!detail::usable(g)) return false;
    run_kernel(pool_source(), instance<T>("pool_backward_f32", "", "pool_backward_bf16"),
               detail::box_elements(g), detail::flatten(g), grad_output,
               static_cast<const long long*>(workspace), grad_input, 0);
    return true;
  }
}

/// grad_input (the box) = grad_output spread evenly over each window; false if it cannot run.
template <class T>
bool avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, bfloat16>) {
    return false;
  } else {
    if (!detail::usable(g)) return false;
    run_kernel(pool_source(), instance<T>("pool_backward_f32", "", "pool_backward_bf16"),
               detail::box_elements(g), detail::flatten(g), grad_output,
               static_cast<const long long*>(nullptr), grad_input, int(count_padding));
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
