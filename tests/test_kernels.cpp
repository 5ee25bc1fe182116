// The blocked and oneDNN convolution kernels agree with the reference loops (1e-4 relative) on
// convolutions and transposed convolutions of many shapes: strides, dilations, channel counts the
// blocks divide and ones they do not. So do the row kernels on the shapes they take (few channels,
// rows of a vector or more), and they turn down the others. oneDNN's pooling agrees with the
// reference pooling, ties (as after a ReLU) routed to the same window position. oneDNN's
// convolutions created on many processors (threads) at once each compute their own.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <meshtensor/core/bfloat16.hpp>
#include <meshtensor/kernels/common/input_gradient_as_forward.hpp>
#include <meshtensor/kernels/common/strided.hpp>
#include <meshtensor/kernels/conv.hpp>
#include <meshtensor/kernels/cpu/blocked/conv.hpp>
#include <meshtensor/kernels/cpu/copy.hpp>
#include <meshtensor/kernels/cpu/elementwise.hpp>
#include <meshtensor/kernels/cpu/loops.hpp>
#include <meshtensor/kernels/cpu/norm.hpp>
#include <meshtensor/kernels/cpu/pair_pool.hpp>
#include <meshtensor/kernels/cpu/reference/fold.hpp>
#include <meshtensor/kernels/cpu/reference/pool.hpp>
#include <meshtensor/kernels/cpu/rows/conv.hpp>
#include <meshtensor/kernels/cpu/vector_rate.hpp>
#include <meshtensor/kernels/pool.hpp>
#include <meshtensor/kernels/sum.hpp>
#ifdef MESHTENSOR_WITH_ONEDNN
#include <meshtensor/kernels/cpu/onednn/conv.hpp>
#include <meshtensor/kernels/cpu/onednn/pool.hpp>
#endif

#include "support/conv_cases.hpp"
#include "support/elementwise_cases.hpp"
#include "support/environment.hpp"
#include "support/gemm_cases.hpp"

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_kernels {

using namespace meshtensor::kernels;
using namespace meshtensor::kernels::reference;
using namespace meshtensor::testing;

// The three kernels of one implementation, to run side by side with the reference loops.
struct Implementation {
  const char* name;
  void (*forward)(const ConvGeometry&, const float*, const float*, float*);
  void (*backward_input)(const ConvGeometry&, const float*, const float*, float*);
  void (*backward_weight)(const ConvGeometry&, const float*, const float*, double*);
};

#ifdef MESHTENSOR_WITH_ONEDNN
// oneDNN's input gradient as a forward convolution wherever it runs one (else as its first call's
// timing chooses).
void onednn_input_gradient_as_forward(const ConvGeometry& g, const float* grad_output,
                                      const float* weight, float* grad_input) {
  const Setting always("MESHTENSOR_INPUT_GRADIENT_AS_FORWARD", "always");
  onednn::conv_backward_input<float>(g, grad_output, weight, grad_input);
}
#endif

const std::vector<Implementation> implementations{
    {"blocked", blocked::conv_forward<float>, blocked::conv_backward_input<float>,
     blocked::conv_backward_weight<float>},
#ifdef MESHTENSOR_WITH_ONEDNN
    {"onednn", onednn::conv_forward<float>, onednn::conv_backward_input<float>,
     onednn::conv_backward_weight<float>},
    {"onednn, input gradient as a forward convolution", onednn::conv_forward<float>,
     onednn_input_gradient_as_forward, onednn::conv_backward_weight<float>},
#endif
};

// oneDNN's kernels run big shapes in slabs of rows; a small minimum cuts these small ones too.
#ifdef MESHTENSOR_WITH_ONEDNN
const std::vector<std::int64_t> slab_budgets{onednn::detail::min_slab_floats(), 600};
void use_slab_budget(std::int64_t floats) { onednn::detail::min_slab_floats() = floats; }
#else
const std::vector<std::int64_t> slab_budgets{0};
void use_slab_budget(std::int64_t) {}
#endif

#ifdef MESHTENSOR_WITH_ONEDNN
// A shape's first input gradient times both ways (direct, and as a forward convolution), and the
// two round differently: that call must give what the way it keeps gives on every later call.
// Which way wins is the machine's, so many fresh shapes (each call pair is its shape's first).
TEST_CASE("oneDNN: a shape's first input gradient, timed both ways, is what later calls give") {
  for (const std::array<std::int64_t, 3>& out : {std::array<std::int64_t, 3>{5, 4, 6}, {6, 5, 4}})
    for (std::int64_t c_in : {8, 16, 24})
      for (std::int64_t c_out : {8, 16, 24}) {
        const ConvCheck check(
            Case{out, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, c_in, c_out, false, false, 1});
        std::vector<float> first(check.in_n), later(check.in_n);
        onednn::conv_backward_input<float>(check.g, check.dy.data(), check.w.data(), first.data());
        onednn::conv_backward_input<float>(check.g, check.dy.data(), check.w.data(), later.data());
        INFO(out[0] << "x" << out[1] << "x" << out[2] << ", " << c_in << " -> " << c_out);
        CHECK(first == later);
      }
}
#endif

#ifdef MESHTENSOR_WITH_ONEDNN
// Processors that are threads of one process build their oneDNN convolutions at the same time,
// one processor float ones and another bfloat16 ones (a bfloat16 run's first layer runs widened
// to float): each result must be its own convolution's. (oneDNN 2.6 shares a brgemm blocking
// setting between threads while it creates a primitive: unserialised, every one of 8 runs of this
// test had 1 to 7 of its 384 results wrong on an AMX Xeon.) Every round is a fresh processor per
// thread, so each round creates every shape again.
TEST_CASE("oneDNN: convolution primitives made on many processors at once compute their own") {
  std::vector<Case> cases;
  for (std::int64_t rows : {1, 2, 4, 5})
    for (std::int64_t c_in : {1, 3})
      cases.push_back({{rows, 6, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, c_in, 4, false, false, 1});
  std::vector<ConvCheck> checks(cases.begin(), cases.end());
  // bfloat16 operands, and the reference on them (widened) to compare with.
  struct Rounded {
    std::vector<meshtensor::bfloat16> x, w;
    std::vector<float> y_ref;
  };
  std::vector<Rounded> rounded;
  for (const ConvCheck& c : checks) {
    Rounded r{{c.x.begin(), c.x.end()}, {c.w.begin(), c.w.end()}, std::vector<float>(c.out_n)};
    const std::vector<float> x(r.x.begin(), r.x.end()), w(r.w.begin(), r.w.end());
    reference::conv_forward(c.g, x.data(), w.data(), r.y_ref.data());
    rounded.push_back(std::move(r));
  }
  constexpr int processors = 8, rounds = 6;
  // Without oneDNN's cache of primitives every round builds them anew, not only the first.
  const int cached = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  std::atomic<int> wrong{0}, native_bf16{0};
  const auto run = [&](int t) {
    for (int round = 0; round < rounds; ++round) {
      const meshtensor::LocalProcessor fresh;
      for (std::size_t k = 0; k < checks.size(); ++k) {
        const ConvCheck& c = checks[k];
        double gap = 0;
        if (t % 2 == 0) {
          std::vector<float> y(c.out_n);
          onednn::conv_forward<float>(c.g, c.x.data(), c.w.data(), y.data());
          gap = relative_gap(widen(c.y_ref), widen(y));
        } else {
          bool fell_back = false;
          std::vector<meshtensor::bfloat16> y(c.out_n);
          onednn::conv_forward_or(c.g, rounded[k].x.data(), rounded[k].w.data(), y.data(),
                                  [&](auto&&...) { fell_back = true; });
          if (fell_back) continue;  // no oneDNN bfloat16 kernel on this machine
          ++native_bf16;
          gap =
              relative_gap(widen(rounded[k].y_ref), widen(std::vector<float>(y.begin(), y.end())));
        }
        if (gap > (t % 2 == 0 ? 1e-4 : 1.0 / 64)) ++wrong;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < processors; ++t) threads.emplace_back(run, t);
  for (auto& thread : threads) thread.join();
  dnnl::set_primitive_cache_capacity(cached);
  if (native_bf16 == 0)
    std::cout << "oneDNN has no bfloat16 convolution kernel on this machine: float ones only\n";
  INFO(wrong << " of " << processors * rounds * checks.size() << " results wrong (" << native_bf16
             << " bfloat16 ones on oneDNN)");
  CHECK(wrong == 0);
}
#endif

TEST_CASE("fast and reference convolution kernels agree") {
  for (const auto& c : conv_cases()) {
    const ConvCheck check(c);
    const ConvGeometry& g = check.g;
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
#ifdef MESHTENSOR_WITH_ONEDNN
    if (c.exact_multiple) CHECK(onednn::detail::supported(g));  // oneDNN's deconvolution runs it
#endif
    for (const auto& impl : implementations)
      for (const std::int64_t budget : slab_budgets) {
        INFO(impl.name << " kernels, slabs of at least " << budget << " floats");
        use_slab_budget(budget);
        std::vector<float> y(check.out_n), dx(check.in_n);
        std::vector<double> dw(check.w_n, 0.0);
        impl.forward(g, check.x.data(), check.w.data(), y.data());
        impl.backward_input(g, check.dy.data(), check.w.data(), dx.data());
        impl.backward_weight(g, check.x.data(), check.dy.data(), dw.data());
        use_slab_budget(slab_budgets.front());
        CHECK(relative_gap(widen(check.y_ref), widen(y)) < 1e-4);
        CHECK(relative_gap(widen(check.dx_ref), widen(dx)) < 1e-4);
        CHECK(relative_gap(check.dw_ref, dw) < 1e-4);
      }
  }
}

namespace {
// One pass of `check` on T through the convolution family, where the candidate forced by the
// processor's policy supports it; the gap to the reference loops, or -1 where it does not.
template <class T>
double forced_pass_gap(const ConvCheck& check, std::size_t candidate, plan::ConvClass::Pass pass) {
  const ConvGeometry& g = check.g;
  if (!ConvCandidates::supports(
          candidate, meshtensor::kernels::detail::whole_problem(g, pass, element_of<T>())))
    return -1;
  REQUIRE(conv_kernel_name<T>(g, pass) == ConvCandidates::names[candidate]);
  const auto as_t = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> x = as_t(check.x), w = as_t(check.w), dy = as_t(check.dy);
  switch (pass) {
    case plan::ConvClass::forward: {
      std::vector<T> y(check.out_n);
      meshtensor::kernels::conv_forward(g, x.data(), w.data(), y.data());
      return relative_gap(widen(check.y_ref), widen(y));
    }
    case plan::ConvClass::backward_input: {
      std::vector<T> dx(check.in_n);
      meshtensor::kernels::conv_backward_input(g, dy.data(), w.data(), dx.data());
      return relative_gap(widen(check.dx_ref), widen(dx));
    }
    default: {  // the weight gradient
      std::vector<double> dw(check.w_n, 0.0);
      meshtensor::kernels::conv_backward_weight(g, x.data(), dy.data(), dw.data());
      return relative_gap(check.dw_ref, dw);
    }
  }
  return -1;
}

// Whether this build and CPU run `name` on some of the shapes below.
bool runs_here(std::string_view name) {
  if (name == "reference" || name == "widened") return true;
  if (reference_kernels) return false;
  if (name == "onednn" || name == "onednn_bf16") return onednn_kernels;
  if (name == "rows") return rows::available();
  return true;  // blocked (double), pointwise
}
}  // namespace

TEST_CASE("each convolution candidate, forced, runs what it supports as the reference loops do") {
  std::vector<Case> cases = conv_cases();
  cases.push_back({{4, 4, 6}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 2, 8, 3, false});  // pointwise's
  // The row kernels' (rows of a whole vector of positions in AVX-512's 16 lanes too).
  cases.push_back({{3, 4, 18}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 8, false, false, 1});
  for (std::size_t candidate = 0; candidate < ConvCandidates::size; ++candidate) {
    const std::string name(ConvCandidates::names[candidate]);
    INFO("the " << name << " candidate");
    const Setting forced("MESHTENSOR_CONV_KERNEL", name.c_str());
    int ran = 0;
    for (const Case& c : cases) {
      const ConvCheck check(c), exact(c, /*bf16_values=*/true);
      INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                  << c.c_out << (c.transposed ? " transposed" : ""));
      for (const auto pass : {plan::ConvClass::forward, plan::ConvClass::backward_input,
                              plan::ConvClass::backward_weight}) {
        const bool weight_pass = pass == plan::ConvClass::backward_weight;
        for (const double gap : {forced_pass_gap<float>(check, candidate, pass),
                                 forced_pass_gap<double>(check, candidate, pass)}) {
          if (gap < 0) continue;
          CHECK(gap < 1e-4);
          ++ran;
        }
        // bfloat16 results are rounded once (a weight gradient's sums are not).
        const double bf16_gap = forced_pass_gap<meshtensor::bfloat16>(exact, candidate, pass);
        if (bf16_gap < 0) continue;
        CHECK(bf16_gap < (weight_pass ? 1e-4 : 4e-3));
        ++ran;
      }
    }
    CHECK((ran > 0) == runs_here(name));
  }
  const Setting unknown("MESHTENSOR_CONV_KERNEL", "fastest");
  const ConvCheck check(conv_cases().front());
  std::vector<float> y(check.out_n);
  CHECK_THROWS_WITH(
      meshtensor::kernels::conv_forward(check.g, check.x.data(), check.w.data(), y.data()),
      Catch::Matchers::Contains(
          "MESHTENSOR_CONV_KERNEL=fastest: no such kernel; expected auto or one of "
          "onednn_bf16, rows, pointwise, widened, onednn, blocked, reference"));
}

TEST_CASE("a stride-1 convolution's input gradient is the forward convolution of flipped weights") {
  int stride_one = 0;
  for (const auto& c : conv_cases()) {
    const ConvCheck check(c);
    const auto f = input_gradient_as_forward(check.g);
    const bool strided = c.stride != std::array<std::int64_t, 3>{1, 1, 1};
    CHECK(f.has_value() == (!c.transposed && !strided));
    if (!f) continue;
    ++stride_one;
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out);
    CHECK((f->in == check.g.out && f->out == check.g.in && f->c_in == c.c_out));
    std::vector<float> flipped(check.w.size()), dx(check.in_n);
    flip_weights(check.g, check.w.data(), flipped.data());
    reference::conv_forward(*f, check.dy.data(), flipped.data(), dx.data());
    CHECK(relative_gap(widen(check.dx_ref), widen(dx)) < 1e-5);
  }
  CHECK(stride_one >= 5);
}

// Shapes the row kernels take: rows of at least a vector, 8 output channels a tile (or 16: two).
struct RowCase {
  Case c;
  bool input_gradient;  // whether the input gradient runs on them too (stride 1, c_in in eights)
};

const std::vector<RowCase> row_cases{
    // 'same' padding as the U-Net's, batch 2, rows that are not whole vectors
    {{{5, 4, 37}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, 8, 8, false, false, 1}, true},
    {{{4, 5, 33}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 1, 8, false, false, 1}, false},  // first
    {{{3, 3, 40}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 24, 8, false, false, 1}, true},  // decoder
    {{{3, 4, 64}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 16, false, false, 1}, true},
    {{{4, 6, 20}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 16, 8, false, false, 1, true}, true},
    {{{4, 4, 19}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, 1, 8, 8, false, false, 2}, true},  // dilated
    {{{3, 4, 18}, {3, 2, 3}, {2, 1, 1}, {1, 2, 1}, 2, 4, 8, false}, false},  // strided, no padding
    {{{4, 3, 17}, {1, 3, 2}, {1, 1, 1}, {1, 1, 1}, 1, 8, 8, false}, true},   // one and two taps
    {{{3, 3, 22}, {3, 3, 3}, {2, 1, 1}, {1, 2, 1}, 2, 1, 8, false}, false},  // first, strided
    // more rows than one weight-gradient block holds (64 at 128 KiB; 16 in 32 KiB)
    {{{2, 70, 64}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 8, 8, false, false, 1}, true},
};

// The ways this build's bfloat16 row kernels multiply: float products always, AVX512_BF16's dot
// products where it has them.
std::vector<rows::Bf16Products> bf16_products_built() {
  if (rows::bf16_dot_products_available())
    return {rows::Bf16Products::widened, rows::Bf16Products::dot};
  return {rows::Bf16Products::widened};
}

// The instruction sets whose form of the row kernels this program runs on this CPU
// (cpu/instruction_set.hpp): one where built for the building machine, each the CPU has where
// built for any x86-64 (test_kernels_any_cpu).
std::vector<cpu::InstructionSet> row_kernel_forms() {
  std::vector<cpu::InstructionSet> forms;
  for (const auto set :
       {cpu::InstructionSet::avx512_bf16, cpu::InstructionSet::avx512, cpu::InstructionSet::avx2}) {
    const cpu::InstructionSet form = cpu::form_within(std::min(set, cpu::cpu_instruction_set()));
    if (form != cpu::InstructionSet::baseline &&
        std::find(forms.begin(), forms.end(), form) == forms.end())
      forms.push_back(form);
  }
  return forms;
}

void check_row_kernels();

namespace {
// The peak of what the calling thread's processor holds while it runs one pass of `check` on T,
// the input whole or in two parts; run on a fresh processor computing on `device` (a plan's
// holds what the call states, a CPU's what it takes).
template <class T>
std::size_t call_peak(const ConvCheck& check, plan::ConvClass::Pass pass, bool in_parts,
                      const meshtensor::Device& device) {
  const meshtensor::LocalProcessor local(device, meshtensor::current_processor().settings());
  const ConvGeometry& g = check.g;
  const auto as_t = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> x = as_t(check.x), w = as_t(check.w), dy = as_t(check.dy);
  std::vector<T> y(check.out_n), dx(check.in_n);
  std::vector<double> dw(check.w_n, 0.0);
  ChannelParts<const T> parts;
  parts.add(x.data(), g.c_in / 2);
  parts.add(x.data() + check.in_n / 2, g.c_in - g.c_in / 2);  // (the values do not matter)
  switch (pass) {
    case plan::ConvClass::forward:
      if (in_parts)
        meshtensor::kernels::conv_forward(g, parts, w.data(), y.data());
      else
        meshtensor::kernels::conv_forward(g, x.data(), w.data(), y.data());
      break;
    case plan::ConvClass::backward_input:
      meshtensor::kernels::conv_backward_input(g, dy.data(), w.data(), dx.data());
      break;
    default:
      if (in_parts)
        meshtensor::kernels::conv_backward_weight(g, parts, dy.data(), dw.data());
      else
        meshtensor::kernels::conv_backward_weight(g, x.data(), dy.data(), dw.data());
  }
  return meshtensor::memory_stats().peak_in_use;
}

// Whether the row kernels run that call here; then whether a plan of it holds what it takes.
template <class T>
int checked_workspace(const ConvCheck& check, plan::ConvClass::Pass pass, bool in_parts) {
  const ConvGeometry& g = check.g;
  ConvProblem p = meshtensor::kernels::detail::whole_problem(g, pass, element_of<T>());
  if (in_parts) p.parts = {g.c_in / 2, g.c_in - g.c_in / 2};
  if (!RowsConv::supports(p)) return 0;
  INFO((in_parts ? "in parts, " : "")
       << "pass " << int(pass) << " on " << (std::is_same_v<T, float> ? "float" : "bfloat16"));
  CHECK(call_peak<T>(check, pass, in_parts, meshtensor::Device::plan()) ==
        call_peak<T>(check, pass, in_parts, meshtensor::Device::cpu()));
  return 1;
}
}  // namespace

TEST_CASE("a plan holds what the row kernels take of the processor's memory for a call") {
  if (!rows::available()) {
    WARN("skipped: this CPU has neither AVX2 nor AVX-512, so the row kernels never run");
    return;
  }
  const Setting forced("MESHTENSOR_CONV_KERNEL", "rows");
  for (const cpu::InstructionSet form : row_kernel_forms()) {
    const Setting cap("MESHTENSOR_MAX_CPU_ISA", cpu::name_of(form).c_str());
    INFO("the " << cpu::name_of(form) << " form");
    int checked = 0;
    for (const RowCase& rc : row_cases) {
      const ConvCheck check(rc.c);
      INFO("out " << rc.c.out[0] << "x" << rc.c.out[1] << "x" << rc.c.out[2] << ", " << rc.c.c_in
                  << " -> " << rc.c.c_out);
      for (const auto pass : {plan::ConvClass::forward, plan::ConvClass::backward_input,
                              plan::ConvClass::backward_weight})
        for (const bool in_parts : {false, true}) {
          if (in_parts && (pass == plan::ConvClass::backward_input || check.g.c_in < 2)) continue;
          checked += checked_workspace<float>(check, pass, in_parts);
          checked += checked_workspace<meshtensor::bfloat16>(check, pass, in_parts);
        }
    }
    CHECK(checked > 0);
  }
}

TEST_CASE("row kernels agree with the reference loops on the shapes they take") {
  if (!rows::available()) {
    WARN("skipped: this CPU has neither AVX2 nor AVX-512, so the row kernels never run");
    return;
  }
  for (const cpu::InstructionSet form : row_kernel_forms()) {
    const Setting cap("MESHTENSOR_MAX_CPU_ISA", cpu::name_of(form).c_str());
    INFO("the " << cpu::name_of(form) << " form");
    REQUIRE(rows::instruction_set() == form);
    check_row_kernels();
  }
  // Capped below every form, no row kernel runs.
  const Setting baseline("MESHTENSOR_MAX_CPU_ISA", "baseline");
  CHECK_FALSE(rows::available());
  CHECK_FALSE(rows::takes(geometry(row_cases[0].c)));
}

void check_row_kernels() {
  int one_channel_cases = 0, bf16_dot_cases = 0, bf16_float_cases = 0, bf16_first_layer_cases = 0;
  for (const RowCase& rc : row_cases) {
    const ConvCheck check(rc.c);
    const ConvGeometry& g = check.g;
    INFO("out " << rc.c.out[0] << "x" << rc.c.out[1] << "x" << rc.c.out[2] << ", " << rc.c.c_in
                << " -> " << rc.c.c_out);
    REQUIRE(rows::takes(g));
    REQUIRE(rows::fits_forward(g) == (g.c_out == 8 || g.c_in < 8));
    REQUIRE(rows::fits_backward_weight(g) == (g.kernel[2] <= 3));
    REQUIRE(rows::fits_backward_input(g) == rc.input_gradient);
    std::vector<double> dw(check.w_n, 0.0);
    rows::conv_backward_weight(g, check.x.data(), check.dy.data(), dw.data());
    CHECK(relative_gap(check.dw_ref, dw) < 1e-5);
    // The bfloat16 forms on values a bfloat16 holds, in each way this build multiplies. In dot
    // products (AVX512_BF16): the weight gradient the float kernel's products exactly, summed in
    // float; forward and input gradient summed in float, each output rounded once. In float
    // products: every pass the float kernel's on the widened values, bit for bit, rounded once.
    const ConvCheck exact(rc.c, true);
    const std::vector<meshtensor::bfloat16> x(exact.x.begin(), exact.x.end()),
        dy(exact.dy.begin(), exact.dy.end()), w(exact.w.begin(), exact.w.end());
    const auto widened = [](const std::vector<meshtensor::bfloat16>& v) {
      return widen(std::vector<float>(v.begin(), v.end()));
    };
    const auto rounded_alike = [](const std::vector<float>& want,
                                  const std::vector<meshtensor::bfloat16>& got) {
      return std::equal(want.begin(), want.end(), got.begin(), [](float a, meshtensor::bfloat16 b) {
        return meshtensor::bfloat16(a).bits == b.bits;
      });
    };
    REQUIRE(rows::fits_forward_bf16(g) == rows::fits_forward(g));
    REQUIRE(rows::fits_backward_input_bf16(g) == rows::fits_backward_input(g));
    for (const rows::Bf16Products products : bf16_products_built()) {
      const bool dot = products == rows::Bf16Products::dot;
      INFO((dot ? "dot" : "float") << " products");
      int& cases = dot ? bf16_dot_cases : bf16_float_cases;
      REQUIRE(rows::fits_backward_weight_bf16(g, products));
      ++cases;
      std::vector<double> dw_bf16(check.w_n, 0.0), dw_float(check.w_n, 0.0);
      rows::conv_backward_weight(g, x.data(), dy.data(), dw_bf16.data(), products);
      CHECK(relative_gap(exact.dw_ref, dw_bf16) < 1e-5);
      {
        // Bands follow the bytes a raw row takes (a bfloat16 row half a float's) and the sums
        // follow the bands: compared on the same bands (with a 1 MiB second-level cache the two
        // cut this case's 70 rows differently).
        const Setting same_bands("MESHTENSOR_ROW_BANDS", "off");
        std::fill(dw_bf16.begin(), dw_bf16.end(), 0.0);
        rows::conv_backward_weight(g, x.data(), dy.data(), dw_bf16.data(), products);
        rows::conv_backward_weight(g, ChannelParts<const float>(exact.x.data(), g.c_in),
                                   exact.dy.data(), dw_float.data());
      }
      if (!dot) CHECK(dw_bf16 == dw_float);
      if (rows::fits_forward_bf16(g) && (!dot || g.c_in % 2 == 0)) {
        ++cases;
        std::vector<meshtensor::bfloat16> y(check.out_n);
        std::vector<float> y_float(check.out_n);
        rows::conv_forward(g, x.data(), w.data(), y.data(), rows::OutputStores::by_size, products);
        CHECK(relative_gap(widen(exact.y_ref), widened(y)) < 4e-3);
        rows::conv_forward(g, ChannelParts<const float>(exact.x.data(), g.c_in), exact.w.data(),
                           ChannelParts<float>(y_float.data(), g.c_out));
        if (!dot) CHECK(rounded_alike(y_float, y));
      }
      if (rows::fits_backward_input_bf16(g) && (!dot || g.c_out % 2 == 0)) {
        ++cases;
        std::vector<meshtensor::bfloat16> dx(check.in_n);
        std::vector<float> dx_float(check.in_n);
        rows::conv_backward_input(g, dy.data(), w.data(), dx.data(), rows::OutputStores::by_size,
                                  products);
        CHECK(relative_gap(widen(exact.dx_ref), widened(dx)) < 4e-3);
        rows::conv_backward_input(g, exact.dy.data(), exact.w.data(),
                                  ChannelParts<float>(dx_float.data(), g.c_in));
        if (!dot) CHECK(rounded_alike(dx_float, dx));
      }
    }
    // The first layer's kernel reading the output gradient channels last, called directly.
    if (rows::fits_one_channel_weight(g)) {
      ++one_channel_cases;
      std::vector<double> dw_one(check.w_n, 0.0);
      rows::conv_backward_weight_one_channel(g, check.x.data(), check.dy.data(), dw_one.data());
      CHECK(relative_gap(check.dw_ref, dw_one) < 1e-5);
    }
    // The first layer's forward pass channels last (it runs where 256-bit vectors are the widest
    // or as fast as 512-bit ones), called directly, through the cache and around it.
    if (rows::fits_one_channel_forward(g)) {
      ++one_channel_cases;
      for (const bool around_cache : {false, true}) {
        meshtensor::Buffer<float> y(check.out_n, -1.0f);
        rows::conv_forward_one_channel(g, check.x.data(), check.w.data(), y.data(), around_cache);
        rows::stream_fence();
        CHECK(relative_gap(widen(check.y_ref), widen(std::vector<float>(y.begin(), y.end()))) <
              1e-5);
      }
      // Its bfloat16 form: the float kernel's sums on the same (bfloat16) values, each rounded.
      if (rows::fits_one_channel_forward_bf16(g)) {
        ++bf16_first_layer_cases;
        const ConvCheck exact(rc.c, true);
        meshtensor::Buffer<float> y(check.out_n);
        rows::conv_forward_one_channel(g, exact.x.data(), exact.w.data(), y.data(), false);
        const std::vector<meshtensor::bfloat16> x(exact.x.begin(), exact.x.end()),
            w(exact.w.begin(), exact.w.end());
        for (const bool around_cache : {false, true}) {
          std::vector<meshtensor::bfloat16> y_bf16(check.out_n);
          rows::conv_forward_one_channel(g, x.data(), w.data(), y_bf16.data(), around_cache);
          rows::stream_fence();
          CHECK(std::equal(y.begin(), y.end(), y_bf16.begin(), [](float a, meshtensor::bfloat16 b) {
            return meshtensor::bfloat16(a).bits == b.bits;
          }));
        }
      }
    }
    // Outputs written through the cache and around it (streamed, where a vector is aligned: the
    // buffers are, and so is every other row here).
    for (const auto stores :
         {rows::OutputStores::through_cache, rows::OutputStores::around_cache}) {
      INFO((stores == rows::OutputStores::around_cache ? "around" : "through") << " the cache");
      meshtensor::Buffer<float> y(check.out_n, -1.0f), dx(check.in_n, -1.0f);
      rows::conv_forward(g, check.x.data(), check.w.data(), y.data(), stores);
      CHECK(relative_gap(widen(check.y_ref), widen(std::vector<float>(y.begin(), y.end()))) < 1e-5);
      if (rc.input_gradient) {
        rows::conv_backward_input(g, check.dy.data(), check.w.data(), dx.data(), stores);
        CHECK(relative_gap(widen(check.dx_ref), widen(std::vector<float>(dx.begin(), dx.end()))) <
              1e-5);
      }
    }
    CHECK_FALSE(rows::writes_around_cache(g, rows::OutputStores::by_size));  // small outputs
  }
  // bfloat16: every case's weight gradient; in float products the forward pass of the 9 the
  // float kernel runs, in dot products of the 7 of those with input channels in pairs; the input
  // gradient of the 7 that have one.
  CHECK(bf16_float_cases == int(row_cases.size()) + 9 + 7);
  CHECK(bf16_dot_cases ==
        (rows::bf16_dot_products_available() ? int(row_cases.size()) + 7 + 7 : 0));
  // Two shapes fit each of the first layer's two kernels (odd rows, strides, dilation).
  CHECK(one_channel_cases == 2 * 2 * int{rows::available()});
  CHECK(bf16_first_layer_cases ==
        (rows::fits_one_channel_forward_bf16(geometry(row_cases[1].c)) ? 2 : 0));
}

namespace {
// What the row kernels give on one case: each pass in float, and in bfloat16 in each way this
// build multiplies.
struct RowPasses {
  std::vector<float> y, dx;
  std::vector<double> dw;
  std::vector<std::vector<meshtensor::bfloat16>> y_bf16;
  std::vector<std::vector<double>> dw_bf16;
};

RowPasses row_passes(const RowCase& rc, const ConvCheck& check) {
  const ConvGeometry& g = check.g;
  RowPasses p{std::vector<float>(check.out_n),
              std::vector<float>(check.in_n),
              std::vector<double>(check.w_n, 0.0),
              {},
              {}};
  rows::conv_forward(g, check.x.data(), check.w.data(), p.y.data());
  if (rc.input_gradient) rows::conv_backward_input(g, check.dy.data(), check.w.data(), p.dx.data());
  rows::conv_backward_weight(g, check.x.data(), check.dy.data(), p.dw.data());
  const std::vector<meshtensor::bfloat16> x(check.x.begin(), check.x.end()),
      dy(check.dy.begin(), check.dy.end()), w(check.w.begin(), check.w.end());
  for (const rows::Bf16Products products : bf16_products_built()) {
    std::vector<meshtensor::bfloat16> y(check.out_n);
    if (products == rows::Bf16Products::widened || g.c_in % 2 == 0)
      rows::conv_forward(g, x.data(), w.data(), y.data(), rows::OutputStores::by_size, products);
    p.y_bf16.push_back(std::move(y));
    p.dw_bf16.emplace_back(check.w_n, 0.0);
    rows::conv_backward_weight(g, x.data(), dy.data(), p.dw_bf16.back().data(), products);
  }
  return p;
}
}  // namespace

// Planes too big for the second-level cache are taken in bands of rows, only the input rows a
// band reads turned (MESHTENSOR_ROW_BANDS=N forces bands of N rows): forward and input gradient
// sum the same products in the same order, bit for bit; the weight gradient's lane sums are cut
// at other rows, equal within float rounding.
TEST_CASE("row kernels in bands of rows give what they give on whole planes") {
  if (!rows::available()) {
    WARN("skipped: this CPU has neither AVX2 nor AVX-512, so the row kernels never run");
    return;
  }
  for (const RowCase& rc : row_cases) {
    const ConvCheck check(rc.c, true);
    INFO("out " << rc.c.out[0] << "x" << rc.c.out[1] << "x" << rc.c.out[2] << ", " << rc.c.c_in
                << " -> " << rc.c.c_out);
    RowPasses whole;
    {
      const Setting planes("MESHTENSOR_ROW_BANDS", "off");
      whole = row_passes(rc, check);
    }
    CHECK(relative_gap(check.dw_ref, whole.dw) < 1e-5);
    for (const char* band : {"1", "2", "3", "5"}) {
      INFO("bands of " << band << " rows");
      const Setting bands("MESHTENSOR_ROW_BANDS", band);
      const RowPasses banded = row_passes(rc, check);
      CHECK(banded.y == whole.y);
      CHECK(banded.dx == whole.dx);
      CHECK(relative_gap(whole.dw, banded.dw) < 1e-5);
      for (std::size_t k = 0; k < whole.y_bf16.size(); ++k) {
        CHECK(std::equal(
            whole.y_bf16[k].begin(), whole.y_bf16[k].end(), banded.y_bf16[k].begin(),
            [](meshtensor::bfloat16 a, meshtensor::bfloat16 b) { return a.bits == b.bits; }));
        CHECK(relative_gap(check.dw_ref, banded.dw_bf16[k]) < 1e-5);
      }
    }
  }
  // A knob that is neither auto, off nor a count of rows is refused, naming what would do.
  CHECK_THROWS_WITH(Setting("MESHTENSOR_ROW_BANDS", "half"),
                    Catch::Contains("MESHTENSOR_ROW_BANDS=half") &&
                        Catch::Contains("auto, off or a number of rows"));
}

namespace {
// A per-channel affine map with scales of both signs and shifts that put some values under the
// floor (a ReLU's 0, or none).
ChannelAffine test_affine(std::int64_t channels, double floor) {
  ChannelAffine f;
  f.floor = floor;
  for (std::int64_t c = 0; c < channels; ++c) {
    f.scale.push_back(std::cos(0.9 * double(c) + 0.2) * 1.7);
    f.shift.push_back(std::sin(1.3 * double(c)) * 0.4);
  }
  return f;
}

// x's positions written out through f as batch norm writes them (norm_affine).
template <class T>
std::vector<T> mapped(const ChannelAffine& f, const std::vector<T>& x) {
  std::vector<T> out(x.size());
  cpu::norm_affine(Sizes{std::int64_t(x.size()) / f.channels(), f.channels()}, Strides{0, 1},
                   f.channels(), x.data(), f.scale.data(), f.shift.data(), T(f.floor), out.data());
  return out;
}

template <class T>
void check_mapped_planes(std::int64_t c) {
  const std::int64_t n1 = 3, n2 = 37;  // rows through registers and a scalar tail
  const rows::RowFormat format{1, 48};
  std::vector<T> x(static_cast<std::size_t>(n1 * n2 * c));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = T(float(std::sin(0.37 * double(i))));
  for (const double floor : {0.0, -std::numeric_limits<double>::infinity()}) {
    const ChannelAffine f = test_affine(c, floor);
    const std::vector<T> written = mapped(f, x);
    std::vector<float> expected(static_cast<std::size_t>(n1 * c * format.width), -1.0f),
        got(expected);
    rows::to_planar(written.data(), n1, n2, c, format, expected.data());
    rows::to_planar(x.data(), n1, n2, c, format, got.data(), 0, &f);
    CHECK(got == expected);
    if constexpr (std::is_same_v<T, meshtensor::bfloat16>) {
      // Into bfloat16 planes (the dot products' weight gradient): the same values' bits.
      std::vector<T> expected_bf16(expected.size(), T(-1.0f)), got_bf16(expected_bf16);
      rows::to_planar(written.data(), n1, n2, c, format, expected_bf16.data());
      rows::to_planar(x.data(), n1, n2, c, format, got_bf16.data(), 0, &f);
      CHECK(std::equal(got_bf16.begin(), got_bf16.end(), expected_bf16.begin(),
                       [](T a, T b) { return a.bits == b.bits; }));
      if (c % 2 == 0) {
        // As channel pairs read as floats' bits (the dot products' forward pass), each half
        // mapped with its own channel's coefficients: the written pairs' bits.
        ChannelAffine pairs = f;
        pairs.bf16_pairs = true;
        const auto words = [](const std::vector<T>& v) {
          return reinterpret_cast<const float*>(v.data());
        };
        std::vector<float> expected_words(static_cast<std::size_t>(n1 * c / 2 * format.width)),
            got_words(expected_words.size());
        rows::to_planar(words(written), n1, n2, c / 2, format, expected_words.data());
        rows::to_planar(words(x), n1, n2, c / 2, format, got_words.data(), 0, &pairs);
        CHECK(std::memcmp(got_words.data(), expected_words.data(),
                          got_words.size() * sizeof(float)) == 0);
      }
    }
  }
}
}  // namespace

namespace {
// The row kernels' passes on T: bfloat16 in float products, the road that maps its parts.
template <class T>
void weight_gradient(const ConvGeometry& g, const ChannelParts<const T>& x, const T* dy,
                     double* dw) {
  if constexpr (std::is_same_v<T, float>)
    rows::conv_backward_weight(g, x, dy, dw);
  else
    rows::conv_backward_weight(g, x, dy, dw, rows::Bf16Products::widened);
}
template <class T>
void forward(const ConvGeometry& g, const ChannelParts<const T>& x, const T* w, T* y) {
  if constexpr (std::is_same_v<T, float>)
    rows::conv_forward(g, x, w, ChannelParts<T>(y, g.c_out));
  else
    rows::conv_forward(g, x, w, ChannelParts<T>(y, g.c_out), rows::OutputStores::by_size,
                       rows::Bf16Products::widened);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_mapped_parts(const ConvCheck& check) {
  const ConvGeometry& g = check.g;
  // The first part mapped, the rest (where there are two) as they are.
  const std::int64_t first = g.c_in > 1 ? g.c_in / 2 : 1, positions = check.in_n / g.c_in;
  std::vector<T> x0, x1;
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t ch = 0; ch < g.c_in; ++ch)
      (ch < first ? x0 : x1).push_back(T(check.x[std::size_t(p * g.c_in + ch)]));
  const std::vector<T> w(check.w.begin(), check.w.end()), dy(check.dy.begin(), check.dy.end());
  for (const char* bands : {"auto", "1"}) {
    const Setting setting("MESHTENSOR_ROW_BANDS", bands);
    const ChannelAffine f = test_affine(first, 0.0);
    const std::vector<T> written = mapped(f, x0);
    ChannelParts<const T> as_map, as_written;
    as_map.add(x0.data(), first, &f);
    as_written.add(written.data(), first);
    if (first < g.c_in) {
      as_map.add(x1.data(), g.c_in - first);
      as_written.add(x1.data(), g.c_in - first);
    }
    std::vector<double> from_map(check.w_n, 0.0), from_written(check.w_n, 0.0);
    weight_gradient(g, as_map, dy.data(), from_map.data());
    weight_gradient(g, as_written, dy.data(), from_written.data());
    CHECK(from_map == from_written);
    // Forward reads its input's planes the same way (a normalisation's output read by the
    // next convolution, never written out).
    std::vector<T> y_map(check.out_n), y_written(check.out_n);
    forward(g, as_map, w.data(), y_map.data());
    forward(g, as_written, w.data(), y_written.data());
    CHECK(same_bits(y_map, y_written));
    if constexpr (std::is_same_v<T, meshtensor::bfloat16>)
      if (rows::bf16_dot_products_available()) {
        // The dot products map as they turn: the weight gradient its bfloat16 planes (or pair
        // words), the forward pass the channel pairs it reads as floats' bits, half by half.
        const rows::Bf16Products dot = rows::Bf16Products::dot;
        REQUIRE(rows::fits_backward_weight_bf16(g, dot));
        std::vector<double> dot_map(check.w_n, 0.0), dot_written(check.w_n, 0.0);
        rows::conv_backward_weight(g, as_map, dy.data(), dot_map.data(), dot);
        rows::conv_backward_weight(g, as_written, dy.data(), dot_written.data(), dot);
        CHECK(dot_map == dot_written);
        if (rows::fits_forward_bf16(g)) {
          std::vector<T> dot_y_map(check.out_n), dot_y_written(check.out_n);
          rows::conv_forward(g, as_map, w.data(), ChannelParts<T>(dot_y_map.data(), g.c_out),
                             rows::OutputStores::by_size, dot);
          rows::conv_forward(g, as_written, w.data(),
                             ChannelParts<T>(dot_y_written.data(), g.c_out),
                             rows::OutputStores::by_size, dot);
          CHECK(same_bits(dot_y_map, dot_y_written));
        }
      }
  }
}
}  // namespace

// The weight gradient and forward read a part given as a per-channel affine map (batch norm's
// output, never written out) as if the map's values had been written out: the same turned planes,
// the same sums bit for bit, whole or as one part of a concatenation, in whole planes or bands;
// bfloat16 parts mapped and rounded as norm_affine writes them, read in float products.
TEST_CASE("row kernels read a part given as its affine map as the values it maps to") {
  if (!rows::available()) {
    WARN("skipped: this CPU has neither AVX2 nor AVX-512, so the row kernels never run");
    return;
  }
  for (const std::int64_t c : {1, 3, 6, 8, 16, 64}) {
    INFO(c << " channels");
    check_mapped_planes<float>(c);
    check_mapped_planes<meshtensor::bfloat16>(c);
  }
  for (const RowCase& rc : row_cases) {
    const ConvCheck check(rc.c);
    INFO("out " << rc.c.out[0] << "x" << rc.c.out[1] << "x" << rc.c.out[2] << ", " << check.g.c_in
                << " -> " << check.g.c_out);
    check_mapped_parts<float>(check);
    check_mapped_parts<meshtensor::bfloat16>(check);
  }
}

TEST_CASE("the bfloat16 weight gradient in dot products takes up to 16 channels on one side") {
  if (!rows::bf16_dot_products_available()) {
    WARN("skipped: this build has no AVX512_BF16, so the bfloat16 row kernels never run");
    return;
  }
  // 'same' padding, batch 2, rows that are not whole vectors of bfloat16 pairs; 16 -> 24 on the
  // planar kernel (output channels not in sixteens), the others with the output channels in lanes.
  const std::vector<Case> cases{
      {{4, 5, 37}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, 16, 16, false, false, 1},
      {{3, 4, 40}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 32, 16, false, false, 1},
      {{3, 3, 33}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 16, 24, false, false, 1}};
  for (const Case& c : cases) {
    const ConvCheck exact(c, true);
    INFO(c.c_in << " -> " << c.c_out);
    CHECK_FALSE(rows::takes(exact.g));
    REQUIRE(rows::fits_backward_weight_bf16(exact.g, rows::Bf16Products::dot));
    CHECK_FALSE(rows::fits_backward_weight_bf16(exact.g, rows::Bf16Products::widened));
    CHECK(rows::runs_channel_lanes_weight(exact.g) == (c.c_out % 16 == 0));
    const std::vector<meshtensor::bfloat16> x(exact.x.begin(), exact.x.end()),
        dy(exact.dy.begin(), exact.dy.end());
    std::vector<double> dw(exact.w_n, 0.0);
    rows::conv_backward_weight(exact.g, x.data(), dy.data(), dw.data(), rows::Bf16Products::dot);
    CHECK(relative_gap(exact.dw_ref, dw) < 1e-5);
  }
}

// Output channels in the lanes, pairs of positions in each dot product: odd rows (a last pair
// with one position), rows shorter than a vector (16^3's level), dilation, two taps along the
// rows, no padding, padding before only, a stride across planes, in bands of any rows and with
// the input in parts: the reference's sums (products exact, summed in float).
TEST_CASE("the bfloat16 weight gradient with output channels in lanes agrees with the reference") {
  if (!rows::bf16_dot_products_available()) {
    WARN("skipped: this build has no AVX512_BF16, so the bfloat16 row kernels never run");
    return;
  }
#if defined(__AVX512BF16__)  // (the kernel is built only there)
  const std::vector<Case> cases{
      {{4, 5, 37}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, 16, 16, false, false, 1},
      {{3, 3, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, 32, 32, false, false, 1},
      {{4, 4, 11}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, 1, 8, 16, false, false, 2},
      {{3, 4, 6}, {3, 3, 2}, {1, 1, 1}, {1, 1, 1}, 2, 16, 32, false},
      {{4, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2, 16, 16, false, false, 1, true},
      {{2, 3, 5}, {3, 3, 3}, {2, 1, 1}, {1, 1, 1}, 1, 8, 16, false, false, 1},
      {{3, 4, 8}, {1, 1, 3}, {1, 1, 1}, {1, 1, 1}, 1, 24, 48, false}};
  for (const Case& c : cases) {
    const ConvCheck exact(c, true);
    const ConvGeometry& g = exact.g;
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out);
    REQUIRE(rows::fits_channel_lanes_weight(g));
    const std::vector<meshtensor::bfloat16> x(exact.x.begin(), exact.x.end()),
        dy(exact.dy.begin(), exact.dy.end());
    std::vector<double> whole(exact.w_n, 0.0);
    rows::channel_lanes_backward_weight(g,
                                        ChannelParts<const meshtensor::bfloat16>(x.data(), c.c_in),
                                        dy.data(), whole.data(), g.out[1]);
    CHECK(relative_gap(exact.dw_ref, whole) < 1e-5);
    // The input as two parts (8 channels, then the rest), in bands of 1 and 2 rows: each band
    // turns only the rows it reads.
    std::vector<meshtensor::bfloat16> x0, x1;
    for (std::size_t i = 0; i < x.size(); ++i)
      (std::int64_t(i) % c.c_in < 8 ? x0 : x1).push_back(x[i]);
    ChannelParts<const meshtensor::bfloat16> parts;
    parts.add(x0.data(), 8);
    if (c.c_in > 8) parts.add(x1.data(), c.c_in - 8);
    for (const std::int64_t band : {std::int64_t{1}, std::int64_t{2}}) {
      std::vector<double> banded(exact.w_n, 0.0);
      rows::channel_lanes_backward_weight(g, parts, dy.data(), banded.data(), band);
      CHECK(relative_gap(exact.dw_ref, banded) < 1e-5);
    }
  }
  // Not taken: output channels not in sixteens, input channels not in eights, a stride along the
  // planes' rows, a cropped box before the rows.
  Case odd = cases.front();
  odd.c_out = 24;
  CHECK_FALSE(rows::fits_channel_lanes_weight(ConvCheck(odd).g));
  odd = cases.front();
  odd.c_in = 12;
  CHECK_FALSE(rows::fits_channel_lanes_weight(ConvCheck(odd).g));
  odd = cases.front();
  odd.stride = {1, 2, 1};
  CHECK_FALSE(rows::fits_channel_lanes_weight(ConvCheck(odd).g));
  ConvGeometry cropped = ConvCheck(cases.front()).g;
  cropped.taps[2].origin = 1;
  CHECK_FALSE(rows::fits_channel_lanes_weight(cropped));
#endif
}

TEST_CASE("row kernels turn down transposed convolutions, strided rows and short rows") {
  for (const auto& c : conv_cases()) {
    const ConvGeometry g = geometry(c);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", " << c.c_in << " -> "
                << c.c_out << (c.transposed ? " transposed" : ""));
    const int lanes = rows::instruction_set() >= cpu::InstructionSet::avx512 ? 16 : 8;
    const bool short_rows = g.out[2] < lanes;
    if (c.transposed || c.stride[2] > 1 || short_rows || !rows::available())
      CHECK_FALSE(rows::takes(g));
  }
  ConvGeometry many = geometry(row_cases.front().c);
  many.c_in = many.c_out = 16;  // the other kernels run faster there
  CHECK_FALSE(rows::fits_forward(many));
  ConvGeometry strided_rows = geometry(row_cases.front().c);  // one tap along rows, stride 2
  strided_rows.kernel[2] = 1;
  strided_rows.taps[2] = Taps{false, 0, 2, 1};
  strided_rows.in[2] = 2 * strided_rows.out[2];
  CHECK_FALSE(rows::takes(strided_rows));
}

#ifdef MESHTENSOR_WITH_ONEDNN
namespace {
struct PoolCase {
  std::array<std::int64_t, 3> out, kernel, stride;
  std::int64_t batch, channels;
  std::int64_t extra = 0;  // box positions beyond the last window: oneDNN cannot take those
};

std::vector<PoolCase> pool_cases() {
  return {
      {{8, 6, 4}, {2, 2, 2}, {2, 2, 2}, 1, 8},  // the U-Net's down-sampling
      {{3, 5, 4}, {2, 2, 2}, {2, 2, 2}, 2, 17},
      {{4, 3, 5}, {3, 3, 3}, {2, 2, 2}, 1, 16},  // overlapping windows
      {{5, 4, 3}, {3, 1, 2}, {1, 1, 2}, 3, 1},
      {{4, 4, 4}, {3, 3, 3}, {2, 2, 2}, 1, 8, 1},  // falls back to reference
  };
}

PoolGeometry pool_geometry(const PoolCase& c) {
  PoolGeometry g;
  g.batch = c.batch;
  g.channels = c.channels;
  g.out = c.out;
  g.kernel = c.kernel;
  for (int d = 0; d < 3; ++d) {
    g.taps[d] = Taps{false, 0, c.stride[d], 1};
    g.in[d] = (c.out[d] - 1) * c.stride[d] + c.kernel[d] + c.extra;
    g.inside_begin[d] = 0;
    g.inside_end[d] = g.in[d];
  }
  return g;
}

std::size_t pool_input_size(const PoolGeometry& g) {
  return std::size_t(g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels);
}
std::size_t pool_output_size(const PoolGeometry& g) {
  return std::size_t(g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels);
}

// Half the inputs are ReLU's zeros: many windows have several maxima. Values a bfloat16 holds.
std::vector<float> pool_inputs(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = float(meshtensor::bfloat16(std::max(0.0f, float(std::sin(0.7 * i + 0.3)))));
  return x;
}
std::vector<float> pool_gradients(std::size_t n) {
  std::vector<float> dy(n);
  for (std::size_t i = 0; i < n; ++i)
    dy[i] = float(meshtensor::bfloat16(float(std::sin(2.1 * i + 1))));
  return dy;
}

// The family's max and average pooling of `c` on T, forward and backward, against the reference
// loops on the same values; false where the forced `candidate` does not run it.
template <class T>
bool forced_pool_matches(const PoolCase& c, std::size_t candidate) {
  namespace k = meshtensor::kernels;
  const PoolGeometry g = pool_geometry(c);
  const std::size_t in_n = pool_input_size(g), out_n = pool_output_size(g);
  const std::vector<float> x = pool_inputs(in_n), dy = pool_gradients(out_n);
  const std::vector<T> xt(x.begin(), x.end()), dyt(dy.begin(), dy.end());
  const double rounding = std::is_same_v<T, meshtensor::bfloat16> ? 4e-3 : 1e-6;
  bool ran = false;
  if (PoolCandidates::supports(candidate,
                               k::detail::pool_problem<T>(g, PoolProblem::Kind::max, false))) {
    ran = true;
    REQUIRE(k::pool_kernel_name<T>(g, PoolProblem::Kind::max) == PoolCandidates::names[candidate]);
    std::vector<std::uint8_t> ws_ref(reference::max_pool_workspace_bytes(g)),
        ws(k::max_pool_workspace_bytes<T>(g));
    std::vector<float> y_ref(out_n), dx_ref(in_n, 7.0f);
    std::vector<T> y(out_n), dx(in_n, T(7.0f));
    reference::max_pool_forward(g, x.data(), y_ref.data(), ws_ref.data());
    reference::max_pool_backward(g, dy.data(), ws_ref.data(), dx_ref.data());
    k::max_pool_forward(g, xt.data(), y.data(), ws.data());
    k::max_pool_backward(g, dyt.data(), ws.data(), dx.data());
    CHECK(widen(y) == widen(y_ref));
    CHECK(relative_gap(widen(dx_ref), widen(dx)) < rounding);  // overlapping windows add
  }
  for (bool count_padding : {true, false}) {
    const PoolProblem p =
        k::detail::pool_problem<T>(g, PoolProblem::Kind::average, false, count_padding);
    if (!PoolCandidates::supports(candidate, p)) continue;
    ran = true;
    std::vector<float> a_ref(out_n), da_ref(in_n, 7.0f);
    std::vector<T> a(out_n), da(in_n, T(7.0f));
    reference::avg_pool_forward(g, x.data(), a_ref.data(), count_padding);
    reference::avg_pool_backward(g, dy.data(), da_ref.data(), count_padding);
    k::avg_pool_forward(g, xt.data(), a.data(), count_padding);
    k::avg_pool_backward(g, dyt.data(), da.data(), count_padding);
    CHECK(relative_gap(widen(a_ref), widen(a)) < rounding);
    CHECK(relative_gap(widen(da_ref), widen(da)) < rounding);
  }
  return ran;
}
}  // namespace

TEST_CASE("each pooling candidate, forced, pools as the reference loops do") {
  for (std::size_t candidate = 0; candidate < PoolCandidates::size; ++candidate) {
    const std::string name(PoolCandidates::names[candidate]);
    INFO("the " << name << " candidate");
    const Setting forced("MESHTENSOR_POOL_KERNEL", name.c_str());
    int ran = 0;
    for (const PoolCase& c : pool_cases()) {
      INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", kernel " << c.kernel[0]
                  << "x" << c.kernel[1] << "x" << c.kernel[2] << ", " << c.channels << " channels");
      ran += forced_pool_matches<float>(c, candidate);
      ran += forced_pool_matches<double>(c, candidate);
      ran += forced_pool_matches<meshtensor::bfloat16>(c, candidate);
    }
    const bool expected = name == "reference" || name == "widened" ||
                          (name == "pair" && !reference_kernels) ||
                          (name == "onednn" && onednn_kernels);
    CHECK((ran > 0) == expected);
  }
}

TEST_CASE("oneDNN and reference pooling kernels agree, ties included") {
  for (const auto& c : pool_cases()) {
    const PoolGeometry g = pool_geometry(c);
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", kernel " << c.kernel[0]
                << "x" << c.kernel[1] << "x" << c.kernel[2] << ", " << c.channels << " channels");
    CHECK(onednn::detail::supported(g) == (c.extra == 0));
    const std::size_t in_n = pool_input_size(g), out_n = pool_output_size(g);
    const std::vector<float> x = pool_inputs(in_n), dy = pool_gradients(out_n);

    std::vector<std::uint8_t> ws_ref(reference::max_pool_workspace_bytes(g)),
        ws(onednn::max_pool_workspace_bytes<float>(g));
    if (c.extra == 0) CHECK(ws.size() * 8 <= ws_ref.size());  // a byte per output, not eight
    std::vector<float> y_ref(out_n), y(out_n), dx_ref(in_n, 7.0f), dx(in_n, 7.0f);
    reference::max_pool_forward(g, x.data(), y_ref.data(), ws_ref.data());
    reference::max_pool_backward(g, dy.data(), ws_ref.data(), dx_ref.data());
    onednn::max_pool_forward(g, x.data(), y.data(), ws.data());
    onednn::max_pool_backward(g, dy.data(), ws.data(), dx.data());
    CHECK(y == y_ref);
    CHECK(relative_gap(widen(dx_ref), widen(dx)) < 1e-6);

    for (bool count_padding : {true, false}) {
      std::vector<float> a_ref(out_n), a(out_n), da_ref(in_n, 7.0f), da(in_n, 7.0f);
      reference::avg_pool_forward(g, x.data(), a_ref.data(), count_padding);
      reference::avg_pool_backward(g, dy.data(), da_ref.data(), count_padding);
      onednn::avg_pool_forward(g, x.data(), a.data(), count_padding);
      onednn::avg_pool_backward(g, dy.data(), da.data(), count_padding);
      CHECK(relative_gap(widen(a_ref), widen(a)) < 1e-6);
      CHECK(relative_gap(widen(da_ref), widen(da)) < 1e-6);
    }
  }
}
#endif

TEST_CASE("2 x 2 x 2 max pooling at stride 2 gives the reference kernels' results bit for bit") {
  struct Case {
    std::array<std::int64_t, 3> out;
    std::int64_t batch, channels;
  };
  const std::vector<Case> cases{{{8, 6, 4}, 1, 8},
                                {{3, 5, 4}, 2, 17},
                                {{4, 4, 2}, 1, 16},
                                {{2, 3, 4}, 2, 32},
                                {{1, 1, 1}, 1, 1}};
  for (const auto& c : cases) {
    PoolGeometry g;
    g.batch = c.batch;
    g.channels = c.channels;
    g.out = c.out;
    g.kernel = {2, 2, 2};
    for (int d = 0; d < 3; ++d) {
      g.taps[d] = Taps{false, 0, 2, 1};
      g.in[d] = 2 * c.out[d];
      g.inside_end[d] = g.in[d];
    }
    INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", batch " << c.batch << ", "
                << c.channels << " channels");
    REQUIRE(cpu::pair_pool_fits(g));
    const std::size_t in_n = g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
    const std::size_t out_n = g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
    // Half the inputs are ReLU's zeros (windows with several maxima), one a NaN.
    std::vector<float> x(in_n), dy(out_n);
    for (std::size_t i = 0; i < in_n; ++i) x[i] = std::max(0.0f, float(std::sin(0.7 * i + 0.3)));
    x[in_n / 2] = std::nanf("");
    for (std::size_t i = 0; i < out_n; ++i) dy[i] = float(std::sin(2.1 * i + 1));
    const auto check = [&](const auto& input, const auto& grad_output) {
      using T = typename std::decay_t<decltype(input)>::value_type;
      std::vector<std::uint8_t> ws_ref(reference::max_pool_workspace_bytes(g)),
          ws(cpu::pair_pool_workspace_bytes(g));  // a byte per output
      std::vector<T> y_ref(out_n), y(out_n), dx_ref(in_n, T(7.0f)), dx(in_n, T(7.0f));
      reference::max_pool_forward(g, input.data(), y_ref.data(), ws_ref.data());
      reference::max_pool_backward(g, grad_output.data(), ws_ref.data(), dx_ref.data());
      cpu::pair_max_pool_forward(g, input.data(), y.data(), ws.data());
      cpu::pair_max_pool_backward(g, grad_output.data(), ws.data(), dx.data());
      const auto bits = [](const std::vector<T>& v) {
        std::vector<float> wide(v.begin(), v.end());
        std::vector<std::uint32_t> out(wide.size());
        std::memcpy(out.data(), wide.data(), wide.size() * sizeof(float));
        return out;
      };
      CHECK(bits(y) == bits(y_ref));
      CHECK(bits(dx) == bits(dx_ref));
    };
    check(x, dy);
    check(std::vector<meshtensor::bfloat16>(x.begin(), x.end()),
          std::vector<meshtensor::bfloat16>(dy.begin(), dy.end()));
  }
  PoolGeometry overlapping;
  overlapping.kernel = {3, 3, 3};
  overlapping.in = {5, 5, 5};
  overlapping.out = {2, 2, 2};
  for (auto& t : overlapping.taps) t.stride = 2;
  CHECK_FALSE(cpu::pair_pool_fits(overlapping));
}

namespace {

// Whether rows of parts of `widths` joined side by side hold each part's rows, and split back
// (the second part skipped, a gradient no one needs) give the first and last parts again.
bool joins_and_splits(std::int64_t rows, const std::vector<std::int64_t>& widths) {
  std::vector<std::vector<float>> parts;
  std::vector<cpu::RowsPart<const float>> pieces;
  std::int64_t width = 0;
  for (std::size_t p = 0; p < widths.size(); ++p) {
    parts.emplace_back(std::size_t(rows * widths[p]));
    for (std::size_t i = 0; i < parts[p].size(); ++i) parts[p][i] = float(1000 * p + i % 4096);
    pieces.push_back({parts[p].data(), widths[p]});
    width += widths[p];
  }
  std::vector<float> joined(std::size_t(rows * width));
  cpu::join_rows(rows, pieces, joined.data());
  bool right = true;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t at = r * width;
    for (std::size_t p = 0; p < widths.size(); ++p)
      for (std::int64_t j = 0; j < widths[p]; ++j)
        right = right && joined[std::size_t(at++)] == parts[p][std::size_t(r * widths[p] + j)];
  }
  std::vector<std::vector<float>> back;
  std::vector<cpu::RowsPart<float>> out;
  for (std::size_t p = 0; p < widths.size(); ++p) {
    back.emplace_back(p == 1 ? 0 : parts[p].size());
    out.push_back({p == 1 ? nullptr : back[p].data(), widths[p]});
  }
  cpu::split_rows<float>(rows, joined.data(), out);
  for (std::size_t p = 0; p < widths.size(); ++p) right = right && (p == 1 || back[p] == parts[p]);
  return right;
}

}  // namespace

TEST_CASE("rows joined side by side and split apart again are the parts' rows") {
  // Many short rows (a concatenation of channels: one pass over them), a single row (each part's
  // copy on all threads) and long rows.
  for (const std::int64_t rows : {1, 3, 5000}) {
    INFO(rows << " rows of 8 + 3 + 16");
    CHECK(joins_and_splits(rows, {8, 3, 16}));
  }
  CHECK(joins_and_splits(64, {2000, 3, 5000}));
}

TEST_CASE("a row repeated over a block (a bias) and a block's sums per channel are exact") {
  for (const std::int64_t channels : {1, 3, 5, 8, 16, 48, 64}) {
    const std::int64_t positions = 1000 + channels;  // whole chunks of rows and a remainder
    INFO(channels << " channels, " << positions << " positions");
    std::vector<float> x(positions * channels), row(channels), out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * i));
    for (std::int64_t c = 0; c < channels; ++c) row[c] = float(c + 1);
    const Sizes sizes{positions, channels};
    const std::array<Strides, 3> bias_second{Strides{channels, 1}, Strides{0, 1},
                                             Strides{channels, 1}};
    const auto minus = [](float a, float b) { return a - b; };
    cpu::zip(minus, sizes, bias_second, x.data(), row.data(), out.data());
    bool exact = true;
    for (std::size_t i = 0; i < x.size(); ++i) exact = exact && out[i] == x[i] - row[i % channels];
    CHECK(exact);
    const std::array<Strides, 3> bias_first{Strides{0, 1}, Strides{channels, 1},
                                            Strides{channels, 1}};
    cpu::zip(minus, sizes, bias_first, row.data(), x.data(), out.data());
    for (std::size_t i = 0; i < x.size(); ++i) exact = exact && out[i] == row[i % channels] - x[i];
    CHECK(exact);
    // The gradient of such a bias: each channel summed over the positions, in double.
    FoldOperand<float> operand{x.data(), {1}, {channels}};
    std::vector<double> sums(channels), expected(channels, 0.0);
    reference::parallel_sum<double, float, 1>({channels}, {positions}, {operand}, sums.data(), 2);
    for (std::size_t i = 0; i < x.size(); ++i) expected[i % channels] += x[i];
    CHECK(relative_gap(expected, sums) < 1e-12);
  }
}

TEST_CASE("a value per row repeated along it (a softmax's) and folds over short rows are exact") {
  for (const std::int64_t classes : {1, 3, 8}) {
    const std::int64_t positions = 3000 + classes;
    INFO(classes << " classes, " << positions << " positions");
    std::vector<float> x(positions * classes), per_row(positions), out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.61 * i));
    for (std::int64_t p = 0; p < positions; ++p) per_row[p] = float(std::cos(0.3 * p));
    const Sizes sizes{positions, classes};
    const auto over = [](float a, float b) { return a / b; };
    cpu::zip(over, sizes, {Strides{classes, 1}, Strides{1, 0}, Strides{classes, 1}}, x.data(),
             per_row.data(), out.data());
    bool exact = true;
    for (std::size_t i = 0; i < x.size(); ++i)
      exact = exact && out[i] == x[i] / per_row[i / classes];
    CHECK(exact);
    cpu::zip(over, sizes, {Strides{1, 0}, Strides{classes, 1}, Strides{classes, 1}}, per_row.data(),
             x.data(), out.data());
    for (std::size_t i = 0; i < x.size(); ++i)
      exact = exact && out[i] == per_row[i / classes] / x[i];
    CHECK(exact);
    // The sum and the maximum over each row's classes, in the order a plain loop takes.
    FoldOperand<float> operand{x.data(), {classes}, {1}};
    std::vector<float> sums(positions), largest(positions);
    reference::parallel_fold<float, float, 1>(
        {positions}, {classes}, {operand}, sums.data(), 0.0f,
        [](float a, float b) { return a + b; }, 2);
    reference::parallel_fold<float, float, 1>(
        {positions}, {classes}, {operand}, largest.data(), -1e30f,
        [](float a, float b) { return std::max(a, b); }, 2);
    for (std::int64_t p = 0; p < positions; ++p) {
      float sum = 0.0f, most = -1e30f;
      for (std::int64_t c = 0; c < classes; ++c) {
        sum += x[p * classes + c];
        most = std::max(most, x[p * classes + c]);
      }
      exact = exact && sums[p] == sum && largest[p] == most;
    }
    CHECK(exact);
  }
}

TEST_CASE("runs of a strided box visit every index once, however the threads cut them") {
  // Three operands: row-major, transposed in its last two dims (nothing merges with it), and
  // broadcast along the middle dim. Big enough to be cut among threads in the middle of rows.
  const Sizes sizes{3, 70, 500};
  const std::array<Strides, 3> strides{row_major_strides(sizes), Strides{35000, 1, 70},
                                       Strides{500, 0, 1}};
  for (const int threads : {1, 2, 3}) {
    std::vector<int> visits(num_elements(sizes), 0);
    std::vector<std::int64_t> second(num_elements(sizes), -1), third(num_elements(sizes), -1);
    parallel_for_each_run<3>(sizes, strides, threads,
                             [&](const std::array<std::int64_t, 3>& at, std::int64_t n,
                                 const std::array<std::int64_t, 3>& step) {
                               for (std::int64_t i = 0; i < n; ++i) {
                                 const std::int64_t flat = at[0] + i * step[0];
                                 ++visits[flat];
                                 second[flat] = at[1] + i * step[1];
                                 third[flat] = at[2] + i * step[2];
                               }
                             });
    std::int64_t wrong = 0, flat = 0;
    for (std::int64_t a = 0; a < sizes[0]; ++a)
      for (std::int64_t b = 0; b < sizes[1]; ++b)
        for (std::int64_t c = 0; c < sizes[2]; ++c, ++flat)
          wrong += visits[flat] != 1 || second[flat] != a * 35000 + b + c * 70 ||
                   third[flat] != a * 500 + c;
    CHECK(wrong == 0);
  }
  // Contiguous operands merge into one run per thread.
  int runs = 0;
  parallel_for_each_run<1>({4, 8, 4096}, {row_major_strides({4, 8, 4096})}, 1,
                           [&](const std::array<std::int64_t, 1>&, std::int64_t n,
                               const std::array<std::int64_t, 1>& step) {
                             ++runs;
                             CHECK(n == 4 * 8 * 4096);
                             CHECK(step[0] == 1);
                           });
  CHECK(runs == 1);
}

TEST_CASE("a loop is shared among threads by the elements it covers, not by its indices") {
  // A normalisation's rows of channels: a 32^3 block of 16 channels is 2^15 rows but 2^19
  // elements, enough for two threads (counted as rows, it ran on one).
  CHECK(threads_paid_for(1 << 15, std::int64_t(1) << 19, 2) == 2);
  CHECK(threads_paid_for(1 << 15, 1 << 15, 2) == 1);
  CHECK(threads_paid_for(1, std::int64_t(1) << 30, 8) == 1);  // one index: nothing to split
  CHECK(threads_paid_for(1 << 20, 1 << 20, 8) == 8);
  const auto nothing = [](int, const Sizes&, const std::array<std::int64_t, 1>&) {};
  CHECK(for_each_part<1>({1 << 15}, {Strides{1}}, 2, nothing, 16) == 2);
  CHECK(for_each_part<1>({1 << 15}, {Strides{1}}, 2, nothing) == 1);
  // Ranges cover [0, n) once, in order, however many threads they are paid for.
  for (const std::int64_t n : {std::int64_t(0), std::int64_t(7), std::int64_t(100003)}) {
    std::vector<int> visits(static_cast<std::size_t>(n), 0);
    parallel_for_ranges(n, 3, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) ++visits[static_cast<std::size_t>(i)];
    });
    CHECK(std::count(visits.begin(), visits.end(), 1) == n);
    // for_each_range: each part once, numbered below the count it returns, the parts in order.
    std::vector<std::int64_t> starts(3, -1), ends(3, -1);
    const int parts = for_each_range(
        n, 3,
        [&](int p, std::int64_t begin, std::int64_t end) {
          starts[std::size_t(p)] = begin;
          ends[std::size_t(p)] = end;
        },
        16);
    CHECK(parts == (n == 100003 ? 3 : 1));
    CHECK(starts[0] == 0);
    CHECK(ends[std::size_t(parts - 1)] == n);
    for (int p = 1; p < parts; ++p) CHECK(starts[std::size_t(p)] == ends[std::size_t(p - 1)]);
  }
}

TEST_CASE("the vector rates count operations a second, not one chain's latency") {
#if defined(__AVX512F__)
  namespace rate = meshtensor::kernels::detail;
  // One chain of multiply-adds, each waiting for the last (4 cycles on every AVX-512 core); twelve
  // independent ones issue at least one a cycle. A measurement the compiler had folded into one
  // chain read as this one, and chose Zen 4's bf16 kernels and weight blocks wrongly.
  const double one_chain =
      16 * rate::operation_rate([](long n) {
        __m512 acc = _mm512_setzero_ps();
        const __m512 x = rate::rate_operand();
        asm volatile("1:\n\tvfmadd231ps %[x], %[x], %[acc]\n\tdec %[n]\n\tjnz 1b"
                     : [n] "+r"(n), [acc] "+v"(acc)
                     : [x] "v"(x)
                     : "cc");
      }) /
      12;
  INFO("floats a second: twelve chains " << rate::wide_fma_rate() << ", one " << one_chain);
  CHECK(rate::wide_fma_rate() >= 2 * one_chain);
#else
  CHECK_FALSE(half_width_fma_at_full_rate());
  CHECK_FALSE(bf16_dot_products_pay());
#endif
}

TEST_CASE("a box moved to the front of the array that holds it keeps every element, in order") {
  // Boxes of a 5x6x7x3 array: inner, touching each end, whole along the inner dims (one run) or
  // not, and the whole array (nothing moves).
  const Sizes holder{5, 6, 7, 3};
  const Strides strides = row_major_strides(holder);
  for (const auto& [begin, sizes] :
       std::vector<std::pair<Sizes, Sizes>>{{{1, 1, 1, 0}, {3, 4, 5, 3}},
                                            {{0, 0, 0, 0}, {4, 5, 6, 3}},
                                            {{1, 2, 1, 1}, {4, 4, 6, 2}},
                                            {{2, 0, 0, 0}, {3, 6, 7, 3}},
                                            {{0, 3, 0, 0}, {5, 3, 7, 3}},
                                            {{0, 0, 0, 0}, {5, 6, 7, 3}}}) {
    std::vector<float> data(std::size_t(num_elements(holder)));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(i);
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < holder.size(); ++d) offset += begin[d] * strides[d];
    meshtensor::kernels::cpu::compact_box(sizes, data.data(), offset, strides);
    std::int64_t wrong = 0, flat = 0;
    for (std::int64_t a = 0; a < sizes[0]; ++a)
      for (std::int64_t b = 0; b < sizes[1]; ++b)
        for (std::int64_t c = 0; c < sizes[2]; ++c)
          for (std::int64_t e = 0; e < sizes[3]; ++e, ++flat)
            wrong += data[std::size_t(flat)] !=
                     float(offset + a * strides[0] + b * strides[1] + c * strides[2] + e);
    CHECK(wrong == 0);
  }
}

TEST_CASE("a box copied into every place of a wider one (a concatenation) lands whole") {
  // Rows of 1 to 40 elements (16, 32, 64 and 128 bytes among them) into rows of `width + 3`, at
  // column 2, for float and bfloat16; on 2 threads. Everything outside the box stays untouched.
  const auto check = [](auto zero) {
    using T = decltype(zero);
    int wrong = 0;
    for (std::int64_t width = 1; width <= 40; ++width) {
      const Sizes box{3, 5, width};
      const std::int64_t wide = width + 3;
      std::vector<T> from(std::size_t(15 * width)), to(std::size_t(15 * wide), T(-1.0f));
      for (std::size_t i = 0; i < from.size(); ++i) from[i] = T(float(i % 250));
      meshtensor::kernels::cpu::copy_box(box, from.data() + 0, row_major_strides(box),
                                         to.data() + 2, Strides{5 * wide, wide, 1});
      for (std::int64_t r = 0; r < 15; ++r)
        for (std::int64_t c = 0; c < wide; ++c) {
          const bool inside = c >= 2 && c < 2 + width;
          const float expected = inside ? float((r * width + c - 2) % 250) : -1.0f;
          wrong += float(to[std::size_t(r * wide + c)]) != expected;
        }
    }
    return wrong;
  };
  CHECK(check(0.0f) == 0);
  CHECK(check(meshtensor::bfloat16(0.0f)) == 0);
}

namespace {
// A normalisation's gradient sums on a channels-last block of `rows` rows of `keys` values,
// with and without the ReLU's mask, against double loops: within 1e-5 of the terms' magnitudes.
template <class T>
void check_gradient_sums(std::int64_t rows, std::int64_t keys) {
  const Sizes sizes{rows, keys};
  const Strides key_strides{0, 1};
  std::vector<T> g(std::size_t(rows * keys)), v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = T(float(std::sin(0.37 * double(i))));
    v[i] = T(float(2.0 * std::cos(0.11 * double(i)) + 0.25));
  }
  std::vector<double> scale(static_cast<std::size_t>(keys)), shift(scale.size());
  for (std::int64_t k = 0; k < keys; ++k) {
    scale[std::size_t(k)] = 0.5 + 0.1 * double(k % 5);
    shift[std::size_t(k)] = -0.2 + 0.05 * double(k % 3);
  }
  for (const bool relu : {false, true}) {
    INFO((relu ? "ReLU mask, " : "no mask, ") << rows << " rows of " << keys << " keys");
    const ReluMask<T> mask{relu ? v.data() : nullptr, scale.data(), shift.data()};
    const auto sums =
        cpu::norm_gradient_sums(sizes, key_strides, g.data(), v.data(), scale, shift, mask);
    std::vector<double> exact(std::size_t(2 * keys)), magnitude(exact.size());
    for (std::int64_t i = 0; i < rows * keys; ++i) {
      const std::size_t k = std::size_t(i % keys);
      const double x = double(float(v[std::size_t(i)]));
      const bool kept = !relu || float(scale[k]) * float(x) + float(shift[k]) > 0.0f;
      const double gm = kept ? double(float(g[std::size_t(i)])) : 0.0;
      const double t = gm * (scale[k] * x + shift[k]);
      exact[2 * k] += gm;
      exact[2 * k + 1] += t;
      magnitude[2 * k] += std::abs(gm);
      magnitude[2 * k + 1] += std::abs(t);
    }
    for (std::size_t j = 0; j < exact.size(); ++j)
      CHECK(std::abs(sums[j] - exact[j]) <= 1e-5 * magnitude[j] + 1e-9);
  }
}
}  // namespace

TEST_CASE("a normalisation's gradient sums per channel match double loops, in registers or not") {
  // Keys dividing 64 (the AVX-512 registers' sums where the CPU has them) and not; rows that end
  // inside a group of 64 values and inside a chunk.
  for (const std::int64_t keys : {8, 16, 64, 3, 24})
    for (const std::int64_t rows : {std::int64_t(1), std::int64_t(37), std::int64_t(5000 + 3)}) {
      check_gradient_sums<float>(rows, keys);
      check_gradient_sums<meshtensor::bfloat16>(rows, keys);
    }
}

namespace {
// A matrix product big enough for the kernels' blocking: x [b][m][k] (or [b][k][m] where
// `x_summed_first`) times y [b][k][n] (or [b][n][k]), row-major, as fold operands onto [b][m][n].
GemmOperands large_product(std::int64_t b, std::int64_t m, std::int64_t n, std::int64_t k,
                           bool x_summed_first, bool y_summed_last) {
  GemmOperands g;
  g.outer = {b, m, n};
  g.inner = {k};
  g.elements = {b * m * k, b * k * n};
  g.operands[0] = {nullptr, {m * k, x_summed_first ? 1 : k, 0}, {x_summed_first ? m : 1}};
  g.operands[1] = {nullptr, {k * n, 0, y_summed_last ? k : 1}, {y_summed_last ? 1 : n}};
  return g;
}

// The family's sum of g's products on T, into double sums or rounded to T, against the double fold
// of the same values; false where the forced `candidate` does not run it.
template <class T>
bool forced_products_match(const GemmOperands& g, std::size_t candidate, bool rounded) {
  namespace k = meshtensor::kernels;
  const auto x = zip_operand<T>(g.elements[0], 0.0), y = zip_operand<T>(g.elements[1], 1.0);
  const std::array<FoldOperand<T>, 2> operands{
      FoldOperand<T>{x.data(), g.operands[0].outer_strides, g.operands[0].inner_strides},
      FoldOperand<T>{y.data(), g.operands[1].outer_strides, g.operands[1].inner_strides}};
  if (!ProductCandidates::supports(candidate,
                                   ProductProblem<T>(g.outer, g.inner, operands, rounded)))
    return false;
  REQUIRE(k::product_kernel_name<T>(g.outer, g.inner, operands, rounded) ==
          ProductCandidates::names[candidate]);
  const std::size_t outputs = std::size_t(num_elements(g.outer));
  std::vector<double> want(outputs, 7.0), got(outputs, 7.0);
  parallel_sum<double, T, 2>(g.outer, g.inner, operands, want.data(), 1);
  if (rounded) {
    std::vector<T> result(outputs, T(7.0f));
    k::sum_rounded<T>(g.outer, g.inner, operands, result.data());
    got.assign(result.begin(), result.end());
  } else {
    k::sum<double, T, 2>(g.outer, g.inner, operands, got.data());
  }
  // Summed in float: each of the k terms (at most 1.02 in size) rounds once, at worst; then the
  // result's own rounding.
  const double terms = double(num_elements(g.inner));
  const double result_rounding = !rounded                                  ? 0.0
                                 : std::is_same_v<T, meshtensor::bfloat16> ? 4e-3
                                                                           : 6e-8;
  CHECK(sum_gap(got, want) < terms * 1.2e-7 + result_rounding);
  return true;
}
}  // namespace

namespace {
// The peak of what a fresh processor computing on `device` holds while it sums g's products on
// T, into double sums or rounded to T (a plan's holds what the call states, a CPU's what it takes).
template <class T>
std::size_t product_peak(const GemmOperands& g, bool rounded, const meshtensor::Device& device) {
  const meshtensor::LocalProcessor local(device, meshtensor::current_processor().settings());
  const std::vector<T> x(std::size_t(g.elements[0]), T(1)), y(std::size_t(g.elements[1]), T(1));
  const std::array<FoldOperand<T>, 2> operands{
      FoldOperand<T>{x.data(), g.operands[0].outer_strides, g.operands[0].inner_strides},
      FoldOperand<T>{y.data(), g.operands[1].outer_strides, g.operands[1].inner_strides}};
  std::vector<double> sums(std::size_t(num_elements(g.outer)));
  std::vector<T> result(sums.size());
  if (rounded)
    meshtensor::kernels::sum_rounded<T>(g.outer, g.inner, operands, result.data());
  else
    meshtensor::kernels::sum<double, T, 2>(g.outer, g.inner, operands, sums.data());
  return meshtensor::memory_stats().peak_in_use;
}
}  // namespace

TEST_CASE("a plan holds what each product candidate takes of the processor's memory") {
  std::vector<GemmOperands> cases{large_product(3, 67, 130, 259, true, false)};
  for (const GemmCase& c : gemm_cases()) cases.push_back(gemm_operands(c.einsum));
  for (std::size_t candidate = 0; candidate < ProductCandidates::size; ++candidate) {
    const std::string name(ProductCandidates::names[candidate]);
    const Setting forced("MESHTENSOR_SUM_KERNEL", name.c_str());
    INFO("the " << ProductCandidates::names[candidate] << " candidate");
    int holding = 0;  // calls that take memory
    for (const GemmOperands& g : cases)
      for (const bool rounded : {false, true}) {
        const std::size_t peak = product_peak<float>(g, rounded, meshtensor::Device::cpu());
        holding += peak > 0;
        CHECK(product_peak<float>(g, rounded, meshtensor::Device::plan()) == peak);
        CHECK(product_peak<meshtensor::bfloat16>(g, rounded, meshtensor::Device::plan()) ==
              product_peak<meshtensor::bfloat16>(g, rounded, meshtensor::Device::cpu()));
      }
    CHECK(holding > 0);
  }
}

TEST_CASE("each product candidate, forced, sums matrix products as the double fold does") {
  std::vector<std::pair<std::string, GemmOperands>> cases;
  for (const GemmCase& c : gemm_cases()) cases.emplace_back(c.einsum, gemm_operands(c.einsum));
  for (bool x_summed_first : {false, true})
    for (bool y_summed_last : {false, true})
      cases.emplace_back("3 x 67 x 130 x 259, transposed " + std::to_string(x_summed_first) +
                             std::to_string(y_summed_last),
                         large_product(3, 67, 130, 259, x_summed_first, y_summed_last));
  for (std::size_t candidate = 0; candidate < ProductCandidates::size; ++candidate) {
    const std::string name(ProductCandidates::names[candidate]);
    INFO("the " << name << " candidate");
    const Setting forced("MESHTENSOR_SUM_KERNEL", name.c_str());
    int ran = 0, gemms = 0, packs = 0;
    for (const auto& [label, g] : cases) {
      INFO(label);
      bool float_ran = false, bf16_ran = false;
      for (const bool rounded : {false, true}) {
        float_ran = forced_products_match<float>(g, candidate, rounded);
        bf16_ran = forced_products_match<meshtensor::bfloat16>(g, candidate, rounded);
        ran += float_ran + bf16_ran + forced_products_match<double>(g, candidate, rounded);
      }
      const bool gemm = gemm_shape_of(g.outer, g.inner, g.operands).has_value();
      const bool packed = !gemm && packed_product_of(g.outer, g.inner, g.operands).has_value();
      gemms += gemm;
      packs += packed;
      // oneDNN runs every float matrix product, as it lies or packed; bfloat16 ones packed (as
      // float where it has no bfloat16 kernel) if not as they lie.
      if (name == "onednn" && onednn_kernels) CHECK(float_ran == gemm);
      if (name == "onednn_packed" && onednn_kernels) {
        CHECK(float_ran == packed);
        CHECK(bf16_ran == (gemm || packed));
      }
    }
    CHECK(gemms > 0);
    CHECK(packs > 0);
    CHECK((ran > 0) == (name == "reference" || onednn_kernels));
  }
}

}  // namespace test_kernels
