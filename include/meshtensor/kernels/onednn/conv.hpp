#pragma once
// Convolution kernels through oneDNN (the library behind PyTorch's CPU convolutions), same contract
// as kernels/reference/conv.hpp. oneDNN chooses its memory formats (blocked, for its jit kernels);
// meshtensor's channels-last blocks (ndhwc, weights dhwio) are reordered into them and back where
// they differ — with the plain formats forced, oneDNN falls back to a slow reference kernel for
// some shapes. Primitives and their buffers are built once per shape and thread (each processor of
// the threads transport is a thread). Transposed convolutions, and boxes that are not exactly a
// convolution's read range, go to the blocked kernels.
// Each processor runs oneDNN on compute_threads() OpenMP threads.

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "meshtensor/comm/compute_threads.hpp"
#include "meshtensor/kernels/blocked/conv.hpp"

namespace meshtensor::kernels::onednn {
namespace detail {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

// A tensor an op reads or writes: meshtensor's plain layout, and the format the primitive wants,
// with a buffer in that format when the two differ.
struct Operand {
  memory::desc plain, chosen;
  memory buffer;  // empty when chosen == plain
};

struct Primitives {
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  Operand src, weights, dst;                            // forward
  Operand diff_dst_data, weights_data, diff_src;        // backward data
  Operand src_weights, diff_dst_weights, diff_weights;  // backward weights
  std::vector<float> weight_gradient;  // the float result, before it joins the double sum
};

// The oneDNN engine, stream and primitives of the calling thread.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::vector<std::int64_t>, std::unique_ptr<Primitives>> cache;
};

inline Context& context() {
  thread_local Context c;
  // oneDNN runs on OpenMP: give this processor its share of the cores, not all of them.
  thread_local int threads = 0;
  if (threads != compute_threads()) {
    threads = compute_threads();
    omp_set_num_threads(threads);
  }
  return c;
}

// A convolution oneDNN can run: ordinary taps, the box exactly the outputs' read range.
inline bool supported(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (t.transposed || t.origin != 0) return false;
    if (g.in[d] != (g.out[d] - 1) * t.stride + (g.kernel[d] - 1) * t.dilation + 1) return false;
  }
  return g.batch > 0 && g.out[0] * g.out[1] * g.out[2] > 0;
}

inline std::vector<std::int64_t> key_of(const ConvGeometry& g) {
  std::vector<std::int64_t> key{g.batch, g.c_in, g.c_out};
  for (int d = 0; d < 3; ++d)
    for (auto v : {g.in[d], g.out[d], g.kernel[d], g.taps[d].stride, g.taps[d].dilation})
      key.push_back(v);
  return key;
}

inline Operand operand(const memory::desc& plain, const memory::desc& chosen) {
  Operand o{plain, chosen, {}};
  if (chosen != plain) o.buffer = memory(chosen, context().engine);
  return o;
}

inline Primitives& primitives(const ConvGeometry& g) {
  Context& c = context();
  auto& slot = c.cache[key_of(g)];
  if (slot) return *slot;
  const auto f32 = memory::data_type::f32;
  const memory::desc src({g.batch, g.c_in, g.in[0], g.in[1], g.in[2]}, f32, tag::ndhwc);
  const memory::desc weights({g.c_out, g.c_in, g.kernel[0], g.kernel[1], g.kernel[2]}, f32,
                             tag::dhwio);
  const memory::desc dst({g.batch, g.c_out, g.out[0], g.out[1], g.out[2]}, f32, tag::ndhwc);
  const memory::desc src_any(src.dims(), f32, tag::any), weights_any(weights.dims(), f32, tag::any),
      dst_any(dst.dims(), f32, tag::any);
  memory::dims strides, dilates, padding{0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    strides.push_back(g.taps[k].stride);
    dilates.push_back(g.taps[k].dilation - 1);  // oneDNN counts the gaps
  }
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc forward(
      {dnnl::prop_kind::forward_training, algorithm, src_any, weights_any, dst_any, strides,
       dilates, padding, padding},
      c.engine);
  const dnnl::convolution_backward_data::primitive_desc backward_data(
      {algorithm, src_any, weights_any, dst_any, strides, dilates, padding, padding}, c.engine,
      forward);
  const dnnl::convolution_backward_weights::primitive_desc backward_weights(
      {algorithm, src_any, weights_any, dst_any, strides, dilates, padding, padding}, c.engine,
      forward);
  slot = std::make_unique<Primitives>(Primitives{
      dnnl::convolution_forward(forward), dnnl::convolution_backward_data(backward_data),
      dnnl::convolution_backward_weights(backward_weights), operand(src, forward.src_desc()),
      operand(weights, forward.weights_desc()), operand(dst, forward.dst_desc()),
      operand(dst, backward_data.diff_dst_desc()), operand(weights, backward_data.weights_desc()),
      operand(src, backward_data.diff_src_desc()), operand(src, backward_weights.src_desc()),
      operand(dst, backward_weights.diff_dst_desc()),
      operand(weights, backward_weights.diff_weights_desc()),
      std::vector<float>(
          static_cast<std::size_t>(g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out))});
  return *slot;
}

inline memory wrap(const memory::desc& desc, const void* data) {
  return memory(desc, context().engine, const_cast<void*>(data));
}

// The memory the primitive reads for `o`: the user's data, reordered into the chosen format if
// needed.
inline memory read(Operand& o, const float* data) {
  memory user = wrap(o.plain, data);
  if (!o.buffer) return user;
  dnnl::reorder(user, o.buffer).execute(context().stream, user, o.buffer);
  return o.buffer;
}

// The memory the primitive writes for `o`; finish() copies a reordered result back.
inline memory write(Operand& o, float* data) { return o.buffer ? o.buffer : wrap(o.plain, data); }
inline void finish(Operand& o, float* data) {
  if (!o.buffer) return;
  memory user = wrap(o.plain, data);
  dnnl::reorder(o.buffer, user).execute(context().stream, o.buffer, user);
}

}  // namespace detail

template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if constexpr (!std::is_same_v<T, float>) {
    return blocked::conv_forward(g, input, weight, output);
  } else {
    if (!detail::supported(g)) return blocked::conv_forward(g, input, weight, output);
    auto& p = detail::primitives(g);
    auto& stream = detail::context().stream;
    p.forward.execute(stream, {{DNNL_ARG_SRC, detail::read(p.src, input)},
                               {DNNL_ARG_WEIGHTS, detail::read(p.weights, weight)},
                               {DNNL_ARG_DST, detail::write(p.dst, output)}});
    detail::finish(p.dst, output);
    stream.wait();
  }
}

template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if constexpr (!std::is_same_v<T, float>) {
    return blocked::conv_backward_input(g, grad_output, weight, grad_input);
  } else {
    if (!detail::supported(g))
      return blocked::conv_backward_input(g, grad_output, weight, grad_input);
    auto& p = detail::primitives(g);
    auto& stream = detail::context().stream;
    p.backward_data.execute(stream,
                            {{DNNL_ARG_DIFF_DST, detail::read(p.diff_dst_data, grad_output)},
                             {DNNL_ARG_WEIGHTS, detail::read(p.weights_data, weight)},
                             {DNNL_ARG_DIFF_SRC, detail::write(p.diff_src, grad_input)}});
    detail::finish(p.diff_src, grad_input);
    stream.wait();
  }
}

template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if constexpr (!std::is_same_v<T, float>) {
    return blocked::conv_backward_weight(g, input, grad_output, grad_weight);
  } else {
    if (!detail::supported(g))
      return blocked::conv_backward_weight(g, input, grad_output, grad_weight);
    auto& p = detail::primitives(g);
    auto& stream = detail::context().stream;
    float* result = p.weight_gradient.data();
    p.backward_weights.execute(stream,
                               {{DNNL_ARG_SRC, detail::read(p.src_weights, input)},
                                {DNNL_ARG_DIFF_DST, detail::read(p.diff_dst_weights, grad_output)},
                                {DNNL_ARG_DIFF_WEIGHTS, detail::write(p.diff_weights, result)}});
    detail::finish(p.diff_weights, result);
    stream.wait();
    for (std::size_t i = 0; i < p.weight_gradient.size(); ++i) grad_weight[i] += result[i];
  }
}

}  // namespace meshtensor::kernels::onednn
