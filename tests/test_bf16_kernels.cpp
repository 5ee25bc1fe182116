// bfloat16 alone, on one processor: its rounding (the same on every CPU path: the AVX512_BF16
// instructions, their AVX-512F emulation, the scalar loop — this file is also built without the
// instructions), and the convolution kernels' three passes on bfloat16 blocks against the float
// kernels, in slabs of rows, on each kernel choice. Nothing here involves a mesh, so it runs on the
// threads transport only; the bfloat16 ops on every layout: test_bf16.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/environment.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_bf16_kernels {

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
}  // namespace

TEST_CASE("bfloat16 keeps the upper half of a float, rounded to nearest, ties to even") {
  CHECK(bf16(1.0f).bits == 0x3f80);
  CHECK(float(bf16(1.0f)) == 1.0f);
  CHECK(bf16(1.0f + 0x1p-8f).bits == 0x3f80);             // a tie: stays at the even 1.0
  CHECK(bf16(1.0f + 3 * 0x1p-8f).bits == 0x3f82);         // a tie: up to the even 1 + 2^-6
  CHECK(bf16(1.0f + 0x1p-8f + 0x1p-20f).bits == 0x3f81);  // past the tie: up
  CHECK(bf16(-2.5f).bits == 0xc020);
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isinf(float(bf16(3.4e38f))));  // beyond bfloat16's largest: overflows
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(bf16(from_bits(0x7f800001u)))));  // a NaN whose payload would round off
  CHECK(float(std::numeric_limits<bf16>::max()) == from_bits(0x7f7f0000u));
  CHECK(float(std::numeric_limits<bf16>::epsilon()) == 0x1p-7f);
  bf16 sum = 1.0f;
  sum += 0.5f;
  CHECK(float(sum) == 1.5f);
}

TEST_CASE("float <-> bfloat16 conversions round alike on every path, denormals as zero") {
  std::mt19937 rng(7);
  std::vector<float> values;
  for (int i = 0; i < 100000; ++i) values.push_back(from_bits(rng()));
  for (std::uint32_t special : {0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0x7f800001u, 0x3f808000u, 0x3f818000u})
    values.push_back(from_bits(special));
  std::vector<bf16> narrowed(values.size());
  kernels::cpu::convert(values.data(), std::int64_t(values.size()), narrowed.data());
  std::vector<float> widened(values.size());
  kernels::cpu::convert(narrowed.data(), std::int64_t(values.size()), widened.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bf16 expected = kernels::cpu::to_bf16_flushed(values[i]);
    INFO("value bits " << std::hex << bits_of(values[i]));
    REQUIRE(narrowed[i].bits == expected.bits);
    REQUIRE(bits_of(widened[i]) == std::uint32_t(expected.bits) << 16);
  }
#if defined(__AVX2__)
  // The AVX2 rounding the row kernels' bfloat16 stores use where 512-bit vectors are missing.
  for (std::size_t i = 0; i < values.size(); i += 8) {
    const std::size_t n = std::min<std::size_t>(8, values.size() - i);
    float eight[8] = {};
    std::copy(values.begin() + i, values.begin() + i + n, eight);
    alignas(16) std::uint16_t bits[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(bits),
                    kernels::cpu::narrowed_bf16(_mm256_loadu_ps(eight)));
    for (std::size_t j = 0; j < n; ++j) {
      INFO("value bits " << std::hex << bits_of(values[i + j]));
      REQUIRE(bits[j] == narrowed[i + j].bits);
    }
    const __m256 back =
        kernels::cpu::widened_bf16(_mm_load_si128(reinterpret_cast<__m128i*>(bits)));
    for (std::size_t j = 0; j < n; ++j) REQUIRE(bits_of(back[j]) == bits_of(widened[i + j]));
  }
#endif
  CHECK(kernels::cpu::to_bf16_flushed(from_bits(0x00000001u)).bits == 0x0000);
  CHECK(kernels::cpu::to_bf16_flushed(from_bits(0x807fffffu)).bits == 0x8000);
}

namespace {
// A convolution's three passes on bfloat16 blocks (run a slab of rows at a time, each widened)
// against the float kernels on the same values, widened whole: `why` names the first pass off.
// On `threads` compute threads where given.
std::string bf16_passes_match_float(const kernels::ConvGeometry& g, int threads = 0) {
  const std::int64_t n_in = kernels::conv_input_size(g), n_out = kernels::conv_output_size(g),
                     n_w = kernels::conv_weight_size(g);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto draw = [&](std::int64_t n) {
    std::vector<bf16> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = bf16(uniform(rng));
    return v;
  };
  auto wide = [](const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto x = draw(n_in), w = draw(n_w), go = draw(n_out);
  // Within a rounding step of the float result, relative to the largest magnitude (sums of a few
  // hundred products in another order, then rounded once).
  auto close = [](const auto& got, const std::vector<float>& want, double rtol) {
    double largest = 0;
    for (float v : want) largest = std::max(largest, double(std::abs(v)));
    for (std::size_t i = 0; i < want.size(); ++i)
      if (std::abs(double(got[i]) - double(want[i])) > rtol * largest) return false;
    return true;
  };
  return on_one_processor([&](Mesh&) -> std::string {
    if (threads > 0) current_processor().set_compute_threads(threads);
    std::vector<bf16> y(static_cast<std::size_t>(n_out)), gx(static_cast<std::size_t>(n_in));
    std::vector<double> gw(static_cast<std::size_t>(n_w), 0.0), gw_float(gw);
    std::vector<float> y_float(y.size()), gx_float(gx.size());
    kernels::conv_forward(g, x.data(), w.data(), y.data());
    kernels::conv_forward(g, wide(x).data(), wide(w).data(), y_float.data());
    if (!close(y, y_float, 1.0 / 128)) return "forward";
    kernels::conv_backward_input(g, go.data(), w.data(), gx.data());
    kernels::conv_backward_input(g, wide(go).data(), wide(w).data(), gx_float.data());
    if (!close(gx, gx_float, 1.0 / 128)) return "input gradient";
    kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());
    kernels::conv_backward_weight(g, wide(x).data(), wide(go).data(), gw_float.data());
    if (!close(gw, std::vector<float>(gw_float.begin(), gw_float.end()), 1e-4))
      return "weight gradient";
    return "";
  });
}

kernels::ConvGeometry geometry(std::array<std::int64_t, 3> in, std::array<std::int64_t, 3> out,
                               std::int64_t kernel, kernels::Taps taps, std::int64_t batch,
                               std::int64_t c_in = 8, std::int64_t c_out = 8) {
  kernels::ConvGeometry g;
  g.batch = batch;
  g.c_in = c_in;
  g.c_out = c_out;
  g.in = in;
  g.out = out;
  g.kernel = {kernel, kernel, kernel};
  g.taps = {taps, taps, taps};
  return g;
}

// MESHTENSOR_BF16_CONV set to `value` while it lives.
struct Bf16Kernels : testing::Setting {
  explicit Bf16Kernels(const char* value) : Setting("MESHTENSOR_BF16_CONV", value) {}
};
}  // namespace

TEST_CASE("bfloat16 convolution kernels run in slabs of rows as the float kernels do") {
  // Rows of 96 x 96 x 8 values: a few MiB of widened rows hold 14 of them, so these blocks run in
  // several slabs, each reading the rows around it; batch 2 runs entry by entry. Each on the
  // widened float kernels, on oneDNN's bf16 ones (where it has none, widened), and as timed.
  for (const char* kernels_setting : {"widened", "native", "auto"}) {
    INFO("MESHTENSOR_BF16_CONV=" << kernels_setting);
    const Bf16Kernels setting(kernels_setting);
    kernels::Taps same;
    same.origin = -1;
    CHECK(bf16_passes_match_float(geometry({24, 96, 96}, {24, 96, 96}, 3, same, 1)) == "");
    kernels::Taps strided;
    strided.stride = 2;
    CHECK(bf16_passes_match_float(geometry({31, 96, 96}, {15, 47, 47}, 3, strided, 1)) == "");
    kernels::Taps up;
    up.transposed = true;
    up.stride = 2;
    CHECK(bf16_passes_match_float(geometry({15, 48, 48}, {30, 96, 96}, 2, up, 1)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {6, 10, 10}, 3, same, 2)) == "");
    // The U-Net's other channel counts: its first layer, a wider level, up-sampling from it.
    CHECK(bf16_passes_match_float(geometry({12, 40, 40}, {12, 40, 40}, 3, same, 1, 1, 8)) == "");
    CHECK(bf16_passes_match_float(geometry({12, 20, 20}, {12, 20, 20}, 3, same, 1, 32, 16)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {12, 20, 20}, 2, up, 1, 32, 16)) == "");
    // The head (one tap, 8 -> 3), at batch 2 too. oneDNN's bf16 input gradients of such odd
    // output channel counts were wrong (its kernels pair the channels); 3 -> 8 and 16 -> 3 beside.
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {6, 10, 10}, 1, {}, 2, 8, 3)) == "");
    CHECK(bf16_passes_match_float(geometry({24, 40, 40}, {24, 40, 40}, 1, {}, 1, 8, 3)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {6, 10, 10}, 1, {}, 1, 3, 8)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {6, 10, 10}, 1, {}, 2, 16, 3)) == "");
  }
}

TEST_CASE("one-tap bfloat16 convolutions with few channels run in one pass over the positions") {
  const kernels::Taps one_to_one;
  CHECK(kernels::cpu::pointwise_takes(geometry({6, 10, 10}, {6, 10, 10}, 1, one_to_one, 2, 8, 3)));
  CHECK(
      kernels::cpu::pointwise_takes(geometry({6, 10, 10}, {6, 10, 10}, 1, one_to_one, 1, 16, 16)));
  // more channels, three taps, padding, a stride, up-sampling: the other kernels run these
  CHECK_FALSE(
      kernels::cpu::pointwise_takes(geometry({6, 10, 10}, {6, 10, 10}, 1, one_to_one, 1, 17, 3)));
  CHECK_FALSE(
      kernels::cpu::pointwise_takes(geometry({8, 12, 12}, {6, 10, 10}, 3, one_to_one, 1, 8, 3)));
  kernels::Taps padded, strided, up;
  padded.origin = -1;
  strided.stride = 2;
  up.transposed = true;
  CHECK_FALSE(
      kernels::cpu::pointwise_takes(geometry({6, 10, 10}, {6, 10, 10}, 1, padded, 1, 8, 3)));
  CHECK_FALSE(
      kernels::cpu::pointwise_takes(geometry({12, 20, 20}, {6, 10, 10}, 1, strided, 1, 8, 3)));
  CHECK_FALSE(kernels::cpu::pointwise_takes(geometry({6, 10, 10}, {6, 10, 10}, 1, up, 1, 8, 3)));
}

TEST_CASE("a widened bfloat16 slab gives every compute thread a row") {
  // Rows of 128 x 128 x 8 floats: 2 fit the slab's 1 MiB; 16 threads get 16 rows, and a block
  // of 40 rows then runs in slabs of 16, 16 and 8, each matching the float kernels.
  const auto rows = on_one_processor([](Mesh&) {
    current_processor().set_compute_threads(1);
    const std::int64_t one = kernels::detail::rows_per_slab(128 * 128 * 8);
    current_processor().set_compute_threads(16);
    return std::make_pair(one, kernels::detail::rows_per_slab(128 * 128 * 8));
  });
  CHECK(rows == std::make_pair(std::int64_t(2), std::int64_t(16)));
  const Bf16Kernels setting("widened");
  kernels::Taps same;
  same.origin = -1;
  CHECK(bf16_passes_match_float(geometry({40, 128, 128}, {40, 128, 128}, 3, same, 1), 16) == "");
}

TEST_CASE("MESHTENSOR_BF16_CONV takes auto, native or widened") {
  CHECK_THROWS_WITH(Bf16Kernels("fast"),
                    "MESHTENSOR_BF16_CONV=fast: expected auto, native or widened");
}

TEST_CASE("bfloat16 weight gradients on oneDNN keep its scratchpad small") {
  // AMX's bf16 weight gradient asks a scratchpad of 2.3 MiB per row of 128 x 128 (9x the
  // activations), a transposed one's about 1.6 MiB per output row; slabs of rows keep it under
  // 16 MiB. Whole, these take about 55 and 52 MiB.
  const Bf16Kernels setting("native");
  kernels::Taps same;
  same.origin = -1;
  kernels::Taps up;
  up.transposed = true;
  up.stride = 2;
  for (const auto& g : {geometry({24, 128, 128}, {24, 128, 128}, 3, same, 1),
                        geometry({16, 64, 64}, {32, 128, 128}, 2, up, 1, 16, 8)}) {
    INFO("input rows " << g.in[0] << ", output rows " << g.out[0]);
    std::vector<bf16> x(static_cast<std::size_t>(kernels::conv_input_size(g)), bf16(0.5f)),
        go(static_cast<std::size_t>(kernels::conv_output_size(g)), bf16(0.25f));
    std::vector<double> gw(static_cast<std::size_t>(kernels::conv_weight_size(g)), 0.0);
    const double added_mib = on_one_processor([&](Mesh&) {
      kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());  // primitives built
      const auto before = memory_stats();
      memory_pool().reset_peak();
      kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());
      return double(memory_stats().peak_in_use - before.in_use) / (1 << 20);
    });
    CHECK(added_mib <= 20.0);
    // Every weight sums 0.5 * 0.25 over the (input, output) pairs its tap joins, twice: of a
    // convolution, the outputs whose tap (0, 0, 0) reads inside the box; of the transposed one,
    // every input.
    const double pairs = g.taps[0].transposed ? 16.0 * 64 * 64 : 23.0 * 127 * 127;
    CHECK(gw[0] == Approx(2 * 0.125 * pairs).epsilon(1e-3));
  }
}

TEST_CASE(
    "bfloat16 planes turned channel by channel keep every value in place, padded with zeros") {
  // Channels in eights, rows of whole vectors of 32 and 16 positions and of left-overs: the
  // 32-position word transpose, the 16-position widened one and the scalar tail.
  for (const std::int64_t c : {8, 16, 24})
    for (const std::int64_t n2 : {16, 31, 32, 48, 64, 70}) {
      INFO(c << " channels, rows of " << n2);
      const std::int64_t n1 = 3;
      const kernels::rows::RowFormat format{1, kernels::rows::round_up(n2 + 3, 32)};
      std::vector<bf16> plane(static_cast<std::size_t>(n1 * n2 * c));
      for (std::size_t k = 0; k < plane.size(); ++k)
        plane[k] = bf16::from_bits(std::uint16_t(k + 1));
      std::vector<bf16> planar(static_cast<std::size_t>(n1 * c * format.width), bf16(7.0f));
      kernels::rows::to_planar(plane.data(), n1, n2, c, format, planar.data());
      std::size_t wrong = 0;
      for (std::int64_t r = 0; r < n1; ++r)
        for (std::int64_t ch = 0; ch < c; ++ch)
          for (std::int64_t x = 0; x < format.width; ++x) {
            const std::int64_t i = x - format.before;
            const std::uint16_t want =
                i >= 0 && i < n2 ? plane[std::size_t((r * n2 + i) * c + ch)].bits : 0;
            wrong += planar[std::size_t((r * c + ch) * format.width + x)].bits != want;
          }
      CHECK(wrong == 0);
    }
}

}  // namespace test_bf16_kernels
