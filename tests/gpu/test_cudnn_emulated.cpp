// The cuDNN convolution kernels against the reference loops, with cuDNN and the CUDA runtime
// emulated on the CPU by their documented semantics (the emulated GPU, emulated/cudnn.cpp): how
// meshtensor's convolutions are put to cuDNN — padding, skipped and padded box rows, transposed
// convolutions as adjoints, weight orders, alpha and beta — checked on every kernel test geometry,
// every slab of output rows and of input rows the ops cut them into, and random geometries; in
// float and in bfloat16. What this cannot check, cuDNN itself on a GPU, test_gpu_kernels does
// where there is one.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include <meshtensor/core/bfloat16.hpp>
#include <meshtensor/device/activity.hpp>
#include <meshtensor/device/host_access.hpp>
#include <meshtensor/device/memory.hpp>
#include <meshtensor/kernels/cuda/cudnn_conv.hpp>
#include <meshtensor/memory/array.hpp>

#include "support/conv_cases.hpp"
#include "support/device_buffers.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {

// Runs the three kernels on T through the emulated cuDNN; false if any declined. bfloat16 operands
// are bf16 values, the reference computes on them exactly in float; its outputs are rounded once
// (gap within bf16's half step), its weight gradient summed in float.
template <class T>
bool agrees(const ConvGeometry& g) {
  const std::size_t in_n = g.batch * g.in[0] * g.in[1] * g.in[2] * g.c_in;
  const std::size_t out_n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.c_out;
  const std::size_t w_n = g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out;
  auto as_t = [](float v) { return float(T(v)); };  // the value a T holds
  std::vector<float> x(in_n), w(w_n), dy(out_n), y_ref(out_n), dx_ref(in_n);
  for (std::size_t i = 0; i < in_n; ++i) x[i] = as_t(float(std::sin(0.7 * i + 0.3)));
  for (std::size_t i = 0; i < w_n; ++i) w[i] = as_t(float(std::cos(1.3 * i)));
  for (std::size_t i = 0; i < out_n; ++i) dy[i] = as_t(float(std::sin(2.1 * i + 1)));
  std::vector<double> dw_ref(w_n, 0.0);
  kernels::reference::conv_forward(g, x.data(), w.data(), y_ref.data());
  kernels::reference::conv_backward_input(g, dy.data(), w.data(), dx_ref.data());
  kernels::reference::conv_backward_weight(g, x.data(), dy.data(), dw_ref.data());
  // The GPU's operands in its memory (the processor's pool), as the ops give them.
  const Buffer<T> gx = on_gpu(std::vector<T>(x.begin(), x.end())),
                  gw = on_gpu(std::vector<T>(w.begin(), w.end())),
                  gdy = on_gpu(std::vector<T>(dy.begin(), dy.end()));
  Buffer<T> y = filled<T>(out_n, T(7.0f)),
            dx = filled<T>(in_n, T(7.0f));  // stale values must be overwritten
  Buffer<double> dw = filled<double>(w_n, 0.0);
  REQUIRE(kernels::cudnn::conv_forward(g, gx.data(), gw.data(), y.data()));
  REQUIRE(kernels::cudnn::conv_backward_input(g, gdy.data(), gw.data(), dx.data()));
  REQUIRE(kernels::cudnn::conv_backward_weight(g, gx.data(), gdy.data(), dw.data()));
  // An accumulator in the GPU's memory is added to there.
  Buffer<double> dw_on_gpu = filled<double>(w_n, 0.5);
  REQUIRE(kernels::cudnn::conv_backward_weight(g, gx.data(), gdy.data(), dw_on_gpu.data()));
  wait_for_device();  // the calls return once queued; the host reads their results next
  std::vector<double> added = to_host(dw_on_gpu);
  for (double& a : added) a -= 0.5;
  const double rounded = std::is_same_v<T, float> ? 1e-4 : 5e-3;
  return relative_gap(widen(y_ref), widen(to_host(y))) < rounded &&
         relative_gap(widen(dx_ref), widen(to_host(dx))) < rounded &&
         relative_gap(dw_ref, to_host(dw)) < 1e-4 && relative_gap(dw_ref, added) < 1e-4;
}

bool agrees(const ConvGeometry& g) { return agrees<float>(g) && agrees<bfloat16>(g); }

// As a processor of the nccl transport: computing on GPU 0, its blocks in the GPU's memory.
struct OnGpu {
  LocalProcessor gpu{Device::cuda(0)};
};

}  // namespace

TEST_CASE("convolutions put to the emulated cuDNN equal the reference, whole and in slabs") {
  OnGpu gpu;
  for (const auto& c : conv_cases()) {
    const ConvGeometry g = geometry(c);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
    CHECK(agrees(g));
    for (std::int64_t a = 0; a < g.out[0]; ++a)
      for (std::int64_t b = a + 1; b <= g.out[0]; ++b) {
        const auto slab = kernels::output_rows(g, a, b);
        if (slab.geometry.in[0] <= 0) continue;
        INFO("output rows " << a << " to " << b);
        CHECK(agrees(slab.geometry));
      }
    if (c.transposed) continue;
    for (std::int64_t r0 = 0; r0 < g.in[0]; ++r0)
      for (std::int64_t r1 = r0 + 1; r1 <= g.in[0]; ++r1) {
        const auto slab = kernels::input_rows(g, r0, r1);
        if (slab.o0 >= slab.o1) continue;
        INFO("input rows " << r0 << " to " << r1);
        CHECK(agrees(slab.geometry));
      }
  }
}

TEST_CASE("random geometries put to the emulated cuDNN equal the reference") {
  OnGpu gpu;
  std::mt19937 random(1);
  auto between = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(random); };
  int ran = 0;
  for (int i = 0; i < 1500; ++i) {
    ConvGeometry g;
    g.batch = between(1, 2);
    g.c_in = between(1, 3);
    g.c_out = between(1, 3);
    const bool transposed = between(0, 2) == 0;
    for (int d = 0; d < 3; ++d) {
      g.kernel[d] = between(1, 3);
      g.out[d] = between(1, 5);
      g.in[d] = between(1, 6);
      kernels::Taps t;
      t.transposed = transposed;
      t.stride = between(1, 3);
      t.dilation = between(1, 2);
      t.origin = between(-4, 4);
      if (between(0, 4) == 0) {  // a pass-through dim, marked either way
        t.transposed = !transposed;
        g.kernel[d] = 1;
        t.stride = 1;
      }
      g.taps[d] = t;
    }
    if (!kernels::cudnn::detail::describable(g)) continue;
    INFO("random geometry " << i);
    CHECK(agrees(g));
    ++ran;
  }
  CHECK(ran > 1400);
}

TEST_CASE("each pass asks cuDNN for its algorithm once per shape") {
  OnGpu gpu;
  const ConvGeometry g = geometry(conv_cases().front());
  const std::uint64_t before = device_activity().library_queries;
  CHECK(agrees<float>(g));  // forward, input gradient, and the weight gradient twice
  const std::uint64_t first = device_activity().library_queries - before;
  CHECK(agrees<float>(g));
  const std::uint64_t same = device_activity().library_queries - before - first;
  // bfloat16: its forward and input gradient are other problems; its weight gradient runs on
  // operands widened to float, float's problem.
  CHECK(agrees<bfloat16>(g));
  const std::uint64_t other = device_activity().library_queries - before - first - same;
  CHECK(first == 3);
  CHECK(same == 0);
  CHECK(other == 2);
}

namespace {

// The emulated cuDNN's three algorithms (emulated/cudnn.cpp: 0 slowest, 2 on the tensor cores)
// while it lives.
class ThreeAlgorithms {
 public:
  ThreeAlgorithms() { setenv(variable, "3", 1); }
  ~ThreeAlgorithms() { unsetenv(variable); }

 private:
  static constexpr const char* variable = "MESHTENSOR_EMULATED_CUDNN_ALGORITHMS";
};

// The algorithms a fresh GPU processor under `policy` chose for the passes of `g` in T, after
// checking their results; and the waits its second round of the same calls made.
template <class T>
std::pair<std::set<int>, std::uint64_t> chosen_algorithms(const ConvGeometry& g,
                                                          KernelPolicy policy) {
  Settings settings = environment_settings();
  settings.kernels = policy;
  LocalProcessor gpu(Device::cuda(0), settings);
  CHECK(agrees<T>(g));
  const std::uint64_t waits = device_activity().waits;
  CHECK(agrees<T>(g));  // the same shapes: chosen already
  std::set<int> algorithms;
  for (const auto& [key, chosen] : kernels::cudnn::detail::context().chosen())
    algorithms.insert(chosen.algo);
  return {algorithms, device_activity().waits - waits};
}

}  // namespace

TEST_CASE(
    "cuDNN's fastest algorithm is timed at a shape's first call, unless the policy is fixed") {
  const ThreeAlgorithms three;
  const ConvGeometry g = geometry(conv_cases().front());
  KernelPolicy timed, fixed, tf32;
  fixed.choice = KernelPolicy::Choice::fixed;
  tf32.math = KernelPolicy::Math::tf32;
  // Float without TF32: algorithm 2 (tensor cores) is not allowed, 1 is faster than 0.
  const auto [timed_float, timed_waits] = chosen_algorithms<float>(g, timed);
  CHECK(timed_float == std::set<int>{1});
  // The fixed policy runs the heuristics' first, untimed.
  const auto [fixed_float, fixed_waits] = chosen_algorithms<float>(g, fixed);
  CHECK(fixed_float == std::set<int>{0});
  CHECK(timed_waits == fixed_waits);  // a shape is timed at its first call only
  // TF32 allowed: the tensor cores' algorithm, fastest, for float too.
  CHECK(chosen_algorithms<float>(g, tf32).first == std::set<int>{2});
  // bfloat16 runs on the tensor cores anyway (its weight gradient is float's problem).
  CHECK(chosen_algorithms<bfloat16>(g, timed).first.count(2) == 1);
}
