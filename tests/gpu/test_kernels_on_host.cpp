// meshtensor's own CUDA kernels, compiled as host C++ and run on the CPU, one "thread" walking
// every element: their logic — window order, ties, the outputs each box element gathers from, the
// order of every sum — is checked bit for bit against the reference kernels on machines without
// a GPU. (The sources come from the headers' strings, extracted at build time; that they compile
// for GPUs is test_runtime_compile's job, that they run on one test_gpu_kernels'.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <meshtensor/kernels/cpu/reference/copy_box.hpp>
#include <meshtensor/kernels/cpu/reference/pool.hpp>
#include <meshtensor/kernels/cpu/tile_up_sampling.hpp>
#include <meshtensor/kernels/cuda/elementwise.hpp>
#include <meshtensor/kernels/cuda/norm.hpp>
#include <meshtensor/kernels/cuda/pool.hpp>
#include <meshtensor/kernels/cuda/resample.hpp>
#include <meshtensor/kernels/cuda/sum.hpp>
#include <meshtensor/kernels/host_operands.hpp>
#include <meshtensor/kernels/sum.hpp>

#include "gpu/host_cuda.hpp"
#include "support/elementwise_cases.hpp"
#include "support/gemm_cases.hpp"
#include "support/norm_cases.hpp"
#include "support/pool_cases.hpp"
#include "support/resample_cases.hpp"

namespace host_kernels {
using namespace host_cuda;
using namespace meshtensor::kernels::shared;  // the formulas the GPU sources start with
#include "elementwise_source.inc"
#include "norm_source.inc"
#include "optimizer_source.inc"
#include "pool_source.inc"
#include "resample_source.inc"
#include "sum_source.inc"
}  // namespace host_kernels

using namespace meshtensor;

namespace {
// Equal bit for bit (NaN too: a window with nothing inside the tensor averages 0 / 0).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

host_kernels::Geometry on_host(const kernels::PoolGeometry& g) {
  static_assert(sizeof(host_kernels::Geometry) == sizeof(kernels::gpu::detail::FlatGeometry),
                "the kernels' Geometry and the host's FlatGeometry must have one layout");
  const auto flat = kernels::gpu::detail::flatten(g);
  host_kernels::Geometry out;
  std::memcpy(&out, &flat, sizeof out);
  return out;
}
}  // namespace

TEST_CASE("the pooling kernels, run on the host, equal the reference kernels bit for bit") {
  for (const auto& c : testing::pool_cases())
    for (const bool inside_all : {true, false}) {
      const kernels::PoolGeometry g = testing::pool_geometry(c, inside_all ? 0 : 1);
      const testing::PoolData data(g);
      const std::size_t in_n = data.in_n, out_n = data.out_n;
      const auto& x = data.x;
      const auto& dy = data.dy;
      const auto geometry = on_host(g);
      INFO("out " << c.out[0] << "x" << c.out[1] << "x" << c.out[2] << ", channels " << c.channels
                  << (inside_all ? "" : ", box partly outside the tensor"));

      std::vector<float> y_ref(out_n), dx_ref(in_n), y(out_n, 7.0f), dx(in_n, 7.0f);
      std::vector<std::int64_t> won_ref(out_n), won(out_n);
      kernels::reference::max_pool_forward(g, x.data(), y_ref.data(), won_ref.data());
      kernels::reference::max_pool_backward(g, dy.data(), won_ref.data(), dx_ref.data());
      host_kernels::max_pool_forward_f32(geometry, x.data(), y.data(),
                                         reinterpret_cast<long long*>(won.data()));
      host_kernels::pool_backward_f32(geometry, dy.data(),
                                      reinterpret_cast<const long long*>(won.data()), dx.data(), 0);
      CHECK(same_bits(y, y_ref));
      CHECK(same_bits(won, won_ref));
      CHECK(same_bits(dx, dx_ref));

      for (const int count_padding : {0, 1}) {
        INFO("average pooling, padding " << (count_padding ? "counted" : "not counted"));
        kernels::reference::avg_pool_forward(g, x.data(), y_ref.data(), count_padding != 0);
        kernels::reference::avg_pool_backward(g, dy.data(), dx_ref.data(), count_padding != 0);
        host_kernels::avg_pool_forward_f32(geometry, x.data(), y.data(), count_padding);
        host_kernels::pool_backward_f32(geometry, dy.data(), nullptr, dx.data(), count_padding);
        // A window wholly in uncounted padding (the dilated case has some) averages to zero: 0 / 0
        // would be a NaN, whose bits differ between the host and the GPU.
        const auto finite = [](float v) { return std::isfinite(v); };
        CHECK(std::all_of(y_ref.begin(), y_ref.end(), finite));
        CHECK(std::all_of(dx_ref.begin(), dx_ref.end(), finite));
        CHECK(same_bits(y, y_ref));
        CHECK(same_bits(dx, dx_ref));
      }
    }
}

template <class T>
void check_elementwise_kernels() {
  const std::size_t n = 1000;
  for (int code = 0; code < kernels::UnaryOp::count; ++code) {
    INFO("unary op " << code);
    const testing::UnaryCheck<T> c(code, n);
    const T s = c.s;
    const auto &x = c.x, &g = c.g, &y_ref = c.y_ref, &dy_ref = c.dy_ref;
    std::vector<T> y(n, T(7)), dy(n, T(7));
    if constexpr (std::is_same_v<T, float>) {
      host_kernels::map_f32(code, s, x.data(), y.data(), n);
      host_kernels::times_derivative_f32(code, s, g.data(), x.data(), dy.data(), n);
    } else {
      host_kernels::map_f64(code, s, x.data(), y.data(), n);
      host_kernels::times_derivative_f64(code, s, g.data(), x.data(), dy.data(), n);
    }
    CHECK(same_bits(y, y_ref));
    CHECK(same_bits(dy, dy_ref));
  }
  static_assert(sizeof(host_kernels::Walk) == sizeof(kernels::gpu::detail::Walk),
                "the kernels' Walk and the host's must have one layout");
  for (const auto& c : testing::zip_cases())
    for (int code = 0; code < kernels::BinaryOp::count; ++code) {
      INFO("binary op " << code << " over " << c.sizes.size() << " dims");
      const testing::ZipCheck<T> check(c, code);
      const auto &a = check.a, &b = check.b, &out_ref = check.out_ref;
      kernels::gpu::detail::Walk flat;
      REQUIRE(kernels::gpu::detail::walk_of(c.sizes, c.strides, &flat));
      CHECK(std::array<std::int64_t, 3>{kernels::span_of(c.sizes, c.strides[0]),
                                        kernels::span_of(c.sizes, c.strides[1]),
                                        kernels::span_of(c.sizes, c.strides[2])} ==
            std::array<std::int64_t, 3>{c.a_elements, c.b_elements, std::int64_t(out_ref.size())});
      host_kernels::Walk walk;
      std::memcpy(&walk, &flat, sizeof walk);
      std::vector<T> out(out_ref.size(), T(7));
      if constexpr (std::is_same_v<T, float>)
        host_kernels::zip_f32(code, walk, a.data(), b.data(), out.data(), out.size());
      else
        host_kernels::zip_f64(code, walk, a.data(), b.data(), out.data(), out.size());
      CHECK(same_bits(out, out_ref));
    }
}

TEST_CASE("the copy kernels, run on the host, copy strided boxes as the reference loops") {
  for (const auto& c : testing::copy_cases()) {
    INFO("box of " << c.box.size() << " dims");
    const auto from = testing::zip_operand<double>(c.from_elements, 0.3);
    std::vector<double> to_ref(std::size_t(c.to_elements), -1.0), to = to_ref;
    kernels::reference::copy_box(c.box, from.data(), c.from_strides, to_ref.data(), c.to_strides);
    kernels::gpu::detail::Walk flat;
    REQUIRE(kernels::gpu::detail::walk_of(
        c.box, {c.from_strides, kernels::Strides(c.box.size(), 0), c.to_strides}, &flat));
    host_kernels::Walk walk;
    std::memcpy(&walk, &flat, sizeof walk);
    host_kernels::copy_8_bytes(walk, reinterpret_cast<const unsigned long long*>(from.data()),
                               reinterpret_cast<unsigned long long*>(to.data()),
                               kernels::num_elements(c.box));
    CHECK(same_bits(to, to_ref));
    std::vector<float> from32(from.begin(), from.end()), to32_ref(to_ref.size(), -1.0f),
        to32(to_ref.size(), -1.0f);
    kernels::reference::copy_box(c.box, from32.data(), c.from_strides, to32_ref.data(),
                                 c.to_strides);
    host_kernels::copy_4_bytes(walk, reinterpret_cast<const unsigned*>(from32.data()),
                               reinterpret_cast<unsigned*>(to32.data()),
                               kernels::num_elements(c.box));
    CHECK(same_bits(to32, to32_ref));
  }
}

TEST_CASE("the element-wise kernels, run on the host, equal the CPU loops bit for bit") {
  check_elementwise_kernels<float>();
  check_elementwise_kernels<double>();
}

template <class T>
void check_optimizer_kernels() {
  const std::size_t n = 777;
  for (const auto& h : testing::adam_steps()) {
    INFO("Adam, weight decay " << h.weight_decay << (h.decoupled ? " decoupled" : ""));
    testing::OptimizerState<T> ref(n), gpu(n);
    for (std::size_t i = 0; i < n; ++i)
      kernels::shared::adam_update(h, ref.parameter[i], ref.first[i], ref.second[i],
                                   ref.gradient[i]);
    if constexpr (std::is_same_v<T, float>)
      host_kernels::adam_f32(&h, gpu.parameter.data(), gpu.first.data(), gpu.second.data(),
                             gpu.gradient.data(), n, nullptr);
    else
      host_kernels::adam_f64(&h, gpu.parameter.data(), gpu.first.data(), gpu.second.data(),
                             gpu.gradient.data(), n, nullptr);
    CHECK(same_bits(gpu.parameter, ref.parameter));
    CHECK(same_bits(gpu.first, ref.first));
    CHECK(same_bits(gpu.second, ref.second));
  }
  for (const auto& h : testing::sgd_steps()) {
    INFO("SGD, momentum " << h.momentum);
    testing::OptimizerState<T> ref(n), gpu(n);
    for (std::size_t i = 0; i < n; ++i)
      kernels::shared::sgd_update(h, ref.parameter[i], ref.first[i], ref.gradient[i]);
    if constexpr (std::is_same_v<T, float>)
      host_kernels::sgd_f32(&h, gpu.parameter.data(), gpu.first.data(), gpu.gradient.data(), n,
                            nullptr);
    else
      host_kernels::sgd_f64(&h, gpu.parameter.data(), gpu.first.data(), gpu.gradient.data(), n,
                            nullptr);
    CHECK(same_bits(gpu.parameter, ref.parameter));
    CHECK(same_bits(gpu.first, ref.first));
  }
}

TEST_CASE("the optimiser kernels, run on the host, equal the CPU loops bit for bit") {
  check_optimizer_kernels<float>();
  check_optimizer_kernels<double>();
  // Adam's step count: counted unless the guard skips the step, as the CPU counts it.
  kernels::shared::AdamStep ref = testing::adam_steps()[0], gpu = ref;
  ref.steps = gpu.steps = 2, ref.first_power = gpu.first_power = 0.81;
  ref.second_power = gpu.second_power = 0.998001;
  kernels::shared::adam_advance(ref);
  const float fine = 0.0f, bad = std::nanf("");
  host_kernels::adam_advance_f32(&gpu, &bad);
  CHECK(gpu.steps == 2);
  host_kernels::adam_advance_f32(&gpu, &fine);
  CHECK(std::memcmp(&gpu, &ref, sizeof gpu) == 0);
  CHECK(gpu.steps == 3);
}

template <std::size_t N>
void check_sum_kernels(const testing::SumCase& c) {
  const testing::SumCheck<N> check(c);
  const auto& operands = check.operands;
  const auto& ref = check.ref;
  const std::int64_t outputs = kernels::num_elements(c.outer),
                     terms = kernels::num_elements(c.inner);

  kernels::gpu::detail::SumShape flat;
  REQUIRE(kernels::gpu::detail::sum_shape_of(c.outer, c.inner, operands, &flat));
  for (std::size_t k = 0; k < N; ++k)
    CHECK(kernels::fold_span(c.outer, c.inner, operands[k]) == c.elements[k]);
  static_assert(sizeof(host_kernels::SumShape) == sizeof(flat),
                "the kernels' SumShape and the host's must have one layout");
  host_kernels::SumShape shape;
  std::memcpy(&shape, &flat, sizeof shape);
  const float* a = check.values[0].data();
  const float* b = check.values[N - 1].data();

  std::vector<double> per_output(ref.size(), 7.0);
  host_kernels::sum_per_output_f32(shape, a, b, per_output.data(), outputs, terms);
  CHECK(testing::sum_gap(per_output, ref) < 1e-12);

  // Chunks of 7 terms, each a block; then each output's chunks added in order.
  const std::int64_t chunk = 7, chunks = (terms + chunk - 1) / chunk;
  std::vector<double> partial(std::size_t(outputs * chunks), 7.0), chunked(ref.size(), 7.0);
  host_cuda::gridDim = {unsigned(outputs), unsigned(chunks)};
  for (unsigned x = 0; x < host_cuda::gridDim.x; ++x)
    for (unsigned y = 0; y < host_cuda::gridDim.y; ++y) {
      host_cuda::blockIdx = {x, y};
      host_kernels::sum_chunk_f32(shape, a, b, partial.data(), terms, chunk);
    }
  host_cuda::gridDim = {1, 1};
  host_cuda::blockIdx = {0, 0};
  host_kernels::add_chunks(partial.data(), chunks, chunked.data(), outputs);
  CHECK(testing::sum_gap(chunked, ref) < 1e-12);

  if constexpr (N == 1) {
    for (const bool is_max : {true, false}) {
      INFO((is_max ? "max" : "min"));
      const auto want = testing::extreme_on_cpu(c, check, is_max);
      const int code = is_max ? kernels::BinaryOp::larger : kernels::BinaryOp::smaller;
      const float init = is_max ? -INFINITY : INFINITY;
      std::vector<float> per_thread(want.size(), 7.0f), folded(want.size(), 7.0f),
          chunk_extremes(std::size_t(outputs * chunks), 7.0f);
      host_kernels::extreme_per_output_f32(shape, a, per_thread.data(), outputs, terms, code, init);
      CHECK(same_bits(per_thread, want));
      host_cuda::gridDim = {unsigned(outputs), unsigned(chunks)};
      for (unsigned x = 0; x < host_cuda::gridDim.x; ++x)
        for (unsigned y = 0; y < host_cuda::gridDim.y; ++y) {
          host_cuda::blockIdx = {x, y};
          host_kernels::extreme_chunk_f32(shape, a, chunk_extremes.data(), terms, chunk, code,
                                          init);
        }
      host_cuda::gridDim = {1, 1};
      host_cuda::blockIdx = {0, 0};
      host_kernels::extreme_of_chunks_f32(chunk_extremes.data(), chunks, folded.data(), outputs,
                                          code, init);
      CHECK(same_bits(folded, want));
    }
  }
}

TEST_CASE(
    "the sum kernels, run on the host, equal the CPU's sums to double rounding, and the max and "
    "min folds bit for bit") {
  for (const auto& c : testing::sum_cases()) {
    INFO(c.outer.size() << " outer dims, " << c.inner.size() << " inner, " << c.elements.size()
                        << " operands");
    if (c.elements.size() == 1)
      check_sum_kernels<1>(c);
    else
      check_sum_kernels<2>(c);
  }
}

TEST_CASE("the accumulation kernels, run on the host, add element by element") {
  std::vector<float> into{1, 2, 3}, add{0.5f, -2, 4};
  host_kernels::accumulate_f32(into.data(), add.data(), 3);
  CHECK(into == std::vector<float>{1.5f, 0, 7});
  std::vector<double> into64{1, 2}, add64{1e-17, 3};
  host_kernels::accumulate_f64(into64.data(), add64.data(), 2);
  CHECK(into64 == std::vector<double>{1 + 1e-17, 5});
}

namespace {
// Runs kernel(x, y) for every block (x, y) of a keys x chunks grid, one thread each.
template <class Kernel>
void over_grid(std::int64_t keys, std::int64_t chunks, Kernel&& kernel) {
  host_cuda::gridDim = {unsigned(keys), unsigned(chunks)};
  for (unsigned x = 0; x < host_cuda::gridDim.x; ++x)
    for (unsigned y = 0; y < host_cuda::gridDim.y; ++y) {
      host_cuda::blockIdx = {x, y};
      kernel();
    }
  host_cuda::gridDim = {1, 1};
  host_cuda::blockIdx = {0, 0};
}
}  // namespace

TEST_CASE("the normalisation kernels, run on the host, equal the CPU's formulas") {
  static_assert(sizeof(host_kernels::KeyedBlock) == sizeof(kernels::gpu::detail::KeyedBlock),
                "the kernels' KeyedBlock and the host's must have one layout");
  for (const auto& c : testing::norm_cases()) {
    INFO(c.what);
    const testing::NormCheck<float> check(c);
    kernels::gpu::detail::KeyedBlock flat;
    REQUIRE(kernels::gpu::detail::keyed_block_of(c.sizes, c.key_strides, &flat));
    host_kernels::KeyedBlock block;
    std::memcpy(&block, &flat, sizeof block);
    const std::int64_t n = check.n, keys = c.keys, terms = n / keys;
    // The per-key constants in double, as the kernels take them (each rounds them to float).
    const auto &scale = check.scale, &shift = check.shift, &mask_scale = check.mask_scale,
               &mask_shift = check.mask_shift, &p = check.p, &q = check.q, &r = check.r;

    // Chunks of 7 elements, each a block; then each key's chunks combined in order.
    const std::int64_t chunk = 7, chunks = (terms + chunk - 1) / chunk;
    std::vector<double> partial(std::size_t(3 * keys * chunks), 7.0), moments(3 * keys, 7.0);
    over_grid(keys, chunks, [&] {
      host_kernels::moments_chunk_f32(block, check.x.data(), partial.data(), terms, chunk);
    });
    host_kernels::combine_moment_chunks(partial.data(), chunks, moments.data(), keys);
    std::vector<kernels::shared::PartialMoments> got;
    for (std::int64_t k = 0; k < keys; ++k)
      got.push_back({moments[3 * k], moments[3 * k + 1], moments[3 * k + 2]});
    CHECK(testing::moments_gap(got, check.moments()) < 1e-12);

    // By lanes, on a channels-last block: groups of rows g, g + groups, ...; a thread each.
    CHECK(kernels::gpu::detail::keys_innermost(flat) == c.keys_innermost);
    const std::vector<std::int64_t> lane_groups =
        c.keys_innermost ? std::vector<std::int64_t>{1, 2, 3} : std::vector<std::int64_t>{};
    for (const std::int64_t groups : lane_groups) {
      INFO("by lanes, " << groups << " groups of rows");
      std::vector<double> lane_partial(std::size_t(3 * keys * groups), 7.0), lane_moments(3 * keys);
      host_kernels::moments_lanes_f32(block, check.x.data(), lane_partial.data(), terms, groups);
      host_kernels::combine_moment_chunks(lane_partial.data(), groups, lane_moments.data(), keys);
      std::vector<kernels::shared::PartialMoments> by_lanes;
      for (std::int64_t k = 0; k < keys; ++k)
        by_lanes.push_back({lane_moments[3 * k], lane_moments[3 * k + 1], lane_moments[3 * k + 2]});
      CHECK(testing::moments_gap(by_lanes, check.moments()) < 1e-12);
    }

    for (const float floor : {-INFINITY, 0.0f}) {
      std::vector<float> out(std::size_t(n), 7.0f);
      host_kernels::affine_f32(block, check.x.data(), scale.data(), shift.data(), floor, out.data(),
                               n);
      CHECK(same_bits(out, check.affine(floor)));
    }

    for (const bool masked : {false, true}) {
      INFO((masked ? "behind a ReLU" : "no ReLU"));
      const float* v = masked ? check.x.data() : check.v.data();
      const float* mask_x = masked ? check.x.data() : nullptr;
      std::vector<double> sum_partial(std::size_t(2 * keys * chunks), 7.0), sums(2 * keys, 7.0);
      over_grid(keys, chunks, [&] {
        host_kernels::gradient_sums_chunk_f32(block, check.g.data(), v, scale.data(), shift.data(),
                                              mask_x, mask_scale.data(), mask_shift.data(),
                                              sum_partial.data(), terms, chunk);
      });
      host_kernels::add_chunks(sum_partial.data(), chunks, sums.data(), 2 * keys);
      CHECK(testing::sum_gap(sums, check.gradient_sums(masked)) < 1e-12);
      for (const std::int64_t groups : lane_groups) {
        INFO("by lanes, " << groups << " groups of rows");
        std::vector<double> lane_partial(std::size_t(2 * keys * groups), 7.0), lane_sums(2 * keys);
        host_kernels::gradient_sums_lanes_f32(block, check.g.data(), v, scale.data(), shift.data(),
                                              mask_x, mask_scale.data(), mask_shift.data(),
                                              lane_partial.data(), terms, groups);
        host_kernels::add_chunks(lane_partial.data(), groups, lane_sums.data(), 2 * keys);
        CHECK(testing::sum_gap(lane_sums, check.gradient_sums(masked)) < 1e-12);
      }

      std::vector<float> dx(std::size_t(n), 7.0f);
      host_kernels::input_gradient_f32(block, check.g.data(), v, mask_x, mask_scale.data(),
                                       mask_shift.data(), p.data(), q.data(), r.data(), dx.data(),
                                       n);
      CHECK(same_bits(dx, check.input_gradient(masked)));
    }
  }
}

TEST_CASE("the resampling kernels, run on the host, equal the reference loops bit for bit") {
  static_assert(sizeof(host_kernels::ResampleShape) == sizeof(kernels::gpu::detail::ResampleShape),
                "the kernels' ResampleShape and the host's must have one layout");
  for (const auto& c : testing::resample_cases()) {
    INFO(c.what);
    const auto& taps = c.taps;
    const testing::ResampleCheck<float> check(taps);
    const auto flat = kernels::gpu::detail::resample_shape_of(taps);
    host_kernels::ResampleShape shape;
    std::memcpy(&shape, &flat, sizeof shape);
    const std::vector<long long> index(taps.index.begin(), taps.index.end());
    const std::vector<float> weight(taps.weight.begin(), taps.weight.end());
    std::vector<float> out(check.out_ref.size(), 7.0f), grad_box(check.grad_box_ref.size(), 7.0f);
    host_kernels::resample_f32(shape, index.data(), weight.data(), check.box.data(), out.data());
    CHECK(same_bits(out, check.out_ref));

    const auto readers = kernels::readers_of(taps);
    const std::vector<long long> start(readers.start.begin(), readers.start.end()),
        reader(readers.reader.begin(), readers.reader.end());
    const std::vector<float> reader_weight(readers.weight.begin(), readers.weight.end());
    host_kernels::resample_adjoint_f32(shape, start.data(), reader.data(), reader_weight.data(),
                                       check.g.data(), grad_box.data());
    CHECK(same_bits(grad_box, check.grad_box_ref));
  }
}

TEST_CASE("contractions that are matrix products become the GEMMs cuBLAS computes, and no others") {
  for (const auto& c : testing::gemm_cases()) {
    INFO(c.einsum);
    auto g = testing::gemm_operands(c.einsum);
    const auto x = testing::zip_operand<float>(g.elements[0], 0.0),
               y = testing::zip_operand<float>(g.elements[1], 1.0);
    g.operands[0].data = x.data();
    g.operands[1].data = y.data();
    const auto shape = kernels::gemm_shape_of(g.outer, g.inner, g.operands);
    REQUIRE(shape.has_value() == c.is_gemm);
    if (!shape) continue;
    const std::int64_t outputs = kernels::num_elements(g.outer);
    CHECK(shape->batch * shape->stride_c == outputs);
    std::vector<double> want(std::size_t(outputs), 7.0), got(std::size_t(outputs), 7.0);
    kernels::reference::parallel_sum<double, float, 2>(g.outer, g.inner, g.operands, want.data(),
                                                       1);
    testing::blas_gemm(*shape, g.operands[shape->a_operand].data,
                       g.operands[1 - shape->a_operand].data, got.data());
    CHECK(testing::sum_gap(got, want) < 1e-12);
  }
}

TEST_CASE("the narrowing kernels, run on the host, round accumulators as the CPU loops") {
  const std::vector<double> in{1.0 / 3, -2.5e-9, 7e30, 12345.678901234, 0.0};
  for (const double divisor : {1.0, 3.0, 4096.0}) {
    std::vector<float> want, got(in.size(), 7.0f);
    std::vector<double> want64, got64(in.size(), 7.0);
    for (double v : in) {
      want.push_back(static_cast<float>(v / divisor));
      want64.push_back(v / divisor);
    }
    host_kernels::narrow_f32(in.data(), got.data(), std::int64_t(in.size()), divisor);
    host_kernels::narrow_f64(in.data(), got64.data(), std::int64_t(in.size()), divisor);
    CHECK(same_bits(got, want));
    CHECK(same_bits(got64, want64));
  }
}

TEST_CASE("the tile up-sampling kernels, run on the host, equal the CPU loop bit for bit") {
  static_assert(sizeof(host_kernels::UpTiles) == sizeof(kernels::gpu::detail::UpTiles),
                "the kernels' UpTiles and the host's must have one layout");
  // 5 positions (a short last group of the CPU's four), 3 input and 4 output channels, 2 taps;
  // the input's channels 5 apart, the output's 7 apart (channels not last), positions in any order.
  kernels::TileUpSampling u;
  u.c_in = 3, u.c_out = 4, u.in_channel_stride = 5, u.out_channel_stride = 7;
  u.input = {0, 4, 1, 3, 2};
  u.output = {6, 0, 2, 4, 1};
  u.tap = {1, 0, 1, 1, 0};
  std::vector<float> input(15), weight(2 * 3 * 4), bias(4);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = std::sin(float(i) * 1.3f) * 3.1f;
  for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = std::cos(float(i) * 0.7f) / 3.0f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * float(i) - 0.17f;
  const host_kernels::UpTiles shape{u.positions(), u.c_in, u.c_out, u.in_channel_stride,
                                    u.out_channel_stride};
  const std::vector<long long> in(u.input.begin(), u.input.end()),
      out(u.output.begin(), u.output.end()), tap(u.tap.begin(), u.tap.end());
  for (const bool with_bias : {false, true}) {
    INFO((with_bias ? "with a bias" : "without a bias"));
    const float* b = with_bias ? bias.data() : nullptr;
    std::vector<float> expected(7 * 4, 9.0f), got(expected);
    kernels::cpu::up_sample_tiles(u, input.data(), weight.data(), b, expected.data());
    host_kernels::up_sample_tiles_f32(shape, in.data(), out.data(), tap.data(), input.data(),
                                      weight.data(), b, got.data());
    CHECK(same_bits(got, expected));
    CHECK(expected[6] != 9.0f);  // written: position 0's first channel

    const std::vector<bfloat16> input16(input.begin(), input.end()),
        weight16(weight.begin(), weight.end());
    std::vector<bfloat16> expected16(7 * 4, bfloat16(9.0f)), got16(expected16);
    kernels::cpu::up_sample_tiles(u, input16.data(), weight16.data(), b, expected16.data());
    host_kernels::up_sample_tiles_bf16(shape, in.data(), out.data(), tap.data(), input16.data(),
                                       weight16.data(), b, got16.data());
    CHECK(same_bits(got16, expected16));
  }
}
