#pragma once
// The pooling family: max and average pooling and their gradients on one block
// (kernels/common/pool_geometry.hpp). A GPU runs meshtensor's CUDA kernels, and the CPU's for
// windows they cannot run (both passes of a max pooling alike: they agree on the workspace's
// format); the CPU the first of kernels/pool_candidates.hpp's list that supports the call. A plan
// counts an operation per (output, tap) pair.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/pool_geometry.hpp"
#include "meshtensor/kernels/pool_candidates.hpp"
#include "meshtensor/kernels/registry.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/pool.hpp"
#endif

namespace meshtensor::kernels {

namespace detail {
inline double pool_flops(const PoolGeometry& g) {
  double n = double(g.batch) * double(g.channels);
  for (int d = 0; d < 3; ++d) n *= double(g.out[d]) * double(g.kernel[d]);
  return n;
}

inline std::size_t chosen_pool(const PoolProblem& p) {
  return PoolCandidates::select(p, current_processor().settings().kernels.pool_kernel,
                                "MESHTENSOR_POOL_KERNEL")
      .chosen;
}

template <class T>
void run_pool_candidates(const PoolProblem& p, const PoolOperands<T>& o) {
  PoolCandidates::visit(chosen_pool(p), [&](auto candidate) { candidate.template run<T>(p, o); });
}
}  // namespace detail

/// The candidate (kernels/pool_candidates.hpp) that runs a pooling call of `g` on T here.
template <class T>
std::string pool_kernel_name(const PoolGeometry& g, PoolProblem::Kind kind,
                             bool count_padding = false) {
  const PoolProblem p = detail::pool_problem<T>(g, kind, false, count_padding);
  return std::string(PoolCandidates::names[detail::chosen_pool(p)]);
}

/// Bytes of max pooling's workspace on this processor.
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  const PoolProblem p = detail::pool_problem<T>(g, PoolProblem::Kind::max, false);
  const std::size_t cpu = PoolCandidates::ask<std::size_t>(
      detail::chosen_pool(p), [&](auto candidate) { return candidate.workspace_bytes(p); });
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
           [&] {
             PoolOperands<T> o;
             o.input = input, o.output = output, o.workspace = workspace;
             detail::run_pool_candidates(detail::pool_problem<T>(g, PoolProblem::Kind::max, false),
                                         o);
           });
}

/// grad_input (the box) = grad_output routed to each window's maximum.
template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::max_pool_backward(g, grad_output, workspace, grad_input)),
           [&] {
             PoolOperands<T> o;
             o.grad_output = grad_output, o.grad_input = grad_input;
             o.workspace = const_cast<void*>(workspace);  // read only, backward
             detail::run_pool_candidates(detail::pool_problem<T>(g, PoolProblem::Kind::max, true),
                                         o);
           });
}

/// output = mean over each window (over the positions inside the tensor, unless count_padding).
template <class T>
void avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::avg_pool_forward(g, input, output, count_padding)),
           [&] {
             PoolOperands<T> o;
             o.input = input, o.output = output;
             detail::run_pool_candidates(
                 detail::pool_problem<T>(g, PoolProblem::Kind::average, false, count_padding), o);
           });
}

/// grad_input (the box) = grad_output spread evenly over each window.
template <class T>
void avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  dispatch([&] { plan::count(plan::Family::pool, detail::pool_flops(g)); },
           MESHTENSOR_ON_GPU(gpu::avg_pool_backward(g, grad_output, grad_input, count_padding)),
           [&] {
             PoolOperands<T> o;
             o.grad_output = grad_output, o.grad_input = grad_input;
             detail::run_pool_candidates(
                 detail::pool_problem<T>(g, PoolProblem::Kind::average, true, count_padding), o);
           });
}

}  // namespace meshtensor::kernels
