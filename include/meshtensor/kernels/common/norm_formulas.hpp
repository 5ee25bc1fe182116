#pragma once
// The normalisations' per-element formulas and the combination of partial statistics, said once
// for the CPU loops (ops/norm.hpp) and the GPU kernels (kernels/cuda/norm.hpp) through
// kernels/common/shared_source.hpp: a recomputed output, and the ReLU mask taken from it, are the
// same values on both sides.

#include <vector>

#include "meshtensor/kernels/common/shared_source.hpp"

namespace meshtensor::kernels::shared {
// The shared text carries no comments, so they are here:
//   PartialMoments: the count, mean and sum of squared deviations of some values.
//   combine_moments: those of two disjoint sets of values, from each set's (Chan, Golub and
//     LeVeque's pairwise update: stable where the sums of x and x² are not).
//   affine_floor: scale x + shift, or `floor` where that is below it (-inf: no floor; 0: a
//     ReLU). The comparison selects by value, which the CPU loops vectorise.
//   affine_input_gradient: a normalisation's input gradient, p g + q v + r per element, where p,
//     q and r are per-statistic constants and v is the input or the output.
// clang-format off
MESHTENSOR_SHARED_SOURCE(norm_formulas_text,
struct PartialMoments {
  double count = 0, mean = 0, m2 = 0;
};
MESHTENSOR_DEVICE inline PartialMoments combine_moments(const PartialMoments& a,
                                                        const PartialMoments& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count, delta = b.mean - a.mean;
  return {n, a.mean + delta * b.count / n, a.m2 + b.m2 + delta * delta * a.count * b.count / n};
}
template <class T>
MESHTENSOR_DEVICE inline T affine_floor(T scale, T x, T shift, T floor) {
  const T y = scale * x + shift;
  return y < floor ? floor : y;
}
template <class T>
MESHTENSOR_DEVICE inline T affine_input_gradient(T p, T g, T q, T v, T r) {
  return p * g + q * v + r;
}
)
// clang-format on

}  // namespace meshtensor::kernels::shared

namespace meshtensor::kernels {
/// Where a ReLU fused after a normalisation passed the gradient: where
/// affine_floor(scale[key], x, shift[key], 0) > 0, the output computed again from x (x null:
/// everywhere).
template <class T>
struct ReluMask {
  const T* x = nullptr;
  const std::vector<double>* scale = nullptr;
  const std::vector<double>* shift = nullptr;
};
}  // namespace meshtensor::kernels
