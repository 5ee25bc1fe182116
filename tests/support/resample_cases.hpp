#pragma once
// Cases for the GPU resampling kernels (against the reference loops): the taps of nearest and
// linear upsampling (edges clamped, so both taps of an output can read one position), reflect and
// zero padding (outputs with no taps) and cropping, over blocks with outer and inner extents.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/kernels/cpu/reference/resample.hpp>

namespace meshtensor::testing {

struct ResampleCase {
  std::string what;
  kernels::ResampleTaps taps;
};

inline std::vector<ResampleCase> resample_cases(std::int64_t scale = 1) {
  auto taps_of = [scale](std::int64_t sources) {
    kernels::ResampleTaps t;
    t.outer = 3 * scale;
    t.inner = 5;
    t.sources = sources;
    return t;
  };
  auto add = [](kernels::ResampleTaps& t, std::int64_t i0, double w0, std::int64_t i1, double w1) {
    t.index.insert(t.index.end(), {i0, i1});
    t.weight.insert(t.weight.end(), {w0, w1});
  };
  std::vector<ResampleCase> cases;
  {
    auto t = taps_of(7);
    for (std::int64_t o = 0; o < 14; ++o) add(t, o / 2, 1.0, -1, 0.0);
    cases.push_back({"nearest, twice", t});
  }
  {
    auto t = taps_of(7);
    for (std::int64_t o = 0; o < 14; ++o) {
      const double at = (double(o) + 0.5) / 2 - 0.5;
      const auto below = std::int64_t(std::floor(at));
      const double w = at - double(below);
      add(t, std::clamp<std::int64_t>(below, 0, 6), 1 - w,
          std::clamp<std::int64_t>(below + 1, 0, 6), w);
    }
    cases.push_back({"linear, twice, edges clamped", t});
  }
  {
    auto t = taps_of(6);
    for (std::int64_t o = -2; o < 8; ++o) add(t, o < 0 ? -o : o > 5 ? 10 - o : o, 1.0, -1, 0.0);
    cases.push_back({"reflect padding of 2", t});
  }
  {
    auto t = taps_of(6);
    for (std::int64_t o = -1; o < 8; ++o) {
      if (o < 0 || o > 5)
        add(t, -1, 0.0, -1, 0.0);
      else
        add(t, o, 1.0, -1, 0.0);
    }
    cases.push_back({"zero padding of 1 and 2", t});
  }
  {
    auto t = taps_of(9);
    for (std::int64_t o = 2; o < 6; ++o) add(t, o, 1.0, -1, 0.0);
    cases.push_back({"crop", t});
  }
  return cases;
}

/// A case's source box and output gradient, and the reference loops' results on them.
template <class T>
struct ResampleCheck {
  std::vector<T> box, g, out_ref, grad_box_ref;
  explicit ResampleCheck(const kernels::ResampleTaps& taps) {
    const std::int64_t box_n = taps.outer * taps.sources * taps.inner,
                       out_n = taps.outer * taps.outputs() * taps.inner;
    for (std::int64_t i = 0; i < box_n; ++i) box.push_back(T(std::cos(0.37 * double(i))));
    for (std::int64_t i = 0; i < out_n; ++i) g.push_back(T(std::sin(0.61 * double(i)) + 0.1));
    out_ref.assign(std::size_t(out_n), T(7));
    grad_box_ref.assign(std::size_t(box_n), T(7));
    kernels::reference::resample(taps, box.data(), out_ref.data());
    kernels::reference::resample_adjoint(taps, g.data(), grad_box_ref.data());
  }
};

}  // namespace meshtensor::testing
