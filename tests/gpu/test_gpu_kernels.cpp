// The GPU kernels, on the first GPU, with operands in its memory. cuDNN's convolution kernels agree
// with the reference loops (1e-4 relative, as the CPU kernels) on the kernel tests' geometries,
// with every operand in the GPU's memory, and in bfloat16 (on the tensor cores) to bf16's rounding.
// The U-Net's own (padded 3x3x3, and the transposed 2x2x2 up-sampling) must run on cuDNN; another
// that cuDNN declines goes to the CPU kernels, as in the ops, and is listed. On a processor that
// computes on the CPU every GPU kernel declines: where a kernel runs is the processor's device,
// never a question about its operands. meshtensor's own kernels (pooling, element-wise ops,
// optimiser steps) equal the CPU loops bit for bit, but for the ops CUDA's math library computes
// (exp, log, tanh, pow) and the optimisers' fused multiply-adds on the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <meshtensor/device/activity.hpp>
#include <meshtensor/device/host_access.hpp>
#include <meshtensor/kernels/conv.hpp>
#include <meshtensor/kernels/cpu/reference/copy_box.hpp>
#include <meshtensor/kernels/cuda/cublas_gemm.hpp>
#include <meshtensor/kernels/cuda/elementwise.hpp>
#include <meshtensor/kernels/cuda/norm.hpp>
#include <meshtensor/kernels/cuda/optimizer.hpp>
#include <meshtensor/kernels/cuda/pool.hpp>
#include <meshtensor/kernels/cuda/resample.hpp>
#include <meshtensor/kernels/cuda/sum.hpp>
#include <meshtensor/kernels/elementwise.hpp>
#include <meshtensor/kernels/norm.hpp>
#include <meshtensor/kernels/sum.hpp>
#include <meshtensor/memory/array.hpp>

#include "support/conv_cases.hpp"
#include "support/device_buffers.hpp"
#include "support/elementwise_cases.hpp"
#include "support/gemm_cases.hpp"
#include "support/norm_cases.hpp"
#include "support/pool_cases.hpp"
#include "support/resample_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {
// cuDNN's three passes on T's operands, waited for; which of them ran.
template <class T>
std::array<bool, 3> cudnn_passes(const ConvGeometry& g, const Buffer<T>& x, const Buffer<T>& w,
                                 const Buffer<T>& dy, Buffer<T>& y, Buffer<T>& dx,
                                 Buffer<double>& dw) {
  const std::array<bool, 3> ran{
      kernels::cudnn::conv_forward(g, x.data(), w.data(), y.data()),
      kernels::cudnn::conv_backward_input(g, dy.data(), w.data(), dx.data()),
      kernels::cudnn::conv_backward_weight(g, x.data(), dy.data(), dw.data())};
  wait_for_device();  // before the host reads the results
  return ran;
}
}  // namespace

TEST_CASE("cuDNN and reference convolution kernels agree") {
  for (const auto& c : conv_cases()) {
    const ConvCheck check(c);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
    auto x = on_gpu(check.x), w = on_gpu(check.w), dy = on_gpu(check.dy);
    Buffer<float> y = filled<float>(check.out_n, 7.0f),
                  dx = filled<float>(check.in_n, 7.0f);  // stale values must go
    Buffer<double> dw = filled<double>(check.w_n, 0.0);
    const ConvGeometry& g = check.g;
    const auto ran = cudnn_passes(g, x, w, dy, y, dx, dw);
    if (!ran[0]) kernels::reference::conv_forward(g, x.data(), w.data(), y.data());
    if (!ran[1]) kernels::reference::conv_backward_input(g, dy.data(), w.data(), dx.data());
    if (!ran[2]) kernels::reference::conv_backward_weight(g, x.data(), dy.data(), dw.data());
    const bool unet_shape = c.pad == 1 || c.exact_multiple;
    for (int k = 0; k < 3; ++k) {
      if (!ran[k]) WARN("cuDNN declined kernel " << k << " (forward, input, weight) of this case");
      if (unet_shape) CHECK(ran[k]);
    }
    CHECK(relative_gap(widen(check.y_ref), widen(to_host(y))) < 1e-4);
    CHECK(relative_gap(widen(check.dx_ref), widen(to_host(dx))) < 1e-4);
    CHECK(relative_gap(check.dw_ref, to_host(dw)) < 1e-4);
  }
}

TEST_CASE("cuDNN's bfloat16 convolutions agree with the reference on bfloat16 values") {
  // On the tensor cores, accumulating in float: each output within a few bf16 half-steps of the
  // exact result; the weight gradient, summed in float from the widened operands, to 1e-4.
  for (const auto& c : conv_cases()) {
    const ConvCheck check(c, /*bf16_values=*/true);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
    auto as_bf16 = [](const std::vector<float>& v) {
      return on_gpu(std::vector<bfloat16>(v.begin(), v.end()));
    };
    auto x = as_bf16(check.x), w = as_bf16(check.w), dy = as_bf16(check.dy);
    Buffer<bfloat16> y = filled<bfloat16>(check.out_n, bfloat16(7.0f)),
                     dx = filled<bfloat16>(check.in_n, bfloat16(7.0f));
    Buffer<double> dw = filled<double>(check.w_n, 0.0);
    const ConvGeometry& g = check.g;
    const auto ran = cudnn_passes(g, x, w, dy, y, dx, dw);
    const bool unet_shape = c.pad == 1 || c.exact_multiple;
    for (int k = 0; k < 3; ++k) {
      if (!ran[k]) WARN("cuDNN declined bf16 kernel " << k << " (forward, input, weight)");
      if (unet_shape) CHECK(ran[k]);
    }
    if (ran[0]) CHECK(relative_gap(widen(check.y_ref), widen(to_host(y))) < 1e-2);
    if (ran[1]) CHECK(relative_gap(widen(check.dx_ref), widen(to_host(dx))) < 1e-2);
    if (ran[2]) CHECK(relative_gap(check.dw_ref, to_host(dw)) < 1e-4);
  }
}

TEST_CASE("a processor that computes on the CPU leaves convolutions to the CPU kernels") {
  const ConvCheck check(conv_cases().front());
  LocalProcessor cpu(Device::cpu());
  std::vector<float> y(check.out_n);
  CHECK_FALSE(kernels::cudnn::conv_forward(check.g, check.x.data(), check.w.data(), y.data()));
}

TEST_CASE("gradients accumulate on the GPU exactly as on the CPU") {
  const std::size_t n = 100'003;  // not a multiple of a block
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = float(std::sin(0.1 * i)), b[i] = float(std::cos(i));
  auto into = on_gpu(a), add = on_gpu(b);
  REQUIRE(kernels::gpu::accumulate(into.data(), add.data(), std::int64_t(n)));
  wait_for_device();  // before the host reads the results
  const std::vector<float> sums = to_host(into);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < n; ++i) differing += sums[i] != a[i] + b[i];
  CHECK(differing == 0);
  LocalProcessor cpu(Device::cpu());  // computes on the CPU: the GPU kernel declines
  CHECK_FALSE(kernels::gpu::accumulate(a.data(), b.data(), std::int64_t(n)));
}

TEST_CASE("pooling on the GPU equals the reference kernels bit for bit") {
  for (const auto& c : pool_cases()) {
    const kernels::PoolGeometry g = pool_geometry(c);
    const PoolData data(g);
    const std::size_t in_n = data.in_n, out_n = data.out_n;
    const auto& x = data.x;
    const auto& dy = data.dy;
    const std::size_t workspace_bytes = kernels::reference::max_pool_workspace_bytes(g);
    for (const bool is_max : {true, false})
      for (const bool count_padding : {false, true}) {
        if (is_max && count_padding) continue;
        INFO((is_max ? "max" : "average")
             << " pooling, out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2]);
        std::vector<float> y_ref(out_n), dx_ref(in_n);
        std::vector<std::uint8_t> ws_ref(workspace_bytes);
        if (is_max) {
          kernels::reference::max_pool_forward(g, x.data(), y_ref.data(), ws_ref.data());
          kernels::reference::max_pool_backward(g, dy.data(), ws_ref.data(), dx_ref.data());
        } else {
          kernels::reference::avg_pool_forward(g, x.data(), y_ref.data(), count_padding);
          kernels::reference::avg_pool_backward(g, dy.data(), dx_ref.data(), count_padding);
        }
        auto gx = on_gpu(x), gdy = on_gpu(dy);
        Buffer<float> y = filled<float>(out_n, 7.0f), dx = filled<float>(in_n, 7.0f);
        Buffer<std::uint8_t> ws(workspace_bytes);
        if (is_max) {
          REQUIRE(kernels::gpu::max_pool_forward(g, gx.data(), y.data(), ws.data()));
          REQUIRE(kernels::gpu::max_pool_backward(g, gdy.data(), ws.data(), dx.data()));
          wait_for_device();  // before the host reads the results
        } else {
          REQUIRE(kernels::gpu::avg_pool_forward(g, gx.data(), y.data(), count_padding));
          REQUIRE(kernels::gpu::avg_pool_backward(g, gdy.data(), dx.data(), count_padding));
          wait_for_device();  // before the host reads the results
        }
        CHECK(std::memcmp(y_ref.data(), to_host(y).data(), out_n * sizeof(float)) ==
              0);  // bit for bit
        CHECK(std::memcmp(dx_ref.data(), to_host(dx).data(), in_n * sizeof(float)) == 0);
        if (is_max) CHECK(std::memcmp(ws_ref.data(), to_host(ws).data(), workspace_bytes) == 0);
      }
  }
}

namespace {
// Whether CUDA's math library computes unary op `code` (within a few units in the last place of
// the host's); every other op is IEEE arithmetic and equal bit for bit.
bool uses_math_library(int code) {
  using U = kernels::UnaryOp;
  for (int c : {U::exponential, U::logarithm, U::hyperbolic_tangent, U::power, U::sigmoid,
                U::power_derivative, U::gelu, U::gelu_tanh, U::silu, U::gelu_derivative,
                U::gelu_tanh_derivative, U::silu_derivative})
    if (c == code) return true;
  return false;
}

// The magnitude below which a formula's gap is taken as absolute: 1 for the derivatives that are
// a difference of terms near 1 (GELU's and SiLU's cross zero), where the math library's last bit
// is relative to the terms, not to the result.
double gap_floor(int code) {
  using U = kernels::UnaryOp;
  for (int c : {U::gelu_derivative, U::gelu_tanh_derivative, U::silu_derivative})
    if (c == code) return 1.0;
  return 1e-30;
}

template <class T>
double largest_relative_gap(const Buffer<T>& on_device, const std::vector<T>& want,
                            double floor = 1e-30) {
  const std::vector<T> got = to_host(on_device);
  double gap = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    gap = std::max(gap, std::abs(double(got[i]) - double(want[i])) /
                            std::max(std::abs(double(want[i])), floor));
  return gap;
}

template <class T>
std::size_t differing(const Buffer<T>& on_device, const std::vector<T>& want) {
  const std::vector<T> got = to_host(on_device);
  std::size_t count = 0;
  for (std::size_t i = 0; i < want.size(); ++i) count += !(got[i] == want[i]);
  return count;
}

template <class T>
void check_elementwise_on_gpu(double math_library_tolerance) {
  const std::size_t n = 100'003;
  for (int code = 0; code < kernels::UnaryOp::count; ++code) {
    INFO("unary op " << code);
    const testing::UnaryCheck<T> c(code, n);
    const T s = c.s;
    const auto &x = c.x, &g = c.g, &y_ref = c.y_ref, &dy_ref = c.dy_ref;
    auto gx = on_gpu(x), gg = on_gpu(g);
    Buffer<T> y = filled<T>(n, T(7)), dy = filled<T>(n, T(7));
    REQUIRE(kernels::gpu::map(code, s, gx.data(), y.data(), std::int64_t(n)));
    REQUIRE(
        kernels::gpu::times_derivative(code, s, gg.data(), gx.data(), dy.data(), std::int64_t(n)));
    wait_for_device();  // before the host reads the results
    if (uses_math_library(code)) {
      CHECK(largest_relative_gap(y, y_ref) < math_library_tolerance);
      CHECK(largest_relative_gap(dy, dy_ref, gap_floor(code)) < math_library_tolerance);
    } else {
      CHECK(differing(y, y_ref) == 0);
      CHECK(differing(dy, dy_ref) == 0);
    }
  }
  for (const auto& c : testing::zip_cases())
    for (int code = 0; code < kernels::BinaryOp::count; ++code) {
      INFO("binary op " << code << " over " << c.sizes.size() << " dims");
      const testing::ZipCheck<T> check(c, code);
      const auto &a = check.a, &b = check.b, &out_ref = check.out_ref;
      auto ga = on_gpu(a), gb = on_gpu(b);
      Buffer<T> out = filled<T>(out_ref.size(), T(7));
      REQUIRE(kernels::gpu::zip(code, c.sizes, c.strides, ga.data(), gb.data(), out.data()));
      wait_for_device();  // before the host reads the results
      CHECK(differing(out, out_ref) == 0);
    }
}
}  // namespace

TEST_CASE("element-wise ops on the GPU equal the CPU loops") {
  check_elementwise_on_gpu<float>(1e-6);  // a few units in the last place
  check_elementwise_on_gpu<double>(2e-15);
  LocalProcessor cpu(Device::cpu());  // computes on the CPU: the GPU kernel declines
  std::vector<float> x(10, 1.0f), y(10);
  CHECK_FALSE(kernels::gpu::map(kernels::UnaryOp::negate, 0.0f, x.data(), y.data(), 10));
}

TEST_CASE("optimiser steps on the GPU equal the CPU loop") {
  // Both sides round the same double arithmetic to float; the host compiler may fuse a multiply
  // and an add, which the GPU kernels do not (--fmad=false).
  const std::size_t n = 100'003;
  for (const auto& h : testing::adam_steps()) {
    INFO("Adam, weight decay " << h.weight_decay << (h.decoupled ? " decoupled" : ""));
    testing::OptimizerState<float> ref(n);
    auto p = on_gpu(ref.parameter), m = on_gpu(ref.first), v = on_gpu(ref.second),
         d = on_gpu(ref.gradient);
    for (std::size_t i = 0; i < n; ++i)
      kernels::shared::adam_update(h, ref.parameter[i], ref.first[i], ref.second[i],
                                   ref.gradient[i]);
    // A guard that is not finite skips the step; a finite one lets it through.
    const auto nan_guard = on_gpu(std::vector<float>{std::nanf("")}),
               fine_guard = on_gpu(std::vector<float>{0.0f});
    const auto hg = on_gpu(std::vector<kernels::shared::AdamStep>{h});
    REQUIRE(kernels::gpu::adam(hg.data(), p.data(), m.data(), v.data(), d.data(), std::int64_t(n),
                               nan_guard.data()));
    wait_for_device();  // before the host reads the results
    CHECK(differing(p, testing::OptimizerState<float>(n).parameter) == 0);
    REQUIRE(kernels::gpu::adam(hg.data(), p.data(), m.data(), v.data(), d.data(), std::int64_t(n),
                               fine_guard.data()));
    wait_for_device();  // before the host reads the results
    CHECK(largest_relative_gap(p, ref.parameter) < 2e-7);
    CHECK(largest_relative_gap(m, ref.first) < 2e-7);
    CHECK(largest_relative_gap(v, ref.second) < 2e-7);
  }
  for (const auto& h : testing::sgd_steps()) {
    INFO("SGD, momentum " << h.momentum);
    testing::OptimizerState<float> ref(n);
    auto p = on_gpu(ref.parameter), v = on_gpu(ref.first), d = on_gpu(ref.gradient);
    for (std::size_t i = 0; i < n; ++i)
      kernels::shared::sgd_update(h, ref.parameter[i], ref.first[i], ref.gradient[i]);
    const auto hg = on_gpu(std::vector<kernels::shared::SgdStep>{h});
    REQUIRE(kernels::gpu::sgd(hg.data(), p.data(), v.data(), d.data(), std::int64_t(n),
                              static_cast<const float*>(nullptr)));
    wait_for_device();  // before the host reads the results
    CHECK(largest_relative_gap(p, ref.parameter) < 2e-7);
    CHECK(largest_relative_gap(v, ref.first) < 2e-7);
  }
}

TEST_CASE("copies between strided boxes on the GPU equal the reference loops") {
  for (const auto& c : testing::copy_cases()) {
    INFO("box of " << c.box.size() << " dims");
    const auto values = testing::zip_operand<float>(c.from_elements, 0.3);
    std::vector<float> to_ref(std::size_t(c.to_elements), -1.0f);
    kernels::reference::copy_box(c.box, values.data(), c.from_strides, to_ref.data(), c.to_strides);
    auto from = on_gpu(values);
    Buffer<float> to = filled<float>(to_ref.size(), -1.0f);
    REQUIRE(kernels::gpu::copy_box(c.box, from.data(), c.from_strides, to.data(), c.to_strides));
    wait_for_device();  // before the host reads the results
    CHECK(differing(to, to_ref) == 0);
    std::vector<std::int64_t> indices(values.size()), to64_ref(to_ref.size(), -1);
    for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = std::int64_t(i) * 7 + 1;
    kernels::reference::copy_box(c.box, indices.data(), c.from_strides, to64_ref.data(),
                                 c.to_strides);
    auto from64 = on_gpu(indices);
    Buffer<std::int64_t> to64 = filled<std::int64_t>(to_ref.size(), -1);
    REQUIRE(
        kernels::gpu::copy_box(c.box, from64.data(), c.from_strides, to64.data(), c.to_strides));
    wait_for_device();  // before the host reads the results
    CHECK(differing(to64, to64_ref) == 0);
  }
}

namespace {
template <std::size_t N>
void check_sum_on_gpu(const testing::SumCase& c) {
  const testing::SumCheck<N> check(c);
  std::vector<Buffer<float>> on_device;
  on_device.reserve(N);
  auto device_operands = check.operands;
  for (std::size_t k = 0; k < N; ++k) {
    on_device.push_back(on_gpu(check.values[k]));
    device_operands[k].data = on_device[k].data();
  }
  const auto& ref = check.ref;
  const std::size_t outputs = ref.size();
  Buffer<double> out = filled<double>(outputs, 7.0);
  REQUIRE(kernels::gpu::sum<double, float, N>(c.outer, c.inner, device_operands, out.data()));
  wait_for_device();  // before the host reads the results
  CHECK(testing::sum_gap(to_host(out), ref) < 1e-12);
  if constexpr (N == 1) {
    for (const bool is_max : {true, false}) {
      INFO((is_max ? "max" : "min"));
      const auto want = testing::extreme_on_cpu(c, check, is_max);
      Buffer<float> got = filled<float>(want.size(), 7.0f);
      REQUIRE(kernels::gpu::extreme<float>(c.outer, c.inner, device_operands[0], got.data(), is_max,
                                           is_max ? -INFINITY : INFINITY));
      wait_for_device();  // before the host reads the results
      CHECK(differing(got, want) == 0);
    }
  }
}
}  // namespace

TEST_CASE("sums of products on the GPU equal the CPU's to double rounding, max and min exactly") {
  // Scale 1: few terms per output (a thread each); 4096: the chunked kernel.
  for (const std::int64_t scale : {1, 4096})
    for (const auto& c : testing::sum_cases(scale)) {
      INFO(c.outer.size() << " outer dims, " << c.inner.size() << " inner, " << c.elements.size()
                          << " operands, scale " << scale);
      if (c.elements.size() == 1)
        check_sum_on_gpu<1>(c);
      else
        check_sum_on_gpu<2>(c);
    }
}

namespace {
// The largest |got - want| / (1 + |want|): the element passes add terms of up to 100 times their
// result, so their rounding is absolute, not relative.
template <class T>
double largest_gap(const Buffer<T>& on_device, const std::vector<float>& want) {
  const std::vector<T> got = to_host(on_device);
  double gap = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    gap = std::max(gap, std::abs(double(got[i]) - double(want[i])) / (1 + std::abs(want[i])));
  return gap;
}
}  // namespace

namespace {
// Per key (count, mean, m2) from 3 doubles a key.
std::vector<kernels::shared::PartialMoments> moments_of(const Buffer<double>& on_device) {
  const std::vector<double> values = to_host(on_device);
  std::vector<kernels::shared::PartialMoments> out;
  for (std::size_t k = 0; 3 * k < values.size(); ++k)
    out.push_back({values[3 * k], values[3 * k + 1], values[3 * k + 2]});
  return out;
}
}  // namespace

TEST_CASE("normalisation passes on the GPU equal the CPU's formulas") {
  // Scale 1: a chunk per key; 4096: many chunks per key.
  for (const std::int64_t scale : {1, 4096})
    for (const auto& c : testing::norm_cases(scale)) {
      INFO(c.what << ", scale " << scale);
      const testing::NormCheck<float> check(c);
      const auto x = on_gpu(check.x), g = on_gpu(check.g), v = on_gpu(check.v);
      // The per-key constants in the GPU's memory, as the ops keep them.
      const auto a = on_gpu(check.scale), b = on_gpu(check.shift), ma = on_gpu(check.mask_scale),
                 mb = on_gpu(check.mask_shift), p = on_gpu(check.p), q = on_gpu(check.q),
                 r = on_gpu(check.r);
      Buffer<double> moments = filled<double>(std::size_t(3 * c.keys), 7.0);
      REQUIRE(kernels::gpu::norm_moments(c.sizes, c.key_strides, c.keys, x.data(), moments.data()));
      wait_for_device();  // before the host reads the results
      CHECK(testing::moments_gap(moments_of(moments), check.moments()) < 1e-12);

      for (const float floor : {-INFINITY, 0.0f}) {
        Buffer<float> out = filled<float>(std::size_t(check.n), 7.0f);
        REQUIRE(kernels::gpu::norm_affine(c.sizes, c.key_strides, c.keys, x.data(), a.data(),
                                          b.data(), floor, out.data()));
        wait_for_device();  // before the host reads the results
        CHECK(largest_gap(out, check.affine(floor)) < 1e-5);
      }
      for (const bool masked : {false, true}) {
        INFO((masked ? "behind a ReLU" : "no ReLU"));
        const float* operand = masked ? x.data() : v.data();
        const kernels::ReluMask<float> mask{masked ? x.data() : nullptr, ma.data(), mb.data()};
        Buffer<double> sums = filled<double>(std::size_t(2 * c.keys), 7.0);
        REQUIRE(kernels::gpu::norm_gradient_sums(c.sizes, c.key_strides, c.keys, g.data(), operand,
                                                 a.data(), b.data(), mask, sums.data()));
        wait_for_device();  // before the host reads the results
        CHECK(testing::sum_gap(to_host(sums), check.gradient_sums(masked)) < 1e-5);
        Buffer<float> dx = filled<float>(std::size_t(check.n), 7.0f);
        REQUIRE(kernels::gpu::norm_input_gradient(c.sizes, c.key_strides, c.keys, g.data(), operand,
                                                  mask, p.data(), q.data(), r.data(), dx.data()));
        wait_for_device();  // before the host reads the results
        CHECK(largest_gap(dx, check.input_gradient(masked)) < 1e-5);
      }
    }
  LocalProcessor cpu(Device::cpu());  // computes on the CPU: the GPU kernel declines
  std::vector<float> values(6, 1.0f);
  std::vector<double> moments(6);
  CHECK_FALSE(kernels::gpu::norm_moments({2, 3}, {0, 1}, 3, values.data(), moments.data()));
}

TEST_CASE("the normalisations' per-key arithmetic on the GPU equals the CPU's bit for bit") {
  // Three parts' moments of 5 keys (a processor's each), combined; coefficients, gradient terms.
  const std::int64_t keys = 5, parts = 3;
  std::vector<double> moments, gamma, beta, sums;
  for (std::int64_t i = 0; i < parts * keys; ++i)
    moments.insert(moments.end(), {double(10 + i % 4), 100 + std::sin(0.3 * double(i)),
                                   2 + std::cos(0.7 * double(i))});
  for (std::int64_t k = 0; k < keys; ++k) {
    gamma.push_back(0.5 + 0.1 * double(k));
    beta.push_back(0.2 - 0.3 * double(k));
    sums.insert(sums.end(), {std::sin(double(k)), std::cos(double(k)) * 3});
  }
  const double count = 3 * 10 + 6;  // not the parts' counts: held to what it is given
  std::vector<double> stats(3 * keys), ab(2 * keys), standard(2 * keys), pqr(3 * keys),
      standard_pqr(3 * keys);
  {
    LocalProcessor cpu(Device::cpu());
    kernels::norm_statistics(moments.data(), parts, keys, count, 1e-5, stats.data());
    kernels::norm_coefficients(stats.data(), keys, gamma.data(), beta.data(), ab.data(),
                               ab.data() + keys);
    kernels::norm_coefficients<double>(stats.data(), keys, nullptr, nullptr, standard.data(),
                                       standard.data() + keys);
    kernels::norm_gradient_terms(stats.data(), keys, gamma.data(), sums.data(), count, pqr.data(),
                                 pqr.data() + keys, pqr.data() + 2 * keys);
    kernels::norm_gradient_terms<double>(stats.data(), keys, nullptr, sums.data(), count,
                                         standard_pqr.data(), standard_pqr.data() + keys,
                                         standard_pqr.data() + 2 * keys);
  }
  const auto m = on_gpu(moments), gg = on_gpu(gamma), gb = on_gpu(beta), gs = on_gpu(sums);
  Buffer<double> s(stats.size()), c(ab.size()), sc(standard.size()), t(pqr.size()),
      st(standard_pqr.size());
  REQUIRE(kernels::gpu::norm_statistics(m.data(), parts, keys, count, 1e-5, s.data()));
  REQUIRE(kernels::gpu::norm_coefficients(s.data(), keys, gg.data(), gb.data(), c.data(),
                                          c.data() + keys));
  REQUIRE(kernels::gpu::norm_coefficients<double>(s.data(), keys, nullptr, nullptr, sc.data(),
                                                  sc.data() + keys));
  REQUIRE(kernels::gpu::norm_gradient_terms(s.data(), keys, gg.data(), gs.data(), count, t.data(),
                                            t.data() + keys, t.data() + 2 * keys));
  REQUIRE(kernels::gpu::norm_gradient_terms<double>(s.data(), keys, nullptr, gs.data(), count,
                                                    st.data(), st.data() + keys,
                                                    st.data() + 2 * keys));
  wait_for_device();  // before the host reads the results
  CHECK(differing(s, stats) == 0);
  CHECK(differing(c, ab) == 0);
  CHECK(differing(sc, standard) == 0);
  CHECK(differing(t, pqr) == 0);
  CHECK(differing(st, standard_pqr) == 0);
  // Running statistics into an evaluation's scale.
  const std::vector<float> variance{0.5f, 2.0f, 1e-6f, 3.25f};
  std::vector<float> inverse(variance.size());
  {
    LocalProcessor cpu(Device::cpu());
    kernels::norm_inverse_std(variance.data(), 4, 1e-5, inverse.data());
  }
  const auto gv = on_gpu(variance);
  Buffer<float> gi(variance.size());
  REQUIRE(kernels::gpu::norm_inverse_std(gv.data(), 4, 1e-5, gi.data()));
  wait_for_device();  // before the host reads the results
  CHECK(differing(gi, inverse) == 0);
}

TEST_CASE("resampling on the GPU equals the reference loops") {
  // The same additions in the same order; the host compiler may fuse a multiply and an add, which
  // the GPU kernels do not (--fmad=false).
  for (const std::int64_t scale : {1, 5000})
    for (const auto& c : testing::resample_cases(scale)) {
      INFO(c.what << ", scale " << scale);
      const testing::ResampleCheck<float> check(c.taps);
      const auto box = on_gpu(check.box), g = on_gpu(check.g);
      Buffer<float> out = filled<float>(check.out_ref.size(), 7.0f),
                    grad_box = filled<float>(check.grad_box_ref.size(), 7.0f);
      REQUIRE(kernels::gpu::resample(c.taps, box.data(), out.data()));
      wait_for_device();  // before the host reads the results
      CHECK(largest_gap(out, check.out_ref) < 1e-6);
      REQUIRE(kernels::gpu::resample_adjoint(c.taps, g.data(), grad_box.data()));
      wait_for_device();  // before the host reads the results
      CHECK(largest_gap(grad_box, check.grad_box_ref) < 1e-6);
    }
}

TEST_CASE("matrix products through cuBLAS equal the CPU's sums to float rounding") {
  for (const auto& c : testing::gemm_cases()) {
    INFO(c.einsum);
    auto g = testing::gemm_operands(c.einsum);
    const auto hx = testing::zip_operand<float>(g.elements[0], 0.0),
               hy = testing::zip_operand<float>(g.elements[1], 1.0);
    g.operands[0].data = hx.data();
    g.operands[1].data = hy.data();
    const std::size_t outputs = std::size_t(kernels::num_elements(g.outer));
    std::vector<double> want(outputs, 7.0);
    kernels::reference::parallel_sum<double, float, 2>(g.outer, g.inner, g.operands, want.data(),
                                                       1);
    const auto x = on_gpu(hx), y = on_gpu(hy);
    g.operands[0].data = x.data();
    g.operands[1].data = y.data();
    Buffer<double> got = filled<double>(outputs, 7.0);
    REQUIRE(kernels::cublas::gemm_sum<float>(g.outer, g.inner, g.operands, got.data()) ==
            c.is_gemm);
    wait_for_device();  // before the host reads the results
    if (c.is_gemm) CHECK(testing::sum_gap(to_host(got), want) < 1e-5);
  }
}

TEST_CASE("accumulators narrowed on the GPU equal the CPU's rounding") {
  std::vector<double> values;
  for (int i = 0; i < 10'000; ++i)
    values.push_back(std::sin(0.37 * i) * std::pow(10.0, i % 40 - 20));
  const auto in = on_gpu(values);
  Buffer<float> out = filled<float>(values.size(), 7.0f);
  REQUIRE(kernels::gpu::narrow<float>(in.data(), out.data(), std::int64_t(values.size()), 3.0));
  wait_for_device();  // before the host reads the results
  std::vector<float> want;
  for (double v : values) want.push_back(static_cast<float>(v / 3.0));
  CHECK(differing(out, want) == 0);
}

namespace {
std::vector<bfloat16> narrowed(const std::vector<float>& values) {
  return std::vector<bfloat16>(values.begin(), values.end());
}
template <class T, class Want>
double largest_bf16_gap(const Buffer<T>& on_device, const Want& want) {
  const std::vector<T> got = to_host(on_device);
  double gap = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < std::min<std::size_t>(got.size(), want.size()); ++i)
    gap =
        std::max(gap, std::abs(double(got[i]) - double(want[i])) / (1 + std::abs(double(want[i]))));
  return gap;
}
constexpr double bf16_step = 1.0 / 128;  // a bfloat16 ulp, relative: the GPU may fuse or round once

void check_bf16_norm(const testing::NormCase& c) {
  const testing::NormCheck<float> check(c);
  const auto x = narrowed(check.x), g = narrowed(check.g), v = narrowed(check.v);
  const auto gx = on_gpu(x), gg = on_gpu(g), gv = on_gpu(v);
  const auto a = on_gpu(check.scale), b = on_gpu(check.shift), ma = on_gpu(check.mask_scale),
             mb = on_gpu(check.mask_shift), p = on_gpu(check.p), q = on_gpu(check.q),
             r = on_gpu(check.r);
  const std::size_t keys = std::size_t(c.keys), n = std::size_t(check.n);
  std::vector<double> moments(3 * keys);
  kernels::cpu::norm_moments(c.sizes, c.key_strides, c.keys, x.data(), moments.data());
  Buffer<double> gpu_moments(3 * keys);
  REQUIRE(
      kernels::gpu::norm_moments(c.sizes, c.key_strides, c.keys, gx.data(), gpu_moments.data()));
  wait_for_device();  // before the host reads the results
  CHECK(testing::moments_gap(moments_of(gpu_moments), moments_of(on_gpu(moments))) < 1e-5);
  for (const bool masked : {false, true}) {
    INFO((masked ? "behind a ReLU" : "no ReLU"));
    const kernels::ReluMask<bfloat16> mask{masked ? x.data() : nullptr, check.mask_scale.data(),
                                           check.mask_shift.data()};
    const kernels::ReluMask<bfloat16> gpu_mask{masked ? gx.data() : nullptr, ma.data(), mb.data()};
    std::vector<bfloat16> out(n), dx(n);
    kernels::cpu::norm_affine(c.sizes, c.key_strides, c.keys, x.data(), check.scale.data(),
                              check.shift.data(), bfloat16(masked ? 0.0f : -INFINITY), out.data());
    kernels::cpu::norm_input_gradient(c.sizes, c.key_strides, c.keys, g.data(), v.data(), mask,
                                      check.p.data(), check.q.data(), check.r.data(), dx.data());
    // The gradient's sums: each term in float as the CPU computes it, summed in double (the CPU
    // sums float lanes, which are further from the exact sums than the GPU's are).
    std::vector<double> sums(2 * keys, 0.0);
    for (std::int64_t at = 0; at < check.n; ++at) {
      const std::int64_t k = check.key[at];
      const bool passes =
          !masked || kernels::shared::affine_floor(float(check.mask_scale[k]), float(x[at]),
                                                   float(check.mask_shift[k]), 0.0f) > 0.0f;
      const float kept = passes ? float(g[at]) : 0.0f;
      sums[2 * k] += kept;
      sums[2 * k + 1] += kept * (float(check.scale[k]) * float(v[at]) + float(check.shift[k]));
    }
    Buffer<bfloat16> gpu_out = filled<bfloat16>(n, bfloat16(7.0f)),
                     gpu_dx = filled<bfloat16>(n, bfloat16(7.0f));
    Buffer<double> gpu_sums(2 * keys);
    REQUIRE(kernels::gpu::norm_affine(c.sizes, c.key_strides, c.keys, gx.data(), a.data(), b.data(),
                                      bfloat16(masked ? 0.0f : -INFINITY), gpu_out.data()));
    REQUIRE(kernels::gpu::norm_input_gradient(c.sizes, c.key_strides, c.keys, gg.data(), gv.data(),
                                              gpu_mask, p.data(), q.data(), r.data(),
                                              gpu_dx.data()));
    REQUIRE(kernels::gpu::norm_gradient_sums(c.sizes, c.key_strides, c.keys, gg.data(), gv.data(),
                                             a.data(), b.data(), gpu_mask, gpu_sums.data()));
    wait_for_device();  // before the host reads the results
    CHECK(largest_bf16_gap(gpu_out, out) < bf16_step);
    CHECK(largest_bf16_gap(gpu_dx, dx) < bf16_step);
    CHECK(testing::sum_gap(to_host(gpu_sums), sums) < 1e-6);
  }
}

// Pooling on bfloat16 values: the float reference on the widened values, each output rounded once.
void check_bf16_pool(const testing::PoolCase& c) {
  const kernels::PoolGeometry g = pool_geometry(c);
  const testing::PoolData data(g);
  const auto x = narrowed(data.x), dy = narrowed(data.dy);
  const std::vector<float> wide_x(x.begin(), x.end()), wide_dy(dy.begin(), dy.end());
  std::vector<float> y_ref(data.out_n), dx_ref(data.in_n), avg_ref(data.out_n),
      avg_dx_ref(data.in_n);
  std::vector<std::uint8_t> ws_ref(kernels::reference::max_pool_workspace_bytes(g));
  kernels::reference::max_pool_forward(g, wide_x.data(), y_ref.data(), ws_ref.data());
  kernels::reference::max_pool_backward(g, wide_dy.data(), ws_ref.data(), dx_ref.data());
  kernels::reference::avg_pool_forward(g, wide_x.data(), avg_ref.data(), false);
  kernels::reference::avg_pool_backward(g, wide_dy.data(), avg_dx_ref.data(), false);
  const auto gx = on_gpu(x), gdy = on_gpu(dy);
  Buffer<bfloat16> y(data.out_n), dx(data.in_n), avg(data.out_n), avg_dx(data.in_n);
  Buffer<std::uint8_t> ws(ws_ref.size());
  REQUIRE(kernels::gpu::max_pool_forward(g, gx.data(), y.data(), ws.data()));
  REQUIRE(kernels::gpu::max_pool_backward(g, gdy.data(), ws.data(), dx.data()));
  REQUIRE(kernels::gpu::avg_pool_forward(g, gx.data(), avg.data(), false));
  REQUIRE(kernels::gpu::avg_pool_backward(g, gdy.data(), avg_dx.data(), false));
  wait_for_device();  // before the host reads the results
  CHECK(differing(y, narrowed(y_ref)) == 0);
  CHECK(differing(dx, narrowed(dx_ref)) == 0);
  CHECK(differing(avg, narrowed(avg_ref)) == 0);
  CHECK(differing(avg_dx, narrowed(avg_dx_ref)) == 0);
  CHECK(std::memcmp(ws_ref.data(), to_host(ws).data(), ws_ref.size()) == 0);
}

void check_bf16_sums(const testing::SumCase& c) {
  const testing::SumCheck<1> check(c);
  const std::vector<std::vector<bfloat16>> values{narrowed(check.values[0])};
  const auto operands = testing::sum_operands<bfloat16, 1>(c, values);
  const auto on_device = on_gpu(values[0]);
  auto device_operands = operands;
  device_operands[0].data = on_device.data();
  const std::size_t outputs = std::size_t(kernels::num_elements(c.outer));
  std::vector<double> ref(outputs);
  kernels::reference::parallel_sum<double, bfloat16, 1>(c.outer, c.inner, operands, ref.data(), 1);
  std::vector<bfloat16> largest(outputs);
  kernels::reference::fold<bfloat16, bfloat16, 1>(
      c.outer, c.inner, operands, largest.data(), bfloat16(-INFINITY), [](bfloat16 a, bfloat16 b) {
        return kernels::Binary<bfloat16, kernels::BinaryOp::larger>{}(a, b);
      });
  Buffer<double> sums = filled<double>(outputs, 7.0);
  Buffer<bfloat16> got_largest(outputs), narrow(outputs);
  REQUIRE(kernels::gpu::sum<double, bfloat16, 1>(c.outer, c.inner, device_operands, sums.data()));
  REQUIRE(kernels::gpu::extreme<bfloat16>(c.outer, c.inner, device_operands[0], got_largest.data(),
                                          true, bfloat16(-INFINITY)));
  REQUIRE(kernels::gpu::narrow<bfloat16>(sums.data(), narrow.data(), std::int64_t(outputs), 3.0));
  wait_for_device();  // before the host reads the results
  CHECK(testing::sum_gap(to_host(sums), ref) < 1e-12);
  CHECK(differing(got_largest, largest) == 0);
  std::vector<bfloat16> narrow_ref;
  for (double s : to_host(sums)) narrow_ref.push_back(static_cast<bfloat16>(s / 3.0));
  CHECK(differing(narrow, narrow_ref) == 0);
}

// The position of each maximum along the middle dim of [outer][n][inner], on the GPU as the CPU's.
template <class T, class Out>
void check_argmax() {
  const std::int64_t outer = 3, n = 5, inner = 1001;
  std::vector<T> scores;
  for (std::int64_t i = 0; i < outer * n * inner; ++i)
    scores.push_back(T(float(std::round(3 * std::sin(0.37 * double(i))))));  // ties
  std::vector<Out> want(std::size_t(outer * inner));
  {
    LocalProcessor cpu(Device::cpu());
    kernels::argmax(scores.data(), outer, n, inner, want.data());
  }
  const auto in = on_gpu(scores);
  Buffer<Out> got = filled<Out>(want.size(), Out(99));
  REQUIRE(kernels::gpu::argmax(in.data(), outer, n, inner, got.data()));
  wait_for_device();  // before the host reads the results
  CHECK(differing(got, want) == 0);
}
}  // namespace

TEST_CASE("bfloat16 blocks run on the GPU's kernels and compute as the CPU's loops") {
  SECTION("element-wise ops: each result rounded once from float") {
    check_elementwise_on_gpu<bfloat16>(bf16_step);
    const std::size_t n = 1001;
    std::vector<bfloat16> a, b;
    for (std::size_t i = 0; i < n; ++i)
      a.push_back(float(std::sin(0.1 * i))), b.push_back(float(std::cos(i)));
    auto into = on_gpu(a), add = on_gpu(b);
    REQUIRE(kernels::gpu::accumulate(into.data(), add.data(), std::int64_t(n)));
    wait_for_device();  // before the host reads the results
    for (std::size_t i = 0; i < n; ++i) a[i] += b[i];
    CHECK(differing(into, a) == 0);
  }
  SECTION("normalisation passes") {
    for (const std::int64_t scale : {1, 4096})
      for (const auto& c : testing::norm_cases(scale)) {
        INFO(c.what << ", scale " << scale);
        check_bf16_norm(c);
      }
  }
  SECTION("pooling") {
    for (const auto& c : pool_cases()) check_bf16_pool(c);
  }
  SECTION("sums, maxima and narrowing") {
    for (const std::int64_t scale : {1, 4096})
      for (const auto& c : testing::sum_cases(scale)) {
        if (c.elements.size() != 1) continue;
        INFO(c.outer.size() << " outer dims, " << c.inner.size() << " inner, scale " << scale);
        check_bf16_sums(c);
      }
  }
  SECTION("resampling: bfloat16 weights, each addition rounded, as the reference loops") {
    for (const auto& c : testing::resample_cases(1)) {
      INFO(c.what);
      const testing::ResampleCheck<bfloat16> check(c.taps);
      const auto box = on_gpu(check.box), g = on_gpu(check.g);
      Buffer<bfloat16> out(check.out_ref.size()), grad_box(check.grad_box_ref.size());
      REQUIRE(kernels::gpu::resample(c.taps, box.data(), out.data()));
      REQUIRE(kernels::gpu::resample_adjoint(c.taps, g.data(), grad_box.data()));
      wait_for_device();  // before the host reads the results
      CHECK(largest_bf16_gap(out, check.out_ref) < bf16_step);
      CHECK(largest_bf16_gap(grad_box, check.grad_box_ref) < bf16_step);
    }
  }
  SECTION("argmax") {
    check_argmax<float, std::uint8_t>();
    check_argmax<bfloat16, std::uint8_t>();
    check_argmax<double, std::int32_t>();
    check_argmax<bfloat16, std::int32_t>();
  }
}

TEST_CASE("a GPU processor counts its kernels, waits and CPU loops run on copies of its blocks") {
  const std::vector<float> values(1000, 2.0f);
  auto x = on_gpu(values);
  Buffer<float> y(values.size());
  const DeviceActivity before = device_activity();
  kernels::map(kernels::Unary<float, kernels::UnaryOp::square>{}, x.data(), y.data(), 1000);
  wait_for_device();
  kernels::map([](float v) { return v + 1; }, x.data(), y.data(),
               1000);  // no GPU kernel: a CPU loop
  const DeviceActivity& after = device_activity();
  CHECK(after.kernels == before.kernels + 1);
  // Ours, the CPU loop's for the GPU's work, and one for each of its operands' copies to the host.
  CHECK(after.waits == before.waits + 4);
  CHECK(after.host_fallbacks == before.host_fallbacks + 1);
  CHECK(to_host(y)[0] == 3.0f);
}
