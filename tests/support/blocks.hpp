#pragma once
// Comparing a processor's block with the matching part of a single-processor result.

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <meshtensor/kernels/cpu/reference/copy_box.hpp>
#include <meshtensor/meshtensor.hpp>

namespace meshtensor::testing {

/// What a processor reports back: where its block lies in the global tensor, and its values.
template <class T>
struct LocalBlock {
  Block block;
  xt::xarray<T> data;
  std::string layout;  // the TensorLayout, for messages
};

template <class T>
LocalBlock<T> local_block(const Tensor<T>& t) {
  return {t.block(), t.local(), t.layout().to_string()};
}

/// The part of a full array that `block` covers.
template <class T>
xt::xarray<T> slice(const xt::xarray<T>& full, const Block& block) {
  xt::xarray<T> out = xt::xarray<T>::from_shape(detail::to_xshape(block.sizes()));
  std::vector<std::int64_t> full_sizes(full.shape().begin(), full.shape().end());
  const auto strides = kernels::row_major_strides(full_sizes);
  kernels::reference::copy_box(block.sizes(),
                               full.data() + kernels::offset_of(block.offsets(), strides), strides,
                               out.data(), kernels::row_major_strides(block.sizes()));
  return out;
}

/// Empty when `got` equals the slice of `expected` within relative tolerance `rtol` (with an
/// absolute floor of rtol for values near 0); otherwise a description of the first mismatch.
template <class T>
std::string mismatch(const LocalBlock<T>& got, const xt::xarray<T>& expected, double rtol = 1e-5) {
  const auto want = slice(expected, got.block);
  std::ostringstream why;
  if (!std::equal(want.shape().begin(), want.shape().end(), got.data.shape().begin(),
                  got.data.shape().end())) {
    why << "block " << got.block << " of " << got.layout << " has the wrong shape";
    return why.str();
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double a = static_cast<double>(got.data.data()[i]);
    const double b = static_cast<double>(want.data()[i]);
    if (!(std::abs(a - b) <= rtol * std::max(1.0, std::abs(b)))) {
      why << "block " << got.block << " of " << got.layout << ": element " << i << " is " << a
          << ", the single-processor value is " << b;
      return why.str();
    }
  }
  return {};
}

/// A deterministic, layout-independent test value for a global index: varied signs and
/// magnitudes, no ties that would make max/min ambiguous.
inline float test_value(const Index& index, int seed = 0) {
  std::uint64_t h = 1469598103934665603ull + static_cast<std::uint64_t>(seed) * 7919u;
  for (auto c : index.coords()) h = (h ^ static_cast<std::uint64_t>(c + 1)) * 1099511628211ull;
  h ^= h >> 29;
  return static_cast<float>(static_cast<double>(h % 200003) / 100001.5 - 1.0);
}

}  // namespace meshtensor::testing
