// The GPU kernels, on the first GPU, with operands in its memory. cuDNN's convolution kernels agree
// with the reference loops (1e-4 relative, as the CPU kernels) on the kernel tests' geometries,
// with every operand in the GPU's memory. The U-Net's own (padded 3x3x3, and the transposed 2x2x2
// up-sampling) must run on cuDNN; another that cuDNN declines goes to the CPU kernels, as in the
// ops, and is listed. Operands in host memory are left to the CPU kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <meshtensor/kernels/conv_select.hpp>
#include <meshtensor/kernels/gpu/elementwise.hpp>
#include <meshtensor/kernels/gpu/pool.hpp>
#include <meshtensor/memory/array.hpp>

#include "support/conv_cases.hpp"
#include "support/pool_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {
// A copy of `values` in the processor's pool: the GPU's managed memory here.
template <class T>
Buffer<T> on_gpu(const std::vector<T>& values) {
  Buffer<T> out(values.size());
  std::copy(values.begin(), values.end(), out.begin());
  return out;
}
}  // namespace

TEST_CASE("cuDNN and reference convolution kernels agree") {
  for (const auto& c : conv_cases()) {
    const ConvCheck check(c);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
    auto x = on_gpu(check.x), w = on_gpu(check.w), dy = on_gpu(check.dy);
    Buffer<float> y(check.out_n, 7.0f), dx(check.in_n, 7.0f);  // stale values must go
    std::vector<double> dw(check.w_n, 0.0);
    const ConvGeometry& g = check.g;
    const bool ran[3] = {kernels::cudnn::conv_forward(g, x.data(), w.data(), y.data()),
                         kernels::cudnn::conv_backward_input(g, dy.data(), w.data(), dx.data()),
                         kernels::cudnn::conv_backward_weight(g, x.data(), dy.data(), dw.data())};
    if (!ran[0]) kernels::cpu_conv_impl::conv_forward(g, x.data(), w.data(), y.data());
    if (!ran[1]) kernels::cpu_conv_impl::conv_backward_input(g, dy.data(), w.data(), dx.data());
    if (!ran[2]) kernels::cpu_conv_impl::conv_backward_weight(g, x.data(), dy.data(), dw.data());
    const bool unet_shape = c.pad == 1 || c.exact_multiple;
    for (int k = 0; k < 3; ++k) {
      if (!ran[k]) WARN("cuDNN declined kernel " << k << " (forward, input, weight) of this case");
      if (unet_shape) CHECK(ran[k]);
    }
    CHECK(relative_gap(widen(check.y_ref), widen(std::vector<float>(y.begin(), y.end()))) < 1e-4);
    CHECK(relative_gap(widen(check.dx_ref), widen(std::vector<float>(dx.begin(), dx.end()))) <
          1e-4);
    CHECK(relative_gap(check.dw_ref, dw) < 1e-4);
  }
}

TEST_CASE("operands in host memory are left to the CPU kernels") {
  const ConvCheck check(conv_cases().front());
  std::vector<float> y(check.out_n);
  CHECK_FALSE(kernels::cudnn::conv_forward(check.g, check.x.data(), check.w.data(), y.data()));
}

TEST_CASE("gradients accumulate on the GPU exactly as on the CPU") {
  const std::size_t n = 100'003;  // not a multiple of a block
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = float(std::sin(0.1 * i)), b[i] = float(std::cos(i));
  auto into = on_gpu(a), add = on_gpu(b);
  REQUIRE(kernels::gpu::accumulate(into.data(), add.data(), std::int64_t(n)));
  std::size_t differing = 0;
  for (std::size_t i = 0; i < n; ++i) differing += into[i] != a[i] + b[i];
  CHECK(differing == 0);
  CHECK_FALSE(kernels::gpu::accumulate(a.data(), b.data(), std::int64_t(n)));  // host memory
}

TEST_CASE("pooling on the GPU equals the reference kernels bit for bit") {
  for (const auto& c : pool_cases()) {
    const kernels::PoolGeometry g = pool_geometry(c);
    const PoolData data(g);
    const std::size_t in_n = data.in_n, out_n = data.out_n;
    const auto& x = data.x;
    const auto& dy = data.dy;
    const std::size_t workspace_bytes = kernels::max_pool_workspace_bytes(g);
    for (const bool is_max : {true, false})
      for (const bool count_padding : {false, true}) {
        if (is_max && count_padding) continue;
        INFO((is_max ? "max" : "average")
             << " pooling, out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2]);
        std::vector<float> y_ref(out_n), dx_ref(in_n);
        std::vector<std::uint8_t> ws_ref(workspace_bytes);
        if (is_max) {
          kernels::max_pool_forward(g, x.data(), y_ref.data(), ws_ref.data());
          kernels::max_pool_backward(g, dy.data(), ws_ref.data(), dx_ref.data());
        } else {
          kernels::avg_pool_forward(g, x.data(), y_ref.data(), count_padding);
          kernels::avg_pool_backward(g, dy.data(), dx_ref.data(), count_padding);
        }
        auto gx = on_gpu(x), gdy = on_gpu(dy);
        Buffer<float> y(out_n, 7.0f), dx(in_n, 7.0f);
        Buffer<std::uint8_t> ws(workspace_bytes);
        if (is_max) {
          REQUIRE(kernels::gpu::max_pool_forward(g, gx.data(), y.data(), ws.data()));
          REQUIRE(kernels::gpu::max_pool_backward(g, gdy.data(), ws.data(), dx.data()));
        } else {
          REQUIRE(kernels::gpu::avg_pool_forward(g, gx.data(), y.data(), count_padding));
          REQUIRE(kernels::gpu::avg_pool_backward(g, gdy.data(), dx.data(), count_padding));
        }
        CHECK(std::memcmp(y_ref.data(), y.data(), out_n * sizeof(float)) == 0);  // bit for bit
        CHECK(std::memcmp(dx_ref.data(), dx.data(), in_n * sizeof(float)) == 0);
        if (is_max) CHECK(std::memcmp(ws_ref.data(), ws.data(), workspace_bytes) == 0);
      }
  }
}
