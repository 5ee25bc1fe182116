#pragma once
// Cases for the GPU normalisation kernels (against the CPU's formulas): blocks whose elements
// belong to statistics ("keys") as batch norm's channels-last and channels-first blocks, instance
// norm's (batch, channels) pairs and blocks with dims of one, and what each pass gives on them,
// computed directly here.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/kernels/common/norm_formulas.hpp>
#include <meshtensor/kernels/common/strided.hpp>

namespace meshtensor::testing {

/// A row-major block; key_strides[d]: dim d's step in the key index (0 for a reduced dim).
struct NormCase {
  std::string what;
  kernels::Sizes sizes;
  kernels::Strides key_strides;
  std::int64_t keys;
  bool keys_innermost;  // rows of the keys side by side (channels last)
};

/// The cases, their first reduced dim `scale` times longer (GPU chunks of many elements).
inline std::vector<NormCase> norm_cases(std::int64_t scale = 1) {
  return {
      {"batch norm, channels last", {2, 5 * scale, 6, 7, 3}, {0, 0, 0, 0, 1}, 3, true},
      {"batch norm, channels first", {4, 9 * scale, 11}, {1, 0, 0}, 4, false},
      {"instance norm, (batch, channels) keys", {2, 4 * scale, 5, 3}, {3, 0, 0, 1}, 6, false},
      {"dims of one, kept and reduced", {1, 9 * scale, 1, 4}, {4, 0, 0, 1}, 4, true},
      {"one key", {3 * scale, 5}, {0, 0}, 1, true},
      {"channels last, two kept dims", {3 * scale, 2, 5}, {0, 5, 1}, 10, true},
  };
}

/// A case's operands and what the normalisation's passes give on them, computed directly: moments
/// in double, element values by the shared formulas, sums of the T terms in double.
template <class T>
struct NormCheck {
  const NormCase& c;
  std::int64_t n;
  std::vector<std::int64_t> key;  // of each element
  std::vector<T> x, g, v;
  std::vector<double> scale, shift, mask_scale, mask_shift, p, q, r;  // per key

  explicit NormCheck(const NormCase& nc) : c(nc), n(kernels::num_elements(nc.sizes)) {
    key.assign(std::size_t(n), 0);
    std::vector<std::int64_t> index(c.sizes.size(), 0);
    for (std::int64_t at = 0; at < n; ++at) {
      for (std::size_t d = 0; d < index.size(); ++d) key[at] += index[d] * c.key_strides[d];
      for (std::size_t d = index.size(); d-- > 0;) {
        if (++index[d] < c.sizes[d]) break;
        index[d] = 0;
      }
    }
    // Values far from zero (spread 1 around 100): a variance from sums of x and x² would lose
    // its digits.
    for (std::int64_t at = 0; at < n; ++at) {
      x.push_back(T(100 + std::cos(0.7 * double(at)) + 0.1 * double(key[at])));
      g.push_back(T(std::sin(1.1 * double(at))));
      v.push_back(T(std::cos(0.3 * double(at) + 1)));
    }
    for (std::int64_t k = 0; k < c.keys; ++k) {
      scale.push_back(0.9 - 0.1 * double(k));
      shift.push_back(0.3 * double(k) - 90.0);
      mask_scale.push_back(0.5 + 0.25 * double(k));
      mask_shift.push_back(-50.0 - 25.0 * double(k));  // x around 100: the ReLU cuts about half
      p.push_back(1.5 - 0.1 * double(k));
      q.push_back(-0.3 + 0.05 * double(k));
      r.push_back(0.01 * double(k) - 0.02);
    }
  }

  /// g, or where masked, g where a ReLU after mask_scale x + mask_shift passes it.
  T kept(std::int64_t at, bool masked) const {
    const std::int64_t k = key[at];
    if (!masked) return g[at];
    const T y = kernels::shared::affine_floor(T(mask_scale[k]), x[at], T(mask_shift[k]), T(0));
    return y > T(0) ? g[at] : T(0);
  }

  std::vector<kernels::shared::PartialMoments> moments() const {
    std::vector<kernels::shared::PartialMoments> out(std::size_t(c.keys));
    for (std::int64_t at = 0; at < n; ++at) {
      out[key[at]].count += 1;
      out[key[at]].mean += double(x[at]);
    }
    for (auto& m : out) m.mean /= m.count;
    for (std::int64_t at = 0; at < n; ++at) {
      const double d = double(x[at]) - out[key[at]].mean;
      out[key[at]].m2 += d * d;
    }
    return out;
  }

  std::vector<T> affine(T floor) const {
    std::vector<T> out;
    for (std::int64_t at = 0; at < n; ++at)
      out.push_back(
          kernels::shared::affine_floor(T(scale[key[at]]), x[at], T(shift[key[at]]), floor));
    return out;
  }

  /// Per key, the sums of g' and of g' (scale v + shift), interleaved; v is x where masked (as in
  /// batch norm's backward) else v.
  std::vector<double> gradient_sums(bool masked) const {
    std::vector<double> out(std::size_t(2 * c.keys), 0.0);
    for (std::int64_t at = 0; at < n; ++at) {
      const std::int64_t k = key[at];
      const T gm = kept(at, masked);
      out[2 * k] += double(gm);
      out[2 * k + 1] += double(gm * (T(scale[k]) * (masked ? x : v)[at] + T(shift[k])));
    }
    return out;
  }

  std::vector<T> input_gradient(bool masked) const {
    std::vector<T> out;
    for (std::int64_t at = 0; at < n; ++at) {
      const std::int64_t k = key[at];
      out.push_back(kernels::shared::affine_input_gradient(T(p[k]), kept(at, masked), T(q[k]),
                                                           (masked ? x : v)[at], T(r[k])));
    }
    return out;
  }
};

/// The largest gap between two lists of moments, relative to the values' size.
inline double moments_gap(const std::vector<kernels::shared::PartialMoments>& got,
                          const std::vector<kernels::shared::PartialMoments>& want) {
  double gap = got.size() == want.size() ? 0 : 1;
  for (std::size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
    gap = std::max(gap, std::abs(got[k].count - want[k].count));
    gap = std::max(gap, std::abs(got[k].mean - want[k].mean) / std::abs(want[k].mean));
    gap = std::max(gap, std::abs(got[k].m2 - want[k].m2) / std::max(1e-30, want[k].m2));
  }
  return gap;
}

}  // namespace meshtensor::testing
