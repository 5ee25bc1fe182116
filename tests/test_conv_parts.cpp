// A convolution whose input is a concatenation held as its parts (kernels/common/channel_parts.hpp)
// gives, bit for bit, what it gives on the parts joined: forward, weight gradient and the input
// gradient written to the parts — on the row kernels, which read and write the parts in place
// (float, and bfloat16 in either way of multiplying), and on every other kernel, which runs on a
// joined copy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/kernels/conv.hpp>

#include "support/environment.hpp"
#include "support/spmd.hpp"

using namespace meshtensor::kernels;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_conv_parts {

namespace {

// A 'same' 3x3x3 convolution over `out` (batch `batch`), c_in -> c_out channels.
ConvGeometry same_geometry(std::array<std::int64_t, 3> out, std::int64_t batch, std::int64_t c_in,
                           std::int64_t c_out) {
  ConvGeometry g;
  g.batch = batch;
  g.c_in = c_in;
  g.c_out = c_out;
  g.in = g.out = out;
  g.kernel = {3, 3, 3};
  for (auto& t : g.taps) t.origin = -1;
  return g;
}

std::vector<float> sines(std::size_t n, double phase) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(std::sin(0.37 * double(i) + phase));
  return v;
}

struct PartsCase {
  std::array<std::int64_t, 3> out;
  std::int64_t batch;
  std::vector<std::int64_t> parts;  // the input's channels, part by part
  std::int64_t c_out;
};

// Row kernels (8 + 8 -> 8: the U-Net decoder's skip and up-sampled channels; 8 + 16 -> 8), parts
// of other than whole tiles (3 + 5: the input gradient through a joined copy), and a shape the row
// kernels do not take (16 + 16 -> 16: oneDNN's, on a joined copy).
const std::vector<PartsCase> parts_cases{{{5, 6, 20}, 1, {8, 8}, 8},
                                         {{4, 5, 17}, 2, {8, 16}, 8},
                                         {{3, 4, 18}, 1, {3, 5}, 8},
                                         {{4, 4, 16}, 1, {16, 16}, 16}};

// The case's convolution: 'same', the parts' channels in.
ConvGeometry geometry_of(const PartsCase& pc) {
  std::int64_t c_in = 0;
  for (std::int64_t c : pc.parts) c_in += c;
  return same_geometry(pc.out, pc.batch, c_in, pc.c_out);
}

// sines() in T.
template <class T>
std::vector<T> sines_of(std::size_t n, double phase) {
  const std::vector<float> v = sines(n, phase);
  return std::vector<T>(v.begin(), v.end());
}

// Whether the row kernels run a pass of T that fits (`fits`) on the parts in place.
template <class T>
bool rows_read_parts(bool fits) {
  return rows::available() && rows::enabled() && fits;
}

// The case's passes on the parts against the same on them joined, on `threads` compute threads:
// the first that differs (or copies where the row kernels should read the parts), or "".
template <class T>
std::string parts_match_joined(const PartsCase& pc, int threads) {
  const ConvGeometry g = geometry_of(pc);
  const std::int64_t c_in = g.c_in;
  const auto positions = std::size_t(g.batch * g.in[0] * g.in[1] * g.in[2]);
  const auto values = sines_of<T>;
  const auto x = values(positions * std::size_t(c_in), 0.1);
  const auto w = values(std::size_t(conv_weight_size(g)), 0.7);
  const auto dy = values(std::size_t(conv_output_size(g)), 1.3);
  // The parts as their own arrays, channels last.
  std::vector<std::vector<T>> parts;
  for (std::size_t j = 0, first = 0; j < pc.parts.size(); first += std::size_t(pc.parts[j++])) {
    parts.emplace_back(positions * std::size_t(pc.parts[j]));
    for (std::size_t p = 0; p < positions; ++p)
      for (std::int64_t c = 0; c < pc.parts[j]; ++c)
        parts[j][p * std::size_t(pc.parts[j]) + std::size_t(c)] =
            x[p * std::size_t(c_in) + first + std::size_t(c)];
  }
  const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(),
                      [](T u, T v) { return std::memcmp(&u, &v, sizeof u) == 0; });
  };
  return on_one_processor([&](meshtensor::Mesh&) -> std::string {
    meshtensor::current_processor().set_compute_threads(threads);
    // Kernel calls counted (kernels/timing.hpp): a joined copy is a copy call.
    kernel_times().on = true;
    const auto copies = [] { return plan::counts().calls[std::size_t(plan::Family::copy)]; };
    ChannelParts<const T> in;
    for (std::size_t j = 0; j < parts.size(); ++j) in.add(parts[j].data(), pc.parts[j]);
    std::vector<T> y(dy.size()), y_parts(dy.size());
    conv_forward(g, x.data(), w.data(), y.data());
    auto before = copies();
    conv_forward(g, in, w.data(), y_parts.data());
    if (!same(y, y_parts)) return "forward";
    if ((copies() == before) != rows_read_parts<T>(rows::fits_forward(g)))
      return "forward's copies";
    std::vector<double> dw(w.size(), 0.0), dw_parts(w.size(), 0.0);
    conv_backward_weight(g, x.data(), dy.data(), dw.data());
    before = copies();
    conv_backward_weight(g, in, dy.data(), dw_parts.data());
    if (dw != dw_parts) return "weight gradient";
    const bool weight_fits = std::is_same_v<T, float> ? rows::fits_backward_weight(g)
                                                      : rows::fits_backward_weight_bf16(g);
    if ((copies() == before) != rows_read_parts<T>(weight_fits)) return "weight gradient's copies";
    std::vector<T> dx(x.size());
    conv_backward_input(g, dy.data(), w.data(), dx.data());
    std::vector<std::vector<T>> dx_parts;
    ChannelParts<T> out;
    for (std::size_t j = 0; j < parts.size(); ++j) {
      dx_parts.emplace_back(parts[j].size(), T(-1.0f));
      out.add(dx_parts[j].data(), pc.parts[j]);
    }
    before = copies();
    conv_backward_input(g, dy.data(), w.data(), out);
    if ((copies() == before) !=
        rows_read_parts<T>(rows::fits_backward_input(g) && rows::takes_output_parts(out)))
      return "input gradient's copies";
    for (std::size_t j = 0, first = 0; j < parts.size(); first += std::size_t(pc.parts[j++]))
      for (std::size_t p = 0; p < positions; ++p)
        for (std::int64_t c = 0; c < pc.parts[j]; ++c) {
          const T got = dx_parts[j][p * std::size_t(pc.parts[j]) + std::size_t(c)];
          const T want = dx[p * std::size_t(c_in) + first + std::size_t(c)];
          if (std::memcmp(&got, &want, sizeof got) != 0) return "input gradient";
        }
    return "";
  });
}

}  // namespace

TEST_CASE("a convolution reads its input, and writes its input's gradient, in channel parts") {
  for (int threads : {1, 2})
    for (const PartsCase& pc : parts_cases) {
      INFO(pc.parts.front() << " + " << pc.parts.back() << " -> " << pc.c_out << ", batch "
                            << pc.batch << ", " << threads << " threads");
      CHECK(parts_match_joined<float>(pc, threads) == "");
    }
}

TEST_CASE("a bfloat16 convolution reads its input, and writes its input's gradient, in parts") {
  // meshtensor's kernels (MESHTENSOR_BF16_CONV=widened, else the first call's timing may pick
  // oneDNN's, which read a joined copy), in each way this build multiplies.
  const Setting kernels("MESHTENSOR_BF16_CONV", "widened");
  std::vector<const char*> products{"float"};
  if (rows::bf16_dot_products_available()) products.push_back("dot");
  for (const char* way : products) {
    const Setting multiply("MESHTENSOR_BF16_PRODUCTS", way);
    for (int threads : {1, 2})
      for (const PartsCase& pc : parts_cases) {
        INFO(way << " products, " << pc.parts.front() << " + " << pc.parts.back() << " -> "
                 << pc.c_out << ", batch " << pc.batch << ", " << threads << " threads");
        CHECK(parts_match_joined<meshtensor::bfloat16>(pc, threads) == "");
      }
  }
}

namespace {

// The case's forward pass and weight gradient with its first part given as a per-channel affine
// map (batch norm's output with its ReLU) against the same with the map's values written out: the
// first that differs (or a copy where the row kernels should map the part as they read it), or
// "". `whole`: the first part alone is the input.
template <class T>
std::string mapped_part_matches_written(PartsCase pc, bool whole) {
  if (whole) pc.parts.resize(1);
  const ConvGeometry g = geometry_of(pc);
  const auto positions = std::int64_t(g.batch * g.in[0] * g.in[1] * g.in[2]);
  const auto values = sines_of<T>;
  std::vector<std::vector<T>> parts;
  for (std::size_t j = 0; j < pc.parts.size(); ++j)
    parts.push_back(values(std::size_t(positions * pc.parts[j]), 0.1 + double(j)));
  const auto dy = values(std::size_t(conv_output_size(g)), 1.3);
  ChannelAffine f;
  f.floor = 0;
  for (std::int64_t c = 0; c < pc.parts[0]; ++c) {
    f.scale.push_back(1.5 * std::cos(double(c)));
    f.shift.push_back(0.3 * std::sin(2.0 * double(c)));
  }
  std::vector<T> written(parts[0].size());
  cpu::norm_affine(Sizes{positions, pc.parts[0]}, Strides{0, 1}, pc.parts[0], parts[0].data(),
                   f.scale.data(), f.shift.data(), T(0.0f), written.data());
  return on_one_processor([&](meshtensor::Mesh&) -> std::string {
    kernel_times().on = true;  // a copy of the map's values is a normalisation's call
    const auto norms = [] { return plan::counts().calls[std::size_t(plan::Family::norm)]; };
    ChannelParts<const T> as_map, as_written;
    for (std::size_t j = 0; j < parts.size(); ++j) {
      as_map.add(parts[j].data(), pc.parts[j], j == 0 ? &f : nullptr);
      as_written.add(j == 0 ? written.data() : parts[j].data(), pc.parts[j]);
    }
    std::vector<double> dw_map(std::size_t(conv_weight_size(g)), 0.0), dw_written(dw_map);
    conv_backward_weight(g, as_written, dy.data(), dw_written.data());
    auto before = norms();
    conv_backward_weight(g, as_map, dy.data(), dw_map.data());
    if (dw_map != dw_written) return "weight gradient";
    if ((norms() == before) != takes_mapped_input<T>(g, plan::ConvClass::backward_weight))
      return "copies of the mapped part in the weight gradient";
    const auto w = values(std::size_t(conv_weight_size(g)), 2.2);
    std::vector<T> y_map(std::size_t(conv_output_size(g))), y_written(y_map.size());
    conv_forward(g, as_written, w.data(), y_written.data());
    before = norms();
    conv_forward(g, as_map, w.data(), y_map.data());
    if (y_map != y_written) return "forward";
    if ((norms() == before) != takes_mapped_input<T>(g, plan::ConvClass::forward))
      return "copies of the mapped part in forward";
    return "";
  });
}

}  // namespace

// The row kernels compute the mapped part as they read it (float; bfloat16 in float products,
// and the weight gradient in dot products); every other kernel (the bfloat16 dot products'
// forward pass, oneDNN's bf16 ones, shapes the row kernels do not take,
// MESHTENSOR_MAPPED_INPUTS=off) reads a copy written first.
TEST_CASE(
    "forward and the weight gradient read a part given as its affine map as the values it maps "
    "to") {
  std::vector<const char*> products{"float"}, bf16_kernels{"widened"};
  if (rows::bf16_dot_products_available()) products.push_back("dot");
#ifdef MESHTENSOR_WITH_ONEDNN
  bf16_kernels.push_back("native");
#endif
  for (const char* mapped : {"on", "off"})
    for (const PartsCase& pc : parts_cases)
      for (const bool whole : {false, true}) {
        const Setting setting("MESHTENSOR_MAPPED_INPUTS", mapped);
        INFO(pc.parts.front() << " + " << pc.parts.back() << " -> " << pc.c_out
                              << (whole ? ", the first part alone" : "") << ", mapped inputs "
                              << mapped);
        CHECK(mapped_part_matches_written<float>(pc, whole) == "");
        for (const char* way : products)
          for (const char* kernels : bf16_kernels) {
            const Setting multiply("MESHTENSOR_BF16_PRODUCTS", way);
            const Setting chosen("MESHTENSOR_BF16_CONV", kernels);
            INFO("bfloat16 on " << kernels << " kernels, " << way << " products");
            CHECK(mapped_part_matches_written<meshtensor::bfloat16>(pc, whole) == "");
          }
      }
}

// Which bfloat16 roads compute a mapped part as they read it: the row kernels, both passes, in
// float products and in dot products (the weight gradient turns its planes through float
// registers, forward maps the channel pairs it reads as floats' bits half by half); never
// oneDNN's bf16 kernels.
TEST_CASE("which bfloat16 roads map a part as they read it") {
  const ConvGeometry g = geometry_of(parts_cases.front());  // 8 + 8 -> 8
  if (!rows::fits_forward(g)) {
    WARN("skipped: this CPU has neither AVX2 nor AVX-512, so the row kernels never run");
    return;
  }
  // {forward, weight gradient}
  const auto maps = [&](const char* products, const char* kernels) {
    const Setting multiply("MESHTENSOR_BF16_PRODUCTS", products);
    const Setting chosen("MESHTENSOR_BF16_CONV", kernels);
    return std::pair<bool, bool>{
        takes_mapped_input<meshtensor::bfloat16>(g, plan::ConvClass::forward),
        takes_mapped_input<meshtensor::bfloat16>(g, plan::ConvClass::backward_weight)};
  };
  const std::pair<bool, bool> both{true, true}, neither{false, false};
  CHECK(maps("float", "widened") == both);
  CHECK(maps("float", "auto") == both);  // where the timing picks oneDNN's, that reads a copy
  if (rows::bf16_dot_products_available()) CHECK(maps("dot", "widened") == both);
#ifdef MESHTENSOR_WITH_ONEDNN
  CHECK(maps("float", "native") == neither);
#endif
  const Setting off("MESHTENSOR_MAPPED_INPUTS", "off");
  CHECK(maps("float", "widened") == neither);
}

}  // namespace test_conv_parts
