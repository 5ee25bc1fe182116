#pragma once
// Which pooling kernels the ops use, chosen at compile time as for convolutions
// (kernels/conv_select.hpp): oneDNN when the program links meshtensor::onednn, else — and with
// MESHTENSOR_REFERENCE_KERNELS — the reference loops. With the GPU backend (MESHTENSOR_WITH_CUDA),
// a processor that computes on a GPU runs meshtensor's CUDA kernels, which keep the reference
// kernels' workspace; max pooling's workspace then starts with a tag saying whose format it holds,
// so that backward reads it the way forward wrote it whichever side each runs on.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "meshtensor/kernels/reference/pool.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/onednn/pool.hpp"
#endif
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/copy_select.hpp"
#include "meshtensor/kernels/gpu/pool.hpp"
#include "meshtensor/kernels/host_access.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
namespace cpu_pool_impl = onednn;
#else
namespace cpu_pool_impl {
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  return kernels::max_pool_workspace_bytes(g);
}
using kernels::avg_pool_backward;
using kernels::avg_pool_forward;
using kernels::max_pool_backward;
using kernels::max_pool_forward;
}  // namespace cpu_pool_impl
#endif

#if defined(MESHTENSOR_WITH_CUDA)
namespace pool_impl {
namespace detail {
// The first bytes of a max pooling workspace: which format follows.
constexpr std::size_t tag_bytes = 8;
constexpr std::uint64_t cpu_format = 0, reference_format = 1;

// Workspaces come from the processor's pool: host memory, or the GPU's, whose page the host would
// pull over to write or read the tag itself; the copy engine carries it instead.
inline void write_tag(void* workspace, std::uint64_t tag) {
  copy_from_host(reinterpret_cast<const unsigned char*>(&tag), sizeof tag,
                 static_cast<unsigned char*>(workspace), memory_pool().source().space);
}
inline std::uint64_t read_tag(const void* workspace) {
  std::uint64_t tag = 0;
  copy_to_host(static_cast<const unsigned char*>(workspace), memory_pool().source().space,
               sizeof tag, reinterpret_cast<unsigned char*>(&tag));
  return tag;
}
}  // namespace detail

// A processor on a GPU may still run the CPU kernel (operands in host memory): room for either
// format. One on the CPU never runs the GPU kernels, whose format takes 8 bytes per output.
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  const std::size_t cpu = cpu_pool_impl::max_pool_workspace_bytes<T>(g);
  if (!cuda::computes_on_gpu()) return detail::tag_bytes + cpu;
  return detail::tag_bytes + std::max(cpu, gpu::max_pool_workspace_bytes(g));
}
template <class T>
void max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  void* formatted = static_cast<char*>(workspace) + detail::tag_bytes;
  const bool on_gpu = gpu::max_pool_forward(g, input, output, formatted);
  if (!on_gpu) {
    wait_for_gpu();
    cpu_pool_impl::max_pool_forward(g, input, output, formatted);
  }
  detail::write_tag(workspace, on_gpu ? detail::reference_format : detail::cpu_format);
}
template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  const void* formatted = static_cast<const char*>(workspace) + detail::tag_bytes;
  const bool cpu_format = detail::read_tag(workspace) == detail::cpu_format;
  if (!cpu_format && gpu::max_pool_backward(g, grad_output, formatted, grad_input)) return;
  wait_for_gpu();
  if (cpu_format)
    cpu_pool_impl::max_pool_backward(g, grad_output, formatted, grad_input);
  else
    kernels::max_pool_backward(g, grad_output, formatted, grad_input);  // the same format
}
template <class T>
void avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  if (gpu::avg_pool_forward(g, input, output, count_padding)) return;
  wait_for_gpu();
  cpu_pool_impl::avg_pool_forward(g, input, output, count_padding);
}
template <class T>
void avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  if (gpu::avg_pool_backward(g, grad_output, grad_input, count_padding)) return;
  wait_for_gpu();
  cpu_pool_impl::avg_pool_backward(g, grad_output, grad_input, count_padding);
}
}  // namespace pool_impl
#else
namespace pool_impl = cpu_pool_impl;
#endif
}  // namespace meshtensor::kernels
