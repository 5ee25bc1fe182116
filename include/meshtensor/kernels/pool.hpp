#pragma once
// The pooling family: max and average pooling and their gradients on one block
// (kernels/common/pool_geometry.hpp). The CPU's kernels are chosen at compile time as for
// convolutions (kernels/conv.hpp): oneDNN when the program links meshtensor::onednn, else — and
// with MESHTENSOR_REFERENCE_KERNELS — the reference loops; max pooling of 2 x 2 x 2 windows at
// stride 2 on meshtensor's own (cpu/pair_pool.hpp), faster than oneDNN's at few channels;
// bfloat16 average pooling where oneDNN does not run it on the float kernels. A GPU runs
// meshtensor's CUDA kernels, and the CPU's for windows they cannot run (both passes of a max
// pooling alike: they agree on the workspace's format). A plan counts an operation per (output,
// tap) pair.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/pool_geometry.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/pair_pool.hpp"
#include "meshtensor/kernels/cpu/reference/pool.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/cpu/onednn/pool.hpp"
#endif
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/pool.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
namespace cpu_pool = onednn;
#else
namespace cpu_pool {
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  return reference::max_pool_workspace_bytes(g);
}
using reference::avg_pool_backward;
using reference::avg_pool_forward;
using reference::max_pool_backward;
using reference::max_pool_forward;
}  // namespace cpu_pool
#endif

namespace detail {
inline double pool_flops(const PoolGeometry& g) {
  double n = double(g.batch) * double(g.channels);
  for (int d = 0; d < 3; ++d) n *= double(g.out[d]) * double(g.kernel[d]);
  return n;
}

inline std::int64_t pool_input_size(const PoolGeometry& g) {
  return g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
}
inline std::int64_t pool_output_size(const PoolGeometry& g) {
  return g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
}

// Average pooling of bfloat16 blocks runs on oneDNN's bf16 kernels, or where they do not run it
// on the float kernels, widened for the call: a window's sum in float, rounded once either way.
// (Max pooling needs no arithmetic: it runs on bfloat16 as it is.)
template <class T>
bool widened_avg(const PoolGeometry& g, bool count_padding) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  return !onednn::detail::runs_avg<T>(g, count_padding);
#else
  (void)g, (void)count_padding;
  return true;
#endif
}

// Max pooling on the CPU: 2 x 2 x 2 windows at stride 2 on meshtensor's own kernels
// (cpu/pair_pool.hpp), others on oneDNN's or the reference ones. The choice depends on the shape
// and type alone, so that backward reads the workspace the way forward wrote it.
template <class T>
bool pair_pooled(const PoolGeometry& g) {
#if defined(MESHTENSOR_REFERENCE_KERNELS)
  (void)g;
  return false;
#else
  constexpr bool pooled_type = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;
  return pooled_type && cpu::pair_pool_fits(g);
#endif
}
template <class T>
std::size_t cpu_max_workspace_bytes(const PoolGeometry& g) {
  return pair_pooled<T>(g) ? cpu::pair_pool_workspace_bytes(g)
                           : cpu_pool::max_pool_workspace_bytes<T>(g);
}
template <class T>
void cpu_max_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  if (pair_pooled<T>(g)) return cpu::pair_max_pool_forward(g, input, output, workspace);
  cpu_pool::max_pool_forward(g, input, output, workspace);
}
template <class T>
void cpu_max_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                      T* grad_input) {
  if (pair_pooled<T>(g)) return cpu::pair_max_pool_backward(g, grad_output, workspace, grad_input);
  cpu_pool::max_pool_backward(g, grad_output, workspace, grad_input);
}

template <class T>
void cpu_avg_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  if constexpr (std::is_same_v<T, bfloat16>)
    if (widened_avg<T>(g, count_padding)) {
      Buffer<float> in(std::size_t(pool_input_size(g))), out(std::size_t(pool_output_size(g)));
      cpu::convert(input, pool_input_size(g), in.data());
      cpu_pool::avg_pool_forward(g, in.data(), out.data(), count_padding);
      return cpu::convert(out.data(), pool_output_size(g), output);
    }
  cpu_pool::avg_pool_forward(g, input, output, count_padding);
}
template <class T>
void cpu_avg_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                      bool count_padding) {
  if constexpr (std::is_same_v<T, bfloat16>)
    if (widened_avg<T>(g, count_padding)) {
      Buffer<float> out(std::size_t(pool_output_size(g))), in(std::size_t(pool_input_size(g)));
      cpu::convert(grad_output, pool_output_size(g), out.data());
      cpu_pool::avg_pool_backward(g, out.data(), in.data(), count_padding);
      return cpu::convert(in.data(), pool_input_size(g), grad_input);
    }
  cpu_pool::avg_pool_backward(g, grad_output, grad_input, count_padding);
}
}  // namespace detail

/// Bytes of max pooling's workspace on this processor.
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  const std::size_t cpu = detail::cpu_max_workspace_bytes<T>(g);
#if defined(MESHTENSOR_WITH_CUDA)
  if (takes_gpu_roads()) return std::max(cpu, gpu::max_pool_workspace_bytes(g));
#endif
  return cpu;
}

/// output = max over each window, `workspace` = where each maximum is. A GPU's kernel and the
/// CPU's write different formats: a GPU that cannot run a shape runs both passes on the CPU.
template <class T>
void max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::max_pool_forward(g, input, output, workspace)),
           [&] { detail::cpu_max_forward(g, input, output, workspace); });
}

/// grad_input (the box) = grad_output routed to each window's maximum.
template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::max_pool_backward(g, grad_output, workspace, grad_input)),
           [&] { detail::cpu_max_backward(g, grad_output, workspace, grad_input); });
}

/// output = mean over each window (over the positions inside the tensor, unless count_padding).
template <class T>
void avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::avg_pool_forward(g, input, output, count_padding)),
           [&] { detail::cpu_avg_forward(g, input, output, count_padding); });
}

/// grad_input (the box) = grad_output spread evenly over each window.
template <class T>
void avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::avg_pool_backward(g, grad_output, grad_input, count_padding)),
           [&] { detail::cpu_avg_backward(g, grad_output, grad_input, count_padding); });
}

}  // namespace meshtensor::kernels
