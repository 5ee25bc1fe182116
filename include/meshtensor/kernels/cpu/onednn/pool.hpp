#pragma once
// Pooling kernels through oneDNN, same contract as kernels/cpu/reference/pool.hpp: the box already
// holds the halo and the padding (-inf for max, zeros for average), so oneDNN pools it with no
// padding of its own. Max pooling keeps oneDNN's workspace (a one-byte window index per output
// where the window is small) instead of the reference kernel's eight-byte box offsets, and both
// let the first maximum in window order win ties, so they route gradients alike.
// Boxes that are not exactly the windows' read range (an overlapping pool whose box a split cut
// unevenly), average pooling that leaves out padding, and types other than float and bfloat16
// (whose windows oneDNN sums in f32 and rounds once) run on the reference kernels.

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/cpu/onednn/context.hpp"
#include "meshtensor/kernels/cpu/reference/pool.hpp"

namespace meshtensor::kernels::onednn {
namespace detail {

struct PoolPrimitives {
  Step forward, backward;
  memory::desc src, dst, workspace;
  bool available = true;  // false: oneDNN has none for the type on this CPU (bf16 on AVX2)
};

// Whether oneDNN pools `g` as the reference kernel would: plain windows reading exactly the box.
inline bool supported(const PoolGeometry& g) {
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (t.transposed || t.dilation != 1 || t.origin != 0) return false;
    if (g.in[d] != (g.out[d] - 1) * t.stride + g.kernel[d]) return false;
  }
  return g.batch > 0 && g.channels > 0 && g.out[0] * g.out[1] * g.out[2] > 0;
}

// Whether the box has positions outside the tensor (average pooling that does not count padding
// divides by fewer than the window's size there).
inline bool has_padding(const PoolGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.inside_begin[d] > 0 || g.inside_end[d] < g.in[d]) return true;
  return false;
}

template <class T>
constexpr bool pooled_type = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

template <class T>
PoolPrimitives& pool_primitives(const PoolGeometry& g, bool is_max) {
  static_assert(pooled_type<T>);
  auto& cache = cache_of<PoolPrimitives>();
  std::vector<std::int64_t> key{is_max, std::is_same_v<T, float>, g.batch, g.channels};
  for (int d = 0; d < 3; ++d)
    for (auto v : {g.in[d], g.out[d], g.kernel[d], g.taps[d].stride}) key.push_back(v);
  auto& slot = cache[key];
  if (slot) return *slot;

  Context& c = context();
  const auto type = std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
  const memory::desc src({g.batch, g.channels, g.in[0], g.in[1], g.in[2]}, type, tag::ndhwc),
      dst({g.batch, g.channels, g.out[0], g.out[1], g.out[2]}, type, tag::ndhwc);
  const memory::dims strides{g.taps[0].stride, g.taps[1].stride, g.taps[2].stride},
      kernel{g.kernel[0], g.kernel[1], g.kernel[2]}, no_padding{0, 0, 0};
  // No oneDNN padding, so "include padding" divides by the whole window, as the box's zeros do.
  const auto algorithm =
      is_max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::pooling_forward::primitive_desc forward;
  dnnl::pooling_backward::primitive_desc backward;
  try {
    forward = dnnl::pooling_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, algorithm, src, dst, strides, kernel, no_padding,
         no_padding},
        attr, c.engine);
    backward = dnnl::pooling_backward::primitive_desc(
        {algorithm, src, dst, strides, kernel, no_padding, no_padding}, attr, c.engine, forward);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    slot = std::make_unique<PoolPrimitives>();
    slot->available = false;
    return *slot;
  }
  slot = std::make_unique<PoolPrimitives>(
      PoolPrimitives{{dnnl::pooling_forward(forward), forward.scratchpad_desc()},
                     {dnnl::pooling_backward(backward), backward.scratchpad_desc()},
                     src,
                     dst,
                     forward.workspace_desc()});
  return *slot;
}

template <class T>
bool runs_max(const PoolGeometry& g) {
  if constexpr (!pooled_type<T>)
    return false;
  else
    return supported(g) && pool_primitives<T>(g, true).available;
}

template <class T>
bool runs_avg(const PoolGeometry& g, bool count_padding) {
  if constexpr (!pooled_type<T>)
    return false;
  else
    return supported(g) && (count_padding || !has_padding(g)) &&
           pool_primitives<T>(g, false).available;
}

inline void pool(const Step& step, const memory::desc& from_desc, const void* from, int from_arg,
                 const memory::desc& to_desc, void* to, int to_arg,
                 const memory::desc& workspace_desc, const void* workspace) {
  CallMemory call;
  std::unordered_map<int, memory> args{{from_arg, call.wrap(from_desc, from)},
                                       {to_arg, call.wrap(to_desc, to)}};
  if (workspace) args[DNNL_ARG_WORKSPACE] = call.wrap(workspace_desc, workspace);
  execute(step, call, std::move(args));
  context().stream.wait();
}

}  // namespace detail

template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  if constexpr (detail::pooled_type<T>)
    if (detail::runs_max<T>(g)) return detail::pool_primitives<T>(g, true).workspace.get_size();
  return reference::max_pool_workspace_bytes(g);
}

template <class T>
void max_pool_forward(const PoolGeometry& g, const T* input, T* output, void* workspace) {
  if constexpr (detail::pooled_type<T>) {
    if (detail::runs_max<T>(g)) {
      const auto& p = detail::pool_primitives<T>(g, true);
      return detail::pool(p.forward, p.src, input, DNNL_ARG_SRC, p.dst, output, DNNL_ARG_DST,
                          p.workspace, workspace);
    }
  }
  reference::max_pool_forward(g, input, output, workspace);
}

template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_output, const void* workspace,
                       T* grad_input) {
  if constexpr (detail::pooled_type<T>) {
    if (detail::runs_max<T>(g)) {
      const auto& p = detail::pool_primitives<T>(g, true);
      return detail::pool(p.backward, p.dst, grad_output, DNNL_ARG_DIFF_DST, p.src, grad_input,
                          DNNL_ARG_DIFF_SRC, p.workspace, workspace);
    }
  }
  reference::max_pool_backward(g, grad_output, workspace, grad_input);
}

template <class T>
void avg_pool_forward(const PoolGeometry& g, const T* input, T* output, bool count_padding) {
  if constexpr (detail::pooled_type<T>) {
    if (detail::runs_avg<T>(g, count_padding)) {
      const auto& p = detail::pool_primitives<T>(g, false);
      return detail::pool(p.forward, p.src, input, DNNL_ARG_SRC, p.dst, output, DNNL_ARG_DST,
                          p.workspace, nullptr);
    }
  }
  reference::avg_pool_forward(g, input, output, count_padding);
}

template <class T>
void avg_pool_backward(const PoolGeometry& g, const T* grad_output, T* grad_input,
                       bool count_padding) {
  if constexpr (detail::pooled_type<T>) {
    if (detail::runs_avg<T>(g, count_padding)) {
      const auto& p = detail::pool_primitives<T>(g, false);
      return detail::pool(p.backward, p.dst, grad_output, DNNL_ARG_DIFF_DST, p.src, grad_input,
                          DNNL_ARG_DIFF_SRC, p.workspace, nullptr);
    }
  }
  reference::avg_pool_backward(g, grad_output, grad_input, count_padding);
}

}  // namespace meshtensor::kernels::onednn
