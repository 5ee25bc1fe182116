#pragma once
// A 3-D convolution's weight gradient as 2-D ones. Tap k of the first kernel dim pairs output row
// o with input row origin + o*stride + k*dilation; with stride 1 the rows each tap pairs are two
// runs of consecutive rows, so taking rows as a batch of 2-D images, each tap's weight gradient is
// a 2-D convolution's, on the channels-last arrays in place.
//
// Why: on AVX2, oneDNN 2.6 has no direct kernel for a 3-D weight gradient, only im2col + gemm,
// slower and with an im2col buffer that no split along the first dim shrinks, while its direct
// 2-D kernel runs on the same data faster with no scratchpad.

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "meshtensor/kernels/cpu/onednn/context.hpp"
#include "meshtensor/kernels/cpu/onednn/pass.hpp"
#include "meshtensor/kernels/cpu/reference/conv.hpp"

namespace meshtensor::kernels::onednn::detail {

// Padding of the two inner spatial dims, before and after (as oneDNN counts it).
using InnerPadding = std::array<std::array<std::int64_t, 2>, 2>;

// The 2-D weight-gradient pass for `batch` rows of `g`'s inner dims, per processor and shape; a
// pass with optimised == false where oneDNN has no direct 2-D kernel either.
// (A plan's passes, `with_kernel` false, only count: no kernel is compiled for them.)
inline const Pass& plane_pass(const ConvGeometry& g, std::int64_t batch,
                              const InnerPadding& padding, bool with_kernel = true) {
  struct PlanePasses;  // tells these passes apart from the other kinds of Pass
  auto& cache = cache_of<Pass, PlanePasses>();
  std::vector<std::int64_t> key{batch, g.c_in, g.c_out, with_kernel};
  for (int d = 1; d < 3; ++d)
    for (auto v : {g.in[d], g.out[d], g.kernel[d], g.taps[d].stride, g.taps[d].dilation,
                   padding[d - 1][0], padding[d - 1][1]})
      key.push_back(v);
  auto& slot = cache[key];
  if (slot) return *slot;
  Context& c = context();
  const auto f32 = memory::data_type::f32;
  using tag = memory::format_tag;
  const memory::desc src({batch, g.c_in, g.in[1], g.in[2]}, f32, tag::nhwc),
      dst({batch, g.c_out, g.out[1], g.out[2]}, f32, tag::nhwc),
      weights_plain({g.c_out, g.c_in, g.kernel[1], g.kernel[2]}, f32, tag::hwio),
      weights_any({g.c_out, g.c_in, g.kernel[1], g.kernel[2]}, f32, tag::any);
  const memory::dims strides{g.taps[1].stride, g.taps[2].stride},
      dilates{g.taps[1].dilation - 1, g.taps[2].dilation - 1},
      pad_before{padding[0][0], padding[1][0]}, pad_after{padding[0][1], padding[1][1]};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto creating = convolution_creation_lock();
  const dnnl::convolution_forward::primitive_desc hint(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, weights_any,
       dst, strides, dilates, pad_before, pad_after},
      attr, c.engine);
  const dnnl::convolution_backward_weights::primitive_desc pd(
      {dnnl::algorithm::convolution_direct, src, weights_any, dst, strides, dilates, pad_before,
       pad_after},
      attr, c.engine, hint);
  slot = std::make_unique<Pass>();
  if (optimised(pd))
    *slot = Pass{{with_kernel ? dnnl::convolution_backward_weights(pd) : dnnl::primitive(),
                  pd.scratchpad_desc()},
                 {src, pd.src_desc()},
                 {dst, pd.diff_dst_desc()},
                 {weights_plain, pd.diff_weights_desc()},
                 true};
  return *slot;
}

// grad_weight += the weight gradient of `g` (non-transposed, stride 1 along the first dim), tap by
// tap of the first kernel dim. False, with nothing done, where some tap has no direct 2-D kernel.
// Per tap of the first kernel dim, the output rows [first, last) whose input row lies inside the
// box; none where the weight gradient does not run by planes (transposed, strided, batched).
struct TapRows {
  std::int64_t first, last;
};
inline std::vector<TapRows> tap_rows(const ConvGeometry& g) {
  const Taps& t = g.taps[0];
  if (t.transposed || t.stride != 1 || g.batch != 1) return {};
  std::vector<TapRows> rows;
  for (std::int64_t k = 0; k < g.kernel[0]; ++k) {
    const std::int64_t shift = t.origin + k * t.dilation;  // input row of output row 0
    rows.push_back(
        {std::max<std::int64_t>(0, -shift), std::min<std::int64_t>(g.out[0], g.in[0] - shift)});
  }
  return rows;
}

// What weight_gradient_by_planes takes of the pool at once, as a plan holds it: its largest tap
// call's blocks; none where it would not run.
inline std::vector<std::size_t> planes_blocks(const ConvGeometry& g, const InnerPadding& padding) {
  std::vector<std::size_t> largest;
  for (const TapRows& r : tap_rows(g)) {
    if (r.first >= r.last) continue;
    const Pass& pass = plane_pass(g, r.last - r.first, padding, /*with_kernel=*/false);
    if (!pass.optimised) return {};
    keep_largest(largest, call_blocks(pass));
  }
  return largest;
}

inline bool weight_gradient_by_planes(const ConvGeometry& g, const InnerPadding& padding,
                                      const float* input, const float* grad_output,
                                      double* grad_weight) {
  const Taps& t = g.taps[0];
  const std::vector<TapRows> rows = tap_rows(g);
  if (rows.empty()) return false;
  for (const TapRows& r : rows)
    if (r.first < r.last && !plane_pass(g, r.last - r.first, padding).optimised) return false;
  const std::int64_t plane = g.kernel[1] * g.kernel[2] * g.c_in * g.c_out;
  std::vector<float> tap(static_cast<std::size_t>(plane));
  for (std::int64_t k = 0; k < g.kernel[0]; ++k) {
    const TapRows& r = rows[k];
    if (r.first >= r.last) continue;
    const std::int64_t shift = t.origin + k * t.dilation;
    run(plane_pass(g, r.last - r.first, padding), backward_weights_args,
        input + (r.first + shift) * input_row_size(g), grad_output + r.first * output_row_size(g),
        tap.data());
    double* sum = grad_weight + k * plane;  // weights are [k0][k1][k2][c_in][c_out]
    for (std::int64_t i = 0; i < plane; ++i) sum[i] += tap[i];
  }
  return true;
}

}  // namespace meshtensor::kernels::onednn::detail
