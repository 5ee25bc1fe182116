#pragma once
// The type sums are accumulated in: double for floating point, bfloat16 included (so that a sum
// over a whole volume does not depend on how the volume was split, beyond rounding of the final
// value), int64 for integers.

#include <cstdint>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"

namespace meshtensor::kernels {

template <class T>
using accumulator_t = std::conditional_t<is_floating_v<T>, double, std::int64_t>;

}  // namespace meshtensor::kernels
